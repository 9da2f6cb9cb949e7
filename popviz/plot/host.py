"""Bytes returned to the host per call under each output mode."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.model import frames
from popviz.plot._style import (
    PALETTE,
    _bytes_unit,
    _data,
    _figure,
    _fmt_bytes,
    _title,
    set_title,
    takes_report,
)


@takes_report
def output_modes(report: Report):
    """Output bytes per call under each output mode (``Report.output_modes()``; see
    ``popviz.model.frames.output_modes``)."""
    return _data("host_io", frames.output_modes, report)


@takes_report
def host_io(report: Report, ax: Axes | None = None) -> Figure:
    """Bytes returned to the host per call under each output mode, the current one marked (copies
    of each output per call when the tensor sizes were not recorded)."""
    from popviz.model.names import output_mode_label

    frame = output_modes(report)
    fig, ax = _figure(ax, (6.5, 4))
    sized = frame["output_bytes_per_call"].notna().all()
    if sized:
        raw = frame["output_bytes_per_call"].astype("float64")
        scale, unit = _bytes_unit(float(raw.max()))
        values = raw / scale
        texts = [_fmt_bytes(v) for v in raw]
        ax.set_ylabel(f"output {unit} per call")
    else:
        values = frame["outputs_per_call"].astype("float64")
        texts = [f"{int(v):,}" for v in values]
        ax.set_ylabel("copies of each output per call")
    colours = [PALETTE["highlight"] if c else PALETTE["base"] for c in frame["current"]]
    labels = [f"{output_mode_label(mode, p)}\n({n:,} per call)"
              for mode, p, n in zip(frame["output_mode"], frame["return_period"], frame["outputs_per_call"],
                                    strict=True)]
    bars = ax.bar(range(len(frame)), values, color=colours, width=0.7)
    for bar, v, text, cur in zip(bars, values, texts, frame["current"], strict=True):
        ax.annotate(text + ("\ncurrent" if cur else ""), (bar.get_x() + bar.get_width() / 2, v),
                    xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize="small",
                    fontweight="bold" if cur else "normal")
    ax.set_xticks(range(len(frame)))
    ax.set_xticklabels(labels, fontsize="small")
    ax.set_ylim(0, max(float(values.max()), 1e-9) * 1.3)
    m = frames.analysis_metrics(report, "host_io")
    inputs = m.get("input_bytes_per_call")
    sub = f"\ninputs {_fmt_bytes(inputs)} per call" if inputs else ""  # a second line: the title fits the figure
    what = "output bytes per call by output mode" if sized else "outputs per call by output mode (sizes not recorded)"
    set_title(ax, _title(report, what) + sub, fontsize="medium")
    return fig
