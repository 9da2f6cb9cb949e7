"""Find the engines under a report directory and read each with the right source.

Layouts understood (``<engine>`` is ``training``, ``inference`` or a ``modelName``):

* ``DIR/<engine>/profile.pop`` — what Poplar's autoReport writes (read through libpva);
* ``DIR/<engine>/popviz-report.json`` + Parquet — a popviz bundle (exported or emulated);
* ``DIR/<engine>/popviz-model.json`` — what popviz's capture hooks recorded (configuration and
  host I/O), merged into the engine's Report whichever source gives memory and execution; an
  engine directory holding only this file is an engine with config and host I/O only;
* ``DIR/<instance>/<engine>/...`` — one subdirectory per instance of a multi-instance run;
* ``DIR`` itself being one engine directory or bundle.

When an engine directory holds both a bundle and a ``profile.pop``, the bundle is read (it is
what ``popviz export`` made from the profile, and needs no libpva).
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

from popviz.errors import CorruptReportError, ReportNotFoundError, UsageError, shown
from popviz.model import Report, ReportSet
from popviz.model.names import INSTANCE_DIR
from popviz.sources import attribution, bundle, infer, layer_flops, manifest, pva
from popviz.sources.runrecord import (
    RUN_FILE,
    failed_instance_warnings,
    manifest_warning,
    read_run_record,
    run_warnings,
)
from popviz.sources.validate import check_report

SKIP_DIRS = {"__pycache__", "node_modules"}
MAX_ENGINES = 1000
"""More engines than this under one directory is not one run (a home directory, a data set):
refused with a message rather than read for minutes."""
MAX_DIRECTORIES = 20_000
"""Directories looked at while searching for engines before giving up with a message."""


@dataclass(frozen=True)
class EngineDir:
    """A directory holding one engine's report, and where it sits in the report tree."""

    path: Path
    kind: str
    """``bundle``, ``pva``, ``manifest`` (only popviz-model.json) or ``incomplete`` (a bundle's
    tables without its metadata: a write killed before its last file; reported, never read)."""
    instance: str | None
    name: str | None
    """The directory's name, or None when the report directory is the engine itself."""


def _kind(directory: Path, names: set[str]) -> str | None:
    if bundle.METADATA_FILE in names:
        return "bundle"
    if pva.PROFILE_FILE in names:
        return "pva"
    if manifest.MODEL_FILE in names:
        return "manifest"
    if names & set(bundle.TABLE_FILES):
        return "incomplete"
    return None


def find_engines(root: str | Path) -> list[EngineDir]:
    """Every engine directory under ``root`` (sorted by path), or a ReportNotFoundError."""
    root = Path(root)
    if not root.exists():
        raise ReportNotFoundError(f"{shown(root)}: no such file or directory; pass a report "
                                  "directory (from popviz capture or autoReport) or a bundle")
    if root.is_file():
        kind = {bundle.METADATA_FILE: "bundle", pva.PROFILE_FILE: "pva",
                manifest.MODEL_FILE: "manifest"}.get(root.name)
        if kind is None:
            raise ReportNotFoundError(f"{shown(root)} is not a report: pass the directory holding "
                                      f"{pva.PROFILE_FILE} or {bundle.METADATA_FILE}")
        # one of an engine directory's files stands for the directory: read with its other files
        # (the hooks' popviz-model.json beside a bundle), as when the directory is passed
        try:
            parent_kind = _kind(root.parent, set(os.listdir(root.parent)))
        except OSError:
            parent_kind = None
        return [EngineDir(root.parent, parent_kind or kind, None, None)]
    try:
        top = set(os.listdir(root))
    except OSError as exc:
        raise ReportNotFoundError(f"{shown(root)}: cannot be read ({exc.strerror})") from None
    if not top:
        raise ReportNotFoundError(f"{shown(root)} is empty: run the model with profiling on "
                                  "(popviz capture -o DIR -- python train.py) and pass that DIR")
    kind = _kind(root, top)
    if kind:
        return [EngineDir(root, kind, None, None)]
    found = []

    def unreadable(exc: OSError) -> None:  # a directory we cannot list is an error, not a skip
        where = exc.filename or root
        raise ReportNotFoundError(f"{shown(where)}: cannot be read ({exc.strerror}); fix its "
                                  "permissions or pass a directory that leaves it out")

    from popviz.ui import progress

    def too_many(what: str) -> ReportNotFoundError:
        return ReportNotFoundError(f"{shown(root)} holds more than {what}; that is not one run: pass the "
                                   "directory of the run (popviz capture -o DIR) or of one engine")

    for seen, (dirpath, dirnames, filenames) in enumerate(os.walk(root, onerror=unreadable), 1):
        if seen > MAX_DIRECTORIES:
            raise too_many(f"{MAX_DIRECTORIES:,} directories")
        if seen % 500 == 0:
            progress(f"{seen:,} directories looked at, {len(found):,} engines found")
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS)
        here = Path(dirpath)
        kind = _kind(here, set(filenames))
        if kind is None or here == root:
            continue
        parts = here.relative_to(root).parts
        instance = "/".join(map(_decoded, parts[:-1])) or None
        found.append(EngineDir(here, kind, instance, _decoded(parts[-1])))
        if len(found) > MAX_ENGINES:
            raise too_many(f"{MAX_ENGINES:,} engines")
        dirnames[:] = []  # an engine directory's subdirectories are not engines
    if not found and "popviz-run.json" in top:
        raise ReportNotFoundError(
            f"{shown(root)}: this capture recorded no engine (the command created no PopTorch "
            f"executor and Poplar wrote no profile); see {shown(root / 'capture.log')}")
    if not found:
        raise ReportNotFoundError(
            f"{shown(root)}: no report found (looked for {pva.PROFILE_FILE}, "
            f"{bundle.METADATA_FILE} and {manifest.MODEL_FILE} in it and its subdirectories); pass "
            "the directory given to "
            "autoReport.directory or popviz capture -o")
    return sorted(found, key=lambda e: e.path.parts)


