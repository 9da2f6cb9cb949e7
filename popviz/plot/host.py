"""Bytes returned to the host per call under each output mode."""

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
    _fmt_bytes,
    _metrics,
    _title,
)


def output_modes(report: Report):
    """Output bytes per call under each output mode (``output_mode``, ``outputs_per_call``,
    ``output_bytes_per_call``, ``current``)."""
    import pandas as pd

    m = _metrics(report, "host_io")
    alternatives = {k: v for k, v in (m.get("alternatives") or {}).items() if v}
    if not alternatives:
        raise PlotDataError(f"host_io: engine '{report.label}' has no recorded output tensors or batching "
                            "(capture the run with popviz capture)")
    current = m.get("output_mode")
    rows = [{"output_mode": mode, "outputs_per_call": a.get("outputs_per_call"),
             "output_bytes_per_call": a.get("output_bytes_per_call"), "current": mode == current}
            for mode, a in alternatives.items()]
    return pd.DataFrame(rows)


def host_io(report: Report, ax: Axes | None = None) -> Figure:
    """Bytes returned to the host per call under each output mode, the current one marked."""
    frame = output_modes(report)
    fig, ax = _figure(ax, (6.5, 4))
    values = frame["output_bytes_per_call"].fillna(0).astype(float)
    colours = [PALETTE["highlight"] if c else PALETTE["base"] for c in frame["current"]]
    labels = []
    for mode, n in zip(frame["output_mode"], frame["outputs_per_call"], strict=True):
        labels.append(f"{mode}\n({n:,} per call)" if n is not None else mode)
    bars = ax.bar(range(len(frame)), values, color=colours)
    for bar, v, cur in zip(bars, values, frame["current"], strict=True):
        ax.annotate(_fmt_bytes(v) + ("\ncurrent" if cur else ""), (bar.get_x() + bar.get_width() / 2, v),
                    xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize="small",
                    fontweight="bold" if cur else "normal")
    ax.set_xticks(range(len(frame)))
    ax.set_xticklabels(labels, fontsize="small")
    ax.set_ylabel("output bytes per call")
    _axis_formatter(ax.yaxis, _fmt_bytes)
    ax.set_ylim(0, max(values.max(), 1) * 1.3)
    m = _metrics(report, "host_io")
    inputs = m.get("input_bytes_per_call")
    sub = f"; inputs {_fmt_bytes(inputs)} per call" if inputs else ""
    ax.set_title(_title(report, f"host I/O by output mode{sub}"), fontsize="medium")
    return fig
