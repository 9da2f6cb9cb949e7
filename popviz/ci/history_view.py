"""What ``popviz history show`` prints: per metric its trend and the runs where a step change
happened (console table, Markdown, JSON)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from popviz import escape as esc
from popviz.ci.compare import fmt
from popviz.ci.render import UNKNOWN_NOTE
from popviz.ci.trend import EnvironmentChange, Step, Trend, sparkline
from popviz.ui import wrap_line

if TYPE_CHECKING:
    from popviz.ci.history import Run

HISTORY_SCHEMA = 1
"""Version of ``history show --json`` output."""
SPARK_WIDTH = 24
"""Runs in the trend column (half on a terminal narrower than 100 columns)."""
HEADLINE_NAMES = 2
"""Metrics named per run in the first line (the table and the step lines list them all)."""


def headline(trends: list[Trend], runs: list[Run]) -> str:
    """The first line: the runs where a metric stepped the worse way, with how many metrics."""
    span = f"{len(runs)} run(s), {runs[0].title} to {runs[-1].title}" if runs else "no runs"
    by_run: dict[int, list[str]] = {}
    titles: dict[int, str] = {}
    for t in trends:
        for s, v in zip(t.steps, t.verdicts, strict=True):
            if v == "regressed":
                run = t.runs[s.index]
                by_run.setdefault(run.id, []).append(f"{t.engine} {t.metric}")
                titles[run.id] = run.title
    if not by_run:
        steps = sum(len(t.steps) for t in trends)
        return f"popviz history: {span}; {steps} step change(s), none a regression"
    parts = []
    for run_id in sorted(by_run):
        names = by_run[run_id]
        named = ", ".join(names[:HEADLINE_NAMES]) + (f" and {len(names) - HEADLINE_NAMES} more"
                                                     if len(names) > HEADLINE_NAMES else "")
        parts.append(f"at {titles[run_id]} in {len(names)} metric(s): {named}")
    return f"popviz history: {span}; step regression " + "; ".join(parts)


def estimated_line(estimated: list[tuple[str, int, int]]) -> str:
    """``estimated by the emulator's cost model, not measured: training (all 5 runs)``, or ""."""
    parts = [f"{engine} ({'all ' + str(total) if est == total else f'{est} of {total}'} runs)"
             for engine, est, total in estimated]
    return f"estimated by the emulator's cost model, not measured: {', '.join(parts)}" if parts else ""


def environment_lines(env: list[EnvironmentChange]) -> list[str]:
    """``#5 (c5) training, inference: Poplar SDK 3.2.0 → 3.3.0``: once per run and change, the
    engines it touched named together."""
    grouped: dict[tuple[int, tuple[str, ...]], list[EnvironmentChange]] = {}
    for c in env:
        grouped.setdefault((c.run.id, tuple(c.changes)), []).append(c)
    return [f"{cs[0].run.title} {', '.join(c.engine for c in cs)}: {'; '.join(key[1])}"
            for key, cs in sorted(grouped.items())]


ENV_TITLE = "environment changed from the engine's previous run (explains steps too):"


def _step_lines(t: Trend) -> list[str]:
    return [f"{t.runs[s.index].title}: {fmt(s.before, t.unit)} → {fmt(s.after, t.unit)} "
            f"({_change(t, s)}) {v}" for s, v in zip(t.steps, t.verdicts, strict=True)]


def config_changes(trends: list[Trend]) -> list[str]:
    """``engine at #N (label): field: old → new; ...`` once per engine and run where a metric
    stepped and the configuration changed too (it explains most steps)."""
    seen: dict[tuple[str, int], str] = {}
    for t in trends:
        for s, c in zip(t.steps, t.config_changes, strict=True):
            run = t.runs[s.index]
            if c and (t.engine, run.id) not in seen:
                seen[(t.engine, run.id)] = f"{t.engine} at {run.title}: {'; '.join(c)}"
    return [seen[k] for k in sorted(seen, key=lambda k: (k[1], k[0]))]


def _change(t: Trend, s: Step) -> str:
    from popviz.ci.trend import change

    return change(s.before, s.after, t.unit)


