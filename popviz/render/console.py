"""The console view (rich): per engine a header, one table per analysis, then findings."""

from __future__ import annotations

from typing import IO

from popviz.analysis.findings import EngineResult, Result
from popviz.render import text

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _frame_table(title: str, frame):  # -> rich.table.Table
    from rich.table import Table

    table = Table(title=title, title_justify="left", title_style="bold", show_edge=False,
                  pad_edge=False, expand=False)
    for col in frame.columns:
        numeric = frame[col].dtype.kind in "iuf"
        table.add_column(str(col), justify="right" if numeric else "left", overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


def _cell(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if value != value:
            return "–"
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _engine(console, engine: EngineResult) -> None:
    from rich.panel import Panel
    from rich.table import Table

    r = engine.report
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    est = r.provenance.estimated
    head.add_row("figures", f"[{'bold magenta' if est else 'green'}]{text.provenance_line(r)}[/]")
    head.add_row("target", text.target_line(r))
    head.add_row("strategy", text.strategy_line(r))
    for line in text.stage_lines(r):
        head.add_row("", line)
    head.add_row("batching", text.batching_line(r))
    for part, desc in text.data_line(r):
        head.add_row(part, desc if desc != "missing" else "[dim]missing[/]")
    if r.path:
        head.add_row("path", r.path)
    title = f"[bold]{r.label}[/]" + ("  [bold magenta](estimated)[/]" if est else "")
    console.print(Panel(head, title=title, title_align="left", expand=False))
    for name, out in engine.outputs.items():
        if out.table is not None and len(out.table):
            console.print(_frame_table(name.replace("_", " "), out.table))
            console.print()
    for f in engine.findings:
        style = SEVERITY_STYLE[f.severity]
        console.print(f"[{style}]{f.severity.upper():7}[/] [bold]{f.code}[/] {f.title}",
                      highlight=False)
        console.print(f"         {f.evidence}", highlight=False, soft_wrap=False)
        console.print(f"         [green]→[/] {f.recommendation}", highlight=False)
    for n in engine.not_checked:
        console.print(f"[dim]not checked ({n.analysis}): {n.check} — {n.reason}[/]", highlight=False)
    if result_has_analyses(engine) and not engine.findings:
        console.print("[green]no findings[/]")
    console.print()


def result_has_analyses(engine: EngineResult) -> bool:
    return bool(engine.outputs)


def render(result: Result, file: IO[str] | None = None, width: int | None = None) -> None:
    from rich.console import Console

    console = Console(file=file, width=width, highlight=False)
    for engine in result.engines:
        _engine(console, engine)
    n = len(result.engines)
    worst = result.worst_severity()
    console.print(f"{n} engine{'s' if n != 1 else ''} analysed"
                  + (f"; worst finding: {worst}" if worst else ""))
