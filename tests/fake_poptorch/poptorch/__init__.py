"""A test double of PopTorch 3.x for popviz's hook tests: the parts of its Python surface the
capture hooks read, laid out like the real module's internals (``OptionsDict._values``,
``Options._execution_strategy`` with ``_block_map`` of ``Stage`` objects, ``_BlockHook``
forward pre-hooks, ``PoplarExecutor._user_model``). It runs the model on the CPU, one
micro-batch at a time, and returns outputs per output mode. Not a product: popviz's emulator
is the real thing for users."""

from __future__ import annotations

import datetime
import enum
import os
import time

import torch

__version__ = "3.3.0+fake"


class OutputMode(enum.IntEnum):
    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class AutoStage(enum.IntEnum):
    SameAsIpu = 0
    AutoIncrement = 1


class _OptionsDict:
    def __init__(self, **values):
        self._is_frozen = False
        self._values = values

    def __getattr__(self, name):
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"Invalid attribute {name}.")

    def createOrSet(self, **kwargs):
        if self._is_frozen:
            raise AttributeError("Can't modify frozen Options")
        self._values.update(kwargs)
        return self

    def toDict(self):
        return dict(self._values)


class _TrainingOptions(_OptionsDict):
    def __init__(self):
        super().__init__(gradient_accumulation=1)

    def gradientAccumulation(self, n):
        return self.createOrSet(gradient_accumulation=n)


