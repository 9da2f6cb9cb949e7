"""What a compiled executor offers besides running: attaching and detaching the (emulated)
device, destroying it, weights and buffers between host and device, changing the optimizer,
PopTorch's timing and cycle-count queries (estimated), tensor names and anchored tensors.
:class:`DeviceState` is that part of :class:`~popviz.emulator.executor.PoplarExecutor` (a mixin
over the executor's state).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import weakref
from collections.abc import Callable

import torch

from popviz.emulator import costmodel, profiling
from popviz.emulator import optim as _optim
from popviz.emulator.enums import ConnectionType, MeanReductionStrategy
from popviz.emulator.errors import Error

NO_EXECUTABLE_ERR = "Model has not been compiled or has been destroyed."
training_steps: dict[int, int] = {}
"""Training calls run per user model (by id): an inference executor of the same model uploads the
host's buffers again after any (PopTorch copies the weights to the device when they changed)."""
wrapped_models: weakref.WeakSet = weakref.WeakSet()
"""User models currently wrapped by a training executor."""


class DeviceState:
    """Device, weights, timing and names of :class:`~popviz.emulator.executor.PoplarExecutor`."""

    def _snapshot_buffers(self) -> None:
        self._device_buffers = {n: b.detach().clone() for n, b in self._model.named_buffers()}
        self._buffers_at_step = training_steps.get(id(self._user_model), 0)

    @contextlib.contextmanager
    def _on_device_buffers(self):
        """An inference run sees the device's buffers, not the host model's (as in PopTorch);
        after a training executor of the same model has run, weights and buffers are uploaded again."""
        if getattr(self, "_buffers_at_step", 0) != training_steps.get(id(self._user_model), 0):
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

    def _anchored_parameters(self) -> list[tuple[str, str, torch.nn.Parameter, bool]]:
        """``opts.anchorTensor`` entries the emulator can serve: (short name, parameter name,
        parameter, whether its gradient is anchored): a parameter by its name, or its gradient
        as ``Gradient___<name>`` (other PopART tensors have no counterpart on the CPU)."""
        anchors = self._options.anchored_tensors
        if not anchors:
            return []
        params = dict(self._user_model.named_parameters())
        out = []
        for short, (long_name, *_rest) in anchors.items():
            name = long_name.split("Gradient___", 1)[-1]
            if name in params:
                out.append((short, name, params[name], long_name.startswith("Gradient___")))
        return out

    def _update_anchors(self) -> None:
        for short, _name, param, gradient in self._anchored_parameters():
            value = param.grad if gradient else param
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
            wrapped_models.discard(self._user_model)
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
        anchored = self._options.anchored_tensors.get(short_name)
        if short_name not in self._anchor_memory and anchored is not None:
            raise Error(f"popviz emulator: {short_name!r} anchors {anchored[0]!r}, which the emulator cannot "
                        "serve: on the CPU it keeps parameters and their gradients (Gradient___<name>) only, "
                        "not PopART's intermediate tensors (docs/emulator.md)")
        assert short_name in self._anchor_memory, "No tensor with name " + short_name + " found."
        return self._anchor_memory[short_name]

    def popvizEstimate(self) -> costmodel.Estimate | None:
        """popviz extension: the cost model's estimate (None before compilation)."""
        return self._estimate if self._compiled else None

    def popvizReport(self):
        """popviz extension: the estimated Report as it stands (None before compilation)."""
        return self._report_builder()() if self._compiled else None
