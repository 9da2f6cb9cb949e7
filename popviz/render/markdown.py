"""The Markdown view (for CI job summaries and pull-request comments)."""

from __future__ import annotations

from popviz import escape
from popviz.analysis.findings import EngineResult, Result
from popviz.render import text

ICON = {"error": "❌", "warning": "⚠️", "info": "ℹ️"}


_esc = escape.md
"""Every value shown here goes through it: names from files are data (no HTML, no Markdown
structure, one line)."""


def _prose(value: str) -> str:
    """Escaped text with its PopTorch code in backticks."""
    return "".join(escape.md_code(piece) if code else _esc(piece) for piece, code in text.marked_up_spans(value))


def _table(frame) -> list[str]:
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(map(_esc, cols)) + " |",
             "|" + "|".join("---:" if frame[c].dtype.kind in "iuf" else "---" for c in frame.columns) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_esc(text.fmt_cell(v)) for v in row) + " |")
    return lines


def _engine(engine: EngineResult, ignored: frozenset[str] = frozenset()) -> list[str]:
    r = engine.report
    est = " (estimated)" if r.provenance.estimated else ""
    out = [f"## {_esc(r.label)}{est}", ""]
    out += [f"- **Figures:** {_esc(text.provenance_line(r))}", f"- **Target:** {_esc(text.target_line(r))}",
            f"- **Strategy:** {_esc(text.strategy_line(r))}"]
    out += [f"  - {_esc(line)}" for line in text.stage_lines(r)]
    out += [f"- **Batching:** {_esc(text.batching_line(r))}"]
    out += [f"- **Assumed:** {_esc(line)}" for line in text.inferred_lines(r)]
    out += ["- **Data:** " + "; ".join(f"{_esc(p)}: {_esc(d)}" for p, d in text.data_line(r)), ""]
    for name, o in engine.outputs.items():
        has_table = o.table is not None and len(o.table)
        if has_table or o.caption:
            out += [f"### {_esc(text.analysis_title(name))}", ""]
        if has_table:
            out += [*_table(o.table), ""]
        if o.caption:
            out += [*(f"{escape.md(line, starts_line=True)}  " for line in o.caption.splitlines()), ""]
    if engine.findings:
        out += ["### Findings", ""]
        for f in engine.findings:
            mark = f" *({text.IGNORED_MARK})*" if f.code in ignored else ""
            out += [f"- {ICON[f.severity]} **{f.severity}** {escape.md_code(f.code)} {_esc(f.title)}{mark}",
                    f"  - {_esc(f.evidence)}", f"  - **Fix:** {_prose(f.recommendation)}"]
        out.append("")
    elif engine.outputs:
        out += ["No findings.", ""]
    if engine.not_checked:
        out += ["<details><summary>Not checked</summary>", ""]
        out += [f"- {_esc(n.analysis)}: {_esc(n.check)} — {_esc(n.reason)}" for n in engine.not_checked]
        out += ["", "</details>", ""]
    return out


def render(result: Result) -> str:
    lines = [f"# popviz analysis of {escape.md_code(result.title)}", ""]
    if result.warnings:
        lines += [*(f"- ⚠️ **warning** {_esc(w)}" for w in result.warnings), ""]
    lines += ["**Summary**", "", *(f"- {_prose(line)}" for line in text.summary_lines(result)), ""]
    for engine in result.engines:
        lines += _engine(engine, result.ignored)
    return "\n".join(lines).rstrip() + "\n"