class _DistributedOptions(_OptionsDict):
    def __init__(self):
        super().__init__(num_distributed_processes=int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")),
                         distributed_process_id=int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")))

    def configureProcessId(self, pid, n):
        return self.createOrSet(distributed_process_id=pid, num_distributed_processes=n)

    @property
    def processId(self):
        return self.distributed_process_id

    @property
    def numProcesses(self):
        return self.num_distributed_processes


class TensorLocationSettings(_OptionsDict):
    def useOnChipStorage(self, use=True):
        return self.createOrSet(onChip=int(use))


class _TensorLocationOptions(_OptionsDict):
    def setOptimizerLocation(self, location):
        return self.createOrSet(location_optimizer=location.toDict())


class _PopartOptions:
    def __init__(self):
        self.options = {}

    def setEngineOptions(self, opts):
        self.options["engineOptions"] = dict(opts)


class Stage:
    def __init__(self, *block_ids):
        self._blocks = block_ids
        self._stage_id = -1
        self._ipu = None

    @property
    def blocks(self):
        return self._blocks

    def ipu(self, ipu):
        self._ipu = ipu
        return self


class _DefaultStageManager:
    def __init__(self, auto_stage):
        self._auto_stage = auto_stage


class PipelinedExecution:
    def __init__(self, *args):
        self._block_map = {}
        auto = AutoStage.SameAsIpu
        if len(args) == 1 and isinstance(args[0], AutoStage):
            auto = args[0]
        else:
            for i, arg in enumerate(args):
                stage = arg if isinstance(arg, Stage) else Stage(arg)
                stage._stage_id = i
                for block in stage.blocks:
                    self._block_map[block] = stage
        self._stages_manager = _DefaultStageManager(auto)


class ShardedExecution(PipelinedExecution):
    pass


class Options(_OptionsDict):
    def __init__(self):
        self._training = _TrainingOptions()
        self._distributed = _DistributedOptions()
        self._tensor_locations = _TensorLocationOptions()
        self._popart = _PopartOptions()
        self._execution_strategy = PipelinedExecution()
        super().__init__(replication_factor=1, device_iterations=1, output_mode=OutputMode.Default.value,
                         output_return_period=1, available_memory_proportion={})

    Training = property(lambda self: self._training)
    Distributed = property(lambda self: self._distributed)
    TensorLocations = property(lambda self: self._tensor_locations)
    _Popart = property(lambda self: self._popart)

    def deviceIterations(self, n):
        return self.createOrSet(device_iterations=n)

    def replicationFactor(self, n):
        return self.createOrSet(replication_factor=n)

    def outputMode(self, mode, output_return_period=None):
        self.createOrSet(output_mode=mode.value)
        if output_return_period:
            self.createOrSet(output_return_period=output_return_period)
        return self

    def setExecutionStrategy(self, strategy):
        self._execution_strategy = strategy
        return self

    def setAvailableMemoryProportion(self, amp):
        return self.createOrSet(available_memory_proportion={int(k[3:]): v for k, v in amp.items()})

    def modelName(self, name):
        return self.createOrSet(model_name=name)

    def enableProfiling(self, profile_dir=None):
        self._popart.setEngineOptions({"autoReport.all": "true", "autoReport.directory": profile_dir or "."})
        return self


class _BlockHook:
    def __init__(self, user_id, ipu_id):
        self._user_id = user_id
        self._ipu_id = ipu_id

    def __call__(self, module, inputs):
        if self._user_id is None:  # PopTorch keeps the automatic id it gives on the first run
            self._user_id = str(Block._next_auto_id)
            Block._next_auto_id += 1
        Block.start(self._user_id, self._ipu_id)

    def __repr__(self):
        return f"BeginBlock(user_id={self._user_id}, ipu_id={self._ipu_id})"


class Block:
    _next_auto_id = 0

    @staticmethod
    def start(user_id=None, ipu_id=None):
        return None

    def __init__(self, user_id=None, ipu_id=None):
        self._user_id = user_id
        self._ipu_id = ipu_id

    def __enter__(self):
        Block.start(self._user_id, self._ipu_id)

    def __exit__(self, *exc):
        return False


def BeginBlock(layer, user_id=None, ipu_id=None):
    layer.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return layer


class Error(RuntimeError):
    pass


def _define_ops():
    """``torch.ops.poptorch.identity_loss`` as PopTorch 3 registers it (graphcore/poptorch
    poptorch/source/dispatch_tracer/RegisterAtenOverloads.cpp: schema ``identity_loss(Tensor x,
    int reduction) -> Tensor``, a CPU kernel computing sum (0), mean (1) or a copy (2), no
    autograd formula; RegisterMetaOps.cpp.inc: a Meta kernel)."""
    try:
        torch.ops.poptorch.identity_loss  # noqa: B018
        return
    except (AttributeError, RuntimeError):
        pass
    lib = torch.library.Library("poptorch", "DEF")
    lib.define("identity_loss(Tensor x, int reduction) -> Tensor")

    def kernel(x, reduction):
        with torch.no_grad():  # PopTorch's op has no autograd formula: its output has no grad_fn
            return x.sum() if reduction == 0 else x.mean() if reduction == 1 else x.clone()

    lib.impl("identity_loss", kernel, "CPU")
    lib.impl("identity_loss", kernel, "Meta")
    # returns its argument (opReturningFirstArgument); no autograd formula either
    lib.define("recomputation_checkpoint(Tensor self) -> Tensor")

    def first(x):
        with torch.no_grad():
            return x.clone()

    lib.impl("recomputation_checkpoint", first, "CPU")
    lib.impl("recomputation_checkpoint", first, "Meta")
    _define_ops.lib = lib


_define_ops()


def recomputationCheckpoint(*tensors):
    """PopTorch's python/ops.py: each tensor through the op."""
    out = tuple(torch.ops.poptorch.recomputation_checkpoint(t) for t in tensors)
    return out[0] if len(out) == 1 else out


def identity_loss(x, reduction):
    """PopTorch's python/ops.py: the reduction by name, then the op."""
    codes = {"sum": 0, "mean": 1, "none": 2}
    if reduction not in codes:
        raise ValueError("reduction must be sum, mean or none")
    return torch.ops.poptorch.identity_loss(x, codes[reduction])


def _combine(results, mode, period, g, r):
    if isinstance(results[0], (tuple, list)):
        return type(results[0])(_combine([x[i] for x in results], mode, period, g, r)
                                for i in range(len(results[0])))
    if mode == "EveryN":  # all accumulation steps and replicas of every N-th device iteration
        results = [x for i, x in enumerate(results) if (i // (g * r) + 1) % period == 0]
    stacked = torch.stack(results) if results[0].dim() == 0 else torch.cat(results)
    if mode in ("All", "EveryN"):
        return stacked
    if mode == "Final":
        return results[-1]
    return stacked.sum(0, keepdim=results[0].dim() > 0)


class PoplarExecutor:
    def __init__(self, model, options, training):
        self._user_model = model
        self._options = options or Options()
        self._training = training
        self._compiled = False
        self._compile_seconds = None
        self._options._is_frozen = True

    def __getattr__(self, attr):
        return getattr(self.__dict__["_user_model"], attr)

    @property
    def model(self):
        return self._user_model

    @property
    def options(self):
        return self._options

    def isCompiled(self):
        return self._compiled

    def compile(self, *args):
        t0 = time.perf_counter()
        n = self._micro_batches()
        with torch.no_grad():
            self._user_model(*(a[: a.shape[0] // n] for a in args))
        if os.environ.get("FAKE_POPTORCH_FAIL_COMPILE"):
            raise Error("Out of memory on tile 42: 1024 bytes required")
        self._compiled = True
        self._compile_seconds = time.perf_counter() - t0

    def compilationTime(self):
        return datetime.timedelta(seconds=self._compile_seconds)

    def _micro_batches(self):
        o = self._options
        return o.device_iterations * o.Training.gradient_accumulation * o.replication_factor

    def __call__(self, *args):
        if not self._compiled:
            self.compile(*args)
        n = self._micro_batches()
        o = self._options
        mode = OutputMode(o.output_mode).name
        if mode == "Default":
            mode = "Final" if self._training else "All"
        chunks = [tuple(a.chunk(n)) for a in args]
        with torch.no_grad():
            results = [self._user_model(*(c[i] for c in chunks)) for i in range(n)]
        return _combine(results, mode, o.output_return_period, o.Training.gradient_accumulation,
                        o.replication_factor)

    def destroy(self):
        self._compiled = False

    def getPerfCounters(self):
        n = self._micro_batches()
        return {"input": [[0.001 * i for i in range(n)]], "input_complete": [[0.001 * i + 0.0002
                                                                              for i in range(n)]],
                "output": [[0.001 * i + 0.0005 for i in range(n)]],
                "output_complete": [[0.001 * i + 0.0007 for i in range(n)]]}

    def getHostIpuLatency(self):
        return (0.0002, 0.0002, 0.0002)

    def getComputeLatency(self):
        return (0.0003, 0.0003, 0.0003)

    def getIpuHostLatency(self):
        return (0.0002, 0.0002, 0.0002)

    def getLatency(self):
        return (0.0007, 0.0007, 0.0007)

    def cycleCount(self):
        raise Error("Cycle count logging is disabled.")


def trainingModel(model, options=None, optimizer=None):
    return PoplarExecutor(model, options, training=True)


def inferenceModel(model, options=None):
    return PoplarExecutor(model, options, training=False)
