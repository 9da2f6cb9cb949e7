"""``poptorch.Options`` and its sub-objects, recorded faithfully.

Every setter PopTorch offers is accepted; the emulator uses the values that change behaviour or
cost (device iterations, gradient accumulation, replication, output mode, execution strategy,
available memory proportion, tensor locations, synthetic data, profiling, model name) and records
the rest in the report. Setters return ``self`` so they chain; values read back as attributes
(``opts.device_iterations``). ``trainingModel``, ``inferenceModel`` and ``DataLoader`` freeze the
options they are given: a later setter raises ``AttributeError("Can't modify frozen Options")``;
``clone()`` gives an unfrozen deep copy.
"""

from __future__ import annotations

import copy
import enum
import json
import os
from typing import Any

from popviz.emulator import enums
from popviz.emulator.strategy import PipelinedExecution, _ExecutionStrategy

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


class Options(_OptionsDict):
    """Options of one executor (PopTorch's ``poptorch.Options``)."""

    def __init__(self) -> None:
        super().__init__(replication_factor=1, input_group_size=1,
                         input_cgt=enums.CommGroupType.Consecutive, broadcast_buffers=True,
                         device_iterations=1, log_dir=".", max_repeat_logs=4,
                         auto_round_num_ipus=False, anchored_tensors={},
                         output_mode=enums.OutputMode.Default.value, output_return_period=1,
                         connection_type=enums.ConnectionType.Always.value,
                         sync_pattern=enums.SyncPattern.Full.value, available_memory_proportion={})
        popart = _PopartOptions()
        object.__setattr__(self, "_jit", _JitOptions())
        object.__setattr__(self, "_popart", popart)
        object.__setattr__(self, "_precision", _PrecisionOptions(popart))
        object.__setattr__(self, "_training", _TrainingOptions(popart))
        object.__setattr__(self, "_distributed", _DistributedOptions())
        object.__setattr__(self, "_tensor_locations", _TensorLocationOptions())
        object.__setattr__(self, "_execution_strategy", PipelinedExecution())
        object.__setattr__(self, "_strategy_is_explicit", False)
        object.__setattr__(self, "_source_location_excludes", [])
        object.__setattr__(self, "_show_compilation_progress_bar", True)
        object.__setattr__(self, "_relax_optimizer_checks", False)
        object.__setattr__(self, "_module_namescope_enabled", True)
        path = os.environ.get("POPTORCH_CACHE_DIR", "")
        if path:
            self.enableExecutableCaching(path)
        self.from_json(os.environ.get("POPTORCH_DEFAULT_OPTIONS", "{}"))

    # -- sub-objects
    @property
    def Jit(self) -> _JitOptions:
        return self._jit

    @property
    def _Popart(self) -> _PopartOptions:
        return self._popart

    @property
    def Precision(self) -> _PrecisionOptions:
        return self._precision

    @property
    def Training(self) -> _TrainingOptions:
        return self._training

    @property
    def Distributed(self) -> _DistributedOptions:
        return self._distributed

    @property
    def TensorLocations(self) -> _TensorLocationOptions:
        return self._tensor_locations

    # -- setters
    def from_json(self, string: str) -> Options:
        """Apply ``{"Accessor.path": value}`` settings (as POPTORCH_DEFAULT_OPTIONS holds)."""
        for option, value in json.loads(string).items():
            target: Any = self
            for attribute in option.split("."):
                target = getattr(target, attribute)
            if isinstance(value, str) and "." in value:
                enum_name, _, member = value.partition(".")
                value = getattr(getattr(enums, enum_name, None), member, value)
            if isinstance(value, list):
                target(*value)
            else:
                target(value)
        return self

    def loadFromFile(self, filepath: str) -> Options:
        """Apply settings from a JSON file (YAML files need PyYAML)."""
        with open(filepath, encoding="utf-8") as fh:
            text = fh.read()
        if filepath.endswith((".yaml", ".yml")):
            import yaml  # optional, as in PopTorch

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        return self.from_json(json.dumps({k: v for k, v in data.items()}))

    def sourceLocationExcludes(self, excludes: list[str]) -> Options:
        self._check_not_frozen()
        object.__setattr__(self, "_source_location_excludes", list(excludes))
        return self

    def appendToLocationExcludes(self, *excludes: str) -> Options:
        self._check_not_frozen()
        self._source_location_excludes.extend(excludes)
        return self

    def showCompilationProgressBar(self, show: bool = True) -> Options:
        self._check_not_frozen()
        object.__setattr__(self, "_show_compilation_progress_bar", bool(show))
        return self

    def relaxOptimizerAttributesChecks(self, relaxed: bool = True) -> Options:
        self._check_not_frozen()
        object.__setattr__(self, "_relax_optimizer_checks", bool(relaxed))
        return self

    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> Options:
        self.set(auto_round_num_ipus=auto_round_num_ipus)
        return self

    def deviceIterations(self, device_iterations: int) -> Options:
        """Batches the device runs per executor call (D)."""
        self.set(device_iterations=device_iterations)
        return self

    def setExecutionStrategy(self, strategy: _ExecutionStrategy) -> Options:
        assert isinstance(strategy, _ExecutionStrategy)
        self._check_not_frozen()
        object.__setattr__(self, "_execution_strategy", strategy)
        object.__setattr__(self, "_strategy_is_explicit", True)
        return self

    def setAvailableMemoryProportion(self, available_memory_proportion: dict[str, float]) -> Options:
        """Temporary memory for matmuls/convolutions per IPU: ``{"IPU0": 0.5, ...}``."""
        actual = {}
        for key, mem in available_memory_proportion.items():
            assert key.startswith("IPU"), (
                "Available memory proportions are expected to be in a dictionary of "
                f"{{\"IPU0\": 0.5}} where the 0 in IPU is the index of the IPU. Invalid key: {key}")
            actual[int(key[3:])] = mem
        self.createOrSet(available_memory_proportion=actual)
        return self

    def replicationFactor(self, replication_factor: int) -> Options:
        """Replicas of the model (R)."""
        self.set(replication_factor=replication_factor)
        return self

    def inputReplicaGrouping(self, input_group_size: int,
                             input_group_type: enums.CommGroupType = enums.CommGroupType.Consecutive
                             ) -> Options:
        if self.replication_factor < input_group_size:
            raise ValueError("input_group_size cannot be larger than replication_factor")
        self.set(input_group_size=input_group_size, input_cgt=input_group_type)
        return self

    def broadcastBuffers(self, broadcast_buffers: bool = True) -> Options:
        self.set(broadcast_buffers=broadcast_buffers)
        return self

    def logDir(self, log_dir: str) -> Options:
        self.set(log_dir=log_dir)
        return self

    def maxRepeatLogs(self, max_lines: int | None) -> Options:
        self._check_not_frozen()
        self._values["max_repeat_logs"] = max_lines
        return self

    def modelName(self, name: str) -> Options:
        """The engine's name (also the report's subdirectory)."""
        self.createOrSet(model_name=name)
        return self

    def enableExecutableCaching(self, path: str | None) -> Options:
        if path is None:
            self._popart.set("enableEngineCaching", False)
        else:
            self._popart.set("cachePath", str(path))
            self._popart.set("enableEngineCaching", True)
        return self

    def useIpuModel(self, use_model: bool) -> Options:
        self.createOrSet(use_model=bool(use_model))
        return self

    def connectionType(self, connection_type: enums.ConnectionType) -> Options:
        assert isinstance(connection_type, enums.ConnectionType)
        self.set(connection_type=connection_type.value)
        return self

    def syncPattern(self, sync_pattern: enums.SyncPattern) -> Options:
        assert isinstance(sync_pattern, enums.SyncPattern)
        self.set(sync_pattern=sync_pattern.value)
        return self

    def useIpuId(self, ipu_id: int) -> Options:
        assert isinstance(ipu_id, int)
        self.createOrSet(ipu_id=ipu_id)
        return self

    def useOfflineIpuTarget(self, ipu_version: int = 2) -> Options:
        """Compile for an IPU version without a device (1 = Mk1, 2 = Mk2, 21 = Bow); the emulator
        estimates for that architecture unless POPVIZ_EMULATOR_ARCH says otherwise."""
        self.connectionType(enums.ConnectionType.Never)
        self.createOrSet(ipu_version=ipu_version)
        return self

    def anchorTensor(self, short_name: str, long_name: str,
                     output_mode: enums.OutputMode | None = None,
                     output_return_period: int = 1) -> Options:
        assert isinstance(short_name, str) and isinstance(long_name, str)
        self._check_not_frozen()
        self._values["anchored_tensors"][short_name] = [
            long_name, output_mode is None,
            (output_mode if output_mode is not None else enums.OutputMode.All).value, output_return_period]
        return self

    def outputMode(self, output_mode: enums.OutputMode, output_return_period: int | None = None) -> Options:
        """What each call returns per output: All, EveryN (with a period), Final, Sum or Default."""
        assert isinstance(output_mode, enums.OutputMode)
        if output_mode == enums.OutputMode.EveryN:
            assert output_return_period and output_return_period > 0, (
                "EveryN anchor must have output_return_period set to valid positive integer")
        self.set(output_mode=output_mode.value, output_return_period=output_return_period or 1)
        return self

    def defaultOutputMode(self) -> bool:
        return self.output_mode == enums.OutputMode.Default

    def randomSeed(self, random_seed: int) -> Options:
        assert isinstance(random_seed, int)
        import torch

        torch.manual_seed(random_seed)
        self.createOrSet(random_seed=random_seed)
        return self

    def enableStableNorm(self, enabled: bool) -> Options:
        self._popart.set("enableStableNorm", enabled)
        return self

    def enableSyntheticData(self, enabled: bool) -> Options:
        """No host I/O: data is made on the device (the estimate then has no StreamCopy)."""
        self._popart.set("syntheticDataMode", 2 if enabled else 0)
        return self

    def logCycleCount(self, log_cycle_count: bool) -> Options:
        """Allow ``executor.cycleCount()`` (in the emulator: the estimated cycles of a call)."""
        self._popart.set("instrumentWithHardwareCycleCounter", log_cycle_count)
        return self

    def enableProfiling(self, profile_dir: str | None = None) -> Options:
        """Write a report per engine to ``profile_dir`` (POPLAR_ENGINE_OPTIONS wins if it sets
        the same keys, with a warning, as in PopTorch)."""
        env = os.environ.get("POPLAR_ENGINE_OPTIONS", "")
        if any(key in env for key in ("debug.allowOutOfMemory", "autoReport.directory",
                                       "autoReport.all")):
            from popviz.emulator.log import warn

            warn("Profiling setting overridden by environment variable. Check content of "
                 "POPLAR_ENGINE_OPTIONS.")
        engine = dict(self._popart.options.get("engineOptions", {}))
        engine["debug.allowOutOfMemory"] = "true"
        engine["autoReport.directory"] = str(profile_dir) if profile_dir else "."
        engine["autoReport.all"] = "true"
        self._popart.setEngineOptions(engine)
        return self

    def disableModuleNamescope(self) -> Options:
        self._check_not_frozen()
        object.__setattr__(self, "_module_namescope_enabled", False)
        return self

    def updatableNamedBuffers(self, buffers: list[str]) -> Options:
        self._popart.set("updatableNamedBuffers", list(buffers))
        return self

    # -- reading
    @property
    def output_mode_enum(self) -> enums.OutputMode:
        return enums.OutputMode(self.output_mode)

    @property
    def synthetic_data(self) -> bool:
        return bool(self._popart.options.get("syntheticDataMode", 0))

    def toDict(self) -> dict[str, Any]:
        """Every option as one JSON-compatible dictionary (what the report records)."""
        out: dict[str, Any] = {}
        for key, value in self._values.items():
            out[key] = _jsonable(value)
        for prefix, sub in (("Training", self._training), ("Precision", self._precision),
                            ("Distributed", self._distributed), ("TensorLocations", self._tensor_locations),
                            ("Jit", self._jit)):
            for key, value in sub._values.items():
                out[f"{prefix}.{key}"] = _jsonable(value)
        for key, value in self._popart.options.items():
            out[f"_Popart.{key}"] = _jsonable(value)
        out["execution_strategy"] = self._execution_strategy.describe()
        return out

    def clone(self) -> Options:
        """An unfrozen deep copy."""
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        subs = ", ".join(f"{name}={getattr(self, name)!r}" for name in
                         ("Training", "Precision", "Distributed", "TensorLocations", "_Popart"))
        body = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Options({body}, {subs})"


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


__all__ = ["Options", "TensorLocationSettings"]
