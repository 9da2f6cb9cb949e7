"""The one reduction of an execution table that every analysis (and the trace plots) shares.

An execution table has a row per program step per IPU: 10⁸ rows at POD scale, which need not fit
in memory (a bundle's table stays in its Parquet file, :mod:`popviz.model.rowsource`). The
analyses need far less: per run its on-tile compute cycles (which runs are executor calls) and
its longest IPU (elapsed cycles); over a set of runs, cycles per IPU and program type (split into
weight-update programs and the rest), and per IPU its Sync steps (count, shortest); and the
stream-copy steps per run, IPU and program. :class:`RunCycles` computes all of them in **one
pass** over the rows, block by block, with numpy on integer columns (the program and its type as
categorical codes), so memory is bounded by the figures kept — per run and IPU two int64 sums
(elapsed cycles, shortest Sync), per IPU and type a few sums, per stream-copy (run, IPU,
program) one row — not by the rows. A set of runs other than "all" is answered from the totals
minus a pass over the runs left out (or a pass over the set, whichever holds fewer rows; a store
on disk reads only the row groups that hold them): none at all when every run with cycles is a
call. The same pass records the boundary checks' findings (:attr:`RunCycles.problems`). Sums are
exact: the sources bound the total below 2**62.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from popviz.model.blockops import WORK_TYPES, Luts, add_ranged, exact_bincount
from popviz.model.rowsource import BLOCK_ROWS, FrameRows, RowSource
from popviz.model.tables import ModelError
from popviz.model.thresholds import MAIN_RUN_MIN_COMPUTE_FRAC

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from popviz.model import ExecutionTable

MAX_DENSE_BINS = 2**21
"""Kept for callers that bound a block: rows handled at once are at most this many."""

ROW_BLOCK = BLOCK_ROWS
"""Rows handled at once (bounds every temporary of the pass to a few tens of MiB)."""

MAX_IPU_RANGE = 2**16
"""IPU indices spanning more than this are renumbered densely (their distinct values) instead of
offset."""

MAX_TOTAL_CYCLES = 2**62
"""Cycle sums above this could overflow int64 arithmetic in the analyses (the boundary check)."""

COMBINED_MIN_BINS = 2**16
"""A block whose (run, IPU, type) key space has at most this many bins (or 4 per row) is
summed with one key; a larger one (rows not in run order, very short runs) key by key."""

PASS_COLUMNS = ("run", "ipu", "program", "program_type", "cycles")
_CACHE_ATTR = "_popviz_run_cycles"


_PENDING_ATTR = "_popviz_run_cycles_pending"


def start_cycle_totals(execution: ExecutionTable, n_ipus: int | None = None) -> None:
    """Begin :func:`cycle_totals` on a thread of its own, for a reader that has other work to do
    meanwhile (the bundle reader reads the liveness table while the pass reduces the rows: Arrow's
    decoding and NumPy's reductions release the GIL). The first ``cycle_totals`` with the same
    ``n_ipus`` waits for it and raises what it raised; :func:`stop_cycle_totals` ends it early."""
    import concurrent.futures
    import threading

    future: concurrent.futures.Future = concurrent.futures.Future()
    stop = threading.Event()

    def run() -> None:
        try:
            future.set_result(RunCycles(execution.rows, run_ids=execution.runs["run"].to_numpy(), n_ipus=n_ipus,
                                        stop=stop))
        except BaseException as exc:  # handed to the thread that waits for it
            future.set_exception(exc)

    execution.__dict__[_PENDING_ATTR] = (execution.rows, n_ipus, future, stop)
    threading.Thread(target=run, name="popviz-pass", daemon=True).start()


def stop_cycle_totals(execution: ExecutionTable) -> None:
    """End a pass :func:`start_cycle_totals` began and wait for its thread (it stops at its next
    block, its reader thread with it): a reader that fails meanwhile must not leave it decoding
    while the interpreter exits."""
    pending = execution.__dict__.pop(_PENDING_ATTR, None)
    if pending is not None:
        pending[3].set()
        pending[2].exception()  # waits; what it raised (the stop itself) is not this caller's


class PassStopped(Exception):
    """The pass was ended by :func:`stop_cycle_totals` before its last block."""


def cycle_totals(execution: ExecutionTable, n_ipus: int | None = None) -> RunCycles:
    """The execution table's :class:`RunCycles`, computed on first use and kept with the table
    so every analysis shares it (``n_ipus``: the target's IPUs, for the boundary check)."""
    rows = execution.rows
    pending = execution.__dict__.pop(_PENDING_ATTR, None)
    if pending is not None and pending[0] is rows and (n_ipus is None or pending[1] == n_ipus):
        totals = pending[2].result()  # the pass started by start_cycle_totals; its error is raised here
        execution.__dict__[_CACHE_ATTR] = (rows, totals)
        return totals
    cached = execution.__dict__.get(_CACHE_ATTR)
    if cached is not None and cached[0] is rows and (n_ipus is None or cached[1].n_ipus_checked == n_ipus):
        return cached[1]
    totals = RunCycles(rows, run_ids=execution.runs["run"].to_numpy(), n_ipus=n_ipus)
    execution.__dict__[_CACHE_ATTR] = (rows, totals)
    return totals


class RunCycles:
    """Per-run figures, per-(IPU, program type) sums and the stream-copy groups of one execution
    table (a frame or a :class:`~popviz.model.rowsource.RowSource`).

    ``runs``: the run ids with any cycles, sorted; ``compute``/``longest``: per run in ``runs``,
    its on-tile compute cycles and the cycles of its busiest IPU (int64); ``problems``: the
    boundary checks' findings, ``{check: (first row, its value, rows in all)}``."""

    def __init__(self, steps: pd.DataFrame | RowSource, max_dense_bins: int = MAX_DENSE_BINS,
                 run_ids: Iterable[int] | None = None, n_ipus: int | None = None,
                 block_rows: int = ROW_BLOCK, stop: Any = None) -> None:
        import numpy as np

        source = steps if isinstance(steps, RowSource) else FrameRows(steps)
        self._source = source
        self._stop = stop  # a threading.Event: the pass ends at the next block once it is set
        self._block_rows = max(1, min(block_rows, max_dense_bins))
        self.n_ipus_checked = n_ipus
        self.problems: dict[str, tuple[int, Any, int]] = {}
        self._luts = Luts()
        self._by_type_cache: dict[tuple[int, ...], pd.DataFrame] = {}
        self._sums_cache: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        if run_ids is None:
            run_ids = self._distinct("run")
        self._run_ids = np.unique(np.asarray(list(run_ids) if not hasattr(run_ids, "dtype") else run_ids,
                                             dtype="int64"))
        self._runs_dense = bool(len(self._run_ids)) and \
            int(self._run_ids[-1]) - int(self._run_ids[0]) + 1 == len(self._run_ids)
        self._ipu_setup()
        self._plan_checks(n_ipus)
        n_runs, n_ipu = len(self._run_ids), len(self._ipu_ids)
        self._total = np.zeros(n_runs * n_ipu, dtype="int64")
        self._sync_min: np.ndarray | None = None
        self._run_rows = np.zeros(n_runs, dtype="int64")
        self._compute = np.zeros(n_runs, dtype="int64")
        self._sums = np.zeros((n_ipu, 0, 2), dtype="int64")
        self._counts = np.zeros((n_ipu, 0, 2), dtype="int64")
        self._copies: list[tuple[np.ndarray, ...]] = []
        self._running_total = 0.0
        self._pass()
        self.types: tuple[str, ...] = tuple(self._luts.types)
        if n_runs and n_ipu:
            per = self._total.reshape(n_runs, n_ipu)
            longest_all, total = per.max(axis=1), per.sum(axis=1)
        else:
            longest_all = total = np.zeros(n_runs, dtype="int64")
        present = self._run_rows > 0
        self._present = present
        self._longest_all = longest_all
        keep = present & (total > 0)  # runs whose steps all took 0 cycles count as absent
        self._keep = keep
        self.runs = self._run_ids[keep]
        self.longest = longest_all[keep].astype("int64")
        self.compute = self._compute[keep]

    # ------------------------------------------------------------------------------- building

    def _distinct(self, column: str) -> np.ndarray:
        import numpy as np

        seen = np.zeros(0, dtype="int64")
        for _, b in self._source.blocks([column], block_rows=max(self._block_rows, ROW_BLOCK)):
            seen = np.union1d(seen, np.unique(b[column]).astype("int64"))
        return seen

    def _ipu_setup(self) -> None:
        import numpy as np

        span = self._source.value_range("ipu")
        self._ipu_min = 0
        self._ipu_sorted = False
        if span is None:
            self._ipu_ids = np.zeros(0, dtype="int64")
        elif span[1] - span[0] < MAX_IPU_RANGE:  # every index in [min, max] gets a slot
            self._ipu_min = span[0]
            self._ipu_ids = np.arange(span[0], span[1] + 1, dtype="int64")
        else:  # indices far apart (no target to bound them): renumber the ones present
            self._ipu_ids = self._distinct("ipu")
            self._ipu_sorted = True

    def _plan_checks(self, n_ipus: int | None) -> None:
        """Which per-block checks can fail, from each column's range (a Parquet file's
        statistics, or a frame's min and max): the others are skipped."""
        rows = self._source.num_rows
        cyc = self._source.value_range("cycles")
        ipu = self._source.value_range("ipu")
        run = self._source.value_range("run")
        self._check_cycles = cyc is not None and (cyc[0] < 0 or float(cyc[1]) * rows >= MAX_TOTAL_CYCLES)
        self._check_ipu = ipu is not None and (ipu[0] < 0 or bool(n_ipus and ipu[1] >= n_ipus))
        self._check_run = run is not None and run[0] < 0
        start = self._source.value_range("start_cycle") if self._source.has_values("start_cycle") else None
        self._check_start = start is not None and start[0] < 0

    def _ipu_index(self, ipu: np.ndarray) -> np.ndarray:
        import numpy as np

        if self._ipu_sorted:
            return np.searchsorted(self._ipu_ids, ipu).astype("int64")
        idx = ipu.astype("int64")
        idx -= self._ipu_min
        return idx

    def _run_index(self, run: np.ndarray) -> np.ndarray:
        import numpy as np

        if self._runs_dense and len(run):
            lo, hi = int(run.min()), int(run.max())
            if lo >= self._run_ids[0] and hi <= self._run_ids[-1]:  # ids are a range: an offset
                idx = run.astype("int64")
                idx -= int(self._run_ids[0])
                return idx
        idx = np.searchsorted(self._run_ids, run)
        ok = idx < len(self._run_ids)
        ok[ok] = self._run_ids[idx[ok]] == run[ok]
        if not ok.all():
            unknown = sorted(int(r) for r in np.unique(run[~ok])[:10])
            raise ModelError(f"execution steps refer to run(s) {unknown} missing from runs")
        return idx.astype("int64")

    def _note(self, check: str, offset: int, bad: np.ndarray, values: np.ndarray) -> None:
        import numpy as np

        n = int(np.count_nonzero(bad))
        if not n:
            return
        if check in self.problems:
            first, value, count = self.problems[check]
            self.problems[check] = (first, value, count + n)
        else:
            row = int(np.flatnonzero(bad)[0])
            self.problems[check] = (offset + row, values[row].item(), n)

    def _check(self, offset: int, b: dict[str, np.ndarray]) -> None:
        import numpy as np

        cycles, ipu, run = b["cycles"], b["ipu"], b["run"]
        if not len(cycles):
            return
        # Only the checks the columns' ranges say can fail; a mask only where one does.
        if self._check_cycles:
            if cycles.min() < 0:
                self._note("cycles", offset, cycles < 0, cycles)
            block = float(cycles.sum(dtype="float64"))
            if self._running_total + block >= MAX_TOTAL_CYCLES:
                over = (self._running_total + np.cumsum(cycles.astype("float64"))) >= MAX_TOTAL_CYCLES
                self._note("cycle_total", offset, over, cycles)
            self._running_total += block
        if self._check_start and "start_cycle" in b and b["start_cycle"].min() < 0:
            start = b["start_cycle"]
            self._note("start_cycle", offset, start < 0, start)
        n = self.n_ipus_checked
        if self._check_ipu and (ipu.min() < 0 or (n and ipu.max() >= n)):
            self._note("ipu", offset, (ipu < 0) | (ipu >= n if n else False), ipu)
        if self._check_run and run.min() < 0:
            self._note("run", offset, run < 0, run)

    def _pass(self) -> None:
        columns = list(PASS_COLUMNS)
        if self._check_start:  # start cycles are read only to refuse a negative one
            columns.append("start_cycle")
        for offset, b in self._source.blocks(columns, block_rows=self._block_rows):
            if self._stop is not None and self._stop.is_set():
                raise PassStopped("the pass over the execution rows was stopped")
            self._luts.refresh(self._source)
            self._check(offset, b)
            self._block(b)

    def _codes(self, b: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Type and program codes, with -1 (missing) moved to the extra last slot."""
        import numpy as np

        nt, npg = len(self._luts.types), len(self._luts.programs)
        t, p = b["program_type"], b["program"]  # their own (small) integer types
        if len(t) and t.min() < 0:
            t = np.where(t < 0, nt, t.astype("int64"))
        if len(p) and p.min() < 0:
            p = np.where(p < 0, npg, p.astype("int64"))
        return t, p

    def _type_sums(self, iidx: np.ndarray, t: np.ndarray, p: np.ndarray, cycles: np.ndarray):
        """Per block: sums and counts per (IPU, type, weight-update program), [n_ipu, nt + 1, 2]."""
        import numpy as np

        nt = len(self._luts.types)
        key = (iidx * (nt + 1) + t) * 2 + self._luts.update[p]
        size = len(self._ipu_ids) * (nt + 1) * 2
        sums = exact_bincount(key, cycles, size).reshape(-1, nt + 1, 2)
        counts = np.bincount(key, minlength=size).reshape(-1, nt + 1, 2)
        return sums, counts

    def _grow(self, nt: int) -> None:
        import numpy as np

        have = self._sums.shape[1]
        if nt > have:
            pad = ((0, 0), (0, nt - have), (0, 0))
            self._sums = np.pad(self._sums, pad)
            self._counts = np.pad(self._counts, pad)

    def _block(self, b: dict[str, np.ndarray]) -> None:
        import numpy as np

        if not len(b["run"]):
            return
        luts = self._luts
        nt, npg = len(luts.types), len(luts.programs)
        n_ipu = len(self._ipu_ids)
        run, ipu, cycles = b["run"], b["ipu"], b["cycles"]
        t, p = self._codes(b)
        lo, hi = int(run.min()), int(run.max())
        dense = (self._runs_dense and not self._ipu_sorted and lo >= self._run_ids[0]
                 and hi <= self._run_ids[-1])
        ridx = None if dense else self._run_index(run)
        r_lo = lo - int(self._run_ids[0]) if dense else int(ridx.min())
        n_local = (hi - lo + 1) if dense else int(ridx.max()) - r_lo + 1
        span = n_local * n_ipu * (nt + 1) * 2
        if span <= max(COMBINED_MIN_BINS, 4 * len(run)):
            # One key per (run, IPU, type, weight-update program) over the block's runs: two
            # bincounts give every per-run and per-type figure of the block.
            # Built in int32 (span < 2**31: half the memory traffic of int64), made the index
            # type bincount takes once.
            if dense:  # ids and IPUs are ranges: the key straight from the columns
                key = run.astype("int32") if run.dtype.itemsize <= 4 else (run - lo).astype("int32")
                if run.dtype.itemsize <= 4:
                    key -= lo
                key *= n_ipu
                np.add(key, ipu, out=key, casting="unsafe")  # IPU indices < 2**16 apart
                if self._ipu_min:
                    key -= self._ipu_min
            else:
                key = (ridx - r_lo).astype("int32")
                key *= n_ipu
                np.add(key, self._ipu_index(ipu), out=key, casting="unsafe")
            key *= nt + 1
            np.add(key, t, out=key, casting="unsafe")
            key *= 2
            update = luts.mask(p, luts.update_codes, luts.update)
            if update is not None:
                key += update
            key = key.astype(np.intp)
            w = exact_bincount(key, cycles, span).reshape(n_local, n_ipu, nt + 1, 2)
            c = np.bincount(key, minlength=span).reshape(n_local, n_ipu, nt + 1, 2)
            del key
            self._total[r_lo * n_ipu:(r_lo + n_local) * n_ipu] += w.sum(axis=(2, 3)).ravel()
            self._run_rows[r_lo:r_lo + n_local] += c.sum(axis=(1, 2, 3))
            self._compute[r_lo:r_lo + n_local] += w[:, :, luts.compute].sum(axis=(1, 2, 3))
            sums, counts = w.sum(axis=0), c.sum(axis=0)
        else:  # a block over many runs (rows not in run order, or tiny runs): keyed apart
            ridx = self._run_index(run) if ridx is None else ridx
            iidx = self._ipu_index(ipu)
            rk = ridx * n_ipu + iidx
            add_ranged(self._total, rk, cycles)
            add_ranged(self._run_rows, ridx, None)
            m = luts.compute[t]
            add_ranged(self._compute, ridx[m], cycles[m])
            sums, counts = self._type_sums(iidx, t, p, cycles)
        self._grow(nt)
        self._sums[:, :nt] += sums[:, :nt]
        self._counts[:, :nt] += counts[:, :nt]
        m = luts.mask(t, luts.sync_codes, luts.sync) if counts[:, luts.sync_codes].any() else None
        if m is not None:
            if self._sync_min is None:
                self._sync_min = np.full(len(self._total), np.iinfo("int64").max, dtype="int64")
            np.minimum.at(self._sync_min, self._run_index(run[m]) * n_ipu + self._ipu_index(ipu[m]), cycles[m])
        m = luts.mask(t, luts.copy_codes, luts.copy) if counts[:, luts.copy_codes].any() else None
        if m is not None:
            rk = self._run_index(run[m]) * n_ipu + self._ipu_index(ipu[m])
            key = (rk * (npg + 1) + p[m].astype("int64")) * (nt + 1) + t[m]
            uniq, inverse, count = np.unique(key, return_inverse=True, return_counts=True)
            total = exact_bincount(inverse.ravel(), cycles[m], len(uniq))
            pt, rest = uniq % (nt + 1), uniq // (nt + 1)
            self._copies.append((rest // (npg + 1), rest % (npg + 1), pt, count.astype("int64"), total,
                                 np.full(len(uniq), npg, dtype="int64"), np.full(len(uniq), nt, dtype="int64")))

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

    def runs_with_steps(self) -> list[int]:
        """Every run id with at least one step (also those whose steps all took 0 cycles)."""
        return [int(r) for r in self._run_ids[self._present]]

    def mean_longest(self) -> float | None:
        """Mean over every run with steps of its longest IPU's cycles (None without steps)."""
        if not self._present.any():
            return None
        return float(self._longest_all[self._present].mean())

    @property
    def ipus(self) -> list[int]:
        """The IPUs with at least one step."""
        import numpy as np

        rows = self._counts.sum(axis=(1, 2)) if self._counts.size else np.zeros(len(self._ipu_ids), "int64")
        return [int(self._ipu_ids[i]) for i in np.flatnonzero(rows)]

    def _selected(self, runs: Iterable[int]) -> np.ndarray:
        """Bool per run slot: in ``runs``."""
        import numpy as np

        return np.isin(self._run_ids, np.asarray(list(runs), dtype="int64"))

    def _sums_over(self, runs: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """Sums and counts per (IPU, type, weight-update) over the rows of ``runs``: the totals
        when that is every run with steps, else the totals less a pass over the others, or a pass
        over these, whichever reads fewer rows."""

        key = tuple(sorted({int(r) for r in runs}))
        cached = self._sums_cache.get(key)
        if cached is not None:
            return cached
        sel = self._selected(key)
        rows_in = int(self._run_rows[sel].sum())
        rows_out = int(self._run_rows[~sel].sum())
        if rows_out == 0:
            out = (self._sums, self._counts)
        elif rows_in <= rows_out:
            out = self._pass_over(sel)
        else:
            s, c = self._pass_over(~sel)
            out = (self._sums - s, self._counts - c)
        if len(self._sums_cache) > 8:
            self._sums_cache.clear()
        self._sums_cache[key] = out
        return out

    def _pass_over(self, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        import numpy as np

        sums = np.zeros_like(self._sums)
        counts = np.zeros_like(self._counts)
        wanted = self._run_ids[sel]
        if not len(wanted):
            return sums, counts
        nt = sums.shape[1]
        for _, b in self._source.blocks(list(PASS_COLUMNS), runs=wanted.tolist(), block_rows=self._block_rows):
            if not len(b["run"]):
                continue
            m = sel[self._run_index(b["run"])]
            if not m.any():
                continue
            b = {k: v[m] for k, v in b.items()}
            t, p = self._codes(b)
            s, c = self._type_sums(self._ipu_index(b["ipu"]), t, p, b["cycles"])
            sums += s[:, :nt]
            counts += c[:, :nt]
        return sums, counts

    def by_ipu_type(self, runs: list[int]) -> pd.DataFrame:
        """Cycles per ``ipu`` and ``program_type`` (str) over ``runs``, zero sums left out,
        sorted by IPU and type code (a small frame: at most IPUs × types rows)."""
        import numpy as np
        import pandas as pd

        key = tuple(int(r) for r in runs)
        cached = self._by_type_cache.get(key)
        if cached is not None:
            return cached
        sums = self._sums_over(key)[0].sum(axis=2)  # [ipu, type]
        n_type = sums.shape[1]
        flat = sums.ravel()
        nz = np.flatnonzero(flat)
        frame = pd.DataFrame({
            "ipu": self._ipu_ids[nz // n_type].astype("int32") if n_type else np.zeros(0, "int32"),
            "program_type": pd.Series([self.types[t] for t in (nz % n_type if n_type else nz)], dtype="str"),
            "cycles": flat[nz],
        })
        self._by_type_cache[key] = frame
        return frame

    def _type_codes(self, names: Iterable[str]) -> list[int]:
        return [k for k, t in enumerate(self.types) if t in set(names)]

    def weight_update(self, runs: list[int]) -> dict[int, int]:
        """Per IPU with such steps in ``runs``: the work cycles (OnTileExecute, DoExchange) of
        programs named like a weight update."""
        import numpy as np

        sums, counts = self._sums_over(runs)
        codes = self._type_codes(WORK_TYPES)
        if not codes or not sums.size:
            return {}
        total, count = sums[:, codes, 1].sum(axis=1), counts[:, codes, 1].sum(axis=1)
        return {int(self._ipu_ids[i]): int(total[i]) for i in np.flatnonzero(count)}

    def sync(self, runs: list[int]) -> dict[int, tuple[int, int, int]]:
        """Per IPU with Sync steps in ``runs``: (steps, cycles summed, fewest cycles of one)."""
        import numpy as np

        sums, counts = self._sums_over(runs)
        codes = self._type_codes(("Sync",))
        if not codes or not sums.size or self._sync_min is None:
            return {}
        total, count = sums[:, codes].sum(axis=(1, 2)), counts[:, codes].sum(axis=(1, 2))
        n_ipu = len(self._ipu_ids)
        least = self._sync_min.reshape(-1, n_ipu)[self._selected(runs)].min(axis=0, initial=np.iinfo("int64").max)
        return {int(self._ipu_ids[i]): (int(count[i]), int(total[i]), int(least[i]))
                for i in np.flatnonzero(count)}

    def copy_groups(self) -> pd.DataFrame:
        """The stream-copy steps per (run, IPU, program, type): ``run``, ``ipu``, ``program`` and
        ``program_type`` (names), ``steps``, ``cycles``, sorted by run, IPU, program and type code."""
        import numpy as np
        import pandas as pd

        names, types = self._luts.programs, self._luts.types
        if not self._copies:
            return pd.DataFrame({"run": np.zeros(0, "int32"), "ipu": np.zeros(0, "int32"),
                                 "program": pd.Series([], dtype="str"), "program_type": pd.Series([], dtype="str"),
                                 "steps": np.zeros(0, "int64"), "cycles": np.zeros(0, "int64")})
        parts = [np.concatenate([c[k] for c in self._copies]) for k in range(7)]
        rk, p, t, count, total, p_missing, t_missing = parts
        p = np.where(p == p_missing, -1, p)  # the block's missing slot, as -1
        t = np.where(t == t_missing, -1, t)
        n_ipu = len(self._ipu_ids)
        frame = pd.DataFrame({"rk": rk, "p": p, "t": t, "steps": count, "cycles": total})
        g = frame.groupby(["rk", "p", "t"], sort=True)[["steps", "cycles"]].sum().reset_index()
        rk = g["rk"].to_numpy()
        prog = pd.Categorical.from_codes(g["p"].to_numpy(), categories=list(dict.fromkeys(names))) \
            if len(set(names)) == len(names) else pd.Categorical([names[c] if c >= 0 else None for c in g["p"]])
        ptype = pd.Categorical.from_codes(g["t"].to_numpy(), categories=types)
        return pd.DataFrame({"run": self._run_ids[rk // n_ipu].astype("int32"),
                             "ipu": self._ipu_ids[rk % n_ipu].astype("int32"),
                             "program": prog, "program_type": ptype,
                             "steps": g["steps"].astype("int64"), "cycles": g["cycles"].astype("int64")})

    def by_program_ipu(self, runs: list[int]) -> pd.Series:
        """Cycles per (``program`` name, ``ipu``) over the rows of ``runs``, the pairs with rows
        only (as pandas' observed groupby gives them), sorted by program code and IPU: one pass
        over the row groups that hold those runs."""
        import numpy as np
        import pandas as pd

        sel = self._selected(runs)
        n_ipu = len(self._ipu_ids)
        sums = np.zeros(0, dtype="int64")
        counts = np.zeros(0, dtype="int64")
        wanted = self._run_ids[sel].tolist()
        for _, b in self._source.blocks(["run", "ipu", "program", "cycles"], runs=wanted,
                                        block_rows=self._block_rows) if wanted else ():
            if not len(b["run"]):
                continue
            m = sel[self._run_index(b["run"])]
            npg = len(self._source.categories("program"))
            p = b["program"][m].astype("int64")
            p = np.where(p < 0, npg, p)
            key = p * n_ipu + self._ipu_index(b["ipu"][m])
            size = (npg + 1) * n_ipu
            if len(sums) < size:
                sums, counts = np.pad(sums, (0, size - len(sums))), np.pad(counts, (0, size - len(counts)))
            sums[:size] += exact_bincount(key, b["cycles"][m], size)
            counts[:size] += np.bincount(key, minlength=size)
        names = self._source.categories("program")
        keep = np.flatnonzero(counts[:len(names) * n_ipu]) if n_ipu else np.zeros(0, dtype="int64")
        index = pd.MultiIndex.from_arrays(
            [pd.Categorical.from_codes(keep // n_ipu, categories=names) if n_ipu else pd.Categorical([]),
             self._ipu_ids[keep % n_ipu].astype("int32") if n_ipu else np.zeros(0, "int32")],
            names=["program", "ipu"])
        return pd.Series(sums[keep], index=index, name="cycles")
