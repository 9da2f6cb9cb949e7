"""``poptorch._impl``: the internals real clients import (optimum-graphcore's seq2seq trainer
imports ``rewrapModelIfNecessary`` and ``unwrapModelIfNecessary``).

PopTorch swaps the class of a wrapped model (and of its parameters and buffers) for a wrapper
subclass, and these two functions undo and redo that around code that must see the plain
classes (``copy``, ``generate``). The emulator never swaps classes (it keeps the models it wraps
in a set, see :mod:`popviz.emulator.executor`), so there is nothing to undo: both return with the
model unchanged, which is what PopTorch leaves after an unwrap/rewrap pair too.
Importing this module defines ``torch.ops.poptorch.*`` (:mod:`popviz.emulator.torch_ops`).
"""

from __future__ import annotations

import torch

from popviz.emulator import torch_ops
from popviz.emulator.errors import Error
from popviz.emulator.ops import isRunningOnIpu

torch_ops.register()


def unwrapModelIfNecessary(model: torch.nn.Module) -> None:
    """Give ``model`` (and its parameters and buffers) their plain classes: already so here."""
    assert isinstance(model, torch.nn.Module), f"{type(model).__name__} is not a torch.nn.Module"


def rewrapModelIfNecessary(model: torch.nn.Module) -> None:
    """Restore the wrapper classes :func:`unwrapModelIfNecessary` removed: none here."""
    assert isinstance(model, torch.nn.Module), f"{type(model).__name__} is not a torch.nn.Module"


def createPoptorchError(msg: str) -> Error:
    return Error(msg)


def internal_cast(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype in (torch.float, torch.float32):
        return torch.ops.poptorch.internal_cast(tensor, "FLOAT")
    if dtype in (torch.half, torch.float16):
        return torch.ops.poptorch.internal_cast(tensor, "FLOAT16")
    raise ValueError("Invalid poptorch.cast target type. Expecting torch.float or torch.half")


def isDispatchTracing() -> bool:
    return isRunningOnIpu()


__all__ = ["createPoptorchError", "internal_cast", "isDispatchTracing", "isRunningOnIpu",
           "rewrapModelIfNecessary", "unwrapModelIfNecessary"]
