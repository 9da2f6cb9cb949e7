"""Two reports' headline figures side by side."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.plot._style import (
    PALETTE,
    PlotDataError,
    _fmt_bytes,
    new_figure,
)

COMPARE_METRICS: tuple[tuple[str, str, str], ...] = (
    ("pipeline", "bottleneck cycles / micro-batch", "bottleneck_cycles"),
    ("pipeline", "imbalance (slowest / mean)", "imbalance_ratio"),
    ("pipeline", "utilisation %", "utilisation_frac"),
    ("memory", "fullest IPU used %", "max_used_pct"),
    ("host_io", "stream copies % of cycles", "stream_copy_frac"),
    ("host_io", "output bytes per call", "output_bytes_per_call"),
)


def key_metrics(report: Report) -> dict[str, float | None]:
    """The headline figures ``compare`` draws (None where the report cannot give one)."""
    from popviz.analysis import registry

    analyses = registry()
    p = analyses["pipeline"](report).metrics
    mem = analyses["memory"](report).metrics if report.memory is not None else {"ipus": []}
    h = analyses["host_io"](report).metrics
    stage_cycles_ = [s["cycles"] for s in p["stages"] if s.get("cycles") is not None]
    out: dict[str, float | None] = {
        "bottleneck_cycles": max(stage_cycles_) if stage_cycles_ else None,
        "imbalance_ratio": p.get("imbalance_ratio"),
        "utilisation_frac": 100 * p["utilisation_frac"] if p.get("utilisation_frac") is not None else None,
        "max_used_pct": max((r["used_pct"] for r in mem["ipus"]), default=None),
        "stream_copy_frac": 100 * h["stream_copy_frac"] if h.get("stream_copy_frac") is not None else None,
        "output_bytes_per_call": h.get("output_bytes_per_call"),
    }
    return out


def compare(base: Report, new: Report, ax: Axes | None = None) -> Figure:
    """The headline figures of two reports side by side, with the relative change of each."""
    a, b = key_metrics(base), key_metrics(new)
    rows = [(label, key) for _, label, key in COMPARE_METRICS if a.get(key) is not None or b.get(key) is not None]
    if not rows:
        raise PlotDataError(f"compare: neither '{base.label}' nor '{new.label}' has a figure to compare")
    if ax is not None:
        fig, axes = ax.figure, [ax]
        rows = rows[:1]
    else:
        ncols = min(3, len(rows))
        nrows = (len(rows) + ncols - 1) // ncols
        fig = new_figure((3.3 * ncols + 0.5, 2.6 * nrows + 0.8))
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
        for extra in axes[len(rows):]:
            extra.set_visible(False)
    for panel, (label, key) in zip(axes, rows, strict=False):
        va, vb = a.get(key), b.get(key)
        values = [va if va is not None else 0.0, vb if vb is not None else 0.0]
        panel.bar([0, 1], values, color=[PALETTE["base"], PALETTE["new"]])
        panel.set_xticks([0, 1])
        panel.set_xticklabels(["base", "new"])
        change = ""
        if va and vb is not None:
            change = f" ({(vb - va) / va * 100:+.1f}%)"
        panel.set_title(f"{label}{change}", fontsize="small")
        for x, v, present in ((0, values[0], va is not None), (1, values[1], vb is not None)):
            text = "n/a" if not present else (_fmt_bytes(v) if "bytes" in key else f"{v:,.3g}")
            panel.annotate(text, (x, v), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                           fontsize="x-small")
        panel.set_ylim(0, max([*values, 1e-9]) * 1.25)
        panel.tick_params(axis="y", labelsize="x-small")
    estimated = any(r.provenance and r.provenance.estimated for r in (base, new))
    fig.suptitle(f"{base.label} → {new.label}: key metrics" + (" (estimated)" if estimated else ""))
    return fig
