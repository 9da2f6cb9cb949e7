"""``trainingModel`` / ``inferenceModel`` and the executor they return, on the CPU.

Semantics follow PopTorch 3.x (see ``docs/emulator.md``):

* One call consumes D·G·R micro-batches, concatenated along dim 0 in the order (device
  iteration, accumulation step, replica); every tensor argument's first dimension must be a
  multiple of D·G·R. Non-tensor arguments are passed to every micro-batch unchanged.
* Training runs forward and backward per micro-batch and steps the optimizer once per G·R
  micro-batches, with the gradients averaged (``ReductionType.Mean``, the default) or summed.
  The weights are the user's model's own parameters, so the host model always sees them.
* Outputs come back per output mode: All (every micro-batch), EveryN (those of every N-th device
  iteration), Final (the last micro-batch of each replica), Sum (summed over D and G per
  replica); Default is Final for training and All for inference. Results of one micro-batch are
  concatenated along dim 0; per-micro-batch scalars (losses) are stacked, and a single one is
  returned as a scalar.
* The first call (or ``compile()``) "compiles": it traces one micro-batch to place blocks on
  stages and measure costs, checks PopTorch's pipeline rules, estimates the engine and, with
  profiling on, writes its report.

Argument handling and output modes are in :mod:`popviz.emulator.batching`; attaching, weights,
timing and names in :mod:`popviz.emulator.device_state` (mixins of :class:`PoplarExecutor`).
"""

from __future__ import annotations

import collections
import contextlib
import copy
import datetime as _dt
import functools
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from popviz.emulator import calls as _calls
from popviz.emulator import costmodel, hardware, layers, oom, profiling, runtime_options
from popviz.emulator import fake as _fake
from popviz.emulator import optim as _optim
from popviz.emulator import progress as _progress
from popviz.emulator.batching import Batching, Outputs, dtype_name, nbytes, no_backward
from popviz.emulator.blocks import BlockTrace, ModuleSpans, relabel, tracing
from popviz.emulator.device_state import DeviceState, training_steps, wrapped_models
from popviz.emulator.enums import ConnectionType, OutputMode, ReductionType
from popviz.emulator.errors import CPP_ERROR, Error
from popviz.emulator.losses import LossCollector, final_loss
from popviz.emulator.measure import measuring
from popviz.emulator.options import Options
from popviz.emulator.precision import upcasting
from popviz.model import HostTensor
from popviz.model.numbers import reserved_ipus, wall_seconds
from popviz.paths import as_component

_activity = [0]
"""Counts the compiles and calls of every executor in the process: a gap between two calls of
one executor in which it moved was spent on another model, not on this one's loop."""

MAX_IPUS_PER_INSTANCE = 64
"""PopTorch's limit on the IPUs one process uses (replicas × IPUs per replica); more need
distributed execution (PopRun)."""
_precompile_hooks: dict[int, Callable[[], None]] = collections.OrderedDict()
_postcompile_hooks: dict[int, Callable[[], None]] = collections.OrderedDict()


def _register(hooks: dict, hook: Callable[[], None]) -> torch.utils.hooks.RemovableHandle:
    if not callable(hook):
        raise RuntimeError("Pre- and post-compile hooks must be callable")
    handle = torch.utils.hooks.RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def registerPreCompileHook(hook: Callable[[], None]) -> torch.utils.hooks.RemovableHandle:
    """Call ``hook()`` before every model compilation (global); returns a removable handle."""
    return _register(_precompile_hooks, hook)


def registerPostCompileHook(hook: Callable[[], None]) -> torch.utils.hooks.RemovableHandle:
    """Call ``hook()`` after tracing, before the (emulated) Poplar compilation."""
    return _register(_postcompile_hooks, hook)


