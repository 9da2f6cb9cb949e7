"""``torch.ops.poptorch.*``: PopTorch's own operators, with PopTorch's schemas, on the CPU.

PopTorch's Python layer (and scripts that call them directly: Graphcore's cnns application calls
``torch.ops.poptorch.push_name_scope`` / ``pop_name_scope``, dino ``internal_cast``) use operators
PopTorch registers in C++ (``poptorch/source/dispatch_tracer/RegisterAtenOverloads.cpp``). This
module defines them in the ``poptorch`` namespace with the same schemas, so a wrong argument type
fails as it does in PopTorch, and implements each as PopTorch's CPU semantics:

- markers without outputs (``begin_ipu_block``, ``end_ipu_block``, ``push_name_scope``,
  ``pop_name_scope``, ``set_attribute``, ``clear_attribute``, ``begin_multi_conv``,
  ``end_multi_conv``, ``optimizer_group``, ``start_for_loop``, ``start_if_block``,
  ``start_else_block``): the block ones start and end a block in the emulator's block trace
  (like ``poptorch.Block``); the name scopes and attributes are kept on :data:`STATE` (read by
  tests and by nothing in the cost model);
- operators returning their first argument (``nop``, ``recomputation_checkpoint``,
  ``set_available_memory``, ``set_matmul_serialization``, ``set_overlap_for_input/output``,
  ``ipu_print_tensor``, ``end_if_block``, ``end_for_loop``);
- ``internal_cast`` (``"FLOAT"`` / ``"FLOAT16"``), ``dynamic_slice``, ``dynamic_update`` and
  ``custom_operation`` (see :mod:`popviz.emulator.custom_ops`) computed with PyTorch's
  operators, which the emulator's measurement then costs like any other.

The registration happens once per process, when the emulator is imported as ``poptorch``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from popviz.emulator.errors import Error

_CAST_TYPES = {"FLOAT": torch.float32, "FLOAT16": torch.float16}


@dataclass
class OpsState:
    """What the marker operators recorded in this process."""

    name_scopes: list[str] = field(default_factory=list)
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)


STATE = OpsState()


def _begin_ipu_block(stage_id: int, phase_id: int, ipu_id: int) -> None:
    from popviz.emulator.blocks import active_trace

    trace = active_trace()
    if trace is not None:
        trace.enter_placement(stage_id, ipu_id)


def _end_ipu_block() -> None:
    from popviz.emulator.blocks import active_trace

    trace = active_trace()
    if trace is not None:
        trace.exit()


def _push_name_scope(name: str) -> None:
    STATE.name_scopes.append(name)


def _pop_name_scope() -> None:
    if STATE.name_scopes:
        STATE.name_scopes.pop()


def _set_attribute(attribute: str, key: str, value: str) -> None:
    STATE.attributes.setdefault(attribute, {})[key] = value


def _clear_attribute(attribute: str, key: str) -> None:
    STATE.attributes.get(attribute, {}).pop(key, None)


def _marker(*_args: Any) -> None:
    return None


def _first(tensor: Any, *_args: Any) -> Any:
    return tensor


def _overlap(kind: str, tensor: Any, mode: str) -> Any:
    from popviz.emulator.blocks import record_overlap

    record_overlap(kind, mode)
    return tensor


def internal_cast(tensor: torch.Tensor, dtype: str) -> torch.Tensor:
    if dtype not in _CAST_TYPES:
        raise Error(f"internal_cast: unsupported type {dtype!r} (expected 'FLOAT' or 'FLOAT16')")
    return tensor.to(_CAST_TYPES[dtype])


def _start(start: torch.Tensor) -> int:
    return int(start.reshape(-1)[0]) if start.numel() else 0


def dynamic_slice(tensor: torch.Tensor, dim: int, start: torch.Tensor, size: int, step: int) -> torch.Tensor:
    """``size`` elements of ``tensor`` along ``dim`` from ``start``, every ``step``-th; a start past
    the end is clamped so the slice fits, as Poplar's dynamic slice does."""
    length = tensor.shape[dim]
    span = (size - 1) * step + 1
    if span > length:
        raise Error(f"dynamic_slice: a slice of {size} (step {step}) does not fit dimension {dim} "
                    f"of size {length}")
    first = min(max(_start(start), 0), length - span)
    index = torch.arange(first, first + span, step, device=tensor.device)
    return tensor.index_select(dim, index)


def dynamic_update(tensor: torch.Tensor, src: torch.Tensor, dim: int, start: torch.Tensor,
                   size: int) -> torch.Tensor:
    """``tensor`` with ``size`` elements along ``dim`` from ``start`` replaced by ``src``."""
    length = tensor.shape[dim]
    if size > length or src.shape[dim] != size:
        raise Error(f"dynamic_update: src has {src.shape[dim]} element(s) along dimension {dim}, "
                    f"size is {size}, the input has {length}")
    first = min(max(_start(start), 0), length - size)
    index = torch.arange(first, first + size, device=tensor.device)
    return tensor.index_copy(dim, index, src)


