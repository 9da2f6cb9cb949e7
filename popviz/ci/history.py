"""The history of a project's runs, that ``popviz history add`` appends a run's metrics to,
``popviz history show`` reads trends from, and ``popviz compare --against-history`` takes the
median of the last runs from.

``--db`` is an embedded SQLite file (:mod:`popviz.ci.history_sqlite`; stdlib, no server) or a
``postgresql://`` URL (:mod:`popviz.ci.history_pg`; a server CI runners share). Both hold one
schema (:mod:`popviz.ci.history_store`), versioned and migrated alike; every write is one
transaction that leaves the history as it was when it fails. Schema and guarantees:
docs/ci-history.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from popviz.ci.baseline import EngineMetrics
from popviz.ci.history_db import Db
from popviz.ci.history_store import FORMAT, SCHEMA_VERSION, display, is_url, reading, writing
from popviz.errors import CorruptReportError, UsageError, brief

__all__ = ["DEFAULT_LAST", "FORMAT", "SCHEMA_VERSION", "History", "MedianBase", "Run", "add", "check_contents",
           "display", "is_url", "median_side", "precheck", "read"]

DEFAULT_LAST = 5
"""``compare --against-history``: the median of this many most recent runs."""


@dataclass(frozen=True)
class Run:
    id: int
    label: str | None
    added_at: str

    @property
    def title(self) -> str:
        """``#3 (abc123)``, or ``#3``."""
        return f"#{self.id}" + (f" ({self.label})" if self.label else "")


# -------------------------------------------------------------------------------------- writing

def add(db: str | os.PathLike[str], engines: Sequence[EngineMetrics], *, label: str | None = None,
        source: str = "") -> Run:
    """Append one run (its engines' metrics, configurations and environments) to the history;
    returns it. All of it or, when anything fails (a full disk, a lost server), none of it."""
    from popviz._version import __version__

    if not engines:
        raise UsageError(f"{source or 'the run'} has no engine to add")
    if label is not None and (not label or len(label) > 1000):
        raise UsageError("--label must be 1 to 1000 characters (e.g. the commit: git rev-parse --short HEAD)")
    if label is not None and not _is_text(label):
        raise UsageError("--label is not valid text (bytes that are not UTF-8); pass a commit id or a name")
    source = source.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    seen: set[str] = set()
    for e in engines:  # the engines' key: a clash would be a UNIQUE error of the database
        if e.label in seen:
            raise UsageError(f"{source or 'the run'} has two engines named {e.label!r}; give them distinct names "
                             "(poptorch.Options().modelName) or instances")
        seen.add(e.label)
    added_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    if not is_url(db):
        from popviz.ci.history_sqlite import check_space

        check_space(Path(db), sum(len(e.metrics) for e in engines),
                    sum(len(json.dumps(e.config, default=str)) + 200 for e in engines) + len(source) + len(label or ""))
    with writing(db) as con:
        check_contents(con)  # a history show and compare would refuse is not appended to
        run_id = int(con.execute("INSERT INTO runs (label, added_at, source, written_by) VALUES (?, ?, ?, ?) "
                                 "RETURNING id", (label, added_at, source, f"popviz {__version__}")).fetchone()[0])
        for e in engines:
            con.execute("INSERT INTO engines (run_id, engine, name, instance, source, estimated, config, environment) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (run_id, e.label, e.name, e.instance, e.source, int(e.estimated),
                         json.dumps(e.config, sort_keys=True, default=str),
                         json.dumps(e.environment or {}, sort_keys=True, default=str)))
            con.executemany("INSERT INTO metrics (run_id, engine, metric, value) VALUES (?, ?, ?, ?)",
                            [(run_id, e.label, k, float(v)) for k, v in sorted(e.metrics.items())])
    return Run(run_id, label, added_at)


def precheck(db: str | os.PathLike[str], label: str | None = None) -> list[str]:
    """Refuse a --db that is not a history (or holds a figure show and compare would refuse), or
    cannot be written, before the (slow) analysis of the run to add; return the titles of the
    runs already labelled ``label``."""
    rest = False
    if not is_url(db):
        from popviz.ci.history_sqlite import _check_path, at_rest, check_writable

        p = Path(db)
        if not _check_path(p, create=True):
            check_writable(p)
            return []
        check_writable(p)
        rest = at_rest(p) is not None  # read as immutable: nothing created beside it (a full disk has no room)
    with reading(db, empty_ok=True, at_rest=rest) as con:
        if not con.version:
            return []
        check_contents(con)
        if not label:
            return []
        return [Run(i, label, "").title for (i,) in con.execute("SELECT id FROM runs WHERE label = ? ORDER BY id",
                                                                (label,))]


