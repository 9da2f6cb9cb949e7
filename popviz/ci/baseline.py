"""Baselines: a small, stable, versioned JSON of an engine's metrics and the configuration that
produced them, meant to be committed; and reading either side of a comparison (a report
directory, an engine directory, a bundle, or a baseline file) into the same shape."""

from __future__ import annotations

import datetime as _dt
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from popviz.errors import CorruptReportError, UsageError, shown

FORMAT = "popviz-baseline"
FORMAT_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first bytes of a SQLite file (a history, popviz.ci.history)."""


@dataclass
class EngineMetrics:
    """One engine's side of a comparison."""

    name: str
    instance: str | None
    source: str
    estimated: bool
    config: dict[str, Any]
    metrics: dict[str, float]
    findings: list[dict[str, str]] = field(default_factory=list)
    unknown_metrics: tuple[str, ...] = ()
    """Well-formed metric names read from a file that this popviz does not define (a newer
    popviz's): left out of ``metrics``, named in the comparison."""
    breakdown: dict[str, dict[str, dict[str, float]]] | None = None
    """What its layers, program types and memory categories cost (:mod:`popviz.ci.diff`); None
    when the side does not say (a baseline saved by an older popviz, a history's median)."""
    environment: dict[str, str] | None = None
    """The Poplar SDK, popviz, PopTorch, torch, IPU architecture and host behind the figures
    (:func:`popviz.ci.diff.environment`); None when the side does not say."""

    @property
    def label(self) -> str:
        return f"{self.instance}/{self.name}" if self.instance else self.name

    def to_dict(self) -> dict[str, Any]:
        out = {"name": self.name, "instance": self.instance,
               "provenance": {"source": self.source, "estimated": self.estimated},
               "config": self.config, "metrics": self.metrics, "findings": self.findings}
        if self.environment is not None:  # added within format_version 1: older readers ignore them
            out["environment"] = self.environment
        if self.breakdown is not None:
            out["breakdown"] = self.breakdown
        return out


def no_metrics_why(e: EngineMetrics) -> str:
    """``: never called (RUN001)`` / ``: its compile failed (RUN002)``, or "" when unknown."""
    codes = {f.get("code") for f in e.findings}
    return (": never called (RUN001)" if "RUN001" in codes else
            ": its compile failed (RUN002)" if "RUN002" in codes else "")


def no_metrics_reason(e: EngineMetrics) -> str:
    """``engine training has no metrics: never called (RUN001)``, or without the reason when unknown."""
    return f"engine {e.label} has no metrics{no_metrics_why(e)}"


def from_reports(path: str | os.PathLike[str]) -> list[EngineMetrics]:
    """Analyse the reports under ``path`` and collect each engine's metrics."""
    from popviz.analysis import analyse
    from popviz.ci import environment
    from popviz.ci.diff import breakdown
    from popviz.ci.metrics import configuration, engine_metrics
    from popviz.sources.discover import load

    result = analyse(load(path, single_run=True))  # one run: a side, a baseline, a history entry
    return [EngineMetrics(name=e.report.name, instance=e.report.instance, source=e.report.provenance.source,
                          estimated=bool(e.report.provenance.estimated), config=configuration(e),
                          metrics=engine_metrics(e),
                          findings=[{"code": f.code, "severity": f.severity, "title": f.title} for f in e.findings],
                          breakdown=breakdown(e.report), environment=environment.of_report(e.report))
            for e in result.engines]


def is_baseline_file(path: Path) -> bool:
    """Whether ``path`` is a baseline file (by its first bytes; never opens a FIFO or device)."""
    return FORMAT.encode() in _head(path)


def _head(path: Path) -> bytes:
    """The first 4 KiB of a regular file, else nothing (never opens a FIFO or a device)."""
    if not path.is_file():
        return b""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return b""
    try:
        return os.read(fd, 4096) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def _is_sqlite(path: Path) -> bool:
    """Whether ``path`` is a SQLite file (a history: popviz.ci.history), by its first bytes."""
    return _head(path).startswith(SQLITE_MAGIC)


