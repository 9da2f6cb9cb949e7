"""One test for "a finite number" in data read from files (bundles, manifests, options): JSON
numbers arrive as Python ints of any size or floats, and booleans are ints too."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def tied_for_most(values: Sequence[float]) -> list[bool]:
    """Which of ``values`` equal the largest: every stage (or IPU) tied for the most cycles is the
    bottleneck, and none is when all are equal (a balanced pipeline has no bottleneck) or there are
    fewer than two."""
    if len(values) < 2:
        return [False] * len(values)
    top = max(values)
    tied = [v == top for v in values]
    return [False] * len(values) if all(tied) else tied


def finite_float(value: Any) -> float | None:
    """``value`` as a float when it is a finite int or float (not a bool); else None. An integer
    too large for a float (a 400-digit JSON number) is None, never an OverflowError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None
