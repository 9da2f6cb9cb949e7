"""The history of a project's runs: an embedded SQLite database (stdlib ``sqlite3``, no server)
that ``popviz history add`` appends a run's metrics to, ``popviz history show`` reads trends from,
and ``popviz compare --against-history`` takes the median of the last runs from.

The file is safe for concurrent writers (CI jobs appending at once): it is in WAL mode, every
write is one ``BEGIN IMMEDIATE`` transaction, and a writer waits up to
:data:`BUSY_TIMEOUT_SECONDS` for another to finish. The schema is versioned with SQLite's
``user_version``; a newer file is refused with a message saying to upgrade popviz, never altered.
Schema and guarantees: docs/ci-history.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from popviz.ci.baseline import SQLITE_MAGIC, EngineMetrics
from popviz.errors import CorruptReportError, UnsupportedFormatError, UsageError, brief, shown

FORMAT = "popviz-history"
SCHEMA_VERSION = 1
"""Stored in ``PRAGMA user_version``; bumped (with a migration) when the tables change."""
BUSY_TIMEOUT_SECONDS = 60.0
"""How long a writer waits for another one before giving up."""
DEFAULT_LAST = 5
"""``compare --against-history``: the median of this many most recent runs."""
T = TypeVar("T")

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    label TEXT,
    added_at TEXT NOT NULL,
    source TEXT NOT NULL,
    written_by TEXT NOT NULL
);
CREATE TABLE engines (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    engine TEXT NOT NULL,
    name TEXT NOT NULL,
    instance TEXT,
    source TEXT NOT NULL,
    estimated INTEGER NOT NULL,
    config TEXT NOT NULL,
    PRIMARY KEY (run_id, engine)
);
CREATE TABLE metrics (
    run_id INTEGER NOT NULL,
    engine TEXT NOT NULL,
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (run_id, engine, metric),
    FOREIGN KEY (run_id, engine) REFERENCES engines(run_id, engine) ON DELETE CASCADE
);
CREATE INDEX metrics_by_name ON metrics (engine, metric, run_id);
"""


@dataclass(frozen=True)
class Run:
    id: int
    label: str | None
    added_at: str

    @property
    def title(self) -> str:
        """``#3 (abc123)``, or ``#3``."""
        return f"#{self.id}" + (f" ({self.label})" if self.label else "")


# ------------------------------------------------------------------------------------- opening

def _fail(path: Path, what: str) -> CorruptReportError:
    return CorruptReportError(f"{shown(path)} {what}; pass a history file written by popviz history add "
                              "(or a new file name to start one)")