def _end_if_block(outputs: list[torch.Tensor], condition: torch.Tensor) -> list[torch.Tensor]:
    return list(outputs)


def _end_for_loop(outputs: list[torch.Tensor], inputs: list[torch.Tensor], trip_count: int) -> list[torch.Tensor]:
    return list(outputs)


def _custom_operation(inputs: list[torch.Tensor], name: str, domain: str, domain_version: int,
                      num_outputs: int, outputs: list[torch.Tensor], attributes: str) -> list[torch.Tensor]:
    from popviz.emulator import custom_cpu

    return custom_cpu.run(inputs, name, domain, domain_version, outputs[:num_outputs], attributes)


def _identity_loss(x: torch.Tensor, reduction: int) -> torch.Tensor:
    from popviz.emulator.losses import identity_loss

    names = {0: "sum", 1: "mean", 2: "none"}
    if reduction not in names:
        raise Error("reduction must be sum (0), mean (1) or none (2)")
    return identity_loss(x, names[reduction])


SCHEMAS: dict[str, tuple[str, Any]] = {
    "begin_ipu_block": ("(int stage_id, int phase_id, int ipu_id) -> ()", _begin_ipu_block),
    "end_ipu_block": ("() -> ()", _end_ipu_block),
    "start_for_loop": ("(Tensor[] inputs) -> ()", _marker),
    "start_if_block": ("(Tensor condition) -> ()", _marker),
    "start_else_block": ("(Tensor[] outputs_true) -> ()", _marker),
    "optimizer_group": ("(int group, Tensor[] inputs) -> ()", _marker),
    "begin_multi_conv": ("() -> ()", _marker),
    "end_multi_conv": ("(float[]? available_memory_proportions, int[]? partials_types, int? plan_type, "
                       "int? per_conv_reserved_tiles, float? cycle_back_off, int[]? enableConvDithering) -> ()",
                       _marker),
    "push_name_scope": ("(str name) -> ()", _push_name_scope),
    "pop_name_scope": ("() -> ()", _pop_name_scope),
    "set_attribute": ("(str attribute, str key, str value) -> ()", _set_attribute),
    "clear_attribute": ("(str attribute, str key) -> ()", _clear_attribute),
    "ipu_print_tensor": ("(Tensor self, str title, int print_gradient, int summarize_threshold, "
                         "int edge_items, int max_line_width, int digits, int float_format, str separator, "
                         "str open_bracket, str close_bracket) -> Tensor", _first),
    "nop": ("(Tensor self) -> Tensor", _first),
    "end_for_loop": ("(Tensor[] outputs, Tensor[] inputs, int trip_count) -> Tensor[]", _end_for_loop),
    "end_if_block": ("(Tensor[] outputs, Tensor condition) -> Tensor[]", _end_if_block),
    "set_matmul_serialization": ("(Tensor matmul, str mode, int factor, bool keep_precision) -> Tensor",
                                 _first),
    "set_overlap_for_input": ("(Tensor t, str mode) -> Tensor", lambda t, mode: _overlap("input", t, mode)),
    "set_overlap_for_output": ("(Tensor t, str mode) -> Tensor", lambda t, mode: _overlap("output", t, mode)),
    "recomputation_checkpoint": ("(Tensor self) -> Tensor", _first),
    "set_available_memory": ("(Tensor t, float mem) -> Tensor", _first),
    "custom_operation": ("(Tensor[] inputs, str name, str domain, int domain_version, int num_outputs, "
                         "Tensor[] outputs, str attributes) -> Tensor[]", _custom_operation),
    "dynamic_slice": ("(Tensor self, int dim, Tensor start, int size, int step) -> Tensor", dynamic_slice),
    "dynamic_update": ("(Tensor self, Tensor src, int dim, Tensor start, int size) -> Tensor", dynamic_update),
    "identity_loss": ("(Tensor x, int reduction) -> Tensor", _identity_loss),
    "internal_cast": ("(Tensor self, str dtype) -> Tensor", internal_cast),
}
"""PopTorch's operator schemas (RegisterAtenOverloads.cpp) and the emulator's implementation."""

_library: torch.library.Library | None = None


def register() -> None:
    """Define ``torch.ops.poptorch.*`` in this process (once). A process where the ``poptorch``
    namespace already holds PopTorch's own operators is left alone."""
    global _library
    if _library is not None:
        return
    try:
        library = torch.library.Library("poptorch", "DEF")
        for name, (schema, impl) in SCHEMAS.items():
            library.define(name + schema)
            library.impl(name, impl, "CompositeImplicitAutograd")
    except RuntimeError:  # already defined (a real PopTorch in this process)
        return
    _library = library


__all__ = ["SCHEMAS", "STATE", "dynamic_slice", "dynamic_update", "internal_cast", "register"]