def check_contents(con: Db) -> None:
    """Every run, engine and metric already in the history, checked as :func:`read` checks them:
    one line naming the first that cannot be true (``history add`` refuses such a history before
    it writes anything). Without reading every row: runs are filtered by the database, engines
    read once per distinct row, and each engine's metrics by index seeks (their names, lowest and
    highest values, :func:`_check_metric`); only a metric at fault is read run by run, to name the
    first run."""
    from popviz.ci import validate as v

    if not con.version:
        return
    sqlite = con.kind == "sqlite"

    def text(col: str) -> str:
        typed = f"typeof({col}) <> 'text' OR " if sqlite else ""
        return f"({typed}length({col}) = 0 OR length({col}) > {v.MAX_NAME_CHARS})"

    odd_runs = con.execute(
        "SELECT id, label, added_at FROM runs WHERE " + ("typeof(id) <> 'integer' OR " if sqlite else "")
        + f"id < 1 OR (label IS NOT NULL AND {text('label')}) OR added_at IS NULL OR {text('added_at')} LIMIT 100"
    ).fetchall()
    for run_id, label, added_at in sorted(odd_runs, key=lambda r: (str(type(r[0])), str(r[0]))):
        _run(con, run_id, label, added_at)
    env = ", environment" if con.version >= 2 else ""
    for row in con.execute(f"SELECT DISTINCT engine, name, instance, source, estimated, config{env} FROM engines"):
        try:
            _engine(con, "?", *row)
        except CorruptReportError:  # name the first run that holds it
            _read_engines(con, 1)
            raise
    for (engine,) in con.execute("SELECT DISTINCT engine FROM engines").fetchall():
        row = con.execute("SELECT metric FROM metrics WHERE engine = ? ORDER BY metric LIMIT 1", (engine,)).fetchone()
        while row is not None:  # each metric of the engine, one index seek apiece (no scan of the rows)
            _check_metric(con, engine, row[0])
            row = con.execute("SELECT metric FROM metrics WHERE engine = ? AND metric > ? ORDER BY metric LIMIT 1",
                              (engine, row[0])).fetchone()


def _check_metric(con: Db, engine: str, metric: object) -> None:
    """One metric of one engine over every run: its name, its lowest and highest value (index
    seeks on ``metrics_by_value``: a value of another type sorts past every number), and, for a
    count, that every value is whole; the first run at fault is named."""
    from popviz.ci import validate as v

    try:
        known = v.known_metric(metric, con.fail, f"engine {engine!r}")
        for order in ("ASC", "DESC"):
            (end,) = con.execute(f"SELECT value FROM metrics WHERE engine = ? AND metric = ? ORDER BY value {order} "
                                 "LIMIT 1", (engine, metric)).fetchone()
            v.metrics({metric: end}, con.fail, f"engine {engine!r}")
        if known and _is_count(str(metric)):
            whole = "CAST(value AS INTEGER)" if con.kind == "sqlite" else "trunc(value)"
            if con.execute(f"SELECT 1 FROM metrics WHERE engine = ? AND metric = ? AND value <> {whole} LIMIT 1",
                           (engine, metric)).fetchone():
                raise con.fail("has a count that is not whole")
    except CorruptReportError:
        _scan_metrics(con, engine, metric)
        raise


def _is_count(metric: str) -> bool:
    from popviz.ci.metrics import definition

    return definition(metric).unit == "count"


def _scan_metrics(con: Db, engine: str | None, metric: str, run_id: int | None = None) -> None:
    """Check ``engine``'s (any engine's) ``metric`` in run ``run_id`` (every run) as read checks
    it: the first value that cannot be true, named with its run."""
    from popviz.ci import validate as v

    where = "metric = ?" + (" AND engine = ?" if engine is not None else "") + \
        (" AND run_id = ?" if run_id is not None else "")
    params = [metric, *([engine] if engine is not None else []), *([run_id] if run_id is not None else [])]
    for run, eng, value in con.execute(f"SELECT run_id, engine, value FROM metrics WHERE {where} "
                                       "ORDER BY run_id, engine", params):
        v.metrics({metric: value}, con.fail, f"engine {eng!r} of run #{run}")


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

    path: str | Path
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


def read(db: str | os.PathLike[str], *, last: int | None = None) -> History:
    """The history in ``db`` (its ``last`` most recent runs when given).

    A SQLite file no connection has open is read as immutable: a read-only SQLite connection to
    a WAL file would leave -wal and -shm files beside it. Should a writer change the file
    meanwhile (its checkpoint writes the main file), it is read again the ordinary way."""
    if is_url(db):
        return _read(db, last, at_rest=False)
    from popviz.ci.history_sqlite import at_rest

    p = Path(db)
    stamp = at_rest(p)
    if stamp is None:
        return _read(p, last, at_rest=False)
    try:
        h = _read(p, last, at_rest=True)
    except (CorruptReportError, UsageError):
        if at_rest(p) == stamp:
            raise
        return _read(p, last, at_rest=False)
    return h if at_rest(p) == stamp else _read(p, last, at_rest=False)


