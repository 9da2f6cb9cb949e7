"""PopTorch's enums, with PopTorch 3.x's member names and values."""

from __future__ import annotations

import enum


class OutputMode(enum.IntEnum):
    """Which results an executor call returns (per output tensor)."""

    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class AutoStage(enum.IntEnum):
    """How blocks without an explicit stage get one."""

    SameAsIpu = 0
    AutoIncrement = 1


class DataLoaderMode(enum.IntEnum):
    Sync = 0
    Async = 1
    AsyncRebatched = 2


class SharingStrategy(enum.IntEnum):
    SharedMemory = 0
    FileSystem = 1
    Fork = 2
    ForkServer = 3


class ReductionType(enum.IntEnum):
    """How gradients are reduced over accumulation steps and replicas."""

    Sum = 0
    Mean = 1
    NoReduction = 2


class MeanReductionStrategy(enum.IntEnum):
    Running = 0
    Post = 1
    PostAndLoss = 2


class ConnectionType(enum.IntEnum):
    Always = 0
    OnDemand = 1
    Never = 2


class SyncPattern(enum.IntEnum):
    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class HalfFloatCastingBehavior(enum.IntEnum):
    FloatDowncastToHalf = 0
    HalfUpcastToFloat = 1
    Default = 2


class MatMulSerializationMode(enum.Enum):
    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class Liveness(enum.IntEnum):
    AlwaysLive = 0
    OffChipAfterFwd = 1
    OffChipAfterFwdNoOverlap = 2
    OffChipAfterEachPhase = 3


class OverlapMode(enum.Enum):
    NoOverlap = "no_overlap"
    OverlapAccumulationLoop = "overlap_accumulation_loop"
    OverlapDeviceIterationLoop = "overlap_device_iteration_loop"


class MultiConvPlanType(enum.IntEnum):
    Parallel = 0
    Serial = 1


class CommGroupType(enum.IntEnum):
    All = 0
    Consecutive = 1
    Orthogonal = 2
    NoGrouping = 3


class VariableRetrievalMode(enum.IntEnum):
    OnePerGroup = 0
    AllReplicas = 2


__all__ = ["AutoStage", "CommGroupType", "ConnectionType", "DataLoaderMode", "HalfFloatCastingBehavior",
           "Liveness", "MatMulSerializationMode", "MeanReductionStrategy", "MultiConvPlanType", "OutputMode",
           "OverlapMode", "ReductionType", "SharingStrategy", "SyncPattern", "VariableRetrievalMode"]
