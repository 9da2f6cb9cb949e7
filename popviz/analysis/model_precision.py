"""What the report records of the model's precision: the dtype of its parameters, and whether
the optimizer keeps its gradient accumulators in a type of its own (PopTorch's ``accum_type``).
The memory levers (MEM001/MEM005) and ``popviz plan``'s float16 lever both ask."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from popviz.model import Report

FLOAT16 = ("float16", "bfloat16", "half")


def precision(report: Report) -> str | None:
    """``float16`` or ``float32``: what the report records the model's parameters to be (their
    bytes per element), else ``float16`` when every float host input is 16-bit (the model already
    runs in float16); None when unknown (a float32 input says nothing of the weights)."""
    model = report.cfg.options.get("model")
    if isinstance(model, dict):
        n, b = model.get("parameters"), model.get("parameter_bytes")
        if isinstance(n, int) and isinstance(b, int) and n > 0 and b > 0:
            return "float16" if b <= 2 * n else "float32"
    dtypes = [t.dtype for t in (report.host_io.inputs if report.host_io else ())
              if t.dtype.startswith(("float", "bfloat", "half", "double"))]
    if dtypes and all(d in FLOAT16 for d in dtypes):
        return "float16"
    return None


def accumulators_typed(report: Report) -> bool:
    """Whether the recorded optimizer names its accumulator type (PopTorch's ``accum_type``,
    float32 unless set): the gradient accumulators then keep that type under ``model.half()``."""
    opt = report.cfg.options.get("optimizer")
    return isinstance(opt, dict) and opt.get("accum_type") is not None