def _retry_locked(fn: Callable[[], T], path: Path) -> T:
    """Run ``fn`` again while SQLite says the database is locked (setting WAL mode takes an
    exclusive lock that the busy handler does not always wait for)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise UsageError(f"{shown(path)} stayed locked by another process for "
                                 f"{BUSY_TIMEOUT_SECONDS:.0f} s; try again") from None
            time.sleep(0.05)


@contextmanager
def open_db(path: str | os.PathLike[str], *, create: bool = False,
            at_rest: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection to the history in ``path`` (created when ``create`` and absent), checked to be
    a popviz history of a schema this popviz reads. One-line errors for anything else.

    Without ``create`` the file is opened read-only (a history on a read-only file or in a
    read-only directory, e.g. a downloaded CI artifact, can be read). With it, an existing file
    is first checked read-only and only then opened for writing and put in WAL mode: a file
    popviz refuses is never modified. ``at_rest``: the file has no connection (see
    :func:`_at_rest`), so it is read as immutable and nothing is created beside it."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{shown(p)} is a directory; --db takes a file (e.g. perf/history.db)")
    if not p.exists():
        if p.is_symlink():
            raise UsageError(f"{shown(p)} is a dangling symbolic link; --db takes a file")
        if not create:
            raise UsageError(f"{shown(p)} does not exist; start a history with popviz history add REPORT "
                             f"--db {shown(p)}")
        if not p.parent.is_dir():
            from popviz.fileio import missing_directory

            raise UsageError(f"{missing_directory(p.parent)}; create it first")
    else:
        try:
            head = _head(p)
        except CorruptReportError as exc:
            raise UsageError(exc.message) from None
        if head and head != SQLITE_MAGIC:
            raise _fail(p, "is not a SQLite database")
        if not create or head:
            with _connect(p, readonly=True, immutable=at_rest) as ro:
                _check_schema(ro, p, create=False, empty_ok=create)
                if not create:
                    yield ro
                    return
    with _connect(p, readonly=False) as con:
        mode = _retry_locked(lambda: con.execute("PRAGMA journal_mode = WAL").fetchone()[0], p)
        if str(mode).lower() != "wal":
            raise UsageError(f"{shown(p)}: SQLite could not switch it to WAL mode (got {mode!r}); "
                             "put the history on a local file system")
        con.execute("PRAGMA foreign_keys = ON")
        _check_schema(con, p, create=True)
        yield con


def _head(p: Path) -> bytes:
    """The first bytes of ``p``, which must be a regular file (a FIFO is never waited on)."""
    from popviz.fileio import check_regular

    check_regular(p)
    try:
        with open(p, "rb") as fh:
            return fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise UsageError(f"{shown(p)}: cannot be read ({exc.strerror})") from None


@contextmanager
def _connect(p: Path, *, readonly: bool, immutable: bool = False) -> Iterator[sqlite3.Connection]:
    """A connection (read-only: ``mode=ro``, and ``immutable=1`` when asked or when the file or
    its directory cannot be written, so SQLite needs no lock and no -wal or -shm file beside it);
    one-line errors."""
    import urllib.parse

    def connect(params: str) -> sqlite3.Connection:
        uri = f"file:{urllib.parse.quote(str(p.resolve()))}?{params}"
        return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)

    try:
        if readonly:
            writable = os.access(p, os.W_OK) and os.access(p.resolve().parent, os.W_OK | os.X_OK)
            con = connect("mode=ro" if writable and not immutable else "mode=ro&immutable=1")
        else:
            con = connect("mode=rwc")
    except sqlite3.Error as exc:
        raise UsageError(f"{shown(p)}: cannot be opened ({exc})") from None
    try:
        con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        yield con
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            raise UsageError(f"{shown(p)} stayed locked by another process; try again") from None
        if isinstance(exc, sqlite3.OperationalError) and "readonly" in str(exc).replace("-", ""):
            raise UsageError(f"{shown(p)} is read-only; popviz history add needs to write it") from None
        raise _fail(p, f"cannot be read as a database ({exc})") from None
    finally:
        con.close()


@contextmanager
def _transaction(con: sqlite3.Connection, path: Path, *, write: bool) -> Iterator[None]:
    _retry_locked(lambda: con.execute("BEGIN IMMEDIATE" if write else "BEGIN"), path)
    try:
        yield
    except BaseException:
        con.execute("ROLLBACK")
        raise
    _retry_locked(lambda: con.execute("COMMIT"), path)


def _check_schema(con: sqlite3.Connection, path: Path, create: bool, *, empty_ok: bool = False) -> None:
    """Refuse what is not a popviz history of a schema this popviz reads; with ``create``, give
    an empty database the schema (``empty_ok``: an empty database is fine, checked read-only)."""
    with _transaction(con, path, write=create):
        version = con.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            from popviz._version import __version__

            raise UnsupportedFormatError(
                f"{shown(path)} is a popviz history of schema {version}; this popviz {__version__} reads "
                f"schema {SCHEMA_VERSION} and older: upgrade popviz (pip install -U popviz)")
        if version == 0:
            tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            if tables:
                raise _fail(path, f"is a SQLite database but not a popviz history (it has table(s) "
                                  f"{', '.join(sorted(tables)[:5])})")
            if empty_ok:
                return
            if not create:
                raise UsageError(f"{shown(path)} holds no runs yet; add one with popviz history add REPORT "
                                 f"--db {shown(path)}")
            from popviz._version import __version__

            # One statement at a time: executescript() would commit the transaction first.
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    con.execute(statement)
            con.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                            [("format", FORMAT), ("created_by", f"popviz {__version__}")])
            con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return
        row = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone() \
            if _has_table(con, "meta") else None
        if row is None or row[0] != FORMAT:
            raise _fail(path, "is a SQLite database but not a popviz history (no format marker)")
        # popviz creates no trigger and no view: one planted in a downloaded history would run
        # (a trigger on every history add) or stand in for a table; checked before any write
        planted = [f"{kind} {name!r}" for kind, name in con.execute(
            "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view') ORDER BY name")]
        if planted:
            raise _fail(path, f"has {', '.join(planted[:3])}, which popviz never creates")


def _has_table(con: sqlite3.Connection, name: str) -> bool:
    return con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() \
        is not None


# -------------------------------------------------------------------------------------- writing

def add(path: str | os.PathLike[str], engines: Sequence[EngineMetrics], *, label: str | None = None,
        source: str = "") -> Run:
    """Append one run (its engines' metrics and configurations) to the history; returns it."""
    from popviz._version import __version__

    if not engines:
        raise UsageError(f"{source or 'the run'} has no engine to add")
    if label is not None and (not label or len(label) > 1000):
        raise UsageError("--label must be 1 to 1000 characters (e.g. the commit: git rev-parse --short HEAD)")
    if label is not None and not _is_text(label):
        raise UsageError("--label is not valid text (bytes that are not UTF-8); pass a commit id or a name")
    source = source.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    p = Path(path)
    added_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    with open_db(p, create=True) as con, _transaction(con, p, write=True):
        check_contents(con, p)  # a file show and compare would refuse is not appended to
        cur = con.execute("INSERT INTO runs (label, added_at, source, written_by) VALUES (?, ?, ?, ?)",
                          (label, added_at, source, f"popviz {__version__}"))
        run_id = int(cur.lastrowid)
        for e in engines:
            con.execute("INSERT INTO engines (run_id, engine, name, instance, source, estimated, config) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (run_id, e.label, e.name, e.instance, e.source, int(e.estimated),
                         json.dumps(e.config, sort_keys=True, default=str)))
            con.executemany("INSERT INTO metrics (run_id, engine, metric, value) VALUES (?, ?, ?, ?)",
                            [(run_id, e.label, k, float(v)) for k, v in sorted(e.metrics.items())])
    return Run(run_id, label, added_at)


