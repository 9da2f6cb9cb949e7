"""PopTorch's free functions: operations that only mean something on the IPU, and utilities.

On the CPU they behave as PopTorch's CPU fallbacks do: identities (the tensor is returned), or
plain PyTorch for the maths. ``ipuHardwareIsAvailable`` is True: the emulated IPUs are there, so
scripts and frameworks (PyTorch Lightning's IPU accelerator) that check take their IPU path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from popviz.emulator import log
from popviz.emulator.blocks import active_trace
from popviz.emulator.enums import OverlapMode


def ipu_print_tensor(tensor: torch.Tensor, title: str = "", print_gradient: bool = True,
                     summarise_threshold: int = 1000, edge_items: int = 3, max_line_width: int = 80,
                     digits: int = 4, float_format: str = "auto", separator: str = ", ",
                     open_bracket: str = "(", close_bracket: str = ")") -> torch.Tensor:
    """Print ``tensor`` each time the model runs (on stderr, in the emulator); returns it."""
    if active_trace() is not None:
        from popviz.emulator.fake import is_fake

        if is_fake(tensor):  # an estimate-only trace has shapes, not values
            shown = (f"<tensor of shape {tuple(tensor.shape)}, {tensor.dtype}: not computed "
                     "(estimate-only trace)>")
        else:
            shown = str(tensor)
        print(f"{title}{shown}", file=sys.stderr)
    return tensor


def set_available_memory(tensor: torch.Tensor, available_memory_proportion: float) -> torch.Tensor:
    """Per-operation temporary memory hint; recorded by nothing in the emulator (the per-IPU
    proportion from Options is used)."""
    assert 0.0 < available_memory_proportion <= 1.0, "available_memory_proportion must be in (0, 1]"
    return tensor


def recomputationCheckpoint(*tensors: torch.Tensor) -> Any:
    """Recomputation checkpoint: returns its arguments; while the emulator measures a forward
    pass, their tensors are recorded as the stashed checkpoints (:mod:`popviz.emulator.recompute`)."""
    from popviz.emulator.recompute import checkpoint

    flat = tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else tensors
    checkpoint(list(flat))
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return type(tensors[0])(tensors[0])
    return tensors[0] if len(tensors) == 1 else tensors


def nop(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def serializedMatMul(lhs: torch.Tensor, rhs: torch.Tensor, mode: Any, factor: int = 0,
                     keep_precision: bool = False) -> torch.Tensor:
    return torch.matmul(lhs, rhs)


def set_overlap_for_input(input_tensors: Any, mode: OverlapMode) -> Any:
    from popviz.emulator.blocks import record_overlap

    record_overlap("input", mode)  # the cost model overlaps their transfers (with I/O tiles)
    return input_tensors


def set_overlap_for_output(output_tensors: Any, mode: OverlapMode) -> Any:
    from popviz.emulator.blocks import record_overlap

    record_overlap("output", mode)
    return output_tensors


def isRunningOnIpu() -> bool:
    """True while an executor runs the model (the emulated IPU), False on the plain CPU."""
    return active_trace() is not None


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    """True: the emulator provides the IPUs a script asks for."""
    return True


def ipuHardwareVersion() -> int:
    """The emulated architecture's version number (1 = Mk1, 2 = Mk2, 21 = Bow)."""
    from popviz.emulator import hardware

    architecture = hardware.spec().architecture
    return next(v for v, a in hardware.IPU_VERSIONS.items() if a == architecture)


def setLogLevel(level: str | int) -> None:
    """How much the emulator prints: TRACE, DEBUG, INFO, WARN (default), ERR or OFF."""
    log.set_level(level)


def for_loop(count: int, body: Callable, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run ``body`` ``count`` times, feeding its outputs back as inputs (passed by value: the
    body's in-place changes do not reach the caller's tensors). As in PopTorch, ``inputs`` must
    be a list of tensors, and loops are for inference only."""
    from popviz.emulator import losses
    from popviz.emulator.errors import Error

    if losses._collectors:
        raise Error("poptorch.for_loop() is only supported in inference")
    if not isinstance(inputs, list):
        raise ValueError("(Object is not list)")
    for i, value in enumerate(inputs):
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"(Object contained in list at index {i} is not torch.tensor)")
    outputs = [t.clone() for t in inputs]
    for _ in range(count):
        result = body(*outputs)
        outputs = list(result) if isinstance(result, (list, tuple)) else [result]
        outputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in outputs]
    return outputs


__all__ = ["for_loop", "ipuHardwareIsAvailable", "ipuHardwareVersion", "ipu_print_tensor", "isRunningOnIpu",
           "nop", "recomputationCheckpoint", "serializedMatMul", "setLogLevel", "set_available_memory",
           "set_overlap_for_input", "set_overlap_for_output"]