class PoplarExecutor(Batching, DeviceState):
    """The wrapped model: call it like the model with combined batches (D·G·R micro-batches)."""

    def __init__(self, model: torch.nn.Module, options: Options | None, training: bool,
                 optimizer: torch.optim.Optimizer | None = None,
                 user_model: torch.nn.Module | None = None) -> None:
        if options is not None:
            if not isinstance(options, Options):
                raise Error(f"Invalid type: 'options' is of type {type(options)} (Expected poptorch.Options)")
            options._freeze()
            options = options.clone()
        else:
            options = Options()
        self._user_model = user_model if user_model is not None else model
        self._model = model
        self._training = training
        self._output_mode_as_set = OutputMode(options.output_mode).name
        if training:
            if options.defaultOutputMode():
                options.outputMode(OutputMode.Final)
            if optimizer is None:
                optimizer = _optim.SGD(self._user_model.parameters(), lr=0.01)
        else:
            if options.defaultOutputMode():
                options.outputMode(OutputMode.All)
            if options.Training.gradient_accumulation != 1:
                message = ("You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it "
                           "as its default value (1) when running a poptorch.inferenceModel().")
                if options._execution_strategy.name == "PipelinedExecution":
                    message += (" Use poptorch.Options().deviceIterations to process a sufficient number "
                                "of batches each run for pipelined execution instead.")
                raise Error(message)
            assert not optimizer, "Optimizer should be None for inference"
        options._freeze()
        self._options = options
        self._compiled = False
        if training and optimizer is not None:
            _optim.warn_if_subclassed(optimizer)
            self._mean_reduction_for(optimizer)
        self._optimizer = optimizer
        self._token = object()
        self._compiled = False
        self._attached = False
        self._estimate: costmodel.Estimate | None = None
        self._setup: costmodel.EngineSetup | None = None
        self._engine_report: profiling.EngineReport | None = None
        self._compile_time: _dt.timedelta | None = None
        self._compiled_inputs: tuple | None = None
        self._last_call_start: float | None = None
        self._last_call_end: tuple[float, float, int] | None = None
        """(``time.perf_counter``, ``time.thread_time``, :data:`_activity`) when the last call
        returned: the script's own host work runs from then until its next call (data loading,
        metrics, logging), unless another executor compiled or ran meanwhile."""
        self._host_gaps: list[tuple[float, float]] = []
        """(wall seconds, the calling thread's CPU seconds) between one call's return and the next."""
        self._host_gaps_skipped = 0
        self._anchor_memory: dict[str, torch.Tensor] = {}
        self._arg_names = self._forward_arg_names(model)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or "_user_model" not in self.__dict__:
            raise AttributeError(attr)
        return getattr(self.__dict__["_user_model"], attr)

    def __repr__(self) -> str:
        return repr(self._user_model)

    @property
    def model(self) -> torch.nn.Module:
        """The wrapped (user's) model."""
        return self._user_model

    @property
    def options(self) -> Options:
        return self._options

    @property
    def training(self) -> bool:
        return self._training

    # ------------------------------------------------------------------ compilation
    def _trace(self) -> BlockTrace:
        structure = self.__dict__.get("_structure")
        split = structure.split if structure is not None else None
        return BlockTrace(self._options._execution_strategy.resolver(), split)

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Trace and estimate the model for these (combined-batch) inputs without running it."""
        _activity[0] += 1
        if self._compiled:
            from popviz.emulator import log

            log.warn("Call to compile() ignored: the executable is already compiled")
            return
        with _progress.reporter().activity(f"compiling {self.engine_name!r}: tracing and measuring one "
                                           "micro-batch"):
            self._compile(*self._canonical(args, kwargs), estimate_only=True)

    def _compile(self, args: tuple, kwargs: dict, estimate_only: bool = False) -> None:
        """Trace, measure and estimate; ``estimate_only``: nothing runs after it (``compile()``,
        the last call ``--calls`` allows), so the trace may use fake tensors (:mod:`.fake`)."""
        started = time.perf_counter()
        buffers = dict(self._model.named_buffers())
        for name in self._options._Popart.options.get("updatableNamedBuffers", []):
            if name not in buffers:
                raise Error(f"updatableNamedBuffers: {name!r} is not a buffer of the model "
                            f"(its buffers: {', '.join(buffers) or 'none'})", type=CPP_ERROR)
        for hook in list(_precompile_hooks.values()):
            hook()
        micro = self._split(args, kwargs)
        m_args, m_kwargs = micro[0]
        measured, notes = None, ()
        if _fake.wanted(estimate_only):
            try:
                measured = self._measure(m_args, m_kwargs, fake=True)
            except Exception as error:  # needs values, or no fake implementation: trace for real
                if not _fake.retry_for_real(error):  # PopTorch's own errors: as they are
                    raise
                notes = (_fake.fallback_note(error),)
                _progress.reporter().say(notes[0])
        if measured is None:
            # measured on a copy: the model may change its inputs in place, which only the run may do
            m_args, m_kwargs = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, micro[0])
            measured = self._measure(m_args, m_kwargs)
        measurement, outputs = measured
        for hook in list(_postcompile_hooks.values()):
            hook()
        # PopTorch acquires its device (IPUs in powers of two) before it checks the pipeline
        self._check_power_of_two((max(seg.ipu for seg in measurement.segments) + 1) * self._options.replication_factor
                                 if measurement.segments else 1)
        self._check_pipeline(len(measurement.segments))
        self._setup = self._engine_setup(m_args, m_kwargs, outputs, len(measurement.segments))
        if notes:
            self._setup.extra_notes = tuple(self._setup.extra_notes) + notes
        self._estimate = costmodel.estimate(measurement, self._setup)
        ipus = self._estimate.target.num_ipus
        if ipus > MAX_IPUS_PER_INSTANCE:
            raise Error(f"Too many IPUs requested ({ipus}). Experiments that need more than "
                        f"{MAX_IPUS_PER_INSTANCE} IPUs require distributed execution.", type=CPP_ERROR)
        self._check_fits()
        self._remember_inputs(args, kwargs)
        if not self._training:  # the device's own copy: host changes reach it only when copied
            self._snapshot_buffers()
        self._compiled = True
        self._attached = True
        self._compile_time = _dt.timedelta(seconds=time.perf_counter() - started)
        directory = profiling.profile_dir(self._options._Popart.options.get("engineOptions", {}))
        if directory is not None:
            self._engine_report = profiling.claim(directory / as_component(self.engine_name), self.engine_name,
                                                  self._report_builder(), self._token)

    def _split_rounds(self) -> bool:
        """A --split over a number of IPUs PopTorch would not reserve as it is (3): estimated as
        with autoRoundNumIPUs(True), which the split's note tells the user to set."""
        structure = self.__dict__.get("_structure")
        ipus = max(structure.split.values()) + 1 if structure is not None and structure.split else 1
        return reserved_ipus(ipus) != ipus

    def _check_power_of_two(self, ipus: int) -> None:
        """PopTorch reserves IPUs in powers of two on hardware (popart_compiler CompilerImpl.cpp,
        ``roundUpNumIPUs``): a model on 3 IPUs is an error unless ``autoRoundNumIPUs(True)``
        (then ``costmodel.num_ipus`` has already rounded) or it compiles for an offline target or
        the IPU Model, which take any number."""
        o = self._options
        rounded = reserved_ipus(ipus)
        if (rounded == ipus or o.auto_round_num_ipus or self._split_rounds()
                or o.connection_type == ConnectionType.Never or (o.exists("use_model") and o.use_model)):
            return
        raise Error(f"The model specifies the use of {ipus} IPUs, however PopTorch must reserve a minimum of "
                    f"{rounded} in order to allow the model to run, because PopTorch must reserve a power of 2 "
                    "or maximum of 64 IPUs per process. Please reconfigure your model to use a different number "
                    "of IPUs or set poptorch.Options().autoRoundNumIPUs(True).", type=CPP_ERROR)

    def _check_fits(self) -> None:
        """Raise PopTorch's out-of-memory error when the estimate does not fit its IPUs, after
        writing the memory-only report as Poplar does (see :mod:`popviz.emulator.oom`)."""
        over = oom.overflowing(self._estimate)
        if not over or oom.ignored():
            return
        engine = self._options._Popart.options.get("engineOptions", {})
        directory = profiling.profile_dir(engine)
        written = None
        if directory is not None and oom.report_allowed(profiling.engine_options(engine)):
            claimed = profiling.claim(directory / as_component(self.engine_name), self.engine_name,
                                      self._report_builder(oom.build_report), self._token)
            written = claimed.directory if claimed is not None and claimed.written else None
        raise oom.error(self._estimate, over, written)

    def _measure(self, args: tuple, kwargs: dict,
                 fake: bool = False) -> tuple[costmodel.Measurement, list[tuple[str, Any]]]:
        """One micro-batch forward under measurement; model state (buffers, RNG) is restored.
        ``fake``: with fake tensors (nothing computed, the model's tensors untouched)."""
        structure = layers.prepare(self._model) if isinstance(self._model, torch.nn.Module) else None
        self._structure = structure
        buffers = [] if fake else [(b, b.detach().clone()) for b in self._model.buffers()]
        rng = torch.get_rng_state()
        trace = self._trace()
        units = layers.UnitTracker(self._model, structure, trace) if structure is not None else None
        spans = ModuleSpans(self._model, trace) if isinstance(self._model, torch.nn.Module) else None
        faking = _fake.faked(self._model, args, kwargs) if fake else contextlib.nullcontext((args, kwargs))
        try:
            with faking as (args, kwargs), torch.set_grad_enabled(self._training), tracing(trace), \
                    units if units is not None else contextlib.nullcontext(), \
                    spans if spans is not None else contextlib.nullcontext(), \
                    measuring(self._model, trace, self._training, units) as recorder:
                if self._training:
                    with LossCollector() as losses, upcasting():
                        out = self._model(*args, **kwargs)
                    loss = final_loss(losses.losses)
                else:
                    with upcasting():
                        out = self._model(*args, **kwargs)
                    loss = None
        finally:
            with torch.no_grad():
                for b, saved in buffers:
                    b.copy_(saved)
            torch.set_rng_state(rng)
        leaves, _ = tree_flatten(out)
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        named = []
        for i, t in enumerate(tensors):
            if loss is not None and t is loss:
                named.append(("loss", t))
            else:
                named.append(("output" if len(tensors) == 1 else f"output.{i}", t))
        measurement = recorder.result(loss)
        if spans is not None:  # blocks by their display names from here on (PopTorch's ids: the trace)
            measurement = relabel(measurement, spans.names())
        return measurement, named

    def _check_pipeline(self, forward_stages: int) -> None:
        o = self._options
        if o._execution_strategy.name != "PipelinedExecution" or forward_stages < 2:
            return
        if self._training:
            stages = 2 * forward_stages - 1
            if o.Training.gradient_accumulation < stages:
                raise Error(
                    f"poptorch.Options().Training.gradientAccumulation must be greater than or equal to the "
                    f"number of pipeline stages ({stages}) when using poptorch.PipelinedExecution. Please "
                    f"note that a model with {forward_stages} pipeline stages in PopTorch will have an "
                    f"additional {forward_stages - 1} stages when training.", type=CPP_ERROR)
        elif o.device_iterations < forward_stages:
            raise Error(
                f"poptorch.Options().deviceIterations must be greater than or equal to the number of "
                f"pipeline stages ({forward_stages}) when using PopTorch.PipelinedExecution.", type=CPP_ERROR)

    @property
    def engine_name(self) -> str:
        """The engine's name: modelName if set, else training / inference."""
        if self._options.exists("model_name"):
            return str(self._options.model_name)
        return "training" if self._training else "inference"

    def _engine_setup(self, args: tuple, kwargs: dict, outputs: list[tuple[str, Any]],
                      segments: int) -> costmodel.EngineSetup:
        o = self._options
        strategy = o._execution_strategy
        structure = self.__dict__.get("_structure")
        split_rounds = self._split_rounds()
        inputs = [HostTensor(name, "input", tuple(v.shape), dtype_name(v.dtype), nbytes(v))
                  for name, v in self._names(args, kwargs) if isinstance(v, torch.Tensor)]
        outs = [HostTensor(name, "output", tuple(t.shape), dtype_name(t.dtype), nbytes(t)) for name, t in outputs]
        locations = o.TensorLocations
        slots, accum_bytes = [], None
        recorded = o.toDict()
        if not recorded.get("anchored_tensors"):
            recorded.pop("anchored_tensors", None)
        if self._training and self._optimizer is not None:
            slots = _optim.state_slots(self._optimizer)
            accum_type = getattr(self._optimizer, "accum_type", None)
            if accum_type is not None:
                accum_bytes = torch.empty((), dtype=accum_type).element_size()
            recorded["optimizer"] = _optim.describe(self._optimizer)
        spec = hardware.spec(ipu_version=o.ipu_version if o.exists("ipu_version") else None)
        host = hardware.host_link()
        recorded["emulator"] = {"architecture": spec.architecture,
                                "host_bytes_per_second": host.bytes_per_second,
                                "host_latency_seconds": host.latency_seconds,
                                "host_process_bytes_per_second": host.process_bytes_per_second}
        popart = o._Popart.options
        threads = runtime_options.callback_threads(popart.get("engineOptions", {}), o.replication_factor)
        recorded["emulator"]["host_callback_threads"] = threads
        return costmodel.EngineSetup(
            name=self.engine_name, mode="training" if self._training else "inference",
            strategy=strategy.name if o._strategy_is_explicit or segments > 1 else None,
            device_iterations=o.device_iterations,
            gradient_accumulation=o.Training.gradient_accumulation if self._training else 1,
            replication_factor=o.replication_factor,
            output_mode=self._output_mode_as_set,
            output_return_period=o.output_return_period,
            optimizer_slots=slots, accumulator_element_bytes=accum_bytes,
            optimizer_on_chip=locations.on_chip("optimizer"),
            optimizer_sharded=locations.sharded("optimizer"),
            half_partials=o._Popart.options.get("partialsTypeMatMuls") == "half",
            accumulator_on_chip=locations.on_chip("accumulator"),
            available_memory_proportion=dict(o.available_memory_proportion),
            synthetic_data=o.synthetic_data, auto_round_num_ipus=o.auto_round_num_ipus or split_rounds,
            inputs=inputs, outputs=outs, anchors=self._anchor_setup(), options=recorded, spec=spec, host=host,
            prefetch_depth=runtime_options.prefetch_depth(popart),
            callback_threads=threads,
            processes=max(1, int(o.Distributed.numProcesses)), calls=0,
            extra_notes=(structure.split_note,) if structure is not None and structure.split_note else (),
        )

    def _anchor_setup(self) -> list[costmodel.AnchoredTensor]:
        """The anchored tensors the emulator can size, each with its own return mode (the
        engine's when ``anchorTensor`` was given none, as PopTorch does)."""
        engine_mode = self._output_mode_as_set
        if engine_mode == "Default":
            engine_mode = "Final" if self._training else "All"
        out = []
        for short, name, param, _gradient in self._anchored_parameters():
            _long, use_default, raw_mode, period = self._options.anchored_tensors[short][:4]
            mode = engine_mode if use_default else OutputMode(raw_mode).name
            if mode == "Default":
                mode = engine_mode
            tensor = HostTensor(short, "anchor", tuple(param.shape), dtype_name(param.dtype), nbytes(param))
            out.append(costmodel.AnchoredTensor(tensor, name, mode, int(period) if mode == "EveryN" else 1))
        return out

    def _report_builder(self, build: Callable[..., Any] = costmodel.build_report) -> Callable[[], Any]:
        """Builds the current report without keeping the executor (or its model) alive."""
        return functools.partial(build, self._estimate, self._setup,
                                 versions={"torch": torch.__version__, "poptorch": "emulated"})

    # ------------------------------------------------------------------ running
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        assert self._options.connection_type != ConnectionType.Never, (
            "Trying to run a model on an offline device (ConnectionType.Never): use model.compile(inputs) "
            "instead of model(inputs)")
        if self._last_call_end is not None:
            wall, cpu, seen = self._last_call_end
            if seen == _activity[0]:
                self._host_gaps.append((time.perf_counter() - wall, time.thread_time() - cpu))
            else:  # another executor's compile or calls ran in the gap: not this loop's host work
                self._host_gaps_skipped += 1
            self._last_call_end = None
        _activity[0] += 1
        args, kwargs = self._canonical(args, kwargs)
        most = _calls.limit()
        report = _progress.reporter()
        if not self._compiled:
            with report.activity(f"compiling {self.engine_name!r}: tracing and measuring one micro-batch"):
                self._compile(args, kwargs, estimate_only=most == 1)
            report.say(f"{self.engine_name!r} estimated in {wall_seconds(self._compile_time.total_seconds())}")
        else:
            self._validate(args, kwargs)
            if not self._attached:
                self.attachToDevice()
        self._setup.host_gaps_seconds = self._host_gaps
        self._setup.host_gaps_skipped = self._host_gaps_skipped
        if most is not None and self._setup.calls + 1 >= most:
            self._setup.calls += 1
            self._last_call_start = time.time()
            written = ("reports are written as it exits" if self._engine_report is not None else
                       "profiling is off, so no report is written (enable it with "
                       "opts.enableProfiling(DIR), or run popviz capture --emulate)")
            report.say(f"{self.engine_name!r}: call {self._setup.calls} of {most} estimated, not run; "
                       f"stopping the script (--calls {most}); {written}")
            from popviz.emulator.workers import end_descendants

            end_descendants()  # no DataLoader worker or other process of the script outlives it
            raise _calls.CallLimitReached(self.engine_name, self._setup.calls)
        self._last_call_start = time.time()
        micro = self._split(args, kwargs)
        o = self._options
        d = o.device_iterations
        g = o.Training.gradient_accumulation if self._training else 1
        r = o.replication_factor // o.input_group_size
        outputs = Outputs(OutputMode(o.output_mode), o.output_return_period, d, g, r)
        k_of_n = f"{self._setup.calls + 1}" + (f" of {most}" if most is not None else "")
        started = time.monotonic()
        with report.activity(f"{self.engine_name!r}: running call {k_of_n} on the CPU", len(micro),
                             announce=most is not None) as act:
            if self._training:
                self._train(micro, outputs, d, g, r, act)
            else:
                with torch.no_grad(), self._on_device_buffers():
                    for i, (a, k) in enumerate(micro):
                        with tracing(self._trace()), upcasting():
                            out = self._model(*a, **k)
                        outputs.add(i // (g * r), (i // r) % g, i % r, out)
                        act.advance(i + 1)
        self._setup.calls += 1
        seconds = time.monotonic() - started
        if most is not None or seconds >= _progress.SLOW_CALL_SECONDS:
            report.say(f"{self.engine_name!r}: call {k_of_n} done" + (f" in {seconds:.1f} s" if most is None else ""))
        self._update_anchors()
        result = outputs.result()
        for leaf in tree_flatten(result)[0]:
            if isinstance(leaf, torch.Tensor):
                leaf.backward = no_backward
        self._last_call_end = (time.perf_counter(), time.thread_time(), _activity[0])
        return result

    def _popviz_host_work_starts(self) -> None:
        """Called by popviz's capture hooks after their own work following a call, so that the
        host work measured between calls is the script's alone."""
        if self._last_call_end is not None:
            self._last_call_end = (time.perf_counter(), time.thread_time(), self._last_call_end[2])

    def _train(self, micro: list, outputs: Outputs, d: int, g: int, r: int,
               act: _progress.Activity | None = None) -> None:
        o = self._options
        mean = o.Training.accumulation_and_replication_reduction_type == ReductionType.Mean
        scale = 1.0 / (g * r) if mean else 1.0
        optimizer = self._optimizer
        params = [p for group in optimizer.param_groups for p in group["params"]]
        max_norm = getattr(optimizer, "max_grad_norm", float("inf"))
        index = 0
        for iteration in range(d):
            optimizer.zero_grad(set_to_none=True)
            for step in range(g):
                for replica in range(r):
                    a, k = micro[index]
                    index += 1
                    with torch.enable_grad(), tracing(self._trace()), LossCollector() as losses, \
                            upcasting():
                        out = self._model(*a, **k)
                    loss = final_loss(losses.losses)
                    if loss.requires_grad:
                        loss.backward(torch.full_like(loss, scale))
                    outputs.add(iteration, step, replica, out)
                    if act is not None:
                        act.advance(index)
            if max_norm != float("inf"):
                torch.nn.utils.clip_grad_norm_(params, max_norm)
            _optim.native_step(optimizer)
        training_steps[id(self._user_model)] = training_steps.get(id(self._user_model), 0) + 1



def trainingModel(model: torch.nn.Module, options: Options | None = None,
                  optimizer: torch.optim.Optimizer | None = None) -> PoplarExecutor:
    """Wrap ``model`` for training (default optimizer: SGD, lr 0.01). The model's parameters are
    trained in place."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    if model in wrapped_models:
        raise RuntimeError("Model has already been wrapped in 'poptorch.trainingModel'. Call model.destroy() "
                           "on the model to unwrap before wrapping again.")
    executor = PoplarExecutor(copy.copy(model), options, True, optimizer, user_model=model)
    wrapped_models.add(model)
    model.__dict__["destroy"] = _Destroy(executor)
    return executor


class _Destroy:
    """``model.destroy()`` on a model wrapped for training: destroys its executor. Picklable (so
    ``torch.save(model)`` works, as in PopTorch); a copy is bound to no executor."""

    def __init__(self, executor: PoplarExecutor) -> None:
        self._ref: weakref.ref | None = weakref.ref(executor)

    def __call__(self) -> None:
        live = self._ref() if self._ref is not None else None
        if live is not None:
            live.destroy()

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self._ref = None


def inferenceModel(model: torch.nn.Module, options: Options | None = None) -> PoplarExecutor:
    """Wrap ``model`` for inference (it shares the weights with ``model``)."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    return PoplarExecutor(copy.copy(model), options, False, user_model=model)


__all__ = ["PoplarExecutor", "inferenceModel", "registerPostCompileHook", "registerPreCompileHook",
           "trainingModel"]
