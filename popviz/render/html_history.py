"""The trend dashboard of ``popviz history show --html FILE``: one self-contained page like the
analyse page (inline CSS, charts as inline SVG drawn here, no script, nothing fetched): per engine
one chart per metric over the runs, the steps ``history show`` finds flagged on them, the runs where
the environment changed marked, each point's run, label, value, configuration and environment in
its hover text (SVG ``<title>``), estimated points drawn hollow beside measured ones, and an engine
filter made of radio buttons and CSS (``:checked ~``), so it works with scripts off.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from popviz._version import __version__
from popviz.render.html import CSS, _e

if TYPE_CHECKING:
    from popviz.ci.history import History
    from popviz.ci.trend import EnvironmentChange, Trend

WIDTH, HEIGHT = 520, 205

"""One chart's size (SVG user units); two charts a row on a wide screen."""
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 70, 14, 34, 36
LABEL_ROWS = (12, 25)
"""The baselines of the two rows of step labels, above the plot area."""
HEADLINE_CHARS = 240
"""Past this, the page folds the headline (``history show``'s one CI line) into a <details>."""
MAX_CONFIG_CHARS = 600
"""The configuration in a point's hover text is cut here (a 100-layer placement is long)."""

PAGE_CSS = CSS + """
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(500px, 1fr)); gap: 6px 18px; }
.chart { margin: 4px 0; } .chart h3 { margin: 8px 0 2px; font-size: 13.5px; overflow-wrap: anywhere; }
.chart svg { width: 100%; height: auto; background: #fff; }
.chart .meta { color: var(--muted); font-size: 12px; margin: 0 0 2px; }
svg .axis { stroke: #999; stroke-width: 1; } svg .grid { stroke: #eee; stroke-width: 1; }
svg .series { fill: none; stroke: #2166ac; stroke-width: 1.6; }
svg .pt { fill: #2166ac; stroke: #2166ac; stroke-width: 1.4; } svg .pt.estimated { fill: #fff; stroke: #b35806; }
svg .pt:hover { stroke-width: 4; }
svg .step.regressed { stroke: #b2182b; } svg .step.improved { stroke: #1b7837; } svg .step.moved { stroke: #7a7a7a; }
svg .step { stroke-width: 1.5; stroke-dasharray: 4 3; } svg .env { stroke: #8c6bb1; stroke-width: 1.2; stroke-dasharray: 1 3; }
svg text { font: 11px system-ui, sans-serif; fill: #444; } svg text.flag { font-weight: 600; }
svg text.regressed { fill: #b2182b; } svg text.improved { fill: #1b7837; } svg text.env { fill: #8c6bb1; }
.filter { margin: 10px 0 4px; } .filter label { margin-right: 14px; cursor: pointer; }
.legend span { margin-right: 16px; white-space: nowrap; }
.dot { display: inline-block; width: 10px; height: 10px; border-radius: 50%; border: 2px solid #2166ac;
       background: #2166ac; vertical-align: -1px; } .dot.estimated { background: #fff; border-color: #b35806; }
.bar { display: inline-block; width: 14px; border-top: 2px dashed #b2182b; vertical-align: 3px; }
.bar.env { border-top: 2px dotted #8c6bb1; }
input.engine-filter { margin-right: 3px; }
"""


def _num(value: float, unit: str) -> str:
    from popviz.ci.compare import fmt

    return fmt(value, unit)


def _short(value: object) -> str:
    return " | ".join(map(str, value)) if isinstance(value, list) else \
        json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)


def _config_text(config: dict) -> str:
    from popviz.ci.metrics import PLACEMENT_FIELD

    parts = [f"{k}: {_short(v)}" for k, v in sorted(config.items()) if k != PLACEMENT_FIELD and v is not None]
    text = "; ".join(parts)
    return text if len(text) <= MAX_CONFIG_CHARS else text[:MAX_CONFIG_CHARS - 1] + "…"


def _env_text(env: dict[str, str]) -> str:
    from popviz.ci.environment import FIELDS

    return "; ".join(f"{label} {env[k]}" for k, label in FIELDS.items() if k in env) or "not recorded"


def _tick_label(value: float, unit: str) -> str:
    """An axis label: bytes in binary units, large counts and cycles with k/M/G (the hover text
    and the heading give the exact figure)."""
    from popviz.units import fmt_bytes

    if unit == "bytes":
        return fmt_bytes(value)
    if unit in ("cycles", "count", "") and abs(value) >= 10_000:
        for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if abs(value) >= scale:
                return f"{value / scale:.3g}{suffix}"
    return _num(value, unit)