def _read(db: str | os.PathLike[str], last: int | None, *, at_rest: bool) -> History:
    with reading(db, at_rest=at_rest) as con:
        if last is None:
            rows = con.execute("SELECT id, label, added_at FROM runs ORDER BY id").fetchall()
        else:  # the newest ``last`` runs by the primary key: no scan of the older ones
            rows = con.execute("SELECT id, label, added_at FROM runs ORDER BY id DESC LIMIT ?",
                               (max(0, last),)).fetchall()[::-1]
        runs = [_run(con, i, lab, at) for i, lab, at in rows]
        if not runs:
            raise UsageError(f"{con.where} holds no runs yet; add one with popviz history add REPORT --db {con.where}")
        engines = _read_engines(con, runs[0].id)
    return History(db if is_url(db) else Path(db), runs, engines)


def _run(con: Db, run_id: object, label: object, added_at: object) -> Run:
    from popviz.ci import validate as v

    if isinstance(run_id, bool) or not isinstance(run_id, int) or run_id < 1:
        raise con.fail(f"has a run with an invalid id ({brief(run_id)})")
    return Run(run_id, v.name(label, con.fail, f"label of run #{run_id}", optional=True),
               v.name(added_at, con.fail, f"time of run #{run_id}") or "")


def _engine(con: Db, run_id: object, engine: object, name: object, instance: object, source: object,
            estimated: object, config: object, environment: object = "{}") -> EngineMetrics:
    """One engine row, each field checked like a baseline's (popviz.ci.validate)."""
    from popviz.ci import validate as v

    fail = con.fail
    label = v.name(engine, fail, f"engine of run #{run_id}")
    where = f"engine {label!r} of run #{run_id}"
    cfg = _json(con, config, where, "configuration")
    env = _json(con, environment, where, "environment")
    if not isinstance(env, dict) or len(env) > 100 or not all(
            isinstance(k, str) and len(k) <= 100 and isinstance(x, str) and len(x) <= 1000 for k, x in env.items()):
        raise fail(f"has an invalid environment for {where} (expected a table of names and versions)")
    if isinstance(estimated, bool) or estimated not in (0, 1):
        raise fail(f"has an invalid estimated flag for {where} ({brief(estimated)})")
    e = EngineMetrics(name=v.name(name, fail, f"name of {where}") or "",
                      instance=v.name(instance, fail, f"instance of {where}", optional=True),
                      source=v.name(source, fail, f"source of {where}") or "", estimated=bool(estimated),
                      config=v.config(cfg, fail, where), metrics={}, environment=env)
    return e


def _json(con: Db, text: object, where: str, what: str) -> Any:
    if not isinstance(text, str) or len(text) > 16 * 2**20:
        raise con.fail(f"has a damaged {what} for {where}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise con.fail(f"has a damaged {what} for {where}") from None


def _read_engines(con: Db, first: int) -> dict[tuple[int, str], EngineMetrics]:
    """The engines and metrics of the runs from ``first`` on, each field checked like a
    baseline's (popviz.ci.validate): a value that cannot be true is refused with one line."""
    from popviz.ci import validate as v

    env = ", environment" if con.version >= 2 else ""
    engines: dict[tuple[int, str], EngineMetrics] = {}
    for row in con.execute(
            f"SELECT run_id, engine, name, instance, source, estimated, config{env} FROM engines WHERE run_id >= ? "
            "AND run_id IN (SELECT id FROM runs) ORDER BY run_id, engine",  # a run deleted by hand can leave rows
            (first,)):
        e = _engine(con, *row)
        engines[(int(row[0]), str(row[1]))] = e
    def checked(key: tuple[int, str], table: dict[str, object]) -> None:
        # the same checks as a baseline's: unknown well-formed names left out and named, values finite
        e = engines[key]
        e.metrics = v.metrics(table, con.fail, f"engine {key[1]!r} of run #{key[0]}")
        e.unknown_metrics = tuple(m for m in table if m not in e.metrics)

    # one engine's rows at a time (they come in order): the raw rows of a whole history are never
    # held beside the checked ones
    key: tuple[int, str] | None = None
    table: dict[str, object] = {}
    for run_id, engine, metric, value in con.execute(
            "SELECT run_id, engine, metric, value FROM metrics WHERE run_id >= ? ORDER BY run_id, engine, metric",
            (first,)):
        if (run_id, engine) != key:
            if key is not None and key in engines:
                checked(key, table)
            key, table = (run_id, engine), {}
        table[metric] = value
    if key is not None and key in engines:
        checked(key, table)
    return engines


@dataclass
class MedianBase:
    """The base side of ``compare --against-history``: per engine, the median of each metric over
    its most recent runs that share its newest run's configuration (at most ``last`` runs)."""

    path: str | Path
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
        where = display(self.path)
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
            raise UsageError(f"{display(h.path)}: engine {engine} is estimated in some of the last {last} runs and "
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
