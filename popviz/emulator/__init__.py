"""popviz's PopTorch emulator: the PopTorch 3.x API on the CPU, with estimated reports.

Import it as ``poptorch`` in an unmodified script through ``popviz emulate -- python train.py``,
or directly: ``import popviz.emulator as poptorch``. The API names load lazily, so importing
``popviz.emulator.launch`` (used by the CLI) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from popviz import __version__ as _popviz_version

__version__ = f"3.4.0+popviz.emulator.{_popviz_version}"
"""PopTorch's last public API version, with a local label saying this is popviz's emulator."""

_EXPORTS: dict[str, str] = {
    "Error": "errors", "RecoverableError": "errors", "UnrecoverableError": "errors",
}
"""Public name -> submodule of popviz.emulator that defines it."""

SUBMODULES = ("poptorch_core",)
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
