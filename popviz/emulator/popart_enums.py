"""A stand-in for PopART's Python enums, so scripts that pass them to ``opts._Popart.set`` run.

Scripts written for the Poplar SDK import ``popart`` only to name session options' values, e.g.
``opts._Popart.set("autoRecomputation", int(popart.RecomputationType.Pipeline))`` or
``int(popart.SyntheticDataMode.RandomNormal)``. PopTorch passes the integer on to PopART (its
``_PopartOptions`` docstring: "there is no mapping for the various PopART enums so integers need
to be used"). Each enum here carries PopART's Python name for every member and the value of the
C++ enumerator it binds (``willow/include/popart/sessionoptions.hpp``, ``op.hpp``,
``datatype.hpp``, ``tensorlocation.hpp``, ``devicemanager.hpp``; names from
``python/popart/popart_core/popart.cpp`` and ``python/popart._internal.ir/bindings/
tensorinfo.cpp``). Python names differ from C++ where C++ says ``None``: PopART binds
``RecomputationType::None`` as ``NoRecompute``, ``MergeVarUpdateType::None`` as ``Off`` and
``ScatterReduction::None`` as ``NoReduction``.

Under ``popviz emulate`` / ``popviz capture --emulate`` the name ``popart`` imports this module
(through ``popviz/emulator/_shim/popart``) unless a real PopART is installed, which then wins.
This module imports nothing heavy.
"""

from __future__ import annotations

import enum

__version__ = "3.4.0+popviz.emulator"
"""The PopART release these enums come from (SDK 3.4), labelled as popviz's stand-in."""


class RecomputationType(enum.IntEnum):
    """``SessionOptions::autoRecomputation``."""

    NoRecompute = 0
    Standard = 1
    NormOnly = 2
    Pipeline = 3
    RecomputeAll = 4


class RecomputeType(enum.IntEnum):
    Undefined = 0
    Checkpoint = 1
    Recompute = 2
    Recomputed = 3


class MergeVarUpdateType(enum.IntEnum):
    """``SessionOptions::mergeVarUpdate`` (C++ order: None, All, AutoLoose, AutoTight)."""

    Off = 0
    All = 1
    AutoLoose = 2
    AutoTight = 3


class VirtualGraphMode(enum.IntEnum):
    Off = 0
    Manual = 1
    Auto = 2
    ExecutionPhases = 3


class SyntheticDataMode(enum.IntEnum):
    """``SessionOptions::syntheticDataMode``: Off streams real data; the others never copy it."""

    Off = 0
    Zeros = 1
    RandomNormal = 2
    RandomUniform = 3


class IrSerializationFormat(enum.IntEnum):
    JSON = 0


class Instrumentation(enum.IntEnum):
    Outer = 0
    Inner = 1


class BatchSerializationBatchSchedule(enum.IntEnum):
    Scheduler = 0
    Isomorphic = 1
    OverlapOnIo = 2
    OverlapOnCompute = 3


class BatchSerializationTransformContext(enum.IntEnum):
    Fwd = 0
    Bwd = 1
    Forward = 0
    Backward = 1


class BatchSerializationMethod(enum.IntEnum):
    UnrollDynamic = 0
    UnrollStatic = 1
    Loop = 2


class ExecutionPhaseIOSchedule(enum.IntEnum):
    Preload = 0
    OnDemand = 1


class ExecutionPhaseSchedule(enum.IntEnum):
    Interleaving = 0
    Batch = 1
    BatchClusteredIO = 2


class AccumulateOuterFragmentSchedule(enum.IntEnum):
    """``SessionOptions::accumulateOuterFragmentSettings.schedule``."""

    Scheduler = 0
    Serial = 1
    OverlapCycleOptimized = 2
    OverlapMemoryOptimized = 3


class SubgraphCopyingStrategy(enum.IntEnum):
    OnEnterAndExit = 0
    JustInTime = 1


class MeanReductionStrategy(enum.IntEnum):
    Running = 0
    Post = 1


class ReductionType(enum.IntEnum):
    Sum = 0
    Mean = 1
    NoReduction = 2


class ScatterReduction(enum.IntEnum):
    Sum = 0
    Max = 1
    Min = 2
    Mul = 3
    NoReduction = 4


class AutodiffStitchStrategy(enum.IntEnum):
    RecomputeMinimal = 0
    RecomputeAllNonInputs = 1
    AddFwdOutputs = 2
    SafeAddFwdOutputs = 3


class GradientTensorTrackingMethod(enum.IntEnum):
    AllNonViewChangingGradientTensors = 0
    ConvAndMatmulGradients = 1
    GradientsOfUserSpecifiedTensors = 2


class PatternsLevel(enum.IntEnum):
    NoPatterns = 0
    Minimal = 1
    Default = 2
    All = 3


class TensorStorage(enum.IntEnum):
    OnChip = 0
    OffChip = 1


class TileSet(enum.IntEnum):
    Compute = 0
    IO = 1


class ReplicatedTensorSharding(enum.IntEnum):
    Off = 0
    On = 1


class SyncPattern(enum.IntEnum):
    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class DeviceType(enum.IntEnum):
    IpuModel = 0
    Cpu = 1
    Ipu = 2
    OfflineIpu = 3
    Sim = 4


class DeviceConnectionType(enum.IntEnum):
    Always = 0
    OnDemand = 1
    Never = 2


class CommGroupType(enum.IntEnum):
    All = 0
    Consecutive = 1
    Orthogonal = 2
    Ungrouped = 3


class VariableRetrievalMode(enum.IntEnum):
    OnePerGroup = 0
    AllReduceReplicas = 1
    AllReplicas = 2


class InitType(enum.IntEnum):
    NoInit = 0
    Zero = 1


class DataType(enum.IntEnum):
    """``popart.DataType`` (``datatype.hpp``)."""

    UINT8 = 0
    INT8 = 1
    FLOAT8_143 = 2
    FLOAT8_152 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    UINT32 = 8
    UINT64 = 9
    BOOL = 10
    FLOAT = 11
    FLOAT16 = 12
    BFLOAT16 = 13
    DOUBLE = 14
    COMPLEX64 = 15
    COMPLEX128 = 16
    STRING = 17
    UNDEFINED = 18


__all__ = sorted(name for name, value in globals().items()
                 if isinstance(value, type) and issubclass(value, enum.IntEnum) and value is not enum.IntEnum)
