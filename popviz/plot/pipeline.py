"""Cycles per pipeline stage, the mean and the bottleneck."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.plot._style import (
    PALETTE,
    PlotDataError,
    _axis_formatter,
    _figure,
    _fmt_cycles,
    _metrics,
    _title,
)


def stage_cycles(report: Report):
    """Cycles per micro-batch of each stage (a DataFrame: ``stage``, ``ipu``, ``blocks``,
    ``cycles_per_micro_batch``, ``bottleneck``)."""
    import pandas as pd

    m = _metrics(report, "pipeline")
    rows = [{"stage": s["index"], "ipu": s["ipu"], "blocks": ", ".join(s["blocks"]),
             "cycles_per_micro_batch": s["cycles"], "bottleneck": s["index"] == m["bottleneck_stage"]}
            for s in m["stages"]]
    return pd.DataFrame(rows, columns=["stage", "ipu", "blocks", "cycles_per_micro_batch", "bottleneck"])


def stages(report: Report, ax: Axes | None = None) -> Figure:
    """Cycles per micro-batch of each pipeline stage, the mean, and the bottleneck marked."""
    frame = stage_cycles(report)
    if frame.empty or frame["cycles_per_micro_batch"].isna().all():
        m = _metrics(report, "pipeline")
        why = "no stages recorded" if not m["stages"] else "no execution profile"
        raise PlotDataError(f"stages: engine '{report.label}' has no per-stage cycles ({why})")
    fig, ax = _figure(ax, (max(5.0, 1.2 * len(frame) + 2), 4))
    cycles = frame["cycles_per_micro_batch"].to_numpy(dtype="float64")
    colours = [PALETTE["highlight"] if b else PALETTE["compute"] for b in frame["bottleneck"]]
    labels = [f"stage {s}\nIPU{i}" for s, i in zip(frame["stage"], frame["ipu"], strict=True)]
    bars = ax.bar(range(len(frame)), cycles, color=colours)
    mean = float(cycles.mean())
    ax.axhline(mean, color=PALETTE["capacity"], linestyle="--", linewidth=1, label=f"mean {_fmt_cycles(mean)}")
    ax.legend(loc="upper left", fontsize="small", frameon=False)
    for bar, value, is_bottleneck in zip(bars, cycles, frame["bottleneck"], strict=True):
        text = _fmt_cycles(value) + ("\nbottleneck" if is_bottleneck and len(frame) > 1 else "")
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize="small")
    ax.set_xticks(range(len(frame)))
    ax.set_xticklabels(labels)
    ax.set_ylabel("cycles per micro-batch")
    _axis_formatter(ax.yaxis, _fmt_cycles)
    ax.set_ylim(0, cycles.max() * 1.3)
    ratio = cycles.max() / mean if mean else float("nan")
    ax.set_title(_title(report, f"cycles per stage (slowest / mean = {ratio:.2f})"))
    return fig
