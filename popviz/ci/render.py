"""The outputs CI systems show for a comparison or a check: a console table, Markdown (for
``$GITHUB_STEP_SUMMARY`` and merge-request comments), JSON, and JUnit XML."""

from __future__ import annotations

import json
from itertools import zip_longest
from typing import IO, TYPE_CHECKING
from xml.etree import ElementTree as ET

from popviz import escape as esc
from popviz.ci.compare import IMPROVED, MOVED, REGRESSED, TRADED, Comparison, Row, budget_value, fmt

if TYPE_CHECKING:
    from rich.table import Table

MARK = {REGRESSED: "✗ regressed", IMPROVED: "✓ improved", MOVED: "↔ moved", TRADED: "⇄ traded"}
RESPLIT_NOTE = "the split changed: per-stage and per-IPU rows are marked moved and do not fail"
LIST_LINES = 8
"""Entries of a changed list (stages, layers moved) shown in the console."""


UNKNOWN_NOTE = "not compared, unknown to this popviz (from a newer one, or misspelt)"
DIFF_LINES = 5
"""Items of an engine's per-layer / per-program diff the console and Markdown show (--json: all)."""


def _diff_heading(c: Comparison, engine: str) -> str:
    measure = next((d["measure"] for d in c.breakdown if d["engine"] == engine), "cycles")
    return f"what changed in {engine}, ranked by {'cycles' if measure == 'cycles' else 'memory'}"


def _diff_lines(c: Comparison, engine: str) -> tuple[list[str], int]:
    """The first DIFF_LINES items of ``engine``'s diff as sentences, and how many more there are."""
    from popviz.ci.diff import describe

    mine = [d for d in c.breakdown if d["engine"] == engine]
    return [describe(d) for d in mine[:DIFF_LINES]], max(0, len(mine) - DIFF_LINES)


def _unknown(c: Comparison) -> str:
    return ", ".join(f"{u['engine']} {u['metric']}" for u in c.unknown_metrics)


def _list_changes(ch: dict) -> list[str]:
    """``stage 1: IPU1: a → IPU1: b`` for each entry of a list-valued change (the stages) that differs."""
    what = "stage " if ch["field"] == "stages" else "#"
    return [f"{what}{i}: {b or '—'} → {n or '—'}"
            for i, (b, n) in enumerate(zip_longest(ch["base"], ch["new"])) if b != n]


def _change_narrow(r: Row) -> str:
    """A relative change of 100% or more without decimals (``+31,663%``), so that a large one
    leaves the metric column room for whole names at 80 columns."""
    if r.unit != "pct" and r.base and r.new is not None:
        relative = (r.new - r.base) / abs(r.base) * 100
        if abs(relative) >= 100:
            return f"{relative:+,.0f}%"
    return r.change


def _verdict(v: str) -> str:
    return MARK.get(v, v)


def _fmt_narrow(value: float | None, unit: str) -> str:
    """``fmt`` for narrow terminals: bytes in binary units (the exact bytes are in --json and Markdown)."""
    if unit == "bytes" and value is not None:
        from popviz.units import fmt_bytes

        return fmt_bytes(value)
    return fmt(value, unit)


