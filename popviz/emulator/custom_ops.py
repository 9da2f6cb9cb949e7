"""``poptorch.custom_op``, ``cond``, ``dynamic_slice`` and ``dynamic_update`` (PopTorch's
``python/ops.py``), validated as PopTorch validates them and run on the CPU.

A custom op is C++ code built against the Poplar SDK; the emulator cannot run it. It runs a CPU
implementation when one is registered for the op's ``(domain, name)``
(:func:`register_cpu_implementation`, from a module named in ``POPVIZ_CUSTOM_OP_MODULES`` so
the script stays unmodified); otherwise it returns zeros shaped like ``example_outputs`` (what
PopTorch itself traces with: "all values will be set to zero for tracing purposes"). Either way
the estimate counts the op as one read of every input and one write of every output (a
memory-bound op; the measurement sees a reduction per input and a fill per output), and the
emulator's log says so once per op.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from popviz.emulator import log
from popviz.emulator.errors import Error

MODULES_VARIABLE = "POPVIZ_CUSTOM_OP_MODULES"
"""Comma-separated modules imported before the first custom op runs; they call
:func:`register_cpu_implementation`."""

ATTR_PREFIX = "attr:"
"""PopTorch's prefix of the attributes id passed to ``torch.ops.poptorch.custom_operation``."""

_cpu: dict[tuple[str, str], Callable[..., Any]] = {}
_attributes: dict[str, dict[str, Any]] = {}
_noted: set[tuple[str, str]] = set()
_modules_loaded = False


def register_cpu_implementation(name: str, domain: str, fn: Callable[..., Any]) -> None:
    """Run ``fn(*inputs, **attributes)`` for custom op ``name`` of ``domain`` in the emulator; it
    returns a tensor or a sequence of tensors like the op's ``example_outputs``."""
    _cpu[(domain, name)] = fn


def _load_modules() -> None:
    global _modules_loaded
    if _modules_loaded:
        return
    _modules_loaded = True
    for module in filter(None, (m.strip() for m in os.environ.get(MODULES_VARIABLE, "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise Error(f"{MODULES_VARIABLE}: cannot import {module!r} ({exc}); name a module on the "
                        "script's path that calls register_cpu_implementation") from None


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
    from popviz.emulator import torch_ops

    torch_ops.register()
    return list(torch.ops.poptorch.custom_operation(list(inputs), name, domain, domain_version,
                                                    len(outputs), outputs, key))


def run(inputs: list[torch.Tensor], name: str, domain: str, domain_version: int,
        outputs: list[torch.Tensor], attributes_key: str) -> list[torch.Tensor]:
    """``torch.ops.poptorch.custom_operation`` in the emulator (see the module docstring)."""
    _load_modules()
    attributes = _attributes.get(attributes_key, {})
    fn = _cpu.get((domain, name))
    if fn is not None:
        result = fn(*inputs, **attributes)
        result = [result] if isinstance(result, torch.Tensor) else list(result)
        if len(result) != len(outputs):
            raise Error(f"custom op {domain}::{name}: the CPU implementation returned {len(result)} "
                        f"tensor(s), example_outputs has {len(outputs)}")
        return result
    if (domain, name) not in _noted:
        _noted.add((domain, name))
        log.warn(f"custom op {domain}::{name} (version {domain_version}) has no CPU implementation: "
                 "its outputs are zeros shaped like example_outputs, and the estimate counts it as one "
                 "read of its inputs and one write of its outputs (register one with "
                 f"popviz.emulator.custom_ops.register_cpu_implementation, from a module named in "
                 f"{MODULES_VARIABLE})")
    touched: torch.Tensor | None = None
    for t in inputs:  # one read of each input; ties the outputs to the inputs for autograd
        term = t.sum() * 0
        touched = term if touched is None else touched + term.to(touched.dtype)
    out = []
    for example in outputs:
        zeros = torch.zeros_like(example)
        if touched is not None and zeros.is_floating_point():
            zeros = zeros + touched.to(zeros.dtype)
        out.append(zeros)
    return out


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
    from popviz.emulator import torch_ops

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
    from popviz.emulator import torch_ops

    return torch_ops.dynamic_update(input, src, dim, start, size)


__all__ = ["cond", "custom_op", "dynamic_slice", "dynamic_update", "register_cpu_implementation"]
