"""The HTML view: one self-contained page (inline CSS, figures as inline SVG, no script, no font
or image fetched from anywhere), for CI artifacts and notebooks. It opens offline and prints well.

It shows the same result as the console, Markdown and JSON views: a summary (engines, the worst
finding, the findings in order), then per engine the run's configuration, the analysis tables,
the findings with the PopTorch change to make, what was not checked, and the figures.
"""

from __future__ import annotations

import html
import io
import re
from typing import TYPE_CHECKING

from popviz import escape
from popviz._version import __version__
from popviz.analysis.findings import EngineResult, Result
from popviz.render import text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSS = """
:root { --fg:#1a1a1a; --muted:#5f5f5f; --line:#d0d0d0; --error:#b2182b; --warning:#b35806; --info:#2166ac; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       max-width: 1100px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 2px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 6px; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: 1px 7px; border-radius: 9px; font-size: 12px; font-weight: 600;
         border: 1px solid currentColor; }
.error { color: var(--error); } .warning { color: var(--warning); } .info { color: var(--info); }
.estimated { background: #fff4d6; color: #7a5200; border-color: #e0b040; }
table { border-collapse: collapse; margin: 6px 0 10px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 10px; text-align: left; }
td.num { text-align: right; } th { background: #f4f4f4; }
dl.config { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 6px 0; }
dl.config dt { color: var(--muted); } dl.config dd { margin: 0; }
.finding { border-left: 4px solid var(--line); padding: 4px 10px; margin: 8px 0; page-break-inside: avoid; }
.finding.error { border-color: var(--error); } .finding.warning { border-color: var(--warning); }
.finding.info { border-color: var(--info); }
.finding p { margin: 3px 0; color: var(--fg); }
code { font: 12.5px ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; background: #f4f4f4;
       padding: 0 3px; border-radius: 3px; overflow-wrap: anywhere; }
figure { margin: 10px 0; page-break-inside: avoid; } figure svg { max-width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 12px; }
.summary li { margin: 2px 0; }
.gain { color: #1b7837; font-size: 12.5px; font-weight: 600; overflow-wrap: anywhere; }
h2, h3 { break-after: avoid; page-break-after: avoid; }
table, dl.config { break-inside: avoid; page-break-inside: avoid; }
@media print { body { max-width: none; margin: 0; font-size: 12px; }
               section.engine { break-before: page; page-break-before: always; }
               a { color: inherit; text-decoration: none; } }
"""


def _e(value: object) -> str:
    """Text (names from files included) as HTML: no tag, no control character (escape.term)."""
    return html.escape(escape.term_lines(value), quote=True)


def _prose(value: str) -> str:
    return "".join(f"<code>{_e(p)}</code>" if code else _e(p) for p, code in text.marked_up_spans(value))


def _table(frame) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in frame.columns)
    numeric = [frame[c].dtype.kind in "iuf" for c in frame.columns]
    rows = []
    for row in frame.itertuples(index=False):
        cells = "".join(f'<td class="num">{_e(text.fmt_cell(v))}</td>' if n else f"<td>{_e(text.fmt_cell(v))}</td>"
                        for v, n in zip(row, numeric, strict=True))
        rows.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def svg(fig: Figure) -> str:
    """A figure as inline SVG markup (text kept as text, so it stays searchable and sharp)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    markup = buf.getvalue()
    markup = markup[markup.index("<svg"):]  # drop the XML prologue and DOCTYPE (it names a URL)
    return re.sub(r"\s*<metadata>.*?</metadata>", "", markup, count=1, flags=re.S)


NOTEBOOK_FIGURES = ("stages", "memory", "breakdown")
"""The small figures a notebook shows inline under a Report or an analysis result."""


def _figures(engine: EngineResult, only: tuple[str, ...] | None = None) -> list[str]:
    from popviz import plot

    out = []
    for name, fig in plot.figures(engine.report, only).items():
        if isinstance(fig, plot.PlotDataError):
            why = fig.message.removeprefix(f"{name}: ")  # the message names its figure; once is enough
            out.append(f'<p class="muted">{_e(name)}: not drawn — {_e(why)}</p>')
            continue
        out.append(f"<figure>{svg(fig)}<figcaption>{_e(name)}</figcaption></figure>")
    return out


def _actions(engine: EngineResult) -> list:
    """The engine's ranked actions (its plan), or [] when the result carries no plan."""
    plan = getattr(engine, "plan", None)
    return list(getattr(plan, "actions", None) or [])


def _gain(action) -> str:
    return str(getattr(action, "gain_text", "") or "")


def _finding(f, gain: str = "", ignored: bool = False) -> str:
    label = "" if gain.startswith("gain ") else "estimated gain: "  # never "estimated gain: gain not estimated"
    gain_html = f' <span class="gain">{label}{_prose(gain)}</span>' if gain else ""
    return (f'<div class="finding {f.severity}"><div><span class="badge {f.severity}">{f.severity}</span> '
            f"<strong>{_e(f.code)}</strong> {_e(f.title)}{gain_html}"
            + (f' <span class="muted">({_e(text.IGNORED_MARK)})</span>' if ignored else "") + "</div>"
            f"<p>{_e(f.evidence)}</p><p>→ {_prose(f.recommendation)}</p></div>")