def console(c: Comparison, *, all_rows: bool = False, file: IO[str] | None = None,
            width: int | None = None, hints: bool = True) -> None:
    """Print the comparison (to ``file``, plain text, when given; else stdout)."""
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    escape = esc.markup  # every value from a file is data: no markup, no control character
    con = Console(highlight=False, soft_wrap=False, file=esc.CommandSafeFile(file) if file is not None else None,
                  width=width)
    from popviz.ui import wrap_line

    def say(text: str, style: str | None = None) -> None:
        """A line from the comparison broken between words to the console's width."""
        for part in wrap_line(text, con.width):
            con.print(escape(part), style=style, soft_wrap=True)

    say(c.headline(), style="bold red" if c.failed else "bold green")
    if c.base_label:
        say(f"base: {c.base_label}")
    if c.estimated_line():
        say(c.estimated_line())
    if c.not_fitting_line():
        say(c.not_fitting_line(), style="red")
    if c.environment_line():  # beside the verdict: a new SDK explains a change of every figure
        say(c.environment_line(), style="yellow")
    for engine in dict.fromkeys(d["engine"] for d in c.breakdown):
        lines, more = _diff_lines(c, engine)
        say(_diff_heading(c, engine) + ":")
        for line in lines:
            say(f"  {line}")
        if more:
            con.print(f"  and {more} more (--json lists them)")
    for note in (*c.environment_notes, *c.breakdown_notes):
        say(note, style="dim")
    if c.config_changes:
        con.print("configuration changed (explains most metric changes):")
        for ch in c.config_changes:
            head = f"  {ch['engine']} {ch['field']}"
            if isinstance(ch["base"], dict) and isinstance(ch["new"], dict):  # layers moved: name -> IPU
                say(head + ":")
                moved = list(ch["base"])
                for k in moved[:LIST_LINES]:
                    say(f"    {k}: IPU{ch['base'][k]} → IPU{ch['new'].get(k)}")
                if len(moved) > LIST_LINES:
                    con.print(f"    and {len(moved) - LIST_LINES} more (--json lists them)")
            elif isinstance(ch["base"], list) and isinstance(ch["new"], list):
                say(head + ":")  # a list (the stages): the entries that differ, one per line
                pairs = _list_changes(ch)
                for line in pairs[:LIST_LINES]:
                    say(f"    {line}")
                if len(pairs) > LIST_LINES:
                    con.print(f"    and {len(pairs) - LIST_LINES} more (--json lists them)")
            else:
                say(f"{head}: {ch['base']} → {ch['new']}")
    if c.resplit:
        say(RESPLIT_NOTE)
    for label, engines in (("only in base", c.quiet_only_base), ("only in new", c.only_new)):
        if engines:
            say(f"{label}: {', '.join(engines)}")
    if c.unknown_metrics:  # one engine-metric pair per line, broken only between words
        say(f"{UNKNOWN_NOTE}:")
        for u in c.unknown_metrics[:LIST_LINES]:
            say(f"  {u['engine']} {u['metric']}")
        if len(c.unknown_metrics) > LIST_LINES:
            con.print(f"  and {len(c.unknown_metrics) - LIST_LINES} more (--json lists them)")
    rows = c.rows if all_rows else [r for r in c.rows if r.verdict != "="]
    for engine in dict.fromkeys(r.engine for r in rows):  # one table per engine: names are not cut
        mine = [r for r in rows if r.engine == engine]
        # the widest layout in which whole metric names fit: full figures with the threshold column,
        # else bytes in MiB and one space between columns, else also without the threshold column
        # (--json and Markdown have it); names fold only where even that is too wide
        for wide, threshold in ((True, True), (False, True), (False, False)):
            t = _metric_table(engine, mine, wide=wide, threshold=threshold)
            if Measurement.get(con, con.options.update_width(10_000), t).maximum <= con.width:
                break
        con.print(t)
    same = sum(r.verdict == "=" for r in c.rows)
    if same and not all_rows:
        con.print(f"{same} metric(s) unchanged" + (" (--all shows them)" if hints else ""))
    if c.budgets:
        t = Table(box=None, header_style="bold", pad_edge=False)
        for col in ("engine", "metric", "value", "budget", "verdict"):
            t.add_column(col)
        for b in c.budgets:
            t.add_row(escape(b["engine"]), escape(b["metric"]), budget_value(b), escape(b["budget"]),
                      "ok" if b["ok"] else "✗ broken", style=None if b["ok"] else "red")
        con.print(t)
    if c.findings:  # the severity and code in a column of their own: the title wraps beside them
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column()
        for f in c.findings:
            state = "ignored" if f["ignored"] else "fails"
            grid.add_row(f"{escape(f['severity'].upper())} {escape(f['code'])}",
                         f"{escape(f['engine'])}: {escape(f['title'])} ({state})")
        con.print(grid)


