"""Numbers with units, written as people read them (shared by the renderers and the CI report)."""

from __future__ import annotations


def fmt_bytes(n: float | None) -> str:
    """``1536`` -> ``1.5 KiB``; binary units, as Poplar and PopVision print memory."""
    if n is None:
        return "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover
