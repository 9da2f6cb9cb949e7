"""A bundle's execution table kept out of core: ``execution.parquet`` read per row group.

:class:`ParquetRows` is the :class:`~popviz.model.rowsource.RowSource` of a large bundle (more
than :data:`popviz.sources.bundle.OUT_OF_CORE_ROWS` rows): the reductions read it in blocks
(``ParquetFile.iter_batches`` over the columns they need), a run's rows are read from the row
groups whose ``run`` statistics can hold it, and the whole table becomes a pandas frame only when
``ExecutionTable.steps`` is asked for. The categorical columns come as Parquet dictionaries, one
per row group; their values are numbered in the order they first appear, which is the order
``pyarrow``'s ``to_pandas`` gives the whole table's categories.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from popviz.model.rowsource import BLOCK_ROWS, CATEGORICAL, NULLABLE, Block, RowSource

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


OUT_OF_CORE_ROWS = 2**24
"""An execution table of more rows than this (16.8 M, about 0.5 GiB as a frame) stays on disk:
a bundle's in its Parquet file, the libpva adapter's in a temporary one it writes run by run
(:class:`Spill`). Every analysis and figure reduces it per row group, and
``report.execution.steps`` reads it whole only when asked for. Smaller tables are held in memory
and reduced by the same code."""

OUT_OF_CORE_ENV = "POPVIZ_OUT_OF_CORE_ROWS"
"""Environment variable that sets the rows above which an execution table stays on disk."""


def out_of_core_rows() -> int:
    """:data:`OUT_OF_CORE_ROWS`, or the whole number ``POPVIZ_OUT_OF_CORE_ROWS`` gives."""
    import os

    value = os.environ.get(OUT_OF_CORE_ENV, "").strip()
    return int(value) if value.isdigit() else OUT_OF_CORE_ROWS


PREFETCH = 2
"""Blocks decoded ahead by a reader thread while the caller reduces the last one (Parquet
decoding releases the GIL, so on two cores reading and reducing overlap)."""


def prefetched(blocks: Iterator[Any], depth: int = PREFETCH) -> Iterator[Any]:
    """``blocks`` produced by a background thread, at most ``depth`` ahead; the thread is
    stopped and joined when the caller stops early, and its errors are raised here."""
    import queue
    import threading

    if depth <= 0:
        yield from blocks
        return
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for item in blocks:
                while not stop.is_set():
                    try:
                        q.put((None, item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((None, done))
        except BaseException as exc:  # handed to the caller
            q.put((exc, None))

    thread = threading.Thread(target=produce, name="popviz-parquet-reader", daemon=True)
    thread.start()
    try:
        while True:
            exc, item = q.get()
            if exc is not None:
                raise exc
            if item is done:
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                q.get(timeout=0.1)
            except queue.Empty:
                pass
        thread.join()


class ParquetRows(RowSource):
    """The rows of one Parquet file (``path``: a str path Arrow opens itself; ``hide``: columns
    read as absent). ``unlink``: remove the file once open (a temporary file: its rows stay
    readable through the open file until the table is gone, and nothing is left behind)."""

    on_disk = True

    def __init__(self, path: str, hide: Sequence[str] = (), unlink: bool = False) -> None:
        import pyarrow.parquet as pq

        self.path = path
        self._file = pq.ParquetFile(path)  # the footer only; the file stays open
        if unlink:
            import os

            os.unlink(path)
        meta = self._file.metadata
        self.num_rows = meta.num_rows
        self.columns = [c for c in self._file.schema_arrow.names if c not in hide]
        self._cats: dict[str, list[str]] = {c: [] for c in CATEGORICAL}
        self._index: dict[str, dict[str, int]] = {c: {} for c in CATEGORICAL}
        self._stats = [self._group_stats(i) for i in range(meta.num_row_groups)]

    def _group_stats(self, i: int) -> dict[str, Any]:
        group = self._file.metadata.row_group(i)
        out: dict[str, Any] = {"rows": group.num_rows}
        for j in range(group.num_columns):
            col = group.column(j)
            name = col.path_in_schema
            st = col.statistics
            if st is None:
                continue
            out[name] = (st.min if st.has_min_max else None, st.max if st.has_min_max else None,
                         st.null_count if st.has_null_count else None)
        return out

    # ---------------------------------------------------------------------------- metadata

    def categories(self, name: str) -> list[str]:
        return self._cats[name]

    def has_values(self, name: str) -> bool:
        if name not in self.columns:
            return False
        for st in self._stats:
            got = st.get(name)
            if got is None or got[2] is None or got[2] < st["rows"]:
                return True
        return False

    def value_range(self, name: str) -> tuple[int, int] | None:
        if not self.num_rows:
            return None
        lo = hi = None
        for st in self._stats:
            got = st.get(name)
            if st["rows"] and (got is None or got[0] is None):
                return self._scan_range(name)
            if st["rows"]:
                lo = got[0] if lo is None else min(lo, got[0])
                hi = got[1] if hi is None else max(hi, got[1])
        return (int(lo), int(hi)) if lo is not None else None

    def _scan_range(self, name: str) -> tuple[int, int] | None:
        lo = hi = None
        for _, b in self.blocks([name]):
            if len(b[name]):
                lo = int(b[name].min()) if lo is None else min(lo, int(b[name].min()))
                hi = int(b[name].max()) if hi is None else max(hi, int(b[name].max()))
        return (lo, hi) if lo is not None else None

    def _groups(self, runs: Iterable[int] | None) -> list[int]:
        """Row groups that can hold rows of ``runs`` (by their ``run`` statistics)."""
        groups = list(range(len(self._stats)))
        if runs is None:
            return groups
        wanted = sorted({int(r) for r in runs})
        if not wanted:
            return []
        import bisect

        keep = []
        for i in groups:
            got = self._stats[i].get("run")
            if got is None or got[0] is None:
                keep.append(i)
                continue
            k = bisect.bisect_left(wanted, int(got[0]))
            if k < len(wanted) and wanted[k] <= int(got[1]):
                keep.append(i)
        return keep

    # ---------------------------------------------------------------------------- reading

    def _codes(self, name: str, array: Any) -> np.ndarray:
        """Global codes of a dictionary (or plain string) column's values; -1 where null."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if not pa.types.is_dictionary(array.type):
            array = pc.dictionary_encode(array)
        index, cats = self._index[name], self._cats[name]
        values = array.dictionary.to_pylist()
        lut = np.empty(len(values) + 1, dtype="int64")
        for k, v in enumerate(values):
            if v is None:
                lut[k] = -1
                continue
            v = str(v)
            code = index.get(v)
            if code is None:
                code = index[v] = len(cats)
                cats.append(v)
            lut[k] = code
        lut[-1] = -1
        idx = array.indices
        if not idx.null_count and np.array_equal(lut[:-1], np.arange(len(values))):
            return idx.to_numpy(zero_copy_only=False)  # the dictionary numbers as the table does
        if idx.null_count:
            idx = pc.fill_null(idx, len(values))
        return lut[idx.to_numpy(zero_copy_only=False)]

    def _column(self, name: str, array: Any) -> np.ndarray:
        import pyarrow.compute as pc

        if name in CATEGORICAL:
            return self._codes(name, array)
        if name in NULLABLE:
            if array.null_count:
                array = pc.fill_null(array, 0)
            return array.to_numpy(zero_copy_only=False).astype("int64", copy=False)
        return array.to_numpy(zero_copy_only=False)

    def blocks(self, columns: Sequence[str], runs: Iterable[int] | None = None,
               block_rows: int = BLOCK_ROWS) -> Iterator[Block]:
        import numpy as np

        groups = self._groups(runs)
        if not groups:
            return
        starts = np.concatenate(([0], np.cumsum([st["rows"] for st in self._stats])))
        if groups == list(range(len(self._stats))):
            def whole() -> Iterator[Block]:
                offset = 0
                for batch in self._file.iter_batches(batch_size=block_rows, columns=list(columns)):
                    yield offset, {c: self._column(c, batch.column(c)) for c in columns}
                    offset += batch.num_rows

            yield from prefetched(whole())
            return
        for g in groups:
            offset = int(starts[g])
            for batch in self._file.iter_batches(batch_size=block_rows, row_groups=[g], columns=list(columns)):
                yield offset, {c: self._column(c, batch.column(c)) for c in columns}
                offset += batch.num_rows

    def frame(self, columns: Sequence[str] | None = None,
              runs: Iterable[int] | None = None) -> pd.DataFrame:
        import pyarrow as pa
        import pyarrow.compute as pc

        cols = list(columns) if columns is not None else self.columns
        read = cols if runs is None or "run" in cols else [*cols, "run"]
        groups = self._groups(runs)
        if runs is None:
            table = self._file.read(columns=read)
        elif groups:
            table = self._file.read_row_groups(groups, columns=read)
            wanted = pa.array(sorted({int(r) for r in runs}), type=table.schema.field("run").type)
            table = table.filter(pc.is_in(table.column("run"), value_set=wanted))
        else:
            table = self._file.schema_arrow.empty_table().select(read)
        if "run" not in cols:
            table = table.drop_columns(["run"])
        empty = [c for c in NULLABLE if c in table.column_names and table.column(c).null_count == table.num_rows]
        frame = table.drop_columns(empty).to_pandas(split_blocks=True)
        for c in CATEGORICAL:  # the categories as the blocks number them (all of them, once read)
            if c in frame and self._cats[c]:
                known = self._cats[c] + [v for v in frame[c].cat.categories if v not in self._index[c]]
                frame[c] = frame[c].cat.set_categories(known)
        return frame


