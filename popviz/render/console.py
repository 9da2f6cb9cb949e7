"""The console view (rich): per engine a header, one table per analysis, then findings."""

from __future__ import annotations

from typing import IO

from popviz import escape
from popviz.analysis.findings import EngineResult, Result
from popviz.render import text

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
PROSE_WIDTH = 120
"""Findings and captions wrap at most this wide, even on a wider terminal (long lines read badly)."""


def _frame_table(title: str, frame):  # -> rich.table.Table
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", title_style="bold", show_edge=False,
                  pad_edge=False, expand=False, box=box.SIMPLE_HEAD, collapse_padding=True)
    for col in frame.columns:
        numeric = frame[col].dtype.kind in "iuf"
        # Numbers never wrap (a folded number misreads); headers and text wrap when narrow, a
        # snake_case header at its words (shown with spaces; --json keeps the names).
        table.add_column(escape.markup(str(col).replace("_", " ")), justify="right" if numeric else "left",
                         overflow="fold",
                         min_width=_widest(frame[col]) if numeric else None)
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


def _widest(column) -> int:
    return max((len(_cell(v)) for v in column), default=1)


def _cell(value: object) -> str:
    return escape.markup(text.fmt_cell(value))  # names from files are data, never markup


def _engine(console, engine: EngineResult, ignored: frozenset[str] = frozenset()) -> None:
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text as RichText

    r = engine.report
    prose = min(console.width, PROSE_WIDTH)
    label = max(len("execution"), len("batching"))

    def Text(value: str, style: str | None = None):
        # every value shown here may hold names from files; wrapped here so that a number keeps
        # its unit (rich would break at any space): panel borders and padding 4, the label, 2
        return RichText(text.prewrap(escape.term(value), console.width - 4 - label - 2), style=style or "")

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column(overflow="fold")
    est = r.provenance.estimated
    head.add_row("figures", Text(text.provenance_line(r), style="bold magenta" if est else "green"))
    head.add_row("target", Text(text.target_line(r)))
    head.add_row("strategy", Text(text.strategy_line(r)))
    for line in text.stage_lines(r):
        head.add_row("", Text(line))
    head.add_row("batching", Text(text.batching_line(r)))
    for k, line in enumerate(text.inferred_lines(r)):
        head.add_row("assumed" if k == 0 else "", Text(line))
    for part, desc in text.data_line(r):
        head.add_row(part, Text(desc) if desc != "missing" else "[dim]missing[/]")
    if r.path:
        head.add_row("path", Text(r.path))
    title = f"[bold]{escape.markup(r.label)}[/]" + ("  [bold magenta](estimated)[/]" if est else "")
    console.print(Panel(head, title=title, title_align="left", expand=False))
    for name, out in engine.outputs.items():
        has_table = out.table is not None and len(out.table)
        if has_table:
            console.print(_frame_table(escape.markup(text.analysis_title(name)), out.table))
        elif out.caption:
            console.print(f"[bold]{escape.markup(text.analysis_title(name))}[/]")
        if out.caption:
            console.print(Padding(RichText(text.prewrap(escape.term_lines(out.caption), prose - 1), style="dim"),
                                  (0, 0, 0, 1), expand=False), width=prose)
        if has_table or out.caption:
            console.print()
    for f in engine.findings:
        console.print(_finding(f, prose, ignored=f.code in ignored), width=prose)
    if engine.not_checked:
        console.print("[dim]not checked:[/]")
        for n in engine.not_checked:
            console.print(Padding(RichText(text.prewrap(escape.term(f"{n.analysis}: {n.check} — {n.reason}"),
                                                        prose - 2), style="dim"),
                                  (0, 0, 0, 2), expand=False), width=prose)
    if result_has_analyses(engine) and not engine.findings:
        console.print("[green]no findings[/]")
    console.print()


SEVERITY_COLUMN = 8
"""Width of the severity label column, its padding included."""


def _finding(f, width: int, ignored: bool = False):  # -> rich.table.Table
    """Severity label in a fixed-width column; title and evidence wrap beside it; the
    recommendation is wrapped here so that its code is never cut inside an identifier (rich's
    own wrapping would fold long code anywhere)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=SEVERITY_COLUMN - 1, no_wrap=True)
    grid.add_column(overflow="fold")
    body = Text()
    body.append(f"{escape.term(f.code)} ", style="bold")
    body.append(escape.term(f.title), style="bold")
    if ignored:
        body.append(f" ({text.IGNORED_MARK})", style="dim")
    body.append("\n" + text.prewrap(escape.term(f.evidence), width - SEVERITY_COLUMN - 1))
    rec = Text(no_wrap=True, overflow="ignore")
    lines = text.wrap_code_prose(f.recommendation, width - SEVERITY_COLUMN - 2)
    for k, line in enumerate(lines):
        rec.append("\n  " if k else "→ ", style="green")
        for piece, code in line:
            rec.append(escape.term(piece), style="cyan" if code else None)
    grid.add_row(Text(f.severity.upper(), style=SEVERITY_STYLE[f.severity]), Group(body, rec))
    return grid


def result_has_analyses(engine: EngineResult) -> bool:
    return bool(engine.outputs)


def render(result: Result, file: IO[str] | None = None, width: int | None = None) -> None:
    from rich.console import Console

    console = Console(file=escape.CommandSafeFile(file) if file is not None else None, width=width,
                      highlight=False)
    from rich.padding import Padding
    from rich.text import Text as RichText

    Text = escape.text
    for w in result.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))
    prose = min(console.width, PROSE_WIDTH)
    console.print("[bold]summary[/]")
    for line in text.summary_lines(result):
        console.print(Padding(RichText(text.prewrap(escape.term(line), prose - 1)), (0, 0, 0, 1), expand=False),
                      width=prose)
    console.print()
    runs = text.run_groups(result)
    for run, engines in runs:
        if len(runs) > 1:
            console.rule(f"[bold]{escape.markup(text.run_heading(run, engines))}[/]", align="left")
        for engine in engines:
            _engine(console, engine, result.ignored)
    n = len(result.engines)
    worst = result.worst_severity()
    console.print(f"{n} engine{'s' if n != 1 else ''} analysed"
                  + (f"; worst finding: {worst}" if worst else "")
                  + (f"; {len(result.warnings)} input warning(s), shown at the top" if result.warnings else ""))