def markdown(c: Comparison, *, all_rows: bool = False) -> str:
    md, code = esc.md, esc.md_code  # every value from a file is data: no HTML, no Markdown structure

    lines = [f"### {'❌' if c.failed else '✅'} {md(c.headline())}", ""]
    if c.base_label:
        lines += [f"Base: {md(c.base_label)}", ""]
    if c.estimated_line():
        lines += [md(c.estimated_line()[0].upper() + c.estimated_line()[1:]) + ".", ""]
    if c.not_fitting_line():
        lines += ["**" + md(c.not_fitting_line()) + ".**", ""]
    if c.environment:
        lines += ["**Environment changed:** " + ", ".join(
            f"{md(e['label'])} {md(e['base'] or 'not recorded')} → {md(e['new'] or 'not recorded')}"
            for e in c.environment), ""]
    for engine in dict.fromkeys(d["engine"] for d in c.breakdown):
        from popviz.ci.diff import describe

        mine = [d for d in c.breakdown if d["engine"] == engine]
        heading = _diff_heading(c, engine)
        lines += [f"**{md(heading[0].upper() + heading[1:])}:**", "",
                  "| kind | name | status | change |", "|---|---|---|---|"]
        # a "|" ends a table cell even inside a code span: such a name is escaped text instead
        lines += [f"| {md(d['kind'])} | {code(d['name']) if '|' not in d['name'] else md(d['name'])} | "
                  f"{md(d['status'])} | "
                  f"{md(describe(d)[len(d['kind']) + len(d['name']) + 2:])} |" for d in mine[:DIFF_LINES]]
        lines.append("")
        if len(mine) > DIFF_LINES:
            lines += [f"And {len(mine) - DIFF_LINES} more (`--json` lists them).", ""]
    for note in (*c.environment_notes, *c.breakdown_notes):
        lines += [md(note[0].upper() + note[1:]) + ".", ""]
    if c.config_changes:
        lines += ["**Configuration changed** (explains most metric changes):", ""]
        lines += [f"- {code(ch['engine'])} {md(ch['field'])}: " + (
                  ", ".join(f"{md(k)} IPU{md(v)} → IPU{md(ch['new'].get(k))}" for k, v in ch["base"].items())
                  if isinstance(ch["base"], dict) else "; ".join(md(x) for x in _list_changes(ch))
                  if isinstance(ch["base"], list) and isinstance(ch["new"], list)
                  else f"{md(ch['base'])} → {md(ch['new'])}")
                  for ch in c.config_changes]
        lines.append("")
    if c.resplit:
        lines += [RESPLIT_NOTE[0].upper() + RESPLIT_NOTE[1:] + ".", ""]
    for label, engines in (("Only in base", c.quiet_only_base), ("Only in new", c.only_new)):
        if engines:
            lines += [f"**{label}:** {md(', '.join(engines))}", ""]
    if c.unknown_metrics:
        lines += [f"{UNKNOWN_NOTE[0].upper() + UNKNOWN_NOTE[1:]}: {md(_unknown(c))}", ""]
    rows = c.rows if all_rows else [r for r in c.rows if r.verdict != "="]
    if rows:
        lines += ["| engine | metric | base | new | change | threshold | verdict |", "|---|---|---:|---:|---:|---:|---|"]
        lines += [f"| {md(r.engine)} | {code(r.metric)} | {fmt(r.base, r.unit)} | {fmt(r.new, r.unit)} | {r.change} | "
                  f"{md(r.threshold)} | {_verdict(r.verdict)} |" for r in rows]
        lines.append("")
    same = sum(r.verdict == "=" for r in c.rows)
    if same and not all_rows:  # as the console says: a table of changes alone reads as all there was
        lines += [f"{same} metric(s) unchanged.", ""]
    if c.budgets:
        lines += ["| engine | metric | value | budget | verdict |", "|---|---|---:|---|---|"]
        lines += [f"| {md(b['engine'])} | {code(b['metric'])} | {budget_value(b)} | {md(b['budget'])} | "
                  f"{'ok' if b['ok'] else '✗ broken'} |" for b in c.budgets]
        lines.append("")
    if c.findings:
        lines += [f"- {md(f['severity'])} {code(f['code'])} {md(f['engine'])}: {md(f['title'])}"
                  f" ({'ignored' if f['ignored'] else 'fails'})" for f in c.findings]
        lines.append("")
    return "\n".join(lines)


