"""``poptorch.custom_op``, ``cond``, ``dynamic_slice`` and ``dynamic_update`` (PopTorch's
``python/ops.py``), validated as PopTorch validates them and run on the CPU.

A custom op is C++ code built against the Poplar SDK; the emulator cannot run it. It runs a CPU
implementation when one is registered for the op's ``(domain, name)``
(:func:`register_cpu_implementation`, from a module named in ``POPVIZ_CUSTOM_OP_MODULES`` so
the script stays unmodified); otherwise it returns zeros shaped like ``example_outputs`` (what
PopTorch itself traces with: "all values will be set to zero for tracing purposes"). Either way
the estimate counts the op as one read of every input and one write of every output (a
memory-bound op; the measurement sees a reduction per input and a fill per output), and the
emulator's log says so once per op. The CPU implementations and what the operator computes are
in :mod:`popviz.emulator.custom_cpu` (below the operator registry, :mod:`popviz.emulator.torch_ops`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from popviz.emulator import torch_ops
from popviz.emulator.custom_cpu import ATTR_PREFIX, _attributes, register_cpu_implementation
from popviz.emulator.errors import Error


def _check_attributes(attributes: dict[str, Any]) -> None:
    """PopTorch's rules for custom op attributes (``python/ops.py``)."""
    for key, value in attributes.items():
        if not isinstance(key, str):
            raise ValueError("All attribute keys must be strings.")
        if not isinstance(value, (float, int, str, list, tuple)):
            raise ValueError("Attribute values must be floats, ints, strings or a list/tuple of float, ints of "
                             "strings.")
        if isinstance(value, (list, tuple)):
            for element in value:
                if not isinstance(element, type(value[0])):
                    raise ValueError("The types in a list/tuple attribute must all be the same.")

    def ascii_only(item: Any) -> None:
        if isinstance(item, (list, tuple)):
            for v in item:
                ascii_only(v)
        elif isinstance(item, str) and any(ord(ch) >= 128 for ch in item):
            raise ValueError(f"{item} contains non-ASCII characters.")

    for key, value in attributes.items():
        ascii_only(key)
        ascii_only(value)


def custom_op(inputs: Sequence[torch.Tensor], name: str, domain: str, domain_version: int,
              example_outputs: Sequence[torch.Tensor],
              attributes: dict[str, Any] | None = None) -> list[torch.Tensor]:
    """Apply custom op ``name`` of ``domain`` to ``inputs``; returns its outputs as a list."""
    outputs = [torch.zeros_like(o, requires_grad=o.requires_grad) for o in example_outputs]
    key = ATTR_PREFIX + "none"
    if attributes is not None:
        _check_attributes(attributes)
        key = f"{ATTR_PREFIX}{id(attributes):x}"
        _attributes[key] = attributes
    torch_ops.register()
    return list(torch.ops.poptorch.custom_operation(list(inputs), name, domain, domain_version,
                                                    len(outputs), outputs, key))


def cond(condition: torch.Tensor, then_body: Callable[..., Any], then_inps: list[torch.Tensor],
         else_body: Callable[..., Any], else_inps: list[torch.Tensor]) -> list[torch.Tensor]:
    """On-device if/else: runs the branch ``condition`` selects, as PopTorch's CPU path does.
    Only for inference (PopTorch's rule); the inputs must be lists."""
    from popviz.emulator import losses

    if not isinstance(then_inps, list) or not isinstance(else_inps, list):
        raise ValueError("poptorch.cond expects then_inps and else_inps tensors to be a list of tensors. "
                         "(Object is not list)")
    if losses._collectors:
        raise Error("poptorch.cond() is only supported in inference")
    body, inputs = (then_body, then_inps) if bool(condition) else (else_body, else_inps)
    result = body(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
    return [result] if isinstance(result, torch.Tensor) else [*result]


def dynamic_slice(tensor: torch.Tensor, dim: int, start: torch.Tensor, size: int, step: int) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise Error(f"dynamic_slice must take a torch.tensor input. {type(tensor)} is not supported.")
    if not isinstance(dim, int):
        raise Error("Dimension must be an integer.")
    if not isinstance(start, torch.Tensor):
        raise Error("Slice start argument to dynamic_slice must be a torch.tensor. "
                    f"{type(start)} is not supported.")
    if not isinstance(size, int):
        raise Error("Size must be an integer.")
    if not isinstance(step, int):
        raise Error("Step must be an integer.")
    return torch_ops.dynamic_slice(tensor, dim, start, size, step)


def dynamic_update(input: torch.Tensor, src: torch.Tensor, dim: int, start: torch.Tensor,
                   size: int) -> torch.Tensor:
    if not isinstance(input, torch.Tensor):
        raise Error(f"dynamic_update must take a torch.tensor input. {type(input)} is not supported.")
    if not isinstance(dim, int):
        raise Error("Dimension must be an integer.")
    if not isinstance(start, torch.Tensor):
        raise Error("Slice start argument to dynamic_update must be a torch.tensor. "
                    f"{type(start)} is not supported.")
    if not isinstance(src, torch.Tensor):
        raise Error(f"Src argument to dynamic_update must be a torch.tensor. {type(src)} is not supported.")
    if not isinstance(size, int):
        raise Error("Size must be an integer.")
    if input.dim() != src.dim():
        raise Error(f"input and src tensors must have same dimensionality. ({input.dim()}) vs ({src.dim()})")
    if input.dtype != src.dtype:
        raise Error(f"input and src tensor must have same dtype. ({input.dtype} vs {src.dtype})")
    return torch_ops.dynamic_update(input, src, dim, start, size)


__all__ = ["cond", "custom_op", "dynamic_slice", "dynamic_update", "register_cpu_implementation"]
