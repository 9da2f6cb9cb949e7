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
    from popviz.analysis import host_io, memory, pipeline, throughput

    return {pipeline.NAME: pipeline.analyse, memory.NAME: memory.analyse, host_io.NAME: host_io.analyse,
            throughput.NAME: throughput.analyse}


CrossCheck = Callable[[ReportSet], dict[str, AnalysisOutput]]


def cross_checks() -> dict[str, CrossCheck]:
    """Checks that compare the engines of a ReportSet (e.g. the instances of a PopRun run), by
    name. Each returns, per engine label, an AnalysisOutput for that engine; run after the
    per-engine analyses, listed only where they produced something."""
    from popviz.analysis import instances

    return {instances.NAME: instances.check}


def analyse(reports: ReportSet, only: Sequence[str] | None = None) -> Result:
    """Run the analyses named in ``only`` (all by default) on every report, in registry order."""
    available = registry()
    cross = cross_checks()
    known = [*available, *cross]
    unknown = [n for n in dict.fromkeys(only or ()) if n not in known]
    if unknown:
        raise UsageError(f"unknown analysis {', '.join(map(repr, unknown))}; choose from "
                         f"{', '.join(known)}")
    names = [n for n in known if not only or n in only]  # always in registry order
    engines = [EngineResult(r, {n: available[n](r) for n in names if n in available}) for r in reports]
    ran = [n for n in names if n in available]
    for n in names:
        if n not in cross:
            continue
        produced = cross[n](reports)
        for engine in engines:
            if engine.report.label in produced:
                engine.outputs[n] = produced[engine.report.label]
        if produced or only:
            ran.append(n)
        if not produced and only and n in only:
            for engine in engines:
                engine.outputs[n] = AnalysisOutput(not_checked=[NotChecked(
                    n, "cross-check of instances", "not applicable: this directory holds no "
                    "multi-instance (PopRun) run; separate runs are each analysed on their own")])
    from popviz.analysis.plan import reconcile

    for engine in engines:
        engine.plan = reconcile(engine)
    return Result(root=reports.root, engines=engines, analyses=ran,
                  warnings=list(getattr(reports, "warnings", [])))


__all__ = ["AnalysisOutput", "EngineResult", "Finding", "NotChecked", "Result", "analyse", "cross_checks",
           "registry"]
