"""The shapes every analysis returns and every renderer reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from popviz.model import Report

SEVERITIES = ("info", "warning", "error")
"""In increasing order of gravity."""


CODES = frozenset({"PIPE001", "PIPE002", "PIPE003", "PIPE004", "PIPE005", "PIPE006", "MEM001", "MEM002", "MEM003", "MEM004", "MEM005",
                   "MEM006", "HIO001", "HIO002", "HIO003", "HIO004", "INST001", "INST002", "INST003", "INST004", "INST005",
                   "RUN001", "RUN002"})
"""Every finding code an analysis reports (docs/findings.md): all that ``--ignore`` and
``[tool.popviz] ignore`` may name."""


def severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity)


def severity_counts(findings: list[Finding]) -> str:
    """``1 error, 2 warnings, 1 info`` (most severe first), or ``no findings``."""
    counts = {s: 0 for s in SEVERITIES}
    for f in findings:
        counts[f.severity] += 1
    parts = [f"{n} {s}{'s' if n != 1 and s != 'info' else ''}" for s, n in reversed(counts.items()) if n]
    return ", ".join(parts) or "no findings"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3].rsplit(" ", 1)[0] + " ..."


@dataclass(frozen=True)
class Finding:
    """One thing an analysis found, with the numbers behind it and what to do."""

    code: str
    """Stable identifier, e.g. ``PIPE001`` (documented in docs/analyses.md)."""
    severity: str
    analysis: str
    """``pipeline``, ``memory``, ``host_io``, ..."""
    title: str
    evidence: str
    """The numbers, with units."""
    recommendation: str
    """The PopTorch option or code change, concretely."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "analysis": self.analysis,
                "title": self.title, "evidence": self.evidence,
                "recommendation": self.recommendation}


@dataclass(frozen=True)
class NotChecked:
    """A check an analysis could not make, and why (missing data, unsupported layout...)."""

    analysis: str
    check: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"analysis": self.analysis, "check": self.check, "reason": self.reason}


@dataclass
class AnalysisOutput:
    """What one analysis returns for one Report."""

    metrics: dict[str, Any] = field(default_factory=dict)
    """JSON-compatible figures (units in the keys); null where the data is missing."""
    findings: list[Finding] = field(default_factory=list)
    not_checked: list[NotChecked] = field(default_factory=list)
    table: pd.DataFrame | None = None
    """A compact table for the console / Markdown renderers (units in column names)."""
    caption: str | None = None
    """One or two lines of key figures printed under the table (the same figures are in
    ``metrics``)."""


class Collector:
    """Gathers one analysis's output for one Report: findings and not-checked lines are tagged
    with the analysis's name."""

    def __init__(self, analysis: str, metrics: dict[str, Any]) -> None:
        self.analysis = analysis
        self.out = AnalysisOutput(metrics=metrics)

    def skip(self, check: str, reason: str) -> None:
        self.out.not_checked.append(NotChecked(self.analysis, check, reason))

    def find(self, code: str, severity: str, title: str, evidence: str, recommendation: str) -> None:
        self.out.findings.append(Finding(code, severity, self.analysis, title, evidence, recommendation))


@dataclass
class EngineResult:
    """Every analysis of one engine."""

    report: Report
    outputs: dict[str, AnalysisOutput] = field(default_factory=dict)
    plan: Any = None
    """The engine's reconciled, ranked plan (``popviz.analysis.plan.Plan``), set by ``analyse``."""

    @property
    def findings(self) -> list[Finding]:
        """All findings, most severe first (stable within a severity)."""
        items = [f for out in self.outputs.values() for f in out.findings]
        return sorted(items, key=lambda f: -severity_rank(f.severity))

    @property
    def not_checked(self) -> list[NotChecked]:
        return [n for out in self.outputs.values() for n in out.not_checked]

    @property
    def metrics(self) -> dict[str, dict[str, Any]]:
        return {name: out.metrics for name, out in self.outputs.items()}

    def summary_line(self) -> str:
        """``training (estimated): 1 warning, 2 info; first to fix: PIPE001 Unbalanced ...`` (the
        first of the ranked actions, as ``popviz analyse`` lists them; else the most severe finding)."""
        found = self.findings
        estimated = " (estimated)" if self.report.provenance.estimated else ""
        actions = list(getattr(self.plan, "actions", None) or [])
        first = actions[0] if actions else (found[0] if found else None)
        top = f"; first to fix: {first.code} {_clip(first.title, 80)}" if first is not None else ""
        return f"{self.report.label}{estimated}: {severity_counts(found)}{top}"

    def __repr__(self) -> str:
        return (f"<EngineResult {self.summary_line()}; data: .findings, .metrics, .not_checked, "
                ".outputs, .plan, .report>")


@dataclass
class Result:
    """What ``popviz analyse`` computed: one EngineResult per engine."""

    root: str | None
    engines: list[EngineResult]
    analyses: list[str]
    warnings: list[str] = field(default_factory=list)
    """Problems with the input that left it usable (shown before the engines; ``--json``
    ``warnings``)."""
    ignored: frozenset[str] = frozenset()
    """Finding codes the team has accepted (``--ignore``, ``[tool.popviz] ignore``): still shown,
    marked ignored, and never failing ``--fail-on``."""

    @property
    def findings(self) -> list[Finding]:
        return [f for e in self.engines for f in e.findings]

    @property
    def title(self) -> str:
        """What the analysis is of: the directory read, else (a Report analysed in a notebook)
        its engines' names."""
        return self.root if self.root is not None else ", ".join(e.report.label for e in self.engines) or "no engine"

    def _repr_html_(self) -> str:
        from popviz.render.html import notebook

        return notebook(self)

    def __repr__(self) -> str:
        """A short summary for a REPL: engines, findings by severity, each engine's top finding
        (the full data is in ``engines``, ``findings`` and ``warnings``)."""
        n = len(self.engines)
        where = f" of {self.root}" if self.root else ""
        worst = self.worst_severity()
        lines = [f"<popviz Result{where}: {n} engine{'s' if n != 1 else ''}, "
                 f"{severity_counts(self.findings)}" + (f" (worst: {worst})" if worst else "")]
        lines += [f"  {e.summary_line()}" for e in self.engines]
        if self.warnings:
            lines.append(f"  {len(self.warnings)} input warning(s): .warnings")
        lines.append("  data: .engines[i].findings / .metrics / .plan / .not_checked; all of it as text: "
                     "popviz.render.console.render(result)>")
        return "\n".join(lines)

    def worst_severity(self) -> str | None:
        ranks = [severity_rank(f.severity) for f in self.findings]
        return SEVERITIES[max(ranks)] if ranks else None