def _metric_table(engine: str, rows: list[Row], *, wide: bool, threshold: bool) -> Table:
    """One engine's rows: full-width figures when ``wide`` (else bytes in MiB, tight columns), the
    threshold column when ``threshold``."""
    from rich.table import Table

    escape = esc.markup  # data from files: no markup, no control character
    t = Table(title=escape(engine), title_justify="left", title_style="bold", box=None, header_style="bold",
              pad_edge=False, collapse_padding=not wide)
    show = fmt if wide else _fmt_narrow
    for col, just in (("metric", "left"), ("base", "right"), ("new", "right"), ("change", "right"),
                      ("threshold", "right"), ("verdict", "left")):
        if col == "threshold" and not threshold:
            continue
        # Only the metric name may wrap (folded, never cut short); numbers and verdicts never do.
        t.add_column(col, justify=just, no_wrap=col != "metric", overflow="fold")
    for r in rows:
        style = "red" if r.verdict == REGRESSED else ("green" if r.verdict == IMPROVED else None)
        cells = [escape(r.metric), show(r.base, r.unit), show(r.new, r.unit),
                 r.change if wide else _change_narrow(r), escape(r.threshold), _verdict(r.verdict)]
        if not threshold:
            del cells[4]
        t.add_row(*cells, style=style)
    return t


def text(c: Comparison, *, width: int = 120) -> str:
    """The console view as plain text (pytest failure messages)."""
    import io

    buf = io.StringIO()
    console(c, file=buf, width=width, hints=False)
    return buf.getvalue().rstrip() + "\n"


def as_json(c: Comparison) -> str:
    return json.dumps(c.to_dict(), indent=2, allow_nan=False)


def _junit_explanation(c: Comparison, engine: str) -> str:
    """The lines a regression's failure text adds: the environment's changes and what grew most."""
    from popviz.ci.diff import describe

    out = ""
    if c.environment_line():
        out += "\n" + c.environment_line()
    grown = c.explained(engine)
    if grown:
        out += "\nlargest changes: " + "; ".join(describe(d) for d in grown)
    return out


def junit(c: Comparison, name: str = "popviz") -> str:
    """JUnit XML: one testcase per metric, budget and failing finding; failures carry the values.
    Every value goes through ``escape.xml`` (characters XML forbids never reach the file)."""
    x = esc.xml

    def sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
        el = ET.SubElement(parent, tag, {k: x(v) for k, v in attrs.items()})
        if text is not None:
            el.text = x(text)
        return el

    suite = ET.Element("testsuite", name=x(name))
    if c.environment:  # beside every verdict: what else changed between the runs
        props = sub(suite, "properties")
        for e in c.environment:
            sub(props, "property", name=f"environment.{e['field']}",
                value=f"{e['base'] or 'not recorded'} → {e['new'] or 'not recorded'}")
    cases = 0
    failures = 0
    for r in c.rows:
        case = sub(suite, "testcase", classname=f"popviz.{r.engine}", name=r.metric)
        cases += 1
        if r.verdict == REGRESSED:
            failures += 1
            msg = (f"{r.metric} regressed: {fmt(r.base, r.unit)} → {fmt(r.new, r.unit)} ({r.change}; "
                   f"threshold {r.threshold})")
            sub(case, "failure", msg + _junit_explanation(c, r.engine), message=msg, type="regression")
        elif r.verdict in ("new", "gone"):
            sub(case, "skipped", message=f"{r.metric} is {r.verdict} (on one side only)")
        elif r.verdict == TRADED:  # passes, but says why a share beyond its threshold does not fail
            sub(case, "system-out", f"{r.metric} traded: {fmt(r.base, r.unit)} → {fmt(r.new, r.unit)} ({r.change}; "
                f"threshold {r.threshold}) while the call got faster; a --fail rule naming it makes it a gate")
    for lost in c.lost:  # an engine that ran in BASE and not in NEW
        case = sub(suite, "testcase", classname="popviz.engines", name=lost.split(" ran in BASE")[0])
        cases += 1
        failures += 1
        sub(case, "failure", lost, message=lost, type="engine")
    for b in c.budgets:
        case = sub(suite, "testcase", classname=f"popviz.{b['engine']}.budget", name=b["metric"])
        cases += 1
        if not b["ok"]:
            failures += 1
            msg = f"{b['metric']} = {budget_value(b)} breaks the budget {b['budget']}"
            sub(case, "failure", msg, message=msg, type="budget")
    for f in c.findings:
        case = sub(suite, "testcase", classname=f"popviz.{f['engine']}.finding", name=f["code"])
        cases += 1
        if f["ignored"]:
            sub(case, "skipped", message=f"{f['code']} ignored (accepted by the team)")
        else:
            failures += 1
            sub(case, "failure", f["title"], message=f"{f['code']}: {f['title']}", type="finding")
    suite.set("tests", str(cases))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
