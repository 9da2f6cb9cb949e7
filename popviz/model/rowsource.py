"""Where an execution table's rows live: in a pandas frame, or out of core (a bundle's
``execution.parquet``, read per row group by :class:`popviz.sources.parquet_rows.ParquetRows`).

Every reduction of the rows (:class:`popviz.model.aggregate.RunCycles`, the boundary checks, the
derived stream-copy table) reads them through :meth:`RowSource.blocks`, one block at a time, so
a report with 10⁸ rows is reduced in bounded memory and a small one through the same code. A
block is ``(offset, arrays)``: the global index of its first row and one NumPy array per column
asked for; the categorical columns (``program``, ``program_type``) come as integer codes into
:meth:`RowSource.categories` (-1: missing), ``start_cycle`` as int64 with 0 where unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

BLOCK_ROWS = 2**20
"""Rows per block (bounds every per-block temporary to a few tens of MiB)."""

CATEGORICAL = ("program", "program_type")
NULLABLE = ("start_cycle",)

Block = tuple[int, dict[str, Any]]


class RowSource:
    """The interface every row store gives (see the module docstring)."""

    num_rows: int = 0
    on_disk: bool = False

    def categories(self, name: str) -> list[str]:  # pragma: no cover - interface
        raise NotImplementedError

    def has_values(self, name: str) -> bool:  # pragma: no cover - interface
        """Whether the (optional) column holds any non-null value."""
        raise NotImplementedError

    def value_range(self, name: str) -> tuple[int, int] | None:  # pragma: no cover - interface
        """(min, max) of an integer column, None when the table is empty."""
        raise NotImplementedError

    def blocks(self, columns: Sequence[str], runs: Iterable[int] | None = None,
               block_rows: int = BLOCK_ROWS) -> Iterator[Block]:  # pragma: no cover - interface
        """The rows in blocks; with ``runs``, at least every row of those runs (a store may skip
        blocks that hold none of them; the caller masks the rest)."""
        raise NotImplementedError

    def frame(self, columns: Sequence[str] | None = None,
              runs: Iterable[int] | None = None) -> pd.DataFrame:  # pragma: no cover - interface
        """The rows as a pandas frame (only ``columns``; only rows of ``runs``)."""
        raise NotImplementedError


class FrameRows(RowSource):
    """Rows held in a pandas frame (already coerced to the model's columns)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self._frame = frame
        self.num_rows = len(frame)
        self._bounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def categories(self, name: str) -> list[str]:
        return [str(c) for c in self._frame[name].cat.categories]

    def has_values(self, name: str) -> bool:
        return name in self._frame and bool(self._frame[name].notna().any())

    def value_range(self, name: str) -> tuple[int, int] | None:
        if not self.num_rows:
            return None
        col = self._column(name)
        return int(col.min()), int(col.max())

    def _column(self, name: str) -> np.ndarray:
        col = self._frame[name]
        if name in CATEGORICAL:
            return col.cat.codes.to_numpy()
        if name in NULLABLE:
            return col.to_numpy(dtype="int64", na_value=0)
        return col.to_numpy()

    def blocks(self, columns: Sequence[str], runs: Iterable[int] | None = None,
               block_rows: int = BLOCK_ROWS) -> Iterator[Block]:
        import numpy as np

        whole = {c: self._column(c) for c in columns}  # views (codes: pandas' own array)
        block_rows = max(1, block_rows)
        starts = range(0, self.num_rows, block_rows)
        if runs is not None:  # skip the blocks that hold none of them
            lo_run, hi_run = self._run_bounds(block_rows)
            wanted = np.unique(np.asarray(list(runs), dtype="int64"))
            first = np.searchsorted(wanted, lo_run)
            keep = (first < len(wanted)) & (wanted[np.minimum(first, len(wanted) - 1)] <= hi_run) \
                if len(wanted) else np.zeros(len(lo_run), dtype=bool)
            starts = [k * block_rows for k in np.flatnonzero(keep)]
        for lo in starts:
            hi = min(lo + block_rows, self.num_rows)
            yield lo, {c: a[lo:hi] for c, a in whole.items()}

    def _run_bounds(self, block_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Per block of ``block_rows`` rows, its smallest and largest run id."""
        import numpy as np

        cached = self._bounds.get(block_rows)
        if cached is None:
            run = self._frame["run"].to_numpy()
            edges = np.arange(0, self.num_rows, block_rows)
            cached = (np.minimum.reduceat(run, edges).astype("int64"),
                      np.maximum.reduceat(run, edges).astype("int64")) if len(run) else \
                (np.zeros(0, "int64"), np.zeros(0, "int64"))
            self._bounds[block_rows] = cached
        return cached

    def frame(self, columns: Sequence[str] | None = None,
              runs: Iterable[int] | None = None) -> pd.DataFrame:
        f = self._frame
        if runs is not None:
            import numpy as np

            f = f[np.isin(f["run"].to_numpy(), np.asarray(list(runs), dtype="int64"))]
        return f[list(columns)] if columns is not None else f