def _engine(engine: EngineResult, figures: bool | tuple[str, ...], ignored: frozenset[str] = frozenset()) -> list[str]:
    r = engine.report
    est = ' <span class="badge estimated">estimated</span>' if r.provenance.estimated else ""
    out = [f'<section class="engine" id="engine-{_e(r.label)}"><h2>{_e(r.label)}{est}</h2>', '<dl class="config">']
    rows = [("figures", text.provenance_line(r)), ("target", text.target_line(r)),
            ("strategy", text.strategy_line(r)), *(("", line) for line in text.stage_lines(r)),
            ("batching", text.batching_line(r)),
            *(("assumed" if k == 0 else "", line) for k, line in enumerate(text.inferred_lines(r))),
            *text.data_line(r)]
    out += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows]
    out.append("</dl>")
    for name, o in engine.outputs.items():
        has_table = o.table is not None and len(o.table)
        if has_table or o.caption:
            out.append(f"<h3>{_e(text.analysis_title(name))}</h3>")
        if has_table:
            out.append(_table(o.table))
        if o.caption:
            out.append("<p class=\"muted\">" + "<br>".join(_e(line) for line in o.caption.splitlines()) + "</p>")
    out.append("<h3>Findings</h3>")
    gains = {getattr(a, "code", None): _gain(a) for a in _actions(engine)}
    out += [_finding(f, gains.get(f.code, ""), f.code in ignored) for f in engine.findings] or ["<p>No findings.</p>"]
    if engine.not_checked:
        out.append("<h3>Not checked</h3><ul>")
        out += [f"<li>{_e(n.analysis)}: {_e(n.check)} — {_e(n.reason)}</li>" for n in engine.not_checked]
        out.append("</ul>")
    if figures:
        out.append("<h3>Figures</h3>")
        out += _figures(engine, figures if isinstance(figures, tuple) else None)
    out.append("</section>")
    return out


def _summary(result: Result) -> list[str]:
    worst = result.worst_severity()
    estimated = any(e.report.provenance.estimated for e in result.engines)
    out = ['<section class="summary"><h2>Summary</h2><ul>',
           f"<li>{len(result.engines)} engine{'s' if len(result.engines) != 1 else ''}: "
           + ", ".join(f'<a href="#engine-{_e(e.report.label)}">{_e(e.report.label)}</a>'
                       + (f" ({_e(text.strategy_line(e.report))})" if e.report.has("config") else "")
                       for e in result.engines)
           + "</li>"]
    if estimated:
        out.append('<li><span class="badge estimated">estimated</span> figures come from popviz\'s emulator '
                   "cost model, not from an IPU</li>")
    if worst:
        label, f = text.worst_finding(result)
        out.append(f'<li>worst finding: <span class="badge {worst}">{worst}</span> '
                   f"<strong>{_e(f.code)}</strong> {_e(f.title)} <span class=\"muted\">({_e(label)})</span></li>")
    else:
        out.append("<li>no findings</li>")
    out.append("</ul>")
    rows = []
    for e in result.engines:
        actions = _actions(e)
        if actions:  # the plan: ranked by what each fix buys
            rows += [(e.report.label, k, getattr(a, "severity", ""), getattr(a, "code", ""),
                      getattr(a, "title", ""), _gain(a)) for k, a in enumerate(actions, 1)]
        else:
            rows += [(e.report.label, k, f.severity, f.code, f.title, "") for k, f in enumerate(e.findings, 1)]
    if rows:
        out.append("<h3>What to fix first</h3>")
        out.append("<table><thead><tr><th>engine</th><th>#</th><th>severity</th><th>code</th><th>finding</th>"
                   "<th>estimated gain</th></tr></thead><tbody>")
        for label, k, severity, code, title, gain in rows:
            out.append(f'<tr><td>{_e(label)}</td><td class="num">{k}</td><td class="{_e(severity)}">{_e(severity)}'
                       f"</td><td>{_e(code)}</td><td>{_e(title)}</td><td>{_prose(gain) if gain else '–'}</td></tr>")
        out.append("</tbody></table>")
    for e in result.engines:
        for d in getattr(getattr(e, "plan", None), "decisions", None) or []:
            reasons = getattr(d, "reasons", None) or []
            if len(reasons) > 1:
                out.append(f'<p class="muted">{_e(e.report.label)}: one value for {_e(d.option)}: {_e(d.value)} '
                           f"({_e('; '.join(reasons))})</p>")
    out.append("</section>")
    return out


def render(result: Result, *, figures: bool | tuple[str, ...] = True, standalone: bool = True) -> str:
    """The page (``standalone``) or an HTML fragment (for notebooks) of an analysis result;
    ``figures`` is True (all), False (none) or the names of the figures to draw."""
    body = [f"<h1>popviz analysis of <code>{_e(result.title)}</code></h1>",
            f'<p class="muted">popviz {_e(__version__)} · analyses: {_e(", ".join(result.analyses))}</p>',
            *(f'<p class="warning">warning: {_e(w)}</p>' for w in result.warnings),
            *_summary(result)]
    for engine in result.engines:
        body += _engine(engine, figures, result.ignored)
    if not standalone:
        return f'<div class="popviz"><style>{CSS}</style>{"".join(body)}</div>'
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>popviz: {_e(result.title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def notebook(obj: object) -> str:
    """The HTML a notebook shows for a Report, a ReportSet or a Result (``_repr_html_``)."""
    from popviz.analysis import analyse
    from popviz.model import Report, ReportSet

    if isinstance(obj, Report):
        obj = ReportSet([obj])
    if isinstance(obj, ReportSet):
        obj = analyse(obj)
    return render(obj, figures=NOTEBOOK_FIGURES, standalone=False)