def _decoded(name: str) -> str:
    """A directory name as text: bytes that are not UTF-8 (which Python keeps as lone
    surrogates) become U+FFFD, so a name from the file system is always valid Unicode."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def read_engine(engine: EngineDir) -> Report:
    """Read one engine directory with the source its files call for, merging in the capture
    hooks' ``popviz-model.json`` when it is there; a profile without one gets the configuration
    its execution shows, labelled inferred (:mod:`popviz.sources.infer`)."""
    check_files(engine.path)
    record = None
    if engine.kind == "manifest":
        report = manifest.manifest_report(manifest.read_manifest(engine.path))
        if engine.name:
            report = report.replace(name=engine.name)
    else:
        if engine.kind == "bundle":
            report = bundle.read_bundle(engine.path)
        else:
            report = pva.read_profile(engine.path / pva.PROFILE_FILE, name=engine.name)
        if (engine.path / manifest.MODEL_FILE).is_file():
            record = manifest.read_manifest(engine.path)
            report = manifest.merge_into(report, record)
    report = check_report(report, engine.path, _files(engine))
    report = infer.infer_config(report)  # a profile without popviz-model.json: labelled inferred
    if engine.kind == "pva":  # per-layer costs where PopTorch's debug contexts name the layers
        report = attribution.with_layers(report, *pva.read_operations(engine.path / pva.PROFILE_FILE))
        # and the FLOPs the capture hooks counted on the model (popviz.sources.layer_flops)
        report = layer_flops.with_flops(report, record.flops if record else None, record is not None)
    return report.replace(instance=engine.instance, path=str(engine.path))


ENGINE_FILES = (bundle.METADATA_FILE, *bundle.TABLE_FILES, pva.PROFILE_FILE, manifest.MODEL_FILE)
"""The files of an engine directory popviz reads (or has libpva or pyarrow read)."""


def check_files(directory: Path) -> None:
    """Each file popviz would read in ``directory`` is a regular file (links followed): a FIFO,
    a device or a dangling link named ``profile.pop`` or ``popviz-model.json`` is refused with
    one line, never opened (reading it would wait forever or without end)."""
    from popviz.fileio import check_regular

    for name in ENGINE_FILES:
        path = directory / name
        if os.path.lexists(path):
            check_regular(path)


def _files(engine: EngineDir) -> dict[str, Path]:
    """Which file each part of an engine's Report came from (for error messages)."""
    d = engine.path
    main = {"bundle": d / bundle.METADATA_FILE, "pva": d / pva.PROFILE_FILE}.get(engine.kind)
    files = {}
    if main is not None:
        files = {k: main for k in ("provenance", "target", "config", "host_io", "tile", "ipu",
                                   "execution", "runs")}
    if engine.kind == "bundle":
        files.update(tile=d / bundle.MEMORY_FILE, ipu=d / bundle.MEMORY_FILE,
                     execution=d / bundle.STEPS_FILE, runs=d / bundle.RUNS_FILE)
    if engine.kind == "manifest" or (d / manifest.MODEL_FILE).is_file():
        files.update(config=d / manifest.MODEL_FILE, host_io=d / manifest.MODEL_FILE)
    return files