def check_contents(con: sqlite3.Connection, p: Path) -> None:
    """Every run, engine and metric already in the history, checked as :func:`read` checks them:
    one line naming the first that cannot be true (``history add`` refuses such a file before it
    writes anything)."""
    for run_id, label, added_at in con.execute("SELECT id, label, added_at FROM runs ORDER BY id"):
        _run(p, run_id, label, added_at)
    _read_engines(con, p, 1)


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -------------------------------------------------------------------------------------- reading

@dataclass
class History:
    """Everything ``history show`` and ``compare --against-history`` read: runs in the order they
    were added, and per (engine, metric) the values by run id."""

    path: Path
    runs: list[Run]
    engines: dict[tuple[int, str], EngineMetrics]
    """(run id, engine label) -> that engine's metrics in that run."""

    def unknown_metrics(self) -> list[str]:
        """``engine metric`` for every well-formed metric name this popviz does not define (a
        newer popviz's), once each: left out of the trends, named beside them."""
        return list(dict.fromkeys(f"{engine} {m}" for (_run_id, engine), e in sorted(self.engines.items())
                                  for m in e.unknown_metrics))

    def estimated(self) -> list[tuple[str, int, int]]:
        """``(engine, runs estimated, runs)`` for every engine some run of which the emulator
        estimated (its figures come from the cost model, not from a profile)."""
        counts: dict[str, list[int]] = {}
        for (_run_id, engine), e in sorted(self.engines.items()):
            c = counts.setdefault(engine, [0, 0])
            c[0] += int(e.estimated)
            c[1] += 1
        return [(engine, est, total) for engine, (est, total) in counts.items() if est]

    def series(self) -> dict[tuple[str, str], list[tuple[Run, float]]]:
        """(engine, metric) -> [(run, value)] in run order."""
        out: dict[tuple[str, str], list[tuple[Run, float]]] = {}
        by_id = {r.id: r for r in self.runs}
        for (run_id, engine), e in sorted(self.engines.items()):
            for metric, value in e.metrics.items():
                out.setdefault((engine, metric), []).append((by_id[run_id], value))
        return out


def read(path: str | os.PathLike[str], *, last: int | None = None) -> History:
    """The history in ``path`` (its ``last`` most recent runs when given).

    A file no connection has open is read as immutable: a read-only SQLite connection to a WAL
    file would leave -wal and -shm files beside it. Should a writer change the file meanwhile
    (its checkpoint writes the main file), it is read again the ordinary way."""
    p = Path(path)
    stamp = _at_rest(p)
    if stamp is None:
        return _read(p, last, at_rest=False)
    try:
        h = _read(p, last, at_rest=True)
    except (CorruptReportError, UsageError):
        if _at_rest(p) == stamp:
            raise
        return _read(p, last, at_rest=False)
    return h if _at_rest(p) == stamp else _read(p, last, at_rest=False)


