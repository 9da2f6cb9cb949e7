"""``poptorch.Options`` and its sub-objects, recorded faithfully.

Every setter PopTorch offers is accepted; the emulator uses the values that change behaviour or
cost (device iterations, gradient accumulation, replication, output mode, execution strategy,
available memory proportion, tensor locations, synthetic data, profiling, model name) and records
the rest in the report. Setters return ``self`` so they chain; values read back as attributes
(``opts.device_iterations``). ``trainingModel``, ``inferenceModel`` and ``DataLoader`` freeze the
options they are given: a later setter raises ``AttributeError("Can't modify frozen Options")``;
``clone()`` gives an unfrozen deep copy. The sub-objects are in :mod:`popviz.emulator.option_groups`.
"""

from __future__ import annotations

import copy
import enum
import json
import os
from typing import Any

from popviz.emulator import enums
from popviz.emulator.option_groups import (
    TensorLocationSettings,
    _DistributedOptions,
    _JitOptions,
    _OptionsDict,
    _PopartOptions,
    _PrecisionOptions,
    _TensorLocationOptions,
    _TrainingOptions,
)
from popviz.emulator.strategy import PipelinedExecution, _ExecutionStrategy


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
