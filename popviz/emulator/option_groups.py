"""The sub-objects of ``poptorch.Options`` (``opts.Training``, ``Precision``, ``Distributed``,
``TensorLocations``, ``Jit``, ``_Popart``) and their common base: named values with defaults,
read back as attributes, frozen with their Options. :mod:`popviz.emulator.options` builds
``Options`` from them (and re-exports ``TensorLocationSettings``, which PopTorch's
``poptorch.options`` defines).
"""

from __future__ import annotations

import copy
import enum
import os
from typing import Any

from popviz.emulator import enums

FROZEN_MESSAGE = "Can't modify frozen Options"


class _OptionsDict:
    """Named option values with defaults; attribute reads; freezing."""

    def __init__(self, **defaults: Any) -> None:
        object.__setattr__(self, "_is_frozen", False)
        object.__setattr__(self, "_values", dict(defaults))

    # -- freezing
    def _check_not_frozen(self) -> None:
        if self.__dict__.get("_is_frozen"):
            raise AttributeError(FROZEN_MESSAGE)

    def _set_frozen(self, state: bool) -> None:
        object.__setattr__(self, "_is_frozen", state)
        for value in self.__dict__.values():
            if isinstance(value, (_OptionsDict, _PopartOptions)):
                value._set_frozen(state)

    def _freeze(self) -> None:
        self._set_frozen(True)

    def _unfreeze(self) -> None:
        self._set_frozen(False)

    # -- values
    def set(self, **kwargs: Any) -> None:
        self._check_not_frozen()
        for option, value in kwargs.items():
            assert option in self._values, (
                f"Invalid option {option}, valid options are {list(self._values)}")
            default = self._values[option]
            assert isinstance(value, type(default)) or default is None, (
                f"Unexpected type {type(value)} for option {option}. Expected {type(default)}")
            self._values[option] = value

    def createOrSet(self, **kwargs: Any) -> None:
        self._check_not_frozen()
        for option, value in kwargs.items():
            if option in self._values:
                self.set(**{option: value})
            else:
                self._values[option] = value

    def exists(self, option: str) -> bool:
        return option in self._values

    def deleteIfExists(self, option: str) -> None:
        self._check_not_frozen()
        self._values.pop(option, None)

    def __getattr__(self, option: str) -> Any:
        if option.startswith("__"):
            raise AttributeError(option)
        values = self.__dict__.get("_values", {})
        if option in values:
            return values[option]
        raise AttributeError(f"Invalid attribute {option}.")

    def __setattr__(self, option: str, value: Any) -> None:
        self._check_not_frozen()
        if option.startswith("_"):
            object.__setattr__(self, option, value)
        else:
            self.set(**{option: value})

    def __call__(self, option: str) -> Any:
        return getattr(self, option)

    def __deepcopy__(self, memo: dict) -> _OptionsDict:
        cls = type(self)
        clone = cls.__new__(cls)
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            object.__setattr__(clone, key, False if key == "_is_frozen" else copy.deepcopy(value, memo))
        return clone

    def toDict(self) -> dict[str, Any]:
        return dict(self._values)

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"{type(self).__name__}({body})"


class _JitOptions(_OptionsDict):
    def __init__(self) -> None:
        super().__init__(trace_model=False)

    def traceModel(self, trace_model: bool) -> _JitOptions:
        self.set(trace_model=trace_model)
        return self


