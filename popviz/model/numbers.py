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


def wall_seconds(secs: float) -> str:
    """A wall-clock duration as popviz prints it: ``40 ms`` below 0.1 s, ``0.48 s`` below 10 s,
    ``12 s`` above (one format for the emulator's progress and capture's summary)."""
    if secs < 0.1:
        return f"{secs * 1e3:.0f} ms"
    return f"{secs:.2f} s" if secs < 10 else f"{secs:.0f} s"


def reserved_ipus(n: int) -> int:
    """The IPUs PopTorch reserves for a process using ``n``: the next power of two
    (popart_compiler ``roundUpNumIPUs``); ``n`` itself when it is one."""
    return 1 << (n - 1).bit_length() if n > 1 else max(n, 1)