def stale_profile_warning(root: Path, engine: EngineDir, label: str) -> str | None:
    """A warning when ``profile.pop`` is older than the start of the capture run recorded in
    ``root/popviz-run.json`` (an executable cache restored the engine, so Poplar wrote no new
    profile and the one here is from an earlier run)."""
    if engine.kind != "pva" or not root.is_dir():
        return None
    doc = read_run_record(root / RUN_FILE, strict=False)
    if doc is None:
        return None
    try:
        started = _dt.datetime.fromisoformat(str(doc["started_at"]))
        profile_mtime = (engine.path / pva.PROFILE_FILE).stat().st_mtime
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return None
    if started.tzinfo is None:
        started = started.replace(tzinfo=_dt.timezone.utc)
    if profile_mtime >= started.timestamp():
        return None
    return (f"{label}: {shown(engine.path / pva.PROFILE_FILE)} is older than the run recorded in "
            f"{RUN_FILE} (an executable cache restored the engine?); its figures are from an "
            "earlier run: clear the cache (executableCachePath) and capture again")


def _mark_not_reached(engine: EngineDir, report: Report) -> Report:
    """An engine the hooks recorded with no call, in a capture that ended early (``--calls N``, a
    failure): say why in ``config.options["not_reached"]``, so it reads as not reached, not as an
    engine the script never calls (RUN001)."""
    import dataclasses

    from popviz.model.frames import NOT_REACHED, no_call_recorded
    from popviz.sources.runrecord import not_reached_reason, record_of, unfinished_manifest

    if report.config is None or not no_call_recorded(report):
        return report
    reason = not_reached_reason(record_of(engine.path))
    if reason is None and unfinished_manifest(engine.path):
        reason = "its process was killed before it called this engine, leaving popviz-model.json unfinalised"
    if reason is None:
        return report
    options = {**report.config.options, NOT_REACHED: reason}
    return report.replace(config=dataclasses.replace(report.config, options=options))


def _capture_run(root: Path, engine: EngineDir) -> Path | None:
    """The directory of the single-process capture run holding ``engine``: its nearest ancestor,
    ``root`` included, with a ``popviz-run.json`` of no PopRun instance (None: not captured)."""
    for here in (engine.path, *engine.path.parents):
        if here != engine.path:
            record = read_run_record(here / RUN_FILE)
            if record is not None and record.get("instance") is None:
                return here
            if record is not None and record.get("instance") == here.name and here != root:
                return here.parent  # one rank of a per-rank capture: the run is its instances' parent
        if here == root:
            return None
    return None


def _started(run: Path) -> str:
    """When a capture run started (its record's, or its earliest rank's for a per-rank capture)."""
    record = read_run_record(run / RUN_FILE)
    if record is not None:
        return str(record.get("started_at", ""))
    ranks = [read_run_record(p / RUN_FILE) or {} for p in run.iterdir() if INSTANCE_DIR.fullmatch(p.name)]
    return min((str(r.get("started_at", "")) for r in ranks), default="")


def one_run(root: Path, engines: list[EngineDir], single: bool) -> Path:
    """The directory to read: a directory holding exactly one capture run, below it (``capture
    --new-run`` into a new directory), is read as that run, so its engines keep their names. With
    ``single`` (a side of compare, a baseline, a history entry), a directory holding several
    captures (``--new-run`` makes a timestamped run inside an earlier one; ``popviz-runs/`` holds
    one per capture) is refused, naming the newest: their engines would be gated as one run."""
    runs = {_capture_run(root, e) for e in engines}
    captured = sorted((r for r in runs if r is not None), key=lambda r: (_started(r), r.name))
    if single and len(captured) > 1:
        inner = [r for r in captured if r != root]  # each can be passed; root itself would hold them all again
        listed = ", ".join(shown(r) for r in inner[:3]) + (f" and {len(inner) - 3} more" if len(inner) > 3 else "")
        own = (f"; the run captured in {shown(root)} itself is read alone once the runs inside it are moved out "
               f"(e.g. mv {shown(inner[-1])} {shown(root.parent / (root.name + '-' + inner[-1].name))})"
               if root in captured else "")
        raise UsageError(f"{shown(root)} holds {len(captured)} captured runs; pass one of the runs inside it "
                         f"({listed}; the newest is {shown(captured[-1])}){own}")
    if len(runs) == 1 and captured and captured[0] != root:
        return captured[0]
    return root


def _incomplete_text(engine: EngineDir) -> str:
    tables = sorted(n for n in bundle.TABLE_FILES if (engine.path / n).exists())
    return (f"{shown(engine.path)} holds {', '.join(tables)} but no {bundle.METADATA_FILE} (a bundle whose "
            "write was interrupted: killed, or out of space)")