class _PopartOptions:
    """PopART session options (``opts._Popart``): a free-form dictionary."""

    def __init__(self) -> None:
        object.__setattr__(self, "_is_frozen", False)
        object.__setattr__(self, "options", {})
        self.set("instrumentWithHardwareCycleCounter", False)
        self.set("rearrangeAnchorsOnHost", False)

    def _set_frozen(self, state: bool) -> None:
        object.__setattr__(self, "_is_frozen", state)

    def checkIsFrozen(self) -> None:
        if self._is_frozen:
            raise AttributeError(FROZEN_MESSAGE)

    def __setattr__(self, name: str, value: Any) -> None:
        self.checkIsFrozen()
        object.__setattr__(self, name, value)

    def __deepcopy__(self, memo: dict) -> _PopartOptions:
        clone = _PopartOptions.__new__(_PopartOptions)
        memo[id(self)] = clone
        object.__setattr__(clone, "_is_frozen", False)
        object.__setattr__(clone, "options", copy.deepcopy(self.options, memo))
        return clone

    def set(self, key: str, value: Any) -> _PopartOptions:
        """Record one PopART session option. PopART takes its enums as integers (PopTorch passes
        the value through), so a ``popart`` enum member is stored as its integer value:
        ``set("autoRecomputation", popart.RecomputationType.Pipeline)`` records 3, exactly as
        ``set("autoRecomputation", 3)`` does."""
        self.checkIsFrozen()
        self.options[key] = int(value) if isinstance(value, enum.IntEnum) else value
        return self

    def setEngineOptions(self, engine_options: dict[str, Any]) -> _PopartOptions:
        """Replace the Poplar engine options."""
        return self.set("engineOptions", dict(engine_options))

    def setPatterns(self, patterns: dict[str, bool], level: int = 2) -> _PopartOptions:
        assert isinstance(level, int)
        assert isinstance(patterns, dict)
        self.set("patterns_level", level)
        self.set("patterns", patterns)
        return self

    def __repr__(self) -> str:
        return f"_PopartOptions({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"


class _PrecisionOptions(_OptionsDict):
    def __init__(self, popart: _PopartOptions) -> None:
        super().__init__()
        object.__setattr__(self, "_popart", popart)

    def halfFloatCasting(self, behaviour: enums.HalfFloatCastingBehavior) -> _PrecisionOptions:
        self.createOrSet(half_float_casting=enums.HalfFloatCastingBehavior(behaviour))
        return self

    def runningStatisticsAlwaysFloat(self, value: bool) -> _PrecisionOptions:
        self.createOrSet(running_statistics_always_float=bool(value))
        return self

    def enableFloatingPointExceptions(self, enabled: bool) -> _PrecisionOptions:
        self.createOrSet(floating_point_exceptions=bool(enabled))
        return self

    def enableStochasticRounding(self, enabled: bool) -> _PrecisionOptions:
        self._popart.set("enableStochasticRounding", bool(enabled))
        return self

    def setPartialsType(self, dtype: Any) -> _PrecisionOptions:
        name = str(dtype).replace("torch.", "")
        assert name in ("float", "float32", "half", "float16"), (
            "setPartialsType only accepts torch.float32 / torch.float or torch.float16 / torch.half")
        self._popart.set("partialsTypeMatMuls", "half" if name in ("half", "float16") else "float")
        self._popart.set("convolutionOptions", {"partialsType": "half" if name in ("half", "float16")
                                                 else "float"})
        return self


class _TrainingOptions(_OptionsDict):
    def __init__(self, popart: _PopartOptions) -> None:
        super().__init__(gradient_accumulation=1,
                         accumulation_and_replication_reduction_type=enums.ReductionType.Mean,
                         meanAccumulationAndReplicationReductionStrategy=enums.MeanReductionStrategy.Post)
        object.__setattr__(self, "_popart", popart)

    def gradientAccumulation(self, gradient_accumulation: int) -> _TrainingOptions:
        """Micro-batches whose gradients are accumulated before each weight update."""
        self.set(gradient_accumulation=gradient_accumulation)
        return self

    def accumulationAndReplicationReductionType(self, reduction_type: enums.ReductionType
                                                ) -> _TrainingOptions:
        """Mean (default) or Sum of the gradients over accumulation steps and replicas."""
        if not isinstance(reduction_type, enums.ReductionType) or \
                reduction_type == enums.ReductionType.NoReduction:
            raise ValueError("accumulationAndReplicationReductionType must be set to "
                             "poptorch.ReductionType.Mean or poptorch.ReductionType.Sum")
        self.set(accumulation_and_replication_reduction_type=reduction_type)
        return self

    def setMeanAccumulationAndReplicationReductionStrategy(
            self, strategy: enums.MeanReductionStrategy) -> _TrainingOptions:
        self.set(meanAccumulationAndReplicationReductionStrategy=strategy)
        return self

    def setAutomaticLossScaling(self, enabled: bool) -> _TrainingOptions:
        self._popart.set("automaticLossScalingSettings.enabled", enabled)
        return self

    def setConvolutionDithering(self, enabled: bool) -> _TrainingOptions:
        self._popart.set("convolutionOptions", {"enableConvDithering": enabled})
        return self


