"""Custom ops on the CPU: the implementations registered for ``(domain, name)``, the modules named
in ``POPVIZ_CUSTOM_OP_MODULES`` that register them, and what ``torch.ops.poptorch.custom_operation``
computes: the user's registered implementation, else popviz's own for the ops Graphcore's
applications use (:mod:`popviz.emulator.custom_graphcore`), else zeros shaped like
``example_outputs``. Outputs take the dtype of their example output (PopTorch types the traced
op's outputs by them). Below
:mod:`popviz.emulator.torch_ops` (which defines the operator) and
:mod:`popviz.emulator.custom_ops` (``poptorch.custom_op``); see the latter for the semantics.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
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


def run(inputs: list[torch.Tensor], name: str, domain: str, domain_version: int,
        outputs: list[torch.Tensor], attributes_key: str) -> list[torch.Tensor]:
    """``torch.ops.poptorch.custom_operation`` in the emulator (see the module docstring)."""
    _load_modules()
    attributes = _attributes.get(attributes_key, {})
    fn = _cpu.get((domain, name))
    if fn is None:
        from popviz.emulator.custom_graphcore import BUILTIN

        fn = BUILTIN.get((domain, name))
    if fn is not None:
        result = fn(*inputs, **attributes)
        result = [result] if isinstance(result, torch.Tensor) else list(result)
        if len(result) != len(outputs):
            raise Error(f"custom op {domain}::{name}: the CPU implementation returned {len(result)} "
                        f"tensor(s), example_outputs has {len(outputs)}")
        return [r.to(e.dtype) if r.dtype != e.dtype else r for r, e in zip(result, outputs, strict=True)]
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
