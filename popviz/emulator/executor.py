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
"""

from __future__ import annotations

import collections
import contextlib
import copy
import datetime as _dt
import functools
import inspect
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from popviz.emulator import calls as _calls
from popviz.emulator import costmodel, hardware, layers, oom, profiling
from popviz.emulator import fake as _fake
from popviz.emulator import optim as _optim
from popviz.emulator import progress as _progress
from popviz.emulator.blocks import BlockTrace, ModuleSpans, relabel, tracing
from popviz.emulator.enums import ConnectionType, MeanReductionStrategy, OutputMode, ReductionType
from popviz.emulator.errors import CPP_ERROR, Error
from popviz.emulator.losses import LossCollector, final_loss
from popviz.emulator.measure import measuring
from popviz.emulator.options import Options
from popviz.emulator.precision import upcasting
from popviz.model import HostTensor
from popviz.paths import as_component

MAX_IPUS_PER_INSTANCE = 64
"""PopTorch's limit on the IPUs one process uses (replicas × IPUs per replica); more need
distributed execution (PopRun)."""
NO_EXECUTABLE_ERR = "Model has not been compiled or has been destroyed."
INPUTS_MISMATCH_END = (
    "\nThis error occurred because the inputs passed at runtime don't match the inputs used to "
    "compile the model.\nTo recompile the model for the new inputs create a new inferenceModel / "
    "trainingModel wrapper or call destroy() on the curent one and try again.")

_precompile_hooks: dict[int, Callable[[], None]] = collections.OrderedDict()
_postcompile_hooks: dict[int, Callable[[], None]] = collections.OrderedDict()
_training_steps: dict[int, int] = {}
"""Training calls run per user model (by id): an inference executor of the same model uploads the
host's buffers again after any (PopTorch copies the weights to the device when they changed)."""
_wrapped: weakref.WeakSet = weakref.WeakSet()
"""User models currently wrapped by a training executor."""


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


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class _Outputs:
    """Collects micro-batch outputs and combines them per output mode."""

    def __init__(self, mode: OutputMode, period: int, d: int, g: int, r: int) -> None:
        self.mode, self.period, self.g, self.r = mode, period, g, r
        self.last_d = d - 1
        self.kept: list[list[Any]] = []
        self.sums: dict[int, list[Any]] = {}
        self.spec = None

    def add(self, iteration: int, step: int, replica: int, out: Any) -> None:
        leaves, spec = tree_flatten(out)
        self.spec = spec
        leaves = [t.detach() if isinstance(t, torch.Tensor) else t for t in leaves]
        if self.mode == OutputMode.All:
            self.kept.append(leaves)
        elif self.mode == OutputMode.EveryN:
            if (iteration + 1) % self.period == 0:
                self.kept.append(leaves)
        elif self.mode == OutputMode.Final:
            if iteration == self.last_d and step == self.g - 1:
                self.kept.append(leaves)
        else:  # Sum over device iterations and accumulation steps, per replica
            current = self.sums.get(replica)
            self.sums[replica] = leaves if current is None else [
                a + b if isinstance(a, torch.Tensor) else b for a, b in zip(current, leaves, strict=True)]

    def result(self) -> Any:
        groups = self.kept if self.mode != OutputMode.Sum else [self.sums[r] for r in sorted(self.sums)]
        if self.spec is None:
            return None
        if not groups:  # EveryN with fewer device iterations than its period: nothing returned
            return None
        combined = []
        for i in range(len(groups[0])):
            parts = [grp[i] for grp in groups]
            if not isinstance(parts[0], torch.Tensor):
                combined.append(parts[-1])
            elif parts[0].dim() == 0:
                combined.append(parts[0] if len(parts) == 1 else torch.stack(parts))
            else:
                combined.append(parts[0] if len(parts) == 1 else torch.cat(parts, dim=0))
        return tree_unflatten(combined, self.spec)