class _DistributedOptions(_OptionsDict):
    """Process id and count of a multi-instance run (PopRun / OpenMPI)."""

    def __init__(self) -> None:
        super().__init__(num_distributed_processes=1, distributed_process_id=0, ipuof_configs={})
        self.setEnvVarNames("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")

    def disable(self) -> _DistributedOptions:
        self.set(num_distributed_processes=1, distributed_process_id=0)
        return self

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str) -> _DistributedOptions:
        """Read the process count and id from these environment variables (when set)."""
        self.configureProcessId(int(os.environ.get(var_process_id, "0")),
                                int(os.environ.get(var_num_processes, "1")))
        return self

    def configureProcessId(self, process_id: int, num_processes: int) -> _DistributedOptions:
        self.set(distributed_process_id=process_id, num_distributed_processes=num_processes)
        return self

    @property
    def processId(self) -> int:
        return self._values["distributed_process_id"]

    @property
    def numProcesses(self) -> int:
        return self._values["num_distributed_processes"]


class TensorLocationSettings(_OptionsDict):
    """Where a class of tensors lives (on chip or in streaming memory) and how it is loaded."""

    def minElementsForOffChip(self, min_elements: int) -> TensorLocationSettings:
        assert isinstance(min_elements, int)
        self.createOrSet(minElementsForOffChip=min_elements)
        return self

    def minElementsForReplicatedTensorSharding(self, min_elements: int) -> TensorLocationSettings:
        assert isinstance(min_elements, int)
        self.createOrSet(minElementsForReplicatedTensorSharding=min_elements)
        return self

    def useOnChipStorage(self, use: bool | None = True) -> TensorLocationSettings:
        if use is None:
            self.deleteIfExists("onChip")
        else:
            assert isinstance(use, bool)
            self.createOrSet(onChip=int(use))
        return self

    def useReplicatedTensorSharding(self, use: bool = True) -> TensorLocationSettings:
        assert isinstance(use, bool)
        self.createOrSet(useReplicatedTensorSharding=int(use))
        return self

    def useIOTilesToLoad(self, use: bool = True) -> TensorLocationSettings:
        assert isinstance(use, bool)
        self.createOrSet(useIOTilesToLoad=int(use))
        return self

    def useIOTilesToStore(self, use: bool = True) -> TensorLocationSettings:
        assert isinstance(use, bool)
        self.createOrSet(useIOTilesToStore=int(use))
        return self


class _TensorLocationOptions(_OptionsDict):
    def numIOTiles(self, num_tiles: int) -> _TensorLocationOptions:
        assert isinstance(num_tiles, int)
        message = "numIOTiles must be an even number between 32 and 192."
        assert 32 <= num_tiles <= 192 and num_tiles % 2 == 0, message
        self.createOrSet(numIOTiles=num_tiles)
        return self

    def _location(self, key: str, location: TensorLocationSettings) -> _TensorLocationOptions:
        assert isinstance(location, TensorLocationSettings)
        self.createOrSet(**{key: location.toDict()})
        return self

    def setActivationLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        return self._location("location_activation", location)

    def setWeightLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        return self._location("location_weight", location)

    def setOptimizerLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        return self._location("location_optimizer", location)

    def setAccumulatorLocation(self, location: TensorLocationSettings) -> _TensorLocationOptions:
        return self._location("location_accumulator", location)

    def on_chip(self, kind: str) -> bool:
        """Whether tensors of ``kind`` (activation/weight/optimizer/accumulator) stay on chip."""
        return bool(self._values.get(f"location_{kind}", {}).get("onChip", 1))

    def sharded(self, kind: str) -> bool:
        """Whether tensors of ``kind`` use replicated tensor sharding."""
        return bool(self._values.get(f"location_{kind}", {}).get("useReplicatedTensorSharding", 0))
