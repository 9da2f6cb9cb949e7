"""Baselines: a small, stable, versioned JSON of an engine's metrics and the configuration that
produced them, meant to be committed; and reading either side of a comparison (a report
directory, an engine directory, a bundle, or a baseline file) into the same shape."""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from popviz.errors import CorruptReportError, UsageError, shown

FORMAT = "popviz-baseline"
FORMAT_VERSION = 1


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

    @property
    def label(self) -> str:
        return f"{self.instance}/{self.name}" if self.instance else self.name

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "instance": self.instance,
                "provenance": {"source": self.source, "estimated": self.estimated},
                "config": self.config, "metrics": self.metrics, "findings": self.findings}


def from_reports(path: str | os.PathLike[str]) -> list[EngineMetrics]:
    """Analyse the reports under ``path`` and collect each engine's metrics."""
    from popviz.analysis import analyse
    from popviz.ci.metrics import configuration, engine_metrics
    from popviz.sources.discover import load

    result = analyse(load(path))
    return [EngineMetrics(name=e.report.name, instance=e.report.instance, source=e.report.provenance.source,
                          estimated=bool(e.report.provenance.estimated), config=configuration(e),
                          metrics=engine_metrics(e),
                          findings=[{"code": f.code, "severity": f.severity, "title": f.title} for f in e.findings])
            for e in result.engines]


def is_baseline_file(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return FORMAT.encode() in head


def read(path: Path) -> list[EngineMetrics]:
    """The engines of a baseline file (one-line errors for anything malformed)."""
    from popviz.fileio import read_versioned_json

    def fail(what: str) -> CorruptReportError:
        return CorruptReportError(f"{shown(path)} {what}; save a new one with popviz baseline save")

    doc = read_versioned_json(path, format_name=FORMAT, format_version=FORMAT_VERSION, kind="baseline", fail=fail)
    engines = doc.get("engines")
    if not isinstance(engines, list) or not engines:
        raise fail("has no engines")
    out = []
    for i, e in enumerate(engines):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not isinstance(e.get("metrics"), dict):
            raise fail(f"has a malformed engine #{i} (needs name and metrics)")
        metrics = {}
        for k, v in e["metrics"].items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
                raise fail(f"has a non-numeric value for metric {k!r} of engine {e['name']!r}")
            metrics[str(k)] = float(v)
        prov = e.get("provenance") if isinstance(e.get("provenance"), dict) else {}
        out.append(EngineMetrics(name=e["name"], instance=e.get("instance") if isinstance(e.get("instance"), str) else None,
                                 source=str(prov.get("source", "unknown")), estimated=prov.get("estimated") is True,
                                 config=e.get("config") if isinstance(e.get("config"), dict) else {},
                                 metrics=metrics,
                                 findings=e.get("findings") if isinstance(e.get("findings"), list) else []))
    return out


def load_side(path: str | os.PathLike[str]) -> list[EngineMetrics]:
    """Either side of a comparison: a baseline file, or reports to analyse."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{shown(p)} does not exist; pass a report directory, an engine directory, a bundle "
                         "or a baseline file")
    if is_baseline_file(p):
        return read(p)
    if p.is_file() and p.suffix == ".json":
        raise CorruptReportError(f"{shown(p)} is not a popviz baseline (no \"format\": \"{FORMAT}\"); "
                                 "save one with popviz baseline save")
    return from_reports(p)


def document(engines: list[EngineMetrics], source: str) -> dict[str, Any]:
    from popviz import __version__

    return {"format": FORMAT, "format_version": FORMAT_VERSION, "written_by": f"popviz {__version__}",
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "source": source,
            "engines": [e.to_dict() for e in engines]}


def save(report: str | os.PathLike[str], out: str | os.PathLike[str], *, force: bool = False) -> list[EngineMetrics]:
    """Write the baseline of ``report`` to ``out`` (an existing file only with ``force``)."""
    from popviz.fileio import atomic_write_bytes

    target = Path(out)
    if target.exists() and not force:
        raise UsageError(f"{shown(target)} exists; popviz never writes over files: pass --force to replace "
                         "the baseline, or choose another file")
    if not target.parent.is_dir():
        raise UsageError(f"{shown(target.parent)} is not a directory; create it first")
    engines = load_side(report)
    text = json.dumps(document(engines, str(report)), indent=1, sort_keys=False) + "\n"
    atomic_write_bytes(target, text.encode())
    return engines