def _at_rest(p: Path) -> tuple[int, int, int] | None:
    """The file's (inode, size, modification time) when no connection has it open — no -wal,
    -shm or -journal beside it: SQLite removes them when the last writer closes, and the file
    then holds every committed run — else None."""
    if any(os.path.lexists(f"{p}{suffix}") for suffix in ("-wal", "-shm", "-journal")):
        return None
    try:
        st = p.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _read(p: Path, last: int | None, *, at_rest: bool) -> History:
    with open_db(p, at_rest=at_rest) as con, _transaction(con, p, write=False):
        query = "SELECT id, label, added_at FROM runs ORDER BY id"
        rows = con.execute(query).fetchall()
        if last is not None:
            rows = rows[-last:] if last > 0 else []
        runs = [_run(p, i, lab, at) for i, lab, at in rows]
        if not runs:
            raise UsageError(f"{shown(p)} holds no runs yet; add one with popviz history add REPORT --db {shown(p)}")
        first = runs[0].id
        engines = _read_engines(con, p, first)
    return History(p, runs, engines)


def _run(p: Path, run_id: object, label: object, added_at: object) -> Run:
    from popviz.ci import validate as v

    if isinstance(run_id, bool) or not isinstance(run_id, int) or run_id < 1:
        raise _fail(p, f"has a run with an invalid id ({brief(run_id)})")
    fail = lambda what: _fail(p, what)  # noqa: E731
    return Run(run_id, v.name(label, fail, f"label of run #{run_id}", optional=True),
               v.name(added_at, fail, f"time of run #{run_id}") or "")


def _read_engines(con: sqlite3.Connection, p: Path, first: int) -> dict[tuple[int, str], EngineMetrics]:
    """The engines and metrics of the runs from ``first`` on, each field checked like a
    baseline's (popviz.ci.validate): a value that cannot be true is refused with one line."""
    from popviz.ci import validate as v

    fail = lambda what: _fail(p, what)  # noqa: E731
    engines: dict[tuple[int, str], EngineMetrics] = {}
    for run_id, engine, name, instance, source, estimated, config in con.execute(
            "SELECT run_id, engine, name, instance, source, estimated, config FROM engines WHERE run_id >= ? "
            "AND run_id IN (SELECT id FROM runs)", (first,)):  # a run deleted by hand can leave its rows
        label = v.name(engine, fail, f"engine of run #{run_id}")
        where = f"engine {label!r} of run #{run_id}"
        if not isinstance(config, str) or len(config) > 16 * 2**20:
            raise _fail(p, f"has a damaged configuration for {where}")
        try:
            cfg = json.loads(config)
        except (ValueError, RecursionError):
            raise _fail(p, f"has a damaged configuration for {where}") from None
        if estimated not in (0, 1):
            raise _fail(p, f"has an invalid estimated flag for {where} ({brief(estimated)})")
        engines[(int(run_id), label)] = EngineMetrics(
            name=v.name(name, fail, f"name of {where}"), instance=v.name(instance, fail, f"instance of {where}",
                                                                     optional=True),
            source=v.name(source, fail, f"source of {where}"), estimated=bool(estimated),
            config=v.config(cfg, fail, where), metrics={})
    raw: dict[tuple[int, str], dict[str, object]] = {}
    for run_id, engine, metric, value in con.execute(
            "SELECT run_id, engine, metric, value FROM metrics WHERE run_id >= ? ORDER BY run_id, engine, metric",
            (first,)):
        if (run_id, engine) in engines:
            raw.setdefault((run_id, engine), {})[metric] = value
    for (run_id, engine), table in raw.items():
        # the same checks as a baseline's: unknown well-formed names left out and named, values finite
        e = engines[(run_id, engine)]
        e.metrics = v.metrics(table, fail, f"engine {engine!r} of run #{run_id}")
        e.unknown_metrics = tuple(m for m in table if m not in e.metrics)
    return engines


