"""The one reduction of an execution table that every analysis (and the trace plots) shares.

An execution table has a row per program step per IPU: 10⁷ rows at POD scale. The analyses need
far less: per run its on-tile compute cycles (which runs are executor calls) and its longest
IPU (elapsed cycles), and, over a set of runs, cycles per IPU and program type (a few hundred
numbers). :class:`RunCycles` computes these with numpy on the table's own integer columns (the
program type as its categorical code), in one pass over the rows plus one per run set asked
for, in blocks so temporary memory stays bounded. Nothing is copied from the table unless its
rows are not in run order. Sums are exact: the sources bound the total below 2**62.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from popviz.model.names import COMPUTE_TYPES
from popviz.model.thresholds import MAIN_RUN_MIN_COMPUTE_FRAC

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from popviz.model import ExecutionTable

MAX_DENSE_BINS = 2**21
"""Bins (runs × IPUs) summed at once: the per-run pass walks the runs in blocks of at most this
many bins (16 MiB of sums), so memory stays bounded however many runs there are."""

ROW_BLOCK = 2**20
"""Rows handled at once by the per-run-set passes (bounds their temporaries to a few MiB)."""

MAX_IPU_RANGE = 2**16
"""IPU indices spanning more than this are renumbered densely (np.unique) instead of offset."""

_CACHE_ATTR = "_popviz_run_cycles"


def cycle_totals(execution: ExecutionTable) -> RunCycles:
    """The execution table's :class:`RunCycles`, computed on first use and kept with the table
    so every analysis shares it."""
    cached = execution.__dict__.get(_CACHE_ATTR)
    if cached is not None and cached[0] is execution.steps:
        return cached[1]
    totals = RunCycles(execution.steps)
    execution.__dict__[_CACHE_ATTR] = (execution.steps, totals)
    return totals


def exact_bincount(key: np.ndarray, weights: np.ndarray, n_bins: int) -> np.ndarray:
    """``numpy.bincount`` of integer weights, exact: float sums are exact below 2**53 per bin,
    else the bins are summed again in int64."""
    import numpy as np

    sums = np.bincount(key, weights=weights, minlength=n_bins)
    if sums.max(initial=0) >= 2**53:
        sums = np.zeros(n_bins, dtype="int64")
        np.add.at(sums, key, weights)
    return sums


class RunCycles:
    """Per-run figures and per-(IPU, program type) sums of one execution table.

    ``runs``: the run ids with any cycles, sorted; ``compute``/``longest``: per run in ``runs``,
    its on-tile compute cycles and the cycles of its busiest IPU (int64)."""

    def __init__(self, steps: pd.DataFrame, max_dense_bins: int = MAX_DENSE_BINS) -> None:
        import numpy as np

        ptype = steps["program_type"]
        self.types: tuple[str, ...] = tuple(str(t) for t in ptype.cat.categories)
        self._code = ptype.cat.codes.to_numpy()
        self._program = steps["program"].cat.codes.to_numpy()
        self._n_programs = len(steps["program"].cat.categories)
        run = steps["run"].to_numpy()
        ipu = steps["ipu"].to_numpy()
        cycles = steps["cycles"].to_numpy()
        self._row_mask_cache: tuple[tuple[int, ...], np.ndarray] | None = None
        self._by_type_cache: dict[tuple[int, ...], pd.DataFrame] = {}
        if len(run) > 1 and not bool((run[1:] >= run[:-1]).all()):  # the blocks need run order
            order = np.argsort(run, kind="stable")
            run, ipu, cycles = run[order], ipu[order], cycles[order]
            self._code, self._program = self._code[order], self._program[order]
            del order
        self._run, self._ipu, self._cycles = run, ipu, cycles
        if not len(run):
            self._edges = np.zeros(1, dtype="int64")
            self._all_ids = np.zeros(0, dtype="int64")
            self.runs = self._all_ids
            self.compute = self.longest = np.zeros(0, dtype="int64")
            self._ipu_ids = np.zeros(0, dtype="int64")
            return
        # Distinct runs: contiguous row ranges [edges[j], edges[j + 1]).
        self._edges = np.concatenate(([0], np.flatnonzero(run[1:] != run[:-1]) + 1, [len(run)]))
        self._all_ids = run[self._edges[:-1]].astype("int64")
        self._ipu_setup(ipu)
        compute_codes = [k for k, t in enumerate(self.types) if t in COMPUTE_TYPES]
        longest, compute, total = self._per_run(max_dense_bins, np.asarray(compute_codes, dtype="int64"))
        keep = total > 0  # runs whose steps all took 0 cycles count as absent
        self.runs = self._all_ids[keep]
        self.longest = longest[keep]
        self.compute = compute[keep]

    # ------------------------------------------------------------------------------- building

    def _ipu_setup(self, ipu: np.ndarray) -> None:
        import numpy as np

        # Every index in [min, max] gets a slot (an IPU without rows just sums to zero).
        lo, hi = int(ipu.min()), int(ipu.max())
        self._ipu_min = lo
        self._ipu_inverse = None
        if hi - lo < MAX_IPU_RANGE:
            self._ipu_ids = np.arange(lo, hi + 1, dtype="int64")
        else:  # indices far apart (no target to bound them): renumber the ones present
            self._ipu_ids, inverse = np.unique(ipu, return_inverse=True)
            self._ipu_inverse = inverse.astype("int64")

    def _ipu_index(self, lo: int, hi: int) -> np.ndarray:
        """Dense IPU index (0..len(ipu_ids)-1) of rows lo:hi, as int64."""
        if self._ipu_inverse is not None:
            return self._ipu_inverse[lo:hi]
        idx = self._ipu[lo:hi].astype("int64")
        idx -= self._ipu_min
        return idx

    def _per_run(self, max_dense_bins: int, compute_codes: np.ndarray):
        import numpy as np

        n_runs, n_ipu = len(self._all_ids), len(self._ipu_ids)
        longest = np.zeros(n_runs, dtype="int64")
        compute = np.zeros(n_runs, dtype="int64")
        total = np.zeros(n_runs, dtype="float64")
        is_compute = np.zeros(max(len(self.types), 1), dtype=bool)
        is_compute[compute_codes] = True
        per_block = max(1, max_dense_bins // n_ipu)
        counts = np.diff(self._edges)
        for j in range(0, n_runs, per_block):
            k = min(per_block, n_runs - j)
            lo, hi = int(self._edges[j]), int(self._edges[j + k])
            local = np.repeat(np.arange(k, dtype="int64"), counts[j:j + k])
            cycles = self._cycles[lo:hi]
            key = local * n_ipu
            key += self._ipu_index(lo, hi)
            sums = exact_bincount(key, cycles, k * n_ipu).reshape(k, n_ipu)
            del key
            longest[j:j + k] = sums.max(axis=1)
            total[j:j + k] = sums.sum(axis=1)
            del sums
            mask = is_compute[self._code[lo:hi]]
            block = exact_bincount(local[mask], cycles[mask], k)
            compute[j:j + k] = np.rint(block) if block.dtype.kind == "f" else block
        return longest, compute, total

    # -------------------------------------------------------------------------------- queries

    def calls(self) -> list[int]:
        """Runs that are executor calls: OnTileExecute cycles at least MAIN_RUN_MIN_COMPUTE_FRAC
        of the busiest run's (weight and optimizer copies from the host are left out). Empty when
        no run computes anything."""
        if not len(self.compute) or self.compute.max() <= 0:
            return []
        keep = (self.compute > 0) & (self.compute >= MAIN_RUN_MIN_COMPUTE_FRAC * self.compute.max())
        return [int(r) for r in self.runs[keep]]

    def elapsed(self, runs: list[int]) -> int:
        """Cycles the given runs took: per run the longest IPU (idle time is in its Sync steps),
        summed."""
        import numpy as np

        sel = np.isin(self.runs, np.asarray(runs, dtype="int64"))
        return int(self.longest[sel].sum())

    def row_mask(self, runs: list[int]) -> np.ndarray:
        """A boolean per row of the (run-ordered) table: is its run in ``runs``? (The last one
        asked for is kept: the analyses ask for the same calls several times.)"""
        import numpy as np

        key = tuple(int(r) for r in runs)
        if self._row_mask_cache is not None and self._row_mask_cache[0] == key:
            return self._row_mask_cache[1]
        sel = np.isin(self._all_ids, np.asarray(key, dtype="int64"))
        mask = np.repeat(sel, np.diff(self._edges))
        self._row_mask_cache = (key, mask)
        return mask

    def by_ipu_type(self, runs: list[int]) -> pd.DataFrame:
        """Cycles per ``ipu`` and ``program_type`` (str) over ``runs``, zero sums left out,
        sorted by IPU and type code (a small frame: at most IPUs × types rows)."""
        import numpy as np
        import pandas as pd

        key = tuple(int(r) for r in runs)
        cached = self._by_type_cache.get(key)
        if cached is not None:
            return cached
        n_ipu, n_type = len(self._ipu_ids), len(self.types)
        sums = np.zeros(n_ipu * n_type, dtype="int64")
        if n_ipu and n_type:
            mask = self.row_mask(runs)
            for lo in range(0, len(self._run), ROW_BLOCK):
                hi = min(lo + ROW_BLOCK, len(self._run))
                m = mask[lo:hi]
                k = self._ipu_index(lo, hi)[m]
                k *= n_type
                k += self._code[lo:hi][m]
                block = exact_bincount(k, self._cycles[lo:hi][m], n_ipu * n_type)
                sums += np.rint(block).astype("int64") if block.dtype.kind == "f" else block
        nz = np.flatnonzero(sums)
        frame = pd.DataFrame({
            "ipu": self._ipu_ids[nz // n_type].astype("int32") if n_type else np.zeros(0, "int32"),
            "program_type": pd.Series([self.types[t] for t in (nz % n_type if n_type else nz)],
                                      dtype="str"),
            "cycles": sums[nz],
        })
        self._by_type_cache[key] = frame
        return frame

    def rows(self, type_names: tuple[str, ...], runs: list[int],
             program_codes: list[int] | None = None) -> np.ndarray:
        """Boolean per row (in this object's row order): program type among ``type_names``, run
        in ``runs`` and, when ``program_codes`` is given, program category code among them."""
        import numpy as np

        wanted = np.zeros(max(len(self.types), 1), dtype=bool)
        wanted[[k for k, t in enumerate(self.types) if t in type_names]] = True
        mask = wanted[self._code] & self.row_mask(runs)
        if program_codes is not None:
            pick = np.zeros(self._n_programs + 1, dtype=bool)  # the last entry: code -1 (missing)
            pick[list(program_codes)] = True
            mask &= pick[self._program]
        return mask

    def per_ipu(self, mask: np.ndarray) -> dict[int, tuple[int, int, int]]:
        """Per IPU with rows in ``mask``: (rows, cycles summed, fewest cycles of one row)."""
        import numpy as np

        n_ipu = len(self._ipu_ids)
        count = np.zeros(n_ipu, dtype="int64")
        total = np.zeros(n_ipu, dtype="int64")
        least = np.full(n_ipu, np.iinfo("int64").max, dtype="int64")
        for lo in range(0, len(self._run), ROW_BLOCK):
            hi = min(lo + ROW_BLOCK, len(self._run))
            m = mask[lo:hi]
            idx = self._ipu_index(lo, hi)[m]
            cycles = self._cycles[lo:hi][m]
            count += np.bincount(idx, minlength=n_ipu)
            block = exact_bincount(idx, cycles, n_ipu)
            total += np.rint(block).astype("int64") if block.dtype.kind == "f" else block
            np.minimum.at(least, idx, cycles)
        return {int(self._ipu_ids[i]): (int(count[i]), int(total[i]), int(least[i]))
                for i in np.flatnonzero(count)}
