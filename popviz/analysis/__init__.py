"""Analyses: pure functions ``Report -> AnalysisOutput`` (metrics, findings, what was not
checked). None of them reads files; ``analyse`` runs the selected ones over a ReportSet."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from popviz.analysis.findings import AnalysisOutput, EngineResult, Finding, NotChecked, Result
from popviz.errors import UsageError
from popviz.model import Report, ReportSet

Analysis = Callable[[Report], AnalysisOutput]


def registry() -> dict[str, Analysis]:
    """Every analysis by name, in the order they are reported."""
    from popviz.analysis import host_io, memory, pipeline

    return {pipeline.NAME: pipeline.analyse, memory.NAME: memory.analyse, host_io.NAME: host_io.analyse}


def analyse(reports: ReportSet, only: Sequence[str] | None = None) -> Result:
    """Run the analyses named in ``only`` (all by default) on every report, in registry order."""
    available = registry()
    unknown = [n for n in dict.fromkeys(only or ()) if n not in available]
    if unknown:
        raise UsageError(f"unknown analysis {', '.join(map(repr, unknown))}; choose from "
                         f"{', '.join(available) or '(none yet)'}")
    names = [n for n in available if not only or n in only]  # always in registry order
    engines = [EngineResult(r, {n: available[n](r) for n in names}) for r in reports]
    return Result(root=reports.root, engines=engines, analyses=names)


__all__ = ["AnalysisOutput", "EngineResult", "Finding", "NotChecked", "Result", "analyse", "registry"]