def _no_backward() -> None:
    raise Error("backward() cannot be called explicitly on outputs of a PopTorch model. If you're using "
                "a trainingModel, the backwards pass is performed automatically when invoking the "
                "model. If you're using an inferenceModel, you should use a trainingModel instead.")


class PoplarExecutor:
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
        self._last_call_end: tuple[float, float] | None = None
        """(``time.perf_counter``, ``time.thread_time``) when the last call returned: the script's
        own host work runs from then until its next call (data loading, metrics, logging)."""
        self._host_gaps: list[tuple[float, float]] = []
        """(wall seconds, the calling thread's CPU seconds) between one call's return and the next."""
        self._anchor_memory: dict[str, torch.Tensor] = {}
        self._arg_names = self._forward_arg_names(model)

    # ------------------------------------------------------------------ model access
    @staticmethod
    def _forward_arg_names(model: Any) -> list[str]:
        try:
            params = inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model).parameters
        except (TypeError, ValueError):
            return []
        return [p.name for p in params.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    @staticmethod
    def _signature(model: Any) -> inspect.Signature | None:
        try:
            return inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model)
        except (TypeError, ValueError):
            return None

    def _canonical(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call's arguments as PopTorch passes them to the model: every parameter of
        ``forward`` in order (given positionally, by name, or its default), so ``m(x, mask=y)``
        and ``m(x, y)`` are the same call; only ``**kwargs`` and what follows ``*args`` stay named."""
        sig = self.__dict__.get("_sig_cache", False)
        if sig is False:
            sig = self._signature(self._model)
            self.__dict__["_sig_cache"] = sig
        if sig is None:
            return args, kwargs
        params = list(sig.parameters.values())
        variadic = any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
        names = [p.name for p in params]
        assert variadic or len(args) + len(kwargs) <= len(params), (
            f"Too many arguments provided: expected {names} ({len(names)}) but got {len(args) + len(kwargs)}")
        if not variadic:
            for k in kwargs:
                assert k in names, f"{k} is not a valid parameter.Allowed values are {names}"
        out_args: list[Any] = []
        out_kwargs: dict[str, Any] = {}
        after_star = False
        rest = list(args)
        for i, p in enumerate(params):
            if p.kind == p.VAR_KEYWORD:
                out_kwargs.update({k: v for k, v in kwargs.items() if k not in names[:i]})
            elif p.kind == p.VAR_POSITIONAL:
                out_args.extend(rest[i:] if i < len(rest) else [])
                rest = []
                after_star = True
            elif i < len(rest):
                assert p.name not in kwargs, f"Parameter {p.name} was passed more than once"
                out_args.append(rest[i])
            else:
                if p.name in kwargs:
                    value = kwargs[p.name]
                elif p.default is not p.empty:
                    value = p.default
                else:
                    raise Error(f"Mandatory parameter {p.name} missing")
                if after_star or p.kind == p.KEYWORD_ONLY:
                    out_kwargs[p.name] = value
                else:
                    out_args.append(value)
        return tuple(out_args), out_kwargs

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

    # ------------------------------------------------------------------ batching
    @property
    def _batches_per_call(self) -> int:
        o = self._options
        return o.device_iterations * (o.replication_factor // o.input_group_size) * \
            (o.Training.gradient_accumulation if self._training else 1)

    def _split(self, args: tuple, kwargs: dict) -> list[tuple[tuple, dict]]:
        """The micro-batches of one call's arguments."""
        n = self._batches_per_call
        o = self._options
        leaves, spec = tree_flatten((args, kwargs))
        for t in leaves:
            if isinstance(t, torch.Tensor):
                b = 1 if t.dim() == 0 else t.shape[0]
                assert b % n == 0, (
                    f"Invalid batch dimension: In the input {t.shape}, the batch dimension ({b}) must be a "
                    f"multiple of Options.deviceIterations({o.device_iterations}) * "
                    f"(Options.replicationFactor({o.replication_factor}) / "
                    f"Options.inputReplicaGrouping.input_group_size({o.input_group_size})) * "
                    f"Options.Training.gradientAccumulation({o.Training.gradient_accumulation}) = {n} "
                    "because it is used to calculate the batch size which will be executed on the device in "
                    "any given iteration. For a full explanation see the batching semantics page of the "
                    "documentation.")
        micro = []
        for i in range(n):
            parts = []
            for t in leaves:
                if isinstance(t, torch.Tensor) and t.dim() > 0:
                    m = t.shape[0] // n
                    parts.append(t[i * m:(i + 1) * m])
                else:
                    parts.append(t)
            micro.append(tree_unflatten(parts, spec))
        return micro

    def _names(self, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
        """(name, value) of every argument leaf, named after forward's parameters."""
        out = []
        for i, value in enumerate(args):
            name = self._arg_names[i] if i < len(self._arg_names) else f"input{i}"
            out.extend(self._leaf_names(name, value))
        for name, value in kwargs.items():
            out.extend(self._leaf_names(name, value))
        return out

    @staticmethod
    def _leaf_names(name: str, value: Any) -> list[tuple[str, Any]]:
        leaves, _ = tree_flatten(value)
        if len(leaves) == 1 and leaves[0] is value:
            return [(name, value)]
        return [(f"{name}[{i}]", leaf) for i, leaf in enumerate(leaves)]

    def _validate(self, args: tuple, kwargs: dict) -> None:
        count, compiled_args, compiled_kwargs = self._compiled_inputs
        if len(args) != count:
            raise Error(f"Number of positional arguments mismatch: expected {count} arguments "
                        f"but got {len(args)}.{INPUTS_MISMATCH_END}")
        now = dict(self._names(args, kwargs))
        for name, (shape, dtype) in {**compiled_args, **compiled_kwargs}.items():
            value = now.get(name)
            if shape is None:
                continue
            if not isinstance(value, torch.Tensor):
                raise Error(f"Type mismatch for {name}: expected {torch.Tensor} but got {type(value)}."
                            f"{INPUTS_MISMATCH_END}")
            if value.dtype != dtype:
                raise Error(f"Data type mismatch for {name}: expected {dtype} but got {value.dtype}."
                            f"{INPUTS_MISMATCH_END}")
            if tuple(value.shape) != shape:
                raise Error(f"Shape mismatch for {name}: expected {torch.Size(shape)} but got {value.shape}."
                            f"{INPUTS_MISMATCH_END}")

    def _remember_inputs(self, args: tuple, kwargs: dict) -> None:
        def shape(v: Any) -> tuple:
            return (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else (None, None)

        positional = {}
        for i, value in enumerate(args):
            name = self._arg_names[i] if i < len(self._arg_names) else f"input{i}"
            positional.update({n: shape(v) for n, v in self._leaf_names(name, value)})
        named = {n: shape(v) for k, value in kwargs.items() for n, v in self._leaf_names(k, value)}
        self._compiled_inputs = (len(args), positional, named)

    # ------------------------------------------------------------------ compilation
    def _trace(self) -> BlockTrace:
        structure = self.__dict__.get("_structure")
        split = structure.split if structure is not None else None
        return BlockTrace(self._options._execution_strategy.resolver(), split)

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Trace and estimate the model for these (combined-batch) inputs without running it."""
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
                named.append(("output" if len(tensors) == 1 else f"output{i}", t))
        measurement = recorder.result()
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
        inputs = [HostTensor(name, "input", tuple(v.shape), _dtype_name(v.dtype), _nbytes(v))
                  for name, v in self._names(args, kwargs) if isinstance(v, torch.Tensor)]
        outs = [HostTensor(name, "output", tuple(t.shape), _dtype_name(t.dtype), _nbytes(t)) for name, t in outputs]
        locations = o.TensorLocations
        slots, accum_bytes = [], None
        recorded = o.toDict()
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
                                "host_latency_seconds": host.latency_seconds}
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
            synthetic_data=o.synthetic_data, auto_round_num_ipus=o.auto_round_num_ipus,
            inputs=inputs, outputs=outs, options=recorded, spec=spec, host=host, calls=0,
            extra_notes=(structure.split_note,) if structure is not None and structure.split_note else (),
        )

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
            wall, cpu = self._last_call_end
            self._host_gaps.append((time.perf_counter() - wall, time.thread_time() - cpu))
            self._last_call_end = None
        args, kwargs = self._canonical(args, kwargs)
        most = _calls.limit()
        report = _progress.reporter()
        if not self._compiled:
            with report.activity(f"compiling {self.engine_name!r}: tracing and measuring one micro-batch"):
                self._compile(args, kwargs, estimate_only=most == 1)
            report.say(f"{self.engine_name!r} estimated in {self._compile_time.total_seconds():.1f} s")
        else:
            self._validate(args, kwargs)
            if not self._attached:
                self.attachToDevice()
        self._setup.host_gaps_seconds = self._host_gaps
        if most is not None and self._setup.calls + 1 >= most:
            self._setup.calls += 1
            self._last_call_start = time.time()
            report.say(f"{self.engine_name!r}: call {self._setup.calls} of {most} estimated, not run; "
                       f"stopping the script (--calls {most}); reports are written as it exits")
            raise _calls.CallLimitReached(self.engine_name, self._setup.calls)
        self._last_call_start = time.time()
        micro = self._split(args, kwargs)
        o = self._options
        d = o.device_iterations
        g = o.Training.gradient_accumulation if self._training else 1
        r = o.replication_factor // o.input_group_size
        outputs = _Outputs(OutputMode(o.output_mode), o.output_return_period, d, g, r)
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
                leaf.backward = _no_backward
        self._last_call_end = (time.perf_counter(), time.thread_time())
        return result

    def _popviz_host_work_starts(self) -> None:
        """Called by popviz's capture hooks after their own work following a call, so that the
        host work measured between calls is the script's alone."""
        if self._last_call_end is not None:
            self._last_call_end = (time.perf_counter(), time.thread_time())

    def _train(self, micro: list, outputs: _Outputs, d: int, g: int, r: int,
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
        _training_steps[id(self._user_model)] = _training_steps.get(id(self._user_model), 0) + 1

    def _snapshot_buffers(self) -> None:
        self._device_buffers = {n: b.detach().clone() for n, b in self._model.named_buffers()}
        self._buffers_at_step = _training_steps.get(id(self._user_model), 0)

    @contextlib.contextmanager
    def _on_device_buffers(self):
        """An inference run sees the device's buffers, not the host model's (as in PopTorch);
        after a training executor of the same model has run, weights and buffers are uploaded again."""
        if getattr(self, "_buffers_at_step", 0) != _training_steps.get(id(self._user_model), 0):
            self._snapshot_buffers()
        saved = []
        for name, value in getattr(self, "_device_buffers", {}).items():
            prefix, _, leaf = name.rpartition(".")
            module = self._model.get_submodule(prefix) if prefix else self._model
            if leaf in module._buffers:
                saved.append((module, leaf, module._buffers[leaf]))
                module._buffers[leaf] = value
        try:
            yield
        finally:
            for module, leaf, host in saved:
                module._buffers[leaf] = host

    def copyNamedBuffersToDevice(self) -> None:
        """Copy the buffers named in ``Options.updatableNamedBuffers`` from the host model to the
        device (the only way a compiled inference model sees host changes to buffers)."""
        if not self._compiled:
            raise Error(NO_EXECUTABLE_ERR)
        names = self._options._Popart.options.get("updatableNamedBuffers")
        if not names:
            raise Error("No named buffers marked as updatable via updatableNamedBuffers option")
        host = dict(self._model.named_buffers())
        device = getattr(self, "_device_buffers", None)
        if device is not None:
            for name in names:
                device[name] = host[name].detach().clone()

    def _update_anchors(self) -> None:
        anchors = self._options.anchored_tensors
        if not anchors:
            return
        params = dict(self._user_model.named_parameters())
        for short, (long_name, *_rest) in anchors.items():
            name = long_name.split("Gradient___", 1)[-1]
            param = params.get(name)
            if param is None:
                continue
            value = param.grad if long_name.startswith("Gradient___") else param
            if value is not None:
                self._anchor_memory[short] = value.detach().clone()

    # ------------------------------------------------------------------ device state
    @property
    def _executable(self) -> object | None:
        """None until compiled and after ``destroy()`` (code such as Lightning's IPUStrategy tests it)."""
        return self._token if self._compiled else None

    def isCompiled(self) -> bool:
        return self._compiled

    def isAttachedToDevice(self) -> bool:
        return self._compiled and self._attached

    def detachFromDevice(self) -> None:
        if not self._compiled:
            raise Error(NO_EXECUTABLE_ERR)
        if not self._attached:
            raise Error("Device is not attached")
        self._attached = False

    def attachToDevice(self) -> None:
        if not self._compiled:
            raise Error(NO_EXECUTABLE_ERR)
        assert self._options.connection_type != ConnectionType.Never, (
            "Trying to attach to an offline device (ConnectionType.Never)")
        if self._attached:
            raise Error("Device is already attached")
        self._attached = True

    def destroy(self) -> None:
        """Release the (emulated) device and executable; the report is updated one last time."""
        if not self._compiled:
            return
        if self._engine_report is not None:
            profiling.release(self._engine_report)
            self._engine_report = None
        self._compiled = False
        self._attached = False
        if self._training:
            _wrapped.discard(self._user_model)
            self._user_model.__dict__.pop("destroy", None)

    def copyWeightsToHost(self) -> None:
        """The host model shares the weights: nothing to copy (must be compiled, as in PopTorch)."""
        if not self._compiled:
            raise Error(NO_EXECUTABLE_ERR)

    def copyWeightsToDevice(self) -> None:
        if not self._compiled:
            raise Error(NO_EXECUTABLE_ERR)
        if not self._training:
            self._snapshot_buffers()

    def copyWeightsToHostIfNeeded(self) -> bool:
        return False

    def _mean_reduction_for(self, optimizer: torch.optim.Optimizer) -> None:
        """float16 gradient accumulators (without the combined variant) need PopTorch's Running
        mean reduction: set it before compiling; a compiled executable cannot change."""
        if getattr(optimizer, "accum_type", None) != torch.float16 or getattr(optimizer, "use_combined_accum", False):
            return
        training = self._options.Training
        if not self._compiled:
            self._options._unfreeze()
            training.setMeanAccumulationAndReplicationReductionStrategy(MeanReductionStrategy.Running)
            self._options._freeze()
        elif training.meanAccumulationAndReplicationReductionStrategy != MeanReductionStrategy.Running:
            raise ValueError("Invalid optimizer: the new optimizer would require changing options.Training."
                             "meanAccumulationAndReplicationReductionStrategy to "
                             "poptorch.MeanReductionStrategy.Running but the executable is already compiled.")

    def setOptimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Use ``optimizer`` from the next call; its state starts from the current one's."""
        old = self._optimizer
        if optimizer is not old:
            _optim.warn_if_subclassed(optimizer)
        self._mean_reduction_for(optimizer)  # also for the same optimizer with changed attributes
        if old is not None and optimizer is not old:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p in old.state and p not in optimizer.state:
                        optimizer.state[p] = old.state[p]
        self._optimizer = optimizer

    # ------------------------------------------------------------------ timing
    def getPerfCounters(self) -> dict[str, list[list[float]]]:
        """Estimated timestamps (seconds) of the last call's host transfers; only differences mean
        anything. Empty lists before the first call and with synthetic data."""
        empty = {"input": [[]], "input_complete": [[]], "output": [[]], "output_complete": [[]]}
        if not self._compiled or self._last_call_start is None or self._setup.synthetic_data:
            return empty
        base = self._last_call_start
        timeline = self._estimate.timeline()
        r = self._options.replication_factor // self._options.input_group_size

        def expand(pairs: list[tuple[float, float]], count: int) -> tuple[list[float], list[float]]:
            starts = [base + s for s, _ in pairs for _ in range(r)]
            ends = [base + e for _, e in pairs for _ in range(r)]
            return [starts] * count if starts else [[]], [ends] * count if ends else [[]]

        n_in = max(1, len(self._setup.inputs))
        n_out = max(1, len(self._setup.outputs))
        inp, inp_done = expand(timeline["input"], n_in)
        out, out_done = expand(timeline["output"], n_out)
        return {"input": inp, "input_complete": inp_done, "output": out, "output_complete": out_done}

    def _latency(self, start: str, start_reduce: Callable, end: str, end_reduce: Callable) -> tuple:
        counters = self.getPerfCounters()
        starts = [start_reduce(col) for col in zip(*counters[start], strict=True)] if counters[start][0] else []
        ends = [end_reduce(col) for col in zip(*counters[end], strict=True)] if counters[end][0] else []
        if not ends or not starts:
            return (0.0, 0.0, 0.0)
        factor = max(1, len(starts) // len(ends))
        groups = [min(starts[i:i + factor]) for i in range(0, len(starts), factor)]
        durations = [e - s for s, e in zip(groups, ends, strict=False)]
        return (min(durations), max(durations), sum(durations) / len(durations))

    def getHostIpuLatency(self) -> tuple:
        return self._latency("input", min, "input_complete", max)

    def getComputeLatency(self) -> tuple:
        return self._latency("input_complete", max, "output", max)

    def getIpuHostLatency(self) -> tuple:
        return self._latency("output", min, "output_complete", max)

    def getLatency(self) -> tuple:
        return self._latency("input", min, "output_complete", max)

    def cycleCount(self) -> int:
        """The estimated cycles of one call (needs ``Options.logCycleCount(True)``)."""
        if not self._options._Popart.options.get("instrumentWithHardwareCycleCounter"):
            raise Error("Cycle count logging is disabled. Please set option logCycleCount to True to enable.")
        if not self._compiled or not self._setup.calls:
            raise Error("Please run the model at least once before obtaining cycle count.")
        return int(self._estimate.call_cycles)

    def compilationTime(self) -> _dt.timedelta:
        """How long the emulated compilation (trace, measurement, estimate) took."""
        if not self._compiled:
            raise Error("Please compile the model before obtaining compilation time.")
        return self._compile_time

    # ------------------------------------------------------------------ names and anchors
    def getTensorNames(self) -> list[str]:
        assert self._compiled, "Model must be compiled before calling getTensorNames"
        names = [t.name for t in self._setup.inputs]
        names += [n for n, _ in self._user_model.named_parameters()]
        names += [t.name for t in self._setup.outputs]
        return names

    def getAnchoredTensor(self, short_name: str) -> torch.Tensor:
        assert short_name in self._anchor_memory, "No tensor with name " + short_name + " found."
        return self._anchor_memory[short_name]

    def popvizEstimate(self) -> costmodel.Estimate | None:
        """popviz extension: the cost model's estimate (None before compilation)."""
        return self._estimate if self._compiled else None

    def popvizReport(self):
        """popviz extension: the estimated Report as it stands (None before compilation)."""
        return self._report_builder()() if self._compiled else None


def trainingModel(model: torch.nn.Module, options: Options | None = None,
                  optimizer: torch.optim.Optimizer | None = None) -> PoplarExecutor:
    """Wrap ``model`` for training (default optimizer: SGD, lr 0.01). The model's parameters are
    trained in place."""
    if isinstance(model, PoplarExecutor):
        model = model._user_model
    if model in _wrapped:
        raise RuntimeError("Model has already been wrapped in 'poptorch.trainingModel'. Call model.destroy() "
                           "on the model to unwrap before wrapping again.")
    executor = PoplarExecutor(copy.copy(model), options, True, optimizer, user_model=model)
    _wrapped.add(model)
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
