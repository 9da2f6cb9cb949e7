"""Estimate without computing: trace the measured micro-batch with fake tensors.

The cost model needs one micro-batch's operations, shapes, dtypes and what autograd saves, not
the values. When a compilation only estimates (the last call ``--calls N`` allows, or
``compile()``), :func:`faked` swaps every parameter and buffer of the model for a
``FakeTensor`` made from it (``torch._subclasses.FakeTensorMode``: same shape, dtype, strides,
``requires_grad`` and storage sharing, no data, nothing copied) and runs the forward in that
mode, under the same :mod:`popviz.emulator.measure` recorder the real trace uses. No arithmetic
is done and no activation memory is allocated, so a model whose forward would not fit the
machine still estimates, and the report is the real trace's, figure for figure (tests compare
both). The model's own tensors are put back when the trace ends; its buffers are never written
(BatchNorm's running statistics change only on the fake copies).

What needs values cannot be faked: reading a tensor in Python (``.item()``, ``if t.any():``,
``.tolist()``, ``.numpy()``), an operation whose output shape depends on the values
(``nonzero``, boolean-mask indexing, ``unique``) or one without a fake implementation. Then the
executor traces that micro-batch with real tensors instead, and the report says so in one note
naming the operation (:func:`fallback_note`).

``POPVIZ_EMULATOR_TRACE`` chooses: ``auto`` (the default: fake when the compilation only
estimates), ``real`` (always the real trace, today's behaviour before fake tensors) or ``fake``
(every compilation traces with fake tensors, also when the call then runs).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch.utils._pytree import tree_map

ENV = "POPVIZ_EMULATOR_TRACE"
CHOICES = ("auto", "fake", "real")


def choice() -> str:
    """``auto``, ``fake`` or ``real`` from the environment; a bad value is a one-line error."""
    from popviz.emulator.errors import Error

    raw = os.environ.get(ENV, "").strip().lower() or "auto"
    if raw not in CHOICES:
        raise Error(f"{ENV}={os.environ.get(ENV)!r}: expected one of {', '.join(CHOICES)} (auto: fake "
                    "tensors when a compilation only estimates; real: always trace with real tensors)")
    return raw


def wanted(estimate_only: bool) -> bool:
    """Whether this compilation traces with fake tensors."""
    mode = choice()
    return mode == "fake" or (mode == "auto" and estimate_only)


def is_fake(t: Any) -> bool:
    return isinstance(t, FakeTensor)


class _Swap:
    """Every parameter and buffer of ``model`` replaced by its fake, and back."""

    def __init__(self, model: torch.nn.Module, mode: FakeTensorMode) -> None:
        self._saved: list[tuple[dict, str, torch.Tensor]] = []
        for module in model.modules():
            for table in (module._parameters, module._buffers):
                for name, value in table.items():
                    if isinstance(value, torch.Tensor) and not is_fake(value):
                        self._saved.append((table, name, value))
        for table, name, value in self._saved:
            fake = mode.from_tensor(value, static_shapes=True)
            fake.popviz_real_tensor = value  # whose fake it is (popviz's capture hooks count tensors once)
            table[name] = fake

    def restore(self) -> None:
        for table, name, value in reversed(self._saved):
            table[name] = value
        self._saved.clear()


@contextlib.contextmanager
def faked(model: Any, args: tuple, kwargs: dict) -> Iterator[tuple[tuple, dict]]:
    """Run the block with ``model``'s tensors fake and fake tensor mode on; yields the fake
    ``(args, kwargs)`` to call it with. Real tensors the forward meets elsewhere (a tensor held
    as a plain attribute, a global) become fakes of themselves on first use (no copy)."""
    mode = FakeTensorMode(allow_non_fake_inputs=True, allow_fallback_kernels=False)

    def fake(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and not is_fake(value):
            return mode.from_tensor(value, static_shapes=True)
        return value

    swap = _Swap(model, mode) if isinstance(model, torch.nn.Module) else None
    try:
        fake_args, fake_kwargs = tree_map(fake, (args, kwargs))
        with mode:
            yield fake_args, fake_kwargs
    finally:
        if swap is not None:
            swap.restore()


_WHAT = {
    "_local_scalar_dense": "a tensor's value read in Python (.item(), bool(), a comparison in an if)",
    "nonzero": "an output shape that depends on the values",
    "masked_select": "an output shape that depends on the values",
}


USER_ERRORS = (OSError, ImportError, NameError, SyntaxError)
"""Errors a fake tensor does not cause (a missing file or library, ``ctypes``' ``OSError`` for a
custom-op library that was never built, an import, a name): the real trace would raise them
again, after as long a wait, so they fail the compile the first time."""


def retry_for_real(error: BaseException) -> bool:
    """Whether the fake trace's ``error`` may be the fake tensors' doing (then the real trace
    runs), or is one the real trace would raise too: PopTorch's errors, the emulator's own
    assertions (its block and stage rules) and the user's own errors (:data:`USER_ERRORS`) do
    not depend on values."""
    from popviz.emulator.errors import Error

    if isinstance(error, (Error, *USER_ERRORS)):
        return False
    if isinstance(error, AssertionError):
        tb = error.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None and tb.tb_frame.f_code.co_filename.startswith(os.path.dirname(__file__) + os.sep):
            return False
    return True


def fallback_note(error: BaseException) -> str:
    """The report's one note when the fake trace gave up and the real one ran instead."""
    func = getattr(error, "func", None)
    if isinstance(error, (DataDependentOutputException, DynamicOutputShapeException,
                          UnsupportedOperatorException)) and func is not None:
        name = str(func)
        packet = name.split(".")[1] if name.count(".") >= 1 else name
        if isinstance(error, UnsupportedOperatorException):
            why = "has no fake-tensor implementation"
        elif isinstance(error, DynamicOutputShapeException):
            why = f"needs the values ({_WHAT.get(packet, 'an output shape that depends on the values')})"
        else:
            why = f"needs the values ({_WHAT.get(packet, 'data-dependent output')})"
        what = f"operation {name} {why}"
    else:
        text = str(error).strip().splitlines()
        what = f"{type(error).__name__}: {text[0][:160] if text else 'no message'}"
    return (f"The estimate traced its micro-batch with real tensors (computed on the CPU): the "
            f"fake-tensor trace stopped at {what}.")


__all__ = ["CHOICES", "ENV", "USER_ERRORS", "choice", "faked", "fallback_note", "is_fake", "retry_for_real", "wanted"]