@dataclass
class MedianBase:
    """The base side of ``compare --against-history``: per engine, the median of each metric over
    its most recent runs that share its newest run's configuration (at most ``last`` runs)."""

    path: Path
    engines: list[EngineMetrics]
    runs: dict[str, list[Run]]
    """Engine label -> the runs its medians are over, oldest first."""
    changed_at: dict[str, Run]
    """Engine label -> the run where its configuration last changed, when that is within the
    runs looked at (the runs before it are left out of its median)."""

    def label(self) -> str:
        """What the base is, for the line after the headline (``base_label``): ``the median of the
        last 5 run(s) in perf.db (#8 (1a2b3c4) to #12 (3f2a9c1))``, narrowed to the runs with the
        newest configuration when it changed among them."""
        where = shown(self.path)
        spans = {e: self._span(e) for e in self.runs}
        if len(set(spans.values())) > 1:
            return (f"per engine, the median of its last runs with its newest configuration in {where}: "
                    + ", ".join(f"{e} {spans[e]}" + (f" (configuration changed at {self.changed_at[e].title})"
                                                      if e in self.changed_at else "") for e in self.runs))
        used = next(iter(self.runs.values()))
        same = " with the newest run's configuration" if self.changed_at else ""
        text = (f"run {used[0].title}{same} in {where}" if len(used) == 1 else
                f"the median of the last {len(used)} run(s){same} in {where} ({used[0].title} to {used[-1].title})")
        if len({r.id for r in self.changed_at.values()}) == 1:
            text += f"; the configuration changed at {next(iter(self.changed_at.values())).title}"
        elif self.changed_at:
            text += "; the configuration changed at " + ", ".join(
                f"{r.title} ({e})" for e, r in self.changed_at.items())
        return text

    def _span(self, engine: str) -> str:
        used = self.runs[engine]
        return used[0].title if len(used) == 1 else f"{used[0].title} to {used[-1].title}"


def median_side(path: str | os.PathLike[str], last: int = DEFAULT_LAST, *,
                allow_mixed: bool = False) -> MedianBase:
    """The base side of ``compare --against-history``: per engine, the median of each metric over
    those of the ``last`` most recent runs that have the engine with the configuration of its
    newest run (runs before a configuration change hold another split or batch: their figures
    are not like for like). The configuration is the newest run's."""
    from popviz.ci.compare import config_changes

    if last < 1:
        raise UsageError(f"--last must be at least 1, got {last}")
    h = read(path, last=last)
    by_engine: dict[str, list[tuple[int, EngineMetrics]]] = {}
    for (run_id, engine), e in sorted(h.engines.items()):
        by_engine.setdefault(engine, []).append((run_id, e))
    by_id = {r.id: r for r in h.runs}
    out, used, changed_at = [], {}, {}
    for engine, seen in by_engine.items():
        newest = seen[-1][1]
        keep = len(seen)
        while keep > 1 and not config_changes(engine, seen[keep - 2][1].config, newest.config)[0]:
            keep -= 1
        if keep > 1:  # the run at seen[keep - 1] changed the configuration
            changed_at[engine] = by_id[seen[keep - 1][0]]
        runs = [e for _, e in seen[keep - 1:]]
        used[engine] = [by_id[i] for i, _ in seen[keep - 1:]]
        if not allow_mixed and any(e.estimated != newest.estimated for e in runs):
            raise UsageError(f"{shown(h.path)}: engine {engine} is estimated in some of the last {last} runs and "
                             "measured in others: their numbers are not comparable; pass --allow-mixed to take "
                             "the median anyway, or --last to look at fewer runs")
        names = sorted({m for e in runs for m in e.metrics})
        metrics = {m: _median(m, [e.metrics[m] for e in runs if m in e.metrics]) for m in names}
        unknown = tuple(dict.fromkeys(m for e in runs for m in e.unknown_metrics if m not in metrics))
        out.append(EngineMetrics(name=newest.name, instance=newest.instance, source=newest.source,
                                 estimated=newest.estimated, config=newest.config, metrics=metrics,
                                 unknown_metrics=unknown))
    return MedianBase(h.path, out, used, changed_at)


def _median(name: str, values: list[float]) -> float:
    """The median of a metric's values; of a count, the lower middle value (a run's own count,
    never half a tile)."""
    from popviz.ci.metrics import definition

    if definition(name).unit == "count":
        return float(statistics.median_low(values))
    return float(statistics.median(values))
