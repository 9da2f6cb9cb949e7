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


MAX_DENSE_BINS = 2**21
"""Bins (runs × IPUs × program types) summed at once: the aggregation walks the runs in blocks of
at most this many bins (16 MiB of sums), so memory stays bounded and cache-friendly however many
runs there are."""

_CACHE_ATTR = "_popviz_run_cycles"


def run_cycles(execution: ExecutionTable, max_dense_bins: int = MAX_DENSE_BINS) -> pd.DataFrame:
    """Cycles summed per ``run``, ``ipu`` and ``program_type``, sorted, zero sums left out.

    The one aggregation of the execution table: one columnar pass (``numpy.bincount`` on a
    combined key, in blocks of runs so memory stays bounded however many runs × IPUs × types
    there are), computed on first use and kept with the table so every analysis shares it
    (treat the frame as read-only). Sums are exact: the sources bound the total below 2**62."""
    cached = execution.__dict__.get(_CACHE_ATTR)
    if max_dense_bins == MAX_DENSE_BINS and cached is not None and cached[0] is execution.steps:
        return cached[1]
    agg = _aggregate(execution.steps, max_dense_bins)
    if max_dense_bins == MAX_DENSE_BINS:
        execution.__dict__[_CACHE_ATTR] = (execution.steps, agg)
    return agg


def _exact_bincount(key, cycles, n_bins: int):
    import numpy as np

    # bincount's float weights are exact below 2**53 cycles per bin; check and redo in int64.
    sums = np.bincount(key, weights=cycles, minlength=n_bins)
    if sums.max(initial=0) >= 2**53:
        sums = np.zeros(n_bins, dtype="int64")
        np.add.at(sums, key, cycles)
    return sums


def _str_column(types, codes) -> pd.Series:
    """``types[codes]`` as a pandas ``str`` Series, built in Arrow (10× faster than objects)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    if len(codes) == 0:
        return pd.Series([], dtype="str")
    arr = pa.DictionaryArray.from_arrays(pa.array(np.asarray(codes, dtype="int32")),
                                         pa.array([str(t) for t in types], type=pa.string()))
    strings = pa.chunked_array([arr.cast(pa.large_string())])
    dtype = pd.Series([], dtype="str").dtype  # pandas' default string dtype (Arrow-backed)
    mapper = {pa.large_string(): dtype, pa.string(): dtype}.get
    out = pd.Series(strings.to_pandas(types_mapper=mapper))
    return out if out.dtype == dtype else out.astype("str")


def _aggregate(steps: pd.DataFrame, max_dense_bins: int) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    if steps.empty:
        return pd.DataFrame({"run": pd.Series(dtype="int32"), "ipu": pd.Series(dtype="int32"),
                             "program_type": pd.Series(dtype="str"), "cycles": pd.Series(dtype="int64")})
    ptype = steps["program_type"]
    types = np.asarray(ptype.cat.categories, dtype=object)
    code = ptype.cat.codes.to_numpy()
    run = steps["run"].to_numpy()
    ipu = steps["ipu"].to_numpy()
    cycles = steps["cycles"].to_numpy()
    run_min, ipu_min = int(run.min()), int(ipu.min())
    n_ipu, n_type = int(ipu.max()) - ipu_min + 1, len(types)
    per_run = n_ipu * n_type
    if len(run) > 1 and not bool((run[1:] >= run[:-1]).all()):  # blocks need rows in run order
        order = np.argsort(run, kind="stable")
        run, ipu, code, cycles = run[order], ipu[order], code[order], cycles[order]
        del order
    runs_per_block = max(1, max_dense_bins // per_run) if max_dense_bins > 0 else 1
    firsts = np.arange(run_min, int(run[-1]) + 1, runs_per_block)
    bounds = np.searchsorted(run, np.append(firsts, int(run[-1]) + 1))
    out_key, out_sum = [], []
    for b, first in enumerate(firsts):
        lo, hi = bounds[b], bounds[b + 1]
        if lo == hi:
            continue
        key = run[lo:hi].astype("int64")  # one int64 array, updated in place
        key -= first
        key *= n_ipu
        key += ipu[lo:hi]
        key -= ipu_min
        key *= n_type
        key += code[lo:hi]
        sums = _exact_bincount(key, cycles[lo:hi], int(key.max()) + 1)
        nz = np.flatnonzero(sums)
        out_key.append(nz + (first - run_min) * per_run)
        out_sum.append(sums[nz])
    full = np.concatenate(out_key) if out_key else np.zeros(0, dtype="int64")
    del out_key
    total = np.concatenate(out_sum) if out_sum else np.zeros(0)
    del out_sum
    # Column by column, dropping each temporary at once (peak memory on big tables).
    type_code = (full % n_type).astype("int32")
    full //= n_type
    ipu_col = (full % n_ipu + ipu_min).astype("int32")
    full //= n_ipu
    full += run_min
    run_col = full.astype("int32")
    del full
    if total.dtype.kind == "f":
        np.rint(total, out=total)
    return pd.DataFrame({
        "run": run_col,
        "ipu": ipu_col,
        "program_type": _str_column(types, type_code),
        "cycles": total.astype("int64"),
    }, copy=False)


def call_runs(agg: pd.DataFrame) -> list[int]:
    """Runs that are executor calls: OnTileExecute cycles at least MAIN_RUN_MIN_COMPUTE_FRAC of the
    busiest run's (weight and optimizer copies from the host are left out). Empty when no run
    computes anything."""
    import numpy as np

    mask = agg["program_type"].isin(COMPUTE_TYPES).to_numpy()
    run = agg["run"].to_numpy()[mask]
    if not len(run):
        return []
    ids, inverse = np.unique(run, return_inverse=True)
    compute = _exact_bincount(inverse, agg["cycles"].to_numpy()[mask], len(ids))
    if compute.max() <= 0:
        return []
    return [int(r) for r in ids[compute >= MAIN_RUN_MIN_COMPUTE_FRAC * compute.max()]]


def elapsed_cycles(agg: pd.DataFrame, runs: list[int]) -> int:
    """Cycles the given runs took: per run the longest IPU (idle time is in its Sync steps), summed."""
    import numpy as np

    mask = np.isin(agg["run"].to_numpy(), np.asarray(runs, dtype="int64"))
    run, ipu = agg["run"].to_numpy()[mask], agg["ipu"].to_numpy()[mask]
    if not len(run):
        return 0
    run_ids, run_idx = np.unique(run, return_inverse=True)
    ipu_min, n_ipu = int(ipu.min()), int(ipu.max()) - int(ipu.min()) + 1
    key = run_idx.astype("int64") * n_ipu + (ipu - ipu_min)
    sums = _exact_bincount(key, agg["cycles"].to_numpy()[mask], len(run_ids) * n_ipu)
    return int(sums.reshape(len(run_ids), n_ipu).max(axis=1).sum())


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
