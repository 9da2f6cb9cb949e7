"""What ``popviz history show`` prints: per metric its trend and the runs where a step change
happened (console table, Markdown, JSON)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from popviz.ci.compare import fmt
from popviz.ci.trend import Step, Trend, sparkline

if TYPE_CHECKING:
    from popviz.ci.history import Run

HISTORY_SCHEMA = 1
"""Version of ``history show --json`` output."""


def headline(trends: list[Trend], runs: list[Run]) -> str:
    regressed = [(t, s) for t in trends for s, v in zip(t.steps, t.verdicts, strict=True) if v == "regressed"]
    steps = sum(len(t.steps) for t in trends)
    span = f"{len(runs)} run(s), {runs[0].title} to {runs[-1].title}" if runs else "no runs"
    if regressed:
        named = ", ".join(f"{t.engine} {t.metric} at {t.runs[s.index].title}" for t, s in regressed[:6])
        more = f" and {len(regressed) - 6} more" if len(regressed) > 6 else ""
        return f"popviz history: {span}; step regressions: {named}{more}"
    return f"popviz history: {span}; {steps} step change(s), none a regression"


def _step_lines(t: Trend) -> list[str]:
    return [f"{t.runs[s.index].title}: {fmt(s.before, t.unit)} → {fmt(s.after, t.unit)} "
            f"({_change(t, s)}) {v}" for s, v in zip(t.steps, t.verdicts, strict=True)]


def _change(t: Trend, s: Step) -> str:
    from popviz.ci.trend import change

    return change(s.before, s.after, t.unit)


def console(trends: list[Trend], runs: list[Run], *, all_rows: bool = False) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = Console(highlight=False, soft_wrap=False)
    con.print(escape(headline(trends, runs)), soft_wrap=True,
              style="bold red" if any("regressed" in t.verdicts for t in trends) else "bold")
    shown_ = trends if all_rows else [t for t in trends if t.steps or len(set(t.values)) > 1]
    if shown_:
        table = Table(box=None, header_style="bold", pad_edge=False)
        for col, just in (("engine", "left"), ("metric", "left"), ("runs", "right"), ("last", "right"),
                          ("trend", "left"), ("steps", "right")):
            table.add_column(col, justify=just, no_wrap=col in ("trend", "last"))
        for t in shown_:
            table.add_row(escape(t.engine), t.metric, str(len(t.values)), fmt(t.values[-1], t.unit),
                          sparkline(t.values), str(len(t.steps)),
                          style="red" if "regressed" in t.verdicts else None)
        con.print(table)
    flat = len(trends) - len(shown_)
    if flat:
        con.print(f"{flat} metric(s) never changed (--all shows them)")
    stepped = [t for t in trends if t.steps]
    if stepped:
        con.print("step changes:")
        for t in stepped:
            for line in _step_lines(t):
                con.print(f"  {escape(t.engine)} {t.metric} at {escape(line)}", soft_wrap=True)


def markdown(trends: list[Trend], runs: list[Run], *, all_rows: bool = False) -> str:
    def esc(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = [f"### {esc(headline(trends, runs))}", ""]
    shown_ = trends if all_rows else [t for t in trends if t.steps or len(set(t.values)) > 1]
    if shown_:
        lines += ["| engine | metric | runs | last | trend | step changes |", "|---|---|---:|---:|---|---|"]
        lines += [f"| {esc(t.engine)} | `{t.metric}` | {len(t.values)} | {fmt(t.values[-1], t.unit)} | "
                  f"{sparkline(t.values)} | {esc('; '.join(_step_lines(t)))} |" for t in shown_]
        lines.append("")
    return "\n".join(lines)


def as_json(trends: list[Trend], runs: list[Run], db: str) -> str:
    return json.dumps({"schema": HISTORY_SCHEMA, "db": db, "headline": headline(trends, runs),
                       "runs": [{"id": r.id, "label": r.label, "added_at": r.added_at} for r in runs],
                       "metrics": [t.to_dict() for t in trends]}, indent=2)