def console(trends: list[Trend], runs: list[Run], *, all_rows: bool = False, unknown: list[str] | None = None,
            estimated: list[tuple[str, int, int]] | None = None, env: list[EnvironmentChange] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    escape = esc.markup  # every value from the history file is data: no markup, no control character

    import sys

    con = Console(highlight=False, soft_wrap=False, file=esc.CommandSafeFile(sys.stdout))
    style = "bold red" if any("regressed" in t.verdicts for t in trends) else "bold"
    for part in wrap_line(headline(trends, runs), con.width):  # the verdict, broken between words
        con.print(escape(part), soft_wrap=True, style=style)
    for part in wrap_line(estimated_line(estimated or []), con.width) if estimated else ():
        con.print(escape(part), soft_wrap=True, style="yellow")
    shown_ = trends if all_rows else [t for t in trends if t.steps or len(set(t.values)) > 1]
    spark = SPARK_WIDTH if con.width >= 100 else SPARK_WIDTH // 2
    for engine in dict.fromkeys(t.engine for t in shown_):  # one table per engine: fits 80 columns
        rows = [t for t in shown_ if t.engine == engine]
        table = Table(title=escape(engine), title_justify="left", title_style="bold", box=None,
                      header_style="bold", pad_edge=False)
        for col, just in (("metric", "left"), ("runs", "right"), ("last", "right"), ("trend", "left"),
                          ("steps", "right")):
            table.add_column(col, justify=just, no_wrap=col != "metric", overflow="fold",
                             min_width=max(len(t.metric) for t in rows) if col == "metric" else None)
        for t in rows:
            table.add_row(escape(t.metric), str(len(t.values)), fmt(t.values[-1], t.unit), sparkline(t.values, spark),
                          str(len(t.steps)), style="red" if "regressed" in t.verdicts else None)
        con.print(table)
    flat = len(trends) - len(shown_)
    if flat:
        con.print(f"{flat} metric(s) never changed (--all shows them)")
    def say(line: str) -> None:  # broken between words at the width (a name or value is never cut)
        for part in wrap_line(line, con.width):
            con.print(escape(part), soft_wrap=True)

    changed = config_changes(trends)
    if changed:
        say("configuration changed where metrics stepped (explains most steps):")
        for line in changed:
            say(f"  {line}")
    if env:
        say(ENV_TITLE)
        for line in environment_lines(env):
            say(f"  {line}")
    stepped = [t for t in trends if t.steps]
    if stepped:
        say("step changes:")
        for t in stepped:
            for line in _step_lines(t):
                say(f"  {t.engine} {t.metric} at {line}")
    if unknown:
        say(f"{UNKNOWN_NOTE}: {', '.join(unknown)}")


def markdown(trends: list[Trend], runs: list[Run], *, all_rows: bool = False, unknown: list[str] | None = None,
             estimated: list[tuple[str, int, int]] | None = None, env: list[EnvironmentChange] | None = None) -> str:
    md, code = esc.md, esc.md_code  # no HTML, no Markdown structure from the history file

    lines = [f"### {md(headline(trends, runs))}", ""]
    if estimated:
        lines += [f"*{md(estimated_line(estimated))}*", ""]
    changed = config_changes(trends)
    if changed:
        lines += ["**Configuration changed where metrics stepped** (explains most steps):", ""]
        lines += [f"- {md(line)}" for line in changed] + [""]
    if env:
        lines += [f"**{md(ENV_TITLE[0].upper() + ENV_TITLE[1:-1])}**:", ""]
        lines += [f"- {md(line)}" for line in environment_lines(env)] + [""]
    shown_ = trends if all_rows else [t for t in trends if t.steps or len(set(t.values)) > 1]
    if shown_:
        lines += ["| engine | metric | runs | last | trend | step changes |", "|---|---|---:|---:|---|---|"]
        lines += [f"| {md(t.engine)} | {code(t.metric)} | {len(t.values)} | {fmt(t.values[-1], t.unit)} | "
                  f"{sparkline(t.values)} | {md('; '.join(_step_lines(t)))} |" for t in shown_]
        lines.append("")
    if unknown:
        lines += [f"{UNKNOWN_NOTE[0].upper() + UNKNOWN_NOTE[1:]}: {md(', '.join(unknown))}", ""]
    return "\n".join(lines)


def as_json(trends: list[Trend], runs: list[Run], db: str, unknown: list[str] | None = None,
            estimated: list[tuple[str, int, int]] | None = None, env: list[EnvironmentChange] | None = None) -> str:
    return json.dumps({"schema": HISTORY_SCHEMA, "db": db, "headline": headline(trends, runs),
                       "estimated": [{"engine": e, "runs_estimated": n, "runs": total}
                                     for e, n, total in estimated or []],
                       "runs": [{"id": r.id, "label": r.label, "added_at": r.added_at} for r in runs],
                       "metrics": [t.to_dict() for t in trends], "unknown_metrics": unknown or [],
                       "environment_changes": [c.to_dict() for c in env or []]},
                      indent=2, allow_nan=False)
