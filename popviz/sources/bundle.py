"""popviz's portable bundle: one Report as a directory of JSON metadata and Parquet tables.

The format is documented field by field in ``docs/format.md``. Reading a bundle runs no code:
JSON is parsed with :func:`json.loads`, tables with :func:`pyarrow.parquet.read_table`, and
every value is checked against the model before a Report is built.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from popviz._version import __version__
from popviz.errors import CorruptReportError, PopvizError, shown
from popviz.fileio import RUN_ID_ENV, StagedFiles, new_id, read_versioned_json
from popviz.model import (
    ExecutionTable,
    HostIO,
    LayerTable,
    MemoryTable,
    ModelConfig,
    ModelError,
    Provenance,
    Report,
    Target,
)
from popviz.model.measured import BlockTable, StreamCopyTable
from popviz.paths import is_safe_component, regular_file_inside

FORMAT_NAME = "popviz-bundle"
FORMAT_VERSION = 2
"""2 added ``layers``; version 1 bundles are read unchanged. ``liveness`` (optional) was added
within version 2: bundles without it read as before."""
METADATA_FILE = "popviz-report.json"
MEMORY_FILE = "memory.parquet"
STEPS_FILE = "execution.parquet"
RUNS_FILE = "runs.parquet"
STREAMS_FILE = "streams.parquet"
BLOCKS_FILE = "blocks.parquet"
LIVENESS_FILE = "liveness.parquet"
TABLE_FILES = (MEMORY_FILE, STEPS_FILE, RUNS_FILE, STREAMS_FILE, BLOCKS_FILE, LIVENESS_FILE)
OPTIONAL_TABLES = (("streams", STREAMS_FILE), ("blocks", BLOCKS_FILE))
"""Tables added within format 2 (``Report.streams``, ``Report.blocks``): a bundle without them
reads as before (stream copies then derived by program name)."""


from popviz.sources.parquet_rows import OUT_OF_CORE_ROWS, out_of_core_rows  # noqa: E402,F401

ROW_GROUP_ROWS = 2**20
"""Rows per Parquet row group written (pyarrow's default): the unit a table out of core is read
and skipped in."""

BUNDLE_ID_KEY = b"popviz.bundle_id"
"""Key of the Parquet schema metadata naming the write of the bundle a table belongs to."""


def is_bundle(directory: str | Path) -> bool:
    return (Path(directory) / METADATA_FILE).is_file()


def _parquet_bytes(frame, bundle_id: str) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # One thread: bundles are small, and a thread pool cannot start while the interpreter exits
    # (the emulator and capture hooks update their reports from atexit handlers).
    table = pa.Table.from_pandas(frame, preserve_index=False, nthreads=1)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), BUNDLE_ID_KEY: bundle_id.encode()})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", row_group_size=ROW_GROUP_ROWS)
    return sink.getvalue().to_pybytes()


def _empty_dir(path: Path) -> bool:
    try:
        return path.is_dir() and not path.is_symlink() and not any(path.iterdir())
    except OSError:
        return False


def write_bundle(report: Report, directory: str | Path, *, overwrite: bool = False,
                 run_id: str | None = None) -> Path:
    """Write ``report`` as a bundle in ``directory`` (created if needed) and return it.

    A new (or empty) directory is built beside it and renamed into place when complete, so a
    failure leaves nothing under its name and of two writers exactly one wins. Into a directory
    holding other files (the capture hooks' ``popviz-model.json``) only popviz's own files are
    written, each atomically, the metadata last; every table carries the identity of this write
    (``bundle_id``) and a table of another popviz write is refused when read, never mixed in (a
    table without one, written by other tools, is read). An
    existing bundle there is replaced only with ``overwrite=True``. ``run_id`` (default: the
    capture's ``POPVIZ_RUN_ID``) names the run, so bundles of two runs are never read as one.
    """
    from popviz.fileio import publish_dir, temp_dir, write_error

    directory = Path(directory)
    run_id = run_id or os.environ.get(RUN_ID_ENV) or None
    if (not directory.exists() and not directory.is_symlink()) or _empty_dir(directory):
        try:
            directory.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_dir(directory)
        except OSError as exc:
            raise write_error(directory, exc) from None
        try:
            write_files(report, tmp, run_id=run_id)
            try:
                publish_dir(tmp, directory, replace=False)
                return directory
            except PopvizError:
                if not overwrite:
                    raise  # another writer made it meanwhile: theirs stays
        finally:
            from popviz.fileio import remove_tree

            remove_tree(tmp)
    meta_path = directory / METADATA_FILE
    if (meta_path.exists() or meta_path.is_symlink()) and not overwrite:
        raise PopvizError(f"{shown(meta_path)} already exists; choose another directory "
                          "(popviz does not overwrite reports)")
    write_files(report, directory, run_id=run_id)
    return directory


def write_files(report: Report, directory: Path, *, run_id: str | None = None) -> None:
    """Write the bundle's files into the existing ``directory``: the tables, tagged with a new
    ``bundle_id``, and the metadata naming them, each written whole under a temporary name before
    any is renamed into place, the metadata last (a reader never sees metadata pointing at tables
    not yet written; a write that fails, a full disk, leaves the directory as it was); then stale
    tables of an earlier write removed. WriteError (one line: the path and the cause) when a file
    cannot be written."""
    bundle_id = new_id()
    meta: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "written_by": f"popviz {__version__}",
        "written_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "bundle_id": bundle_id,
        "run_id": run_id,
        "name": report.name,
        "provenance": report.provenance.to_dict(),
        "target": report.target.to_dict() if report.target else None,
        "config": report.config.to_dict() if report.config is not None else None,
        "host_io": report.host_io.to_dict() if report.host_io is not None else None,
        "memory": None,
        "execution": None,
        "layers": report.layers.to_dict() if report.layers is not None else None,
    }
    written = set()
    with StagedFiles() as files:  # all written before any is renamed into place: a failure changes nothing
        if report.memory is not None:
            files.stage(directory / MEMORY_FILE, _parquet_bytes(report.memory.frame, bundle_id))
            meta["memory"] = {"level": report.memory.level, "file": MEMORY_FILE,
                              "rows": len(report.memory.frame)}
            written.add(MEMORY_FILE)
        if report.execution is not None and report.execution.on_disk:  # copied row group by row group
            from popviz.sources.parquet_rows import rows_filler

            files.stage(directory / STEPS_FILE, rows_filler(report.execution.rows, {BUNDLE_ID_KEY: bundle_id.encode()}))
            files.stage(directory / RUNS_FILE, _parquet_bytes(report.execution.runs, bundle_id))
            meta["execution"] = {"steps_file": STEPS_FILE, "runs_file": RUNS_FILE,
                                 "rows": report.execution.num_rows}
            written |= {STEPS_FILE, RUNS_FILE}
        elif report.execution is not None:
            files.stage(directory / STEPS_FILE, _parquet_bytes(report.execution.steps, bundle_id))
            files.stage(directory / RUNS_FILE, _parquet_bytes(report.execution.runs, bundle_id))
            meta["execution"] = {"steps_file": STEPS_FILE, "runs_file": RUNS_FILE,
                                 "rows": len(report.execution.steps)}
            written |= {STEPS_FILE, RUNS_FILE}
        for key, file_name in OPTIONAL_TABLES:
            table = getattr(report, key)
            if table is not None:
                files.stage(directory / file_name, _parquet_bytes(table.frame, bundle_id))
                meta[key] = {"file": file_name, "rows": len(table.frame)}
                written.add(file_name)
        if report.liveness is not None:
            from popviz.sources.bundle_liveness import liveness_frame, liveness_meta

            files.stage(directory / LIVENESS_FILE, _parquet_bytes(liveness_frame(report.liveness), bundle_id))
            meta["liveness"] = liveness_meta(report.liveness, LIVENESS_FILE)
            written.add(LIVENESS_FILE)
        # the metadata names the tables: renamed into place last (a reader never sees it before them)
        files.stage(directory / METADATA_FILE, (json.dumps(meta, indent=1, allow_nan=False) + "\n").encode())
    for stale in set(TABLE_FILES) - written:  # tables of a previous version of this bundle
        with contextlib.suppress(OSError):
            (directory / stale).unlink(missing_ok=True)


def run_id_of(directory: str | Path) -> str | None:
    """The ``run_id`` a bundle's metadata names (None: none, or not a readable bundle)."""
    from popviz.fileio import read_regular_text

    try:
        doc = json.loads(read_regular_text(Path(directory) / METADATA_FILE))
    except (PopvizError, ValueError, RecursionError):
        return None
    value = doc.get("run_id") if isinstance(doc, dict) else None
    return value if isinstance(value, str) and value else None


# --------------------------------------------------------------------------------- reading

def _arrow_owned_bytes(fh: Any, pa: Any) -> Any:
    """The whole of ``fh`` in a buffer Arrow allocated. Parquet decodes on Arrow's thread pool;
    given a Python file object, its tasks hold Python buffers, and a task released after the
    interpreter began shutting down takes the GIL from a dying thread: the process aborts with
    "terminate called without an active exception" (exit 134) after its work is done, which a
    CI step reads as a failure. An Arrow-owned buffer keeps Python out of those tasks."""
    size = os.fstat(fh.fileno()).st_size
    buf = pa.allocate_buffer(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = fh.readinto(view[got:])
        if not n:
            break
        got += n
    view.release()
    if got != size or fh.read(1):
        raise OSError(f"the file changed size while it was read ({got:,} of {size:,} bytes)")
    return buf


class _Reader:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.meta_path = directory / METADATA_FILE
        self.bundle_id: str | None = None
        """The write the metadata belongs to (bundles from before popviz 0.1 have none)."""

    def fail(self, what: str, path: Path | None = None) -> CorruptReportError:
        return CorruptReportError(f"{shown(path or self.meta_path)}: {what}; the bundle is damaged "
                                  "or incomplete: write it again (popviz export / capture)")

    def load_meta(self) -> dict[str, Any]:
        return read_versioned_json(self.meta_path, format_name=FORMAT_NAME, format_version=FORMAT_VERSION,
                                   kind="bundle", fail=self.fail)

    def section(self, meta: dict[str, Any], key: str, kind: type) -> Any:
        value = meta.get(key)
        if value is not None and not isinstance(value, kind):
            raise self.fail(f"field {key!r} must be a JSON {'object' if kind is dict else 'value'}")
        return value

    @contextlib.contextmanager
    def naming(self, file_name: Any) -> Iterator[None]:
        """A table's values refused by the model: named with the Parquet file they came from
        (a table already read, so ``file_name`` is a valid name)."""
        try:
            yield
        except (ModelError, TypeError, ValueError, OverflowError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise self.fail(f"does not match the bundle format ({first[:200]})",
                            path=self.directory / str(file_name)) from None

    def table_path(self, file_name: Any, what: str) -> Path:
        """The path of a table file the metadata names: a safe name, present, a regular file
        inside the bundle (else a one-line error naming it)."""
        if not is_safe_component(file_name):
            raise self.fail(f"names an invalid {what} file {file_name!r}")
        path = self.directory / file_name
        if not path.exists() and not path.is_symlink():
            raise self.fail(f"refers to {file_name}, which is missing", path=path)
        regular_file_inside(path, self.directory)
        return path

    def check_written(self, metadata: Any, path: Path) -> None:
        """Refuse a table written by another write of the bundle than its metadata."""
        written = (metadata or {}).get(BUNDLE_ID_KEY)
        if self.bundle_id is not None and written is not None and written != self.bundle_id.encode():
            raise self.fail("belongs to another write of this bundle than its metadata (a write that was "
                            "interrupted, or two at once)", path=path)

    def table(self, file_name: Any, rows: Any, what: str, optional: tuple[str, ...] = ()):
        """The table in ``file_name`` as a DataFrame. ``optional`` columns that hold no value at
        all are left out (the model fills them with nulls far faster than pandas converts them)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.table_path(file_name, what)
        try:
            # ParquetFile rather than read_table: read_table imports pyarrow.dataset (~0.5 s).
            # One block per column: no consolidation copy (10⁷ rows: 5× less CPU, ~20% less
            # peak memory); the model keeps the columns as they are when their dtypes match.
            with open(path, "rb") as fh:  # a file object: any path, also one that is not UTF-8
                raw = _arrow_owned_bytes(fh, pa)
            table = pq.ParquetFile(pa.BufferReader(raw)).read()
            del raw
            metadata = table.schema.metadata
            empty = [c for c in optional if c in table.column_names
                     and table.column(c).null_count == table.num_rows]
            frame = table.drop_columns(empty).to_pandas(split_blocks=True)
            del table
        except (pa.ArrowException, OSError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise self.fail(f"is not a readable Parquet file ({first})", path=path) from None
        self.check_written(metadata, path)
        if isinstance(rows, int) and len(frame) != rows:
            raise self.fail(f"has {len(frame)} rows, the metadata says {rows}", path=path)
        return frame

    def liveness(self, live_meta: dict[str, Any]):  # -> LivenessTable | None
        """The liveness table read batch by batch into its arrays (None: read it as a frame)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from popviz.sources.bundle_liveness import read_liveness_file

        file_name, rows = live_meta.get("file"), live_meta.get("rows")
        path = self.table_path(file_name, "liveness")
        try:
            name = os.fspath(path)
            name.encode("utf-8")
        except UnicodeError:
            return None  # a path Arrow cannot open itself: the frame reader reads it
        try:
            pf = pq.ParquetFile(name)
            self.check_written(pf.schema_arrow.metadata, path)
            if isinstance(rows, int) and pf.metadata.num_rows != rows:
                raise self.fail(f"has {pf.metadata.num_rows} rows, the metadata says {rows}", path=path)
            with self.naming(file_name):
                return read_liveness_file(pf, live_meta)
        except (pa.ArrowException, OSError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise self.fail(f"is not a readable Parquet file ({first})", path=path) from None

    def out_of_core(self, exe_meta: dict[str, Any]) -> ExecutionTable:
        """The execution table left in its Parquet file: its footer and schema checked here,
        its values by the one pass over the rows (``check_report``)."""
        import pyarrow as pa
        import pyarrow.types as pat

        from popviz.model.tables import EXECUTION_COLUMNS
        from popviz.sources.parquet_rows import ParquetRows

        file_name, rows = exe_meta.get("steps_file"), exe_meta.get("rows")
        path = self.table_path(file_name, "execution")
        try:
            os.fspath(path).encode("utf-8")
        except UnicodeError:  # a path Arrow cannot open itself: read into memory
            steps = self.table(file_name, rows, "execution", optional=("start_cycle",))
            runs = self.table(exe_meta.get("runs_file"), None, "runs")
            with self.naming(file_name):
                return ExecutionTable(steps, runs)
        try:
            source = ParquetRows(os.fspath(path))
            schema = source._file.schema_arrow
        except (pa.ArrowException, OSError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise self.fail(f"is not a readable Parquet file ({first})", path=path) from None
        self.check_written(schema.metadata, path)
        if source.num_rows != rows:
            raise self.fail(f"has {source.num_rows} rows, the metadata says {rows}", path=path)
        for name, dtype in EXECUTION_COLUMNS.items():
            if name not in schema.names:
                if name == "start_cycle":
                    continue
                raise self.fail(f"does not match the bundle format (execution steps table lacks column {name})",
                                path=path)
            t = schema.field(name).type
            ok = ((pat.is_dictionary(t) and pat.is_string(t.value_type)) or pat.is_string(t)
                  or pat.is_large_string(t)) if dtype == "category" else pat.is_integer(t)
            if not ok:
                raise self.fail(f"does not match the bundle format (execution steps table column {name} "
                                f"is {t}, not {dtype})", path=path)
        extra = [n for n in schema.names if n not in EXECUTION_COLUMNS]
        if extra:
            raise self.fail(f"does not match the bundle format (execution steps table has unknown column(s) "
                            f"{', '.join(extra)})", path=path)
        runs = self.table(exe_meta.get("runs_file"), None, "runs")
        with self.naming(file_name):
            return ExecutionTable(runs=runs, rows=source)

    def _read_liveness(self, live_meta: dict[str, Any] | None):  # -> LivenessTable | None
        if live_meta is None:
            return None
        from popviz.sources.bundle_liveness import read_liveness

        liveness = self.liveness(live_meta)
        if liveness is None:
            frame = self.table(live_meta.get("file"), live_meta.get("rows"), "liveness")
            with self.naming(live_meta.get("file")):
                liveness = read_liveness(frame, live_meta)
        return liveness

    def read(self) -> Report:
        self._pass_started = None
        try:
            return self._read()
        except BaseException:  # a bad table, Ctrl-C: a pass begun on its thread ends first
            if self._pass_started is not None:
                from popviz.model.aggregate import stop_cycle_totals

                stop_cycle_totals(self._pass_started)
            raise

    def _read(self) -> Report:
        meta = self.load_meta()
        bundle_id = meta.get("bundle_id")
        self.bundle_id = bundle_id if isinstance(bundle_id, str) and bundle_id else None
        try:
            name = meta.get("name")
            if name is None or name == "":
                raise self.fail("has no engine \"name\"")
            if not isinstance(name, str):
                raise self.fail(f"has an engine \"name\" that is not a string ({type(name).__name__}); "
                                "write the engine's name as a string")
            prov = self.section(meta, "provenance", dict)
            if prov is None:
                raise self.fail("has no \"provenance\"")
            target = self.section(meta, "target", dict)
            config = self.section(meta, "config", dict)
            host_io = self.section(meta, "host_io", dict)
            mem_meta = self.section(meta, "memory", dict)
            exe_meta = self.section(meta, "execution", dict)
            layers = self.section(meta, "layers", dict)
            memory = None
            if mem_meta is not None:
                frame = self.table(mem_meta.get("file"), mem_meta.get("rows"), "memory")
                with self.naming(mem_meta.get("file")):
                    memory = MemoryTable(frame, level=mem_meta.get("level", "tile"))
            execution = None
            if exe_meta is not None and isinstance(exe_meta.get("rows"), int) \
                    and exe_meta["rows"] > out_of_core_rows():
                execution = self.out_of_core(exe_meta)
            elif exe_meta is not None:
                steps = self.table(exe_meta.get("steps_file"), exe_meta.get("rows"), "execution",
                                   optional=("start_cycle",))
                runs = self.table(exe_meta.get("runs_file"), None, "runs")
                with self.naming(exe_meta.get("steps_file")):
                    execution = ExecutionTable(steps, runs)
            extra = {}
            for key, kind in (("streams", StreamCopyTable), ("blocks", BlockTable)):
                section = self.section(meta, key, dict)
                if section is not None:
                    frame = self.table(section.get("file"), section.get("rows"), key)
                    with self.naming(section.get("file")):
                        extra[key] = kind(frame)
            liveness = None
            live_meta = self.section(meta, "liveness", dict)
            if live_meta is not None and execution is not None and execution.on_disk:
                # the rows' one pass (the boundary check load runs next) reduces them while the
                # liveness table is read: on two cores a POD64's 10^8 rows and 10^6 steps take
                # about the time of the longer of the two instead of their sum
                from popviz.model.aggregate import start_cycle_totals

                start_cycle_totals(execution, n_ipus=(Target(**target).ipus_per_replica if target is not None
                                                      else None) or 0)  # as the boundary check asks
                self._pass_started = execution
            liveness = self._read_liveness(live_meta)
            return Report(
                **extra,
                name=name,
                provenance=Provenance(**prov),
                target=Target(**target) if target is not None else None,
                memory=memory,
                execution=execution,
                config=ModelConfig(**config) if config is not None else None,
                host_io=HostIO(**host_io) if host_io is not None else None,
                path=str(self.directory),
                layers=LayerTable(**layers) if layers is not None else None,
                liveness=liveness,
            )
        except (ModelError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise self.fail(f"does not match the bundle format ({first[:200]})") from None


def read_bundle(directory: str | Path) -> Report:
    """Read the bundle in ``directory`` (or whose ``popviz-report.json`` is ``directory``)."""
    path = Path(directory)
    if path.name == METADATA_FILE:
        path = path.parent
    return _Reader(path).read()