def _without_incomplete(root: Path, engines: list[EngineDir], single_run: bool) -> tuple[list[EngineDir], list[str]]:
    """The engines to read, and a warning per incomplete engine directory left out. Refused when
    nothing else is there, or for a single run (a baseline or a gate must not lose an engine)."""
    incomplete = [e for e in engines if e.kind == "incomplete"]
    complete = [e for e in engines if e.kind != "incomplete"]
    if incomplete and (single_run or not complete):
        more = f" (and {len(incomplete) - 1} more)" if len(incomplete) > 1 else ""
        raise CorruptReportError(f"{_incomplete_text(incomplete[0])}{more}; write it again (popviz export / "
                                 "capture), or remove that directory to leave the engine out")
    notes = [f"{_incomplete_text(e)}: left out of this analysis; write it again" for e in incomplete]
    notes += [f"{_incomplete_text(e)}: only its {manifest.MODEL_FILE} was read" for e in complete
              if e.kind == "manifest" and any((e.path / n).exists() for n in bundle.TABLE_FILES)]
    return complete, notes


def _check_one_run_id(root: Path, engines: list[EngineDir]) -> None:
    """CorruptReportError when bundles that would be read as one run (same capture run, same
    instance) name different runs: two exports into one directory, a replace that stopped half way."""
    seen: dict[tuple[Path | None, str | None], tuple[str, EngineDir]] = {}
    for e in engines:
        if e.kind != "bundle":
            continue
        run_id = bundle.run_id_of(e.path)
        if run_id is None:
            continue
        key = (_capture_run(root, e), e.instance)
        first = seen.setdefault(key, (run_id, e))
        if first[0] != run_id:
            raise CorruptReportError(
                f"{shown(first[1].path)} and {shown(e.path)} are bundles of two different runs (run_id "
                f"{first[0]} and {run_id}), which would be read as one: export into a new directory, or "
                "pass each engine directory on its own")


def _unique_labels(engines: list[EngineDir], reports: list[Report]) -> tuple[list[Report], list[str]]:
    """Engines whose files give them the same name (two bundles both named ``training``) take their
    directory's name instead, with a warning: one label per engine, so a baseline saved from them
    can be compared."""
    from collections import Counter

    counts = Counter(r.label for r in reports)
    if all(n == 1 for n in counts.values()):
        return reports, []
    out, notes = [], []
    for e, r in zip(engines, reports, strict=True):
        if counts[r.label] > 1 and e.name and e.name != r.name:
            notes.append(f"{shown(e.path)}: its report names the engine {r.name!r}, as another engine here "
                         f"does; it is shown as {e.name!r}, its directory's name")
            r = r.replace(name=e.name)
        out.append(r)
    dup = next((label for label, n in Counter(r.label for r in out).items() if n > 1), None)
    if dup is not None:
        raise CorruptReportError(f"two engines here are both named {dup!r} and their directories cannot tell "
                                 "them apart; pass each engine directory on its own")
    return out, notes


def load(path: str | os.PathLike[str], *, single_run: bool = False) -> ReportSet:
    """Every engine found under ``path`` (a report directory, an engine directory or a bundle);
    ``single_run``: refuse a directory holding several capture runs (:func:`one_run`).

    Raises a :class:`popviz.errors.PopvizError` subclass with a one-line message naming the file
    when something cannot be read.
    """
    from popviz.ui import progress

    if isinstance(path, str) and not path.strip():  # Path("") is the current directory: a slip, not a choice
        raise UsageError("the report path is empty; pass a report directory or bundle (\".\" for the current "
                         "directory)")
    engines = find_engines(Path(path))
    if Path(path).is_dir() and len(engines) > 0:
        run = one_run(Path(path), engines, single_run)
        if run != Path(path):
            path, engines = run, find_engines(run)
    root = Path(path)
    engines, warnings = _without_incomplete(root, engines, single_run)
    _check_one_run_id(root, engines)
    reports = []
    for k, e in enumerate(engines, 1):
        if len(engines) > 1:
            progress(f"engine {k:,} of {len(engines):,}")
        reports.append(read_engine(e))
    reports = [_mark_not_reached(e, r) for e, r in zip(engines, reports, strict=True)]
    reports, renamed = _unique_labels(engines, reports)
    from popviz.sources import pva_trace  # host traces (.pvti) of the run, where captured

    reports, trace_warnings = pva_trace.attach(root, reports)
    warnings = (run_warnings(root) if root.is_dir() else []) + warnings + renamed + trace_warnings
    if root.is_dir():
        warnings += failed_instance_warnings(root, {r.instance.rsplit("/", 1)[-1] for r in reports if r.instance})
    for engine, report in zip(engines, reports, strict=True):
        for note in (manifest_warning(engine.path, report.label),
                     stale_profile_warning(root, engine, report.label)):
            if note:
                warnings.append(note)
    return ReportSet(reports, root=str(path), warnings=warnings)