class Spill:
    """An execution table written piece by piece to a temporary Parquet file (the libpva
    adapter's, for a profile of more rows than :func:`out_of_core_rows`), read back as a
    :class:`ParquetRows` that removes the file once open."""

    def __init__(self) -> None:
        import tempfile

        fd, self.path = tempfile.mkstemp(prefix="popviz-execution-", suffix=".parquet")
        import os

        os.close(fd)
        self._writer = None
        self._schema = None
        self.rows = 0

    def write(self, frame: pd.DataFrame) -> None:
        """Append one piece (the model's execution columns; categoricals of any categories)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False, nthreads=1)
        if self._schema is None:
            fields = [pa.field(f.name, pa.dictionary(pa.int32(), pa.string()))
                      if pa.types.is_dictionary(f.type) else f for f in table.schema]
            self._schema = pa.schema(fields)
            self._writer = pq.ParquetWriter(self.path, self._schema, compression="zstd")
        self._writer.write_table(table.cast(self._schema))
        self.rows += len(frame)

    def close(self, hide: Sequence[str] = ()) -> ParquetRows:
        if self._writer is not None:
            self._writer.close()
        return ParquetRows(self.path, hide=hide, unlink=True)

    def discard(self) -> None:
        import contextlib
        import os

        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def rows_filler(rows: RowSource, metadata: dict[bytes, bytes]) -> Any:
    """A writer of a table held out of core (``fill(fh)``), batch by batch, never whole;
    ``metadata`` replaces its schema's (the bundle's write identity)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(rows, ParquetRows):
        raise TypeError("write_rows copies a ParquetRows store")
    schema = rows._file.schema_arrow
    hidden = [c for c in schema.names if c not in rows.columns]
    schema = pa.schema([f for f in schema if f.name not in hidden], metadata={**(schema.metadata or {}), **metadata})

    def fill(fh: Any) -> None:
        with pq.ParquetWriter(pa.PythonFile(fh, mode="w"), schema, compression="zstd") as writer:
            for batch in rows._file.iter_batches(batch_size=BLOCK_ROWS, columns=rows.columns):
                writer.write_table(pa.Table.from_batches([batch]).cast(schema))

    return fill


def write_rows(rows: RowSource, path: Any, metadata: dict[bytes, bytes]) -> None:
    """Write a table held out of core to ``path`` (atomically) batch by batch, never whole."""
    from popviz.atomic import write_file

    write_file(path, rows_filler(rows, metadata), replace=True)