def read(path: Path) -> list[EngineMetrics]:
    """The engines of a baseline file (one-line errors for anything malformed)."""
    from popviz.fileio import read_versioned_json

    def fail(what: str) -> CorruptReportError:
        return CorruptReportError(f"{shown(path)} {what}; save a new one with popviz baseline save")

    doc = read_versioned_json(path, format_name=FORMAT, format_version=FORMAT_VERSION, kind="baseline", fail=fail)
    from popviz.ci import validate as v

    engines = doc.get("engines")
    if not isinstance(engines, list) or not engines:
        raise fail("has no engines")
    if len(engines) > v.MAX_ENGINES:
        raise fail(f"has more than {v.MAX_ENGINES:,} engines")
    out = []
    for i, e in enumerate(engines):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not isinstance(e.get("metrics"), dict):
            raise fail(f"has a malformed engine #{i} (needs name and metrics)")
        name = v.name(e["name"], fail, f"name of engine #{i}")
        instance = v.name(e.get("instance"), fail, f"instance of engine {name!r}", optional=True)
        where = f"engine {name!r}"
        prov = e.get("provenance", {})
        if not isinstance(prov, dict) or not isinstance(prov.get("source", "unknown"), str) or \
                not isinstance(prov.get("estimated", False), bool):
            raise fail(f"has an invalid provenance for {where} (expected source and estimated true/false)")
        known = v.metrics(e["metrics"], fail, where)  # a malformed name fails; an unknown one is left out
        from popviz.ci.diff import check_breakdown, check_environment
        out.append(EngineMetrics(name=name, instance=instance,
                                 source=v.name(prov.get("source", "unknown"), fail, f"source of {where}"),
                                 estimated=prov.get("estimated") is True,
                                 config=v.config(e.get("config"), fail, where),
                                 metrics=known,
                                 findings=v.findings(e.get("findings"), fail, where),
                                 unknown_metrics=tuple(k for k in e["metrics"] if k not in known),
                                 breakdown=check_breakdown(e.get("breakdown"), fail, where),
                                 environment=check_environment(e.get("environment"), fail, where)))
    keys = [(e.instance or "", e.name) for e in out]
    if len(set(keys)) != len(keys):
        raise fail("names an engine twice")
    return out


def load_side(path: str | os.PathLike[str]) -> list[EngineMetrics]:
    """Either side of a comparison: a baseline file, or reports to analyse."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{shown(p)} does not exist; pass a report directory, an engine directory, a bundle "
                         "or a baseline file")
    if is_baseline_file(p):
        return read(p)
    if _is_sqlite(p):
        raise UsageError(f"{shown(p)} is a SQLite file, not a report or a baseline; to compare a run with a "
                         f"history, pass popviz compare --against-history {shown(p)} NEW")
    if p.is_file() and p.suffix == ".json":
        raise CorruptReportError(f"{shown(p)} is not a popviz baseline (no \"format\": \"{FORMAT}\"); "
                                 "save one with popviz baseline save")
    from popviz.sources import bundle, manifest, pva

    if p.is_file() and p.name not in (bundle.METADATA_FILE, pva.PROFILE_FILE, manifest.MODEL_FILE):
        raise UsageError(f"{shown(p)} is neither a report nor a baseline file: pass a report directory, an engine "
                         "directory, a bundle or a file written by popviz baseline save")
    return from_reports(p)


def document(engines: list[EngineMetrics], source: str) -> dict[str, Any]:
    from popviz._version import __version__

    return {"format": FORMAT, "format_version": FORMAT_VERSION, "written_by": f"popviz {__version__}",
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "source": source,
            "engines": [e.to_dict() for e in engines]}


def save(report: str | os.PathLike[str], out: str | os.PathLike[str], *, force: bool = False) -> list[EngineMetrics]:
    """Write the baseline of ``report`` to ``out`` (an existing file only with ``force``): its engines
    with metrics (every engine is returned; those without metrics were left out)."""
    from popviz.fileio import check_replaceable, write_output

    target = Path(out)
    if (target.exists() or target.is_symlink()) and not force:
        raise UsageError(f"{shown(target)} exists; popviz never writes over files: pass --force to replace "
                         "the baseline, or choose another file")
    check_replaceable(target)
    engines = load_side(report)
    kept = [e for e in engines if e.metrics]  # an engine without metrics would gate nothing
    if not kept:
        raise UsageError(f"{shown(report)}: no metric to save, so the baseline would gate nothing "
                         f"({'; '.join(no_metrics_reason(e) for e in engines) or 'no engine'}); save a run that ran")
    text = json.dumps(document(kept, str(report)), indent=1, sort_keys=False) + "\n"
    # exclusive at the rename without --force: of two saves at once, exactly one wins
    write_output(target, text, force)
    return engines
