"""Two reports' headline figures side by side (the metrics ``popviz compare`` checks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.errors import UsageError
from popviz.plot._style import (
    PALETTE,
    PlotDataError,
    _fmt_bytes,
    _fmt_cycles,
    as_report,
    new_figure,
    takes_report,
)

COMPARE_METRICS: tuple[tuple[str, str], ...] = (
    ("throughput.samples_per_second", "samples / s (the system)"),
    ("pipeline.cycles_per_micro_batch", "slowest stage, cycles / micro-batch"),
    ("pipeline.imbalance_ratio", "imbalance (slowest / mean stage)"),
    ("pipeline.utilisation_pct", "IPU utilisation %"),
    ("pipeline.ramp_efficiency_pct", "ramp efficiency %"),
    ("memory.max_used_pct", "fullest IPU, memory used %"),
    ("memory.fullest_tile_pct", "fullest tile, memory used %"),
    ("host_io.stream_copy_pct", "host transfers, % of cycles"),
    ("host_io.output_bytes_per_call", "output bytes per call"),
)
"""The figures ``compare`` draws: ``popviz compare``'s metric names (docs/ci.md), with a label."""


@takes_report
def key_metrics(report: Report) -> dict[str, float]:
    """The headline figures of ``COMPARE_METRICS`` the report supports, by metric name (as
    ``popviz compare`` computes them; figures the report cannot give are left out)."""
    from popviz.analysis import analyse
    from popviz.ci.metrics import engine_metrics
    from popviz.model import ReportSet

    every = engine_metrics(analyse(ReportSet([report])).engines[0])
    return {name: every[name] for name, _ in COMPARE_METRICS if name in every}


def _fmt(name: str, value: float) -> str:
    if name == "throughput.samples_per_second":
        return f"{value:,.0f}/s" if value >= 100 else f"{value:,.1f}/s"
    if name.endswith("bytes_per_call"):
        return _fmt_bytes(value)
    if "cycles" in name:
        return _fmt_cycles(value)
    if name.endswith("_pct"):
        return f"{value:.1f}%"
    return f"{value:.2f}"


def compare(base: Report, new: Report, ax: Axes | None = None, *, allow_different_engines: bool = False) -> Figure:
    """The headline figures of two reports side by side, one panel per figure, with the relative
    change and ``popviz compare``'s verdict under its default thresholds (docs/ci.md): the new bar
    is vermillion where the change is a regression, blue otherwise. Like ``popviz compare``, it
    compares an engine with the same engine (training with training): two differently named
    engines are refused unless ``allow_different_engines``."""
    from popviz.ci.compare import IMPROVED, REGRESSED, SAME, verdict

    base, new = as_report(base, "popviz.plot.compare"), as_report(new, "popviz.plot.compare")
    if base.name != new.name and not allow_different_engines:
        raise UsageError(f"popviz.plot.compare: '{base.label}' and '{new.label}' are different engines, whose "
                         "figures better/worse verdicts would not mean anything (popviz compare matches engines "
                         "by name); compare each with its own run, or pass allow_different_engines=True")

    a, b = key_metrics(base), key_metrics(new)
    rows = [(name, label) for name, label in COMPARE_METRICS if name in a or name in b]
    if not rows:
        raise PlotDataError(f"compare: neither '{base.label}' nor '{new.label}' has a figure to compare")
    if ax is not None:
        fig, axes = ax.figure, [ax]
        rows = rows[:1]
    else:
        ncols = min(4, len(rows))
        nrows = (len(rows) + ncols - 1) // ncols
        fig = new_figure((2.9 * ncols + 0.5, 2.5 * nrows + 0.9))
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
        for extra in axes[len(rows):]:
            extra.set_visible(False)
    for panel, (name, label) in zip(axes, rows, strict=False):
        va, vb = a.get(name), b.get(name)
        values = [va if va is not None else 0.0, vb if vb is not None else 0.0]
        worse = False
        change = ""
        if va is not None and vb is not None:
            status, spec = verdict(name, va, vb, [])
            worse = status == REGRESSED
            word = {REGRESSED: "worse", IMPROVED: "better", SAME: "same"}.get(status, f"within {spec}")
            if name.endswith("_pct"):  # shares change in points, not in per cent of themselves
                change = f"\n{vb - va:+.1f} pp · {word}"
            else:
                change = f"\n{(vb - va) / va * 100:+.1f}% · {word}" if va else f"\n{word}"
        colour = PALETTE["highlight"] if worse else PALETTE["new"]
        panel.bar([0, 1], values, color=[PALETTE["base"], colour], width=0.6)
        panel.set_xticks([0, 1])
        panel.set_xticklabels(["base", "new"], fontsize="small")
        panel.set_title(f"{label}{change}", fontsize="small",
                        color=PALETTE["highlight"] if worse else "black")
        for x, v, present in ((0, values[0], va is not None), (1, values[1], vb is not None)):
            panel.annotate(_fmt(name, v) if present else "n/a", (x, v), xytext=(0, 2), textcoords="offset points",
                           ha="center", va="bottom", fontsize="x-small")
        panel.set_ylim(0, max([*values, 1e-9]) * 1.25)
        panel.set_yticks([])
        for side in ("top", "right", "left"):
            panel.spines[side].set_visible(False)
    estimated = any(r.provenance and r.provenance.estimated for r in (base, new))
    runs = [_run_name(r) for r in (base, new)]
    which = (f"{base.label}: base {runs[0]} → new {runs[1]}" if None not in runs and runs[0] != runs[1]
             else f"{base.label} → {new.label}")
    fig.suptitle(f"{which}: key metrics" + (" (estimated)" if estimated else ""))
    return fig


def _run_name(report: Report) -> str | None:
    """The run directory an engine was read from (``gpt_train`` for ``gpt_train/training``), so
    the figure says which run is base and which new; None when the report has no path."""
    from pathlib import Path

    if not report.path:
        return None
    path = Path(report.path)
    return (path.parent.name if path.name == report.name else path.name) or None
