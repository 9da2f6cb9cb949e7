"""Small pieces the analyses share: the per-run cycle aggregate, which runs are executor calls,
and number formatting for evidence strings."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from popviz.analysis.thresholds import MAIN_RUN_MIN_COMPUTE_FRAC
from popviz.model import COMPUTE_TYPES

if TYPE_CHECKING:
    import pandas as pd

    from popviz.model import ExecutionTable


MAX_DENSE_BINS = 20_000_000
"""Above this many (run, ipu, program type) combinations, aggregate with a pandas groupby instead
of a dense array."""


def run_cycles(execution: ExecutionTable, max_dense_bins: int = MAX_DENSE_BINS) -> pd.DataFrame:
    """Cycles summed per ``run``, ``ipu`` and ``program_type``, sorted, zero sums left out.

    One pass over the steps (``numpy.bincount`` on a combined key: several times faster than a
    groupby on millions of rows); everything else works from this small frame."""
    import numpy as np
    import pandas as pd

    steps = execution.steps
    if steps.empty:
        return pd.DataFrame({"run": pd.Series(dtype="int32"), "ipu": pd.Series(dtype="int32"),
                             "program_type": pd.Series(dtype="str"), "cycles": pd.Series(dtype="int64")})
    ptype = steps["program_type"]
    types = np.asarray(ptype.cat.categories, dtype=object)
    code = ptype.cat.codes.to_numpy()
    run = steps["run"].to_numpy()
    ipu = steps["ipu"].to_numpy()
    n_run, n_ipu, n_type = int(run.max()) + 1, int(ipu.max()) + 1, len(types)
    if run.min() < 0 or ipu.min() < 0 or n_run * n_ipu * n_type > max_dense_bins:
        agg = steps.groupby(["run", "ipu", "program_type"], observed=True, sort=True)["cycles"].sum()
        agg = agg.reset_index()
        agg["program_type"] = agg["program_type"].astype("str")
        return agg[agg["cycles"] != 0].reset_index(drop=True)
    key = run.astype("int64")  # one int64 array, updated in place (memory-lean on big tables)
    key *= n_ipu
    key += ipu
    key *= n_type
    key += code
    cycles = steps["cycles"].to_numpy()
    # Integer sums: bincount's float weights are exact below 2**53 cycles; check and fall back.
    sums = np.bincount(key, weights=cycles, minlength=n_run * n_ipu * n_type)
    if sums.max(initial=0) >= 2**53:
        sums = np.zeros(n_run * n_ipu * n_type, dtype="int64")
        np.add.at(sums, key, cycles)
    nz = np.flatnonzero(sums)
    return pd.DataFrame({
        "run": (nz // (n_ipu * n_type)).astype("int32"),
        "ipu": ((nz // n_type) % n_ipu).astype("int32"),
        "program_type": pd.Series(types[nz % n_type], dtype="str"),
        "cycles": np.rint(sums[nz]).astype("int64"),
    })


def call_runs(agg: pd.DataFrame) -> list[int]:
    """Runs that are executor calls: OnTileExecute cycles at least MAIN_RUN_MIN_COMPUTE_FRAC of the
    busiest run's (weight and optimizer copies from the host are left out). Empty when no run
    computes anything."""
    compute = agg[agg["program_type"].isin(COMPUTE_TYPES)].groupby("run")["cycles"].sum()
    if compute.empty or compute.max() <= 0:
        return []
    return sorted(int(r) for r in compute[compute >= MAIN_RUN_MIN_COMPUTE_FRAC * compute.max()].index)


def elapsed_cycles(agg: pd.DataFrame, runs: list[int]) -> int:
    """Cycles the given runs took: per run the longest IPU (idle time is in its Sync steps), summed."""
    part = agg[agg["run"].isin(runs)]
    return int(part.groupby(["run", "ipu"])["cycles"].sum().groupby("run").max().sum())


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
