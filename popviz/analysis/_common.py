"""Small pieces the analyses share: number formatting for evidence strings. (The per-run cycle
aggregate, which runs are executor calls, is ``popviz.model.aggregate``.)"""

from __future__ import annotations

import json
import math

# ----------------------------------------------------------------------------------- formatting

def pct(frac: float | None, digits: int = 1) -> str:
    """``0.6667`` -> ``66.7%``."""
    if frac is None or (isinstance(frac, float) and math.isnan(frac)):
        return "n/a"
    return f"{100 * frac:.{digits}f}%"


def num(value: float | None) -> str:
    """Thousands separators; integers exact, other values to one decimal."""
    if value is None:
        return "n/a"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def nbytes(n: int | float | None) -> str:
    """Exact bytes with a binary-unit reading: ``4,000,000 B (3.8 MiB)``."""
    if n is None:
        return "n/a"
    value = float(n)
    exact = f"{int(n):,} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            break
    if abs(n) < 1024:
        return exact
    return f"{exact} ({value:,.1f} {unit})"


def mib(n: float | None) -> float | None:
    return None if n is None else float(n) / 2**20


def ceil_exact(numerator: float, denominator: float) -> int:
    """``ceil(numerator / denominator)`` without float noise turning 54.0000001 into 55."""
    return math.ceil(round(numerator / denominator, 9))


def module_expr(path: str, root: str = "model") -> str:
    """``encoder.layer.3`` -> ``model.encoder.layer[3]``; a part that is not an identifier is a
    key (``blocks.block-0`` -> ``model.blocks["block-0"]``, an ``nn.ModuleDict``'s), so the
    expression can be assigned to (``get_submodule(...) = ...`` is not Python)."""
    import keyword

    out = root
    for part in path.split("."):
        if part.isdigit():
            out += f"[{part}]"
        elif part.isidentifier() and not keyword.iskeyword(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out