def _ticks(lo: float, hi: float) -> list[float]:
    if hi == lo:
        return [lo]
    return [lo + (hi - lo) * k / 4 for k in range(5)]


def chart(t: Trend, history: History, env_runs: set[int]) -> str:
    """One metric's SVG: the values over the runs, steps and environment changes flagged."""
    values = t.values
    n = len(values)
    lo, hi = min(values), max(values)
    span = hi - lo
    if span <= max(abs(hi), abs(lo)) * 1e-9:  # flat: centre it on a 10% band, as the sparkline does
        pad = max(abs(hi) * 0.05, 1e-9)
        lo, hi = lo - pad, hi + pad
    else:
        lo, hi = lo - span * 0.08, hi + span * 0.08
    if min(values) >= 0 and lo < 0:
        lo = 0.0
    w, h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM

    def x(i: int) -> float:
        return PAD_LEFT + (w * i / (n - 1) if n > 1 else w / 2)

    def y(v: float) -> float:
        return PAD_TOP + h - (v - lo) / (hi - lo) * h

    out = [f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_e(t.engine)} {_e(t.metric)}">']
    for tick in _ticks(lo, hi):
        out.append(f'<line class="grid" x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>')
        out.append(f'<text x="{PAD_LEFT - 5}" y="{y(tick) + 4:.1f}" text-anchor="end">{_e(_tick_label(tick, t.unit))}</text>')
    out.append(f'<line class="axis" x1="{PAD_LEFT}" x2="{PAD_LEFT}" y1="{PAD_TOP}" y2="{PAD_TOP + h}"/>')
    out.append(f'<line class="axis" x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{PAD_TOP + h}" y2="{PAD_TOP + h}"/>')
    labels = [0]
    for i in [round(k * (n - 1) / 4) for k in range(1, 5)] if n > 1 else []:  # ~110 units apart
        if x(i) - x(labels[-1]) >= 110 and (i == n - 1 or x(n - 1) - x(i) >= 110):
            labels.append(i)
    for i in labels:
        anchor = "start" if i == 0 and n > 1 else "end" if i == n - 1 and n > 1 else "middle"
        out.append(f'<text x="{x(i):.1f}" y="{HEIGHT - PAD_BOTTOM + 15}" text-anchor="{anchor}">'
                   f'{_e(_cut(t.runs[i].title, 18))}</text>')
    for i, run in enumerate(t.runs):  # the environment changed at this run
        if run.id in env_runs and i > 0:
            out.append(f'<line class="env" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{PAD_TOP}" y2="{PAD_TOP + h}">'
                       f'<title>{_e(f"environment changed at {run.title}")}</title></line>')
    flagged = [-1e9, -1e9]  # where each label row ends: labels never overlap (every step has hover text)
    for s, verdict in zip(t.steps, t.verdicts, strict=True):
        i = s.index
        mid = (x(i - 1) + x(i)) / 2 if i > 0 else x(i)
        from popviz.ci.trend import change

        tip = f"step at {t.runs[i].title}: {_num(s.before, t.unit)} → {_num(s.after, t.unit)} " \
              f"({change(s.before, s.after, t.unit)}, {verdict})"
        out.append(f'<line class="step {verdict}" x1="{mid:.1f}" x2="{mid:.1f}" y1="4" y2="{PAD_TOP + h}">'
                   f'<title>{_e(tip)}</title></line>')
        label = f"{verdict} {change(s.before, s.after, t.unit)}"
        anchor = "end" if mid > PAD_LEFT + w * 0.7 else "start"
        dx = -3 if anchor == "end" else 3
        width = 6.2 * len(label)
        start = mid + dx - (width if anchor == "end" else 0)
        row = next((r for r in (0, 1) if start >= flagged[r] + 4), None)
        if row is None:
            continue
        flagged[row] = start + width
        out.append(f'<text class="flag {verdict}" x="{mid + dx:.1f}" y="{LABEL_ROWS[row]}" '
                   f'text-anchor="{anchor}">'
                   f'{_e(label)}<title>{_e(tip)}</title></text>')
    if n > 1:
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        out.append(f'<polyline class="series" points="{points}"/>')
    radius = 3.2 if n <= 60 else 2.2 if n <= 300 else 1.4
    for i, (run, v) in enumerate(zip(t.runs, values, strict=True)):
        e = history.engines.get((run.id, t.engine))
        estimated = bool(e and e.estimated)
        tip = [f"{run.title} · {_num(v, t.unit)} ({t.metric})", f"added {run.added_at}",
               "estimated by the emulator's cost model" if estimated else "measured"]
        if e is not None:
            tip += [f"configuration: {_config_text(e.config)}", f"environment: {_env_text(e.environment)}"]
        cls = "pt estimated" if estimated else "pt"
        out.append(f'<circle class="{cls}" cx="{x(i):.1f}" cy="{y(v):.1f}" r="{radius}">'
                   f'<title>{_e(chr(10).join(tip))}</title></circle>')
    out.append("</svg>")
    return "".join(out)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def render(history: History, trends: Sequence[Trend], *, db: str, unknown: Sequence[str] = (),
           estimated: Sequence[tuple[str, int, int]] = (), env: Sequence[EnvironmentChange] = ()) -> str:
    """The page, as text."""
    from popviz.ci.history_view import environment_lines, estimated_line, headline

    runs = history.runs
    engines = list(dict.fromkeys(t.engine for t in trends))
    env_by_engine: dict[str, set[int]] = {}
    for c in env:
        env_by_engine.setdefault(c.engine, set()).add(c.run.id)
    first = headline(list(trends), runs)
    body = [f"<h1>popviz history: {_e(db)}</h1>"]
    if len(first) <= HEADLINE_CHARS:
        body.append(f"<p><strong>{_e(first)}</strong></p>")
    else:  # the CI log's one line, folded: the charts flag each step anyway
        body.append(f"<details><summary><strong>{_e(first[:HEADLINE_CHARS].rsplit(' ', 1)[0])} …</strong></summary>"
                    f"<p>{_e(first)}</p></details>")
    line = estimated_line(list(estimated))
    if line:
        body.append(f'<p><span class="badge estimated">estimated</span> {_e(line)}</p>')
    body.append('<p class="legend"><span><i class="dot"></i> measured run</span>'
                '<span><i class="dot estimated"></i> estimated run (cost model)</span>'
                '<span><i class="bar"></i> step (regressed red, improved green, moved grey)</span>'
                '<span><i class="bar env"></i> environment changed</span>'
                '<span class="muted">hover a point for its run, configuration and environment</span></p>')
    if env:
        body.append("<h3>Environment changed from the engine's previous run</h3><ul>")
        body += [f"<li>{_e(text)}</li>" for text in environment_lines(list(env))]
        body.append("</ul>")
    # the engine filter: radio inputs before the sections, CSS hides the others (no script)
    filt = ['<div class="filter"><strong>engine:</strong> ']
    rules = []
    inputs = ['<input class="engine-filter" type="radio" name="engine" id="engine-all" checked>']
    filt.append('<label for="engine-all">all</label>')
    for k, engine in enumerate(engines):
        inputs.append(f'<input class="engine-filter" type="radio" name="engine" id="engine-{k}">')
        filt.append(f'<label for="engine-{k}">{_e(engine)}</label>')
        rules.append(f"#engine-{k}:checked ~ main section.engine:not(.e{k}) {{ display: none; }}")
    filt.append("</div>")
    sections = []
    for k, engine in enumerate(engines):
        rows = [t for t in trends if t.engine == engine]
        charts = []
        for t in rows:
            steps = f"{len(t.steps)} step(s)" if t.steps else "no step"
            charts.append(f'<div class="chart"><h3>{_e(t.metric)}</h3><p class="meta">{len(t.values)} run(s), last '
                          f'{_e(_num(t.values[-1], t.unit))}, {steps}, threshold {_e(t.threshold)}</p>'
                          f"{chart(t, history, env_by_engine.get(engine, set()))}</div>")
        sections.append(f'<section class="engine e{k}"><h2>{_e(engine)}</h2>'
                        f'<div class="charts">{"".join(charts)}</div></section>')
    if unknown:
        sections.append(f'<p class="muted">Not shown, unknown to this popviz (from a newer one, or misspelt): '
                        f'{_e(", ".join(unknown))}</p>')
    filter_css = "\n".join(rules) + "\ninput.engine-filter { position: absolute; opacity: 0; }\n" + \
        "".join(f'#engine-{k}:checked ~ div.filter label[for="engine-{k}"], ' for k in range(len(engines))) + \
        '#engine-all:checked ~ div.filter label[for="engine-all"] { font-weight: 700; text-decoration: underline; }'
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>popviz history: {_e(db)}</title><style>{PAGE_CSS}\n{filter_css}</style></head><body>\n"
            + "\n".join(body) + "\n" + "".join(inputs) + "".join(filt)
            + "<main>" + "\n".join(sections) + "</main>"
            + f'<p class="muted">popviz {html.escape(__version__)} · {len(runs)} run(s) · no network requests, no script'
            "</p></body></html>\n")


def write_page(path: str, history: History, trends: Sequence[Trend], *, force: bool = False, **kw: object) -> None:
    from popviz.fileio import write_output

    write_output(path, render(history, trends, **kw), force)  # type: ignore[arg-type]
