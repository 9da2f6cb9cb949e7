"""popviz's PopTorch emulator: the PopTorch 3.x API on the CPU, with estimated reports.

Import it as ``poptorch`` in an unmodified script through ``popviz emulate -- python train.py``,
or directly: ``import popviz.emulator as poptorch``. The API names load lazily, so importing
``popviz.emulator.launch`` (used by the CLI) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from popviz._version import __version__ as _popviz_version

__version__ = f"3.4.0+popviz.emulator.{_popviz_version}"
"""PopTorch's last public API version, with a local label saying this is popviz's emulator."""

_MODULES: dict[str, tuple[str, ...]] = {
    "errors": ("Error", "RecoverableError", "UnrecoverableError"),
    "enums": ("AutoStage", "CommGroupType", "ConnectionType", "DataLoaderMode", "HalfFloatCastingBehavior",
              "Liveness", "MatMulSerializationMode", "MeanReductionStrategy", "MultiConvPlanType",
              "OutputMode", "OverlapMode", "ReductionType", "SharingStrategy", "SyncPattern",
              "VariableRetrievalMode"),
    "options": ("Options", "TensorLocationSettings"),
    "strategy": ("ParallelPhasedExecution", "Phase", "PipelinedExecution", "SerialPhasedExecution",
                 "ShardedExecution", "Stage"),
    "blocks": ("BeginBlock", "Block", "BlockFunction", "removeBlocks"),
    "losses": ("identity_loss",),
    "ops": ("for_loop", "ipuHardwareIsAvailable", "ipuHardwareVersion", "ipu_print_tensor", "isRunningOnIpu",
            "nop", "recomputationCheckpoint", "serializedMatMul", "setLogLevel", "set_available_memory",
            "set_overlap_for_input", "set_overlap_for_output"),
    "executor": ("PoplarExecutor", "inferenceModel", "registerPostCompileHook", "registerPreCompileHook",
                 "trainingModel"),
    "dataloader": ("AsynchronousDataAccessor", "DataLoader"),
    "custom_args": ("ICustomArgParser", "registerCustomArgParser"),
    "custom_ops": ("cond", "custom_op", "dynamic_slice", "dynamic_update"),
    "attributes": ("Attribute",),
}
_EXPORTS: dict[str, str] = {name: module for module, names in _MODULES.items() for name in names}
"""Public name -> submodule of popviz.emulator that defines it."""

SUBMODULES = ("enums", "optim", "options", "poptorch_core", "_impl", "_poplar_executor")
"""Submodules scripts import from poptorch (``poptorch.optim``, ...), aliased by the shim."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in SUBMODULES:
        return importlib.import_module(f"popviz.emulator.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'poptorch' (popviz emulator) has no attribute {name!r}")
    value = getattr(importlib.import_module(f"popviz.emulator.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | set(SUBMODULES))
