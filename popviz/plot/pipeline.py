"""Cycles per pipeline stage, the mean and the bottleneck."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.model import frames
from popviz.plot._style import (
    MANY_BARS,
    PALETTE,
    PlotDataError,
    _axis_formatter,
    _data,
    _figure,
    _fmt_cycles,
    _title,
    bar_collection,
    clean,
    many_rows_height,
    set_title,
    takes_report,
)

MAX_BLOCKS_SHOWN = 2
"""Block names printed under a stage's bar (then ``+N``)."""


@takes_report
def stage_cycles(report: Report):
    """Cycles of each pipeline stage (``Report.stage_cycles()``; see ``popviz.model.frames.stage_cycles``)."""
    return _data("stages", frames.stage_cycles, report)


def _why_no_stage_cycles(report: Report) -> str:
    unrun = frames.unrun_reason(report)
    if unrun is not None:
        return unrun
    if not report.cfg.stages:
        return ("no configuration in this report, so no stages; popviz capture records them"
                if not report.has("config") else "no stages recorded: no execution strategy is set")
    if report.execution is None:
        return f"no execution table: {frames.no_execution_reason(report)}"
    if report.cfg.num_stages <= 1:
        return "the model is one stage on one IPU: there are no stages to compare"
    if len(report.cfg.stage_ipus) <= 1:
        return "every stage runs on one IPU, so the per-IPU profile cannot split them"
    return "the pipeline analysis could not attribute cycles to stages (popviz analyse says why)"


@takes_report
def ipu_cycles(report: Report):
    """Cycles of each IPU running stages (``Report.ipu_cycles()``; see ``popviz.model.frames.ipu_cycles``)."""
    return _data("stages", frames.ipu_cycles, report)


def _block_lines(blocks: str) -> list[str]:
    names = [b for b in blocks.split(", ") if b]
    if names and all(b.isdigit() for b in names):  # bare numbers (e.g. Lightning's block ids) say little alone
        names = [f"block{'s' if len(names) > 1 else ''} {', '.join(names)}"]
    return names[:MAX_BLOCKS_SHOWN] + ([f"+{len(names) - MAX_BLOCKS_SHOWN}"] if len(names) > MAX_BLOCKS_SHOWN else [])


def _stage_label(stage: int, ipu: int, blocks: str) -> str:
    return "\n".join([f"stage {stage} · IPU{ipu}", *_block_lines(blocks)])


def _ipu_label(ipu: int, stages: str, blocks: str) -> str:
    return "\n".join([f"IPU{ipu} · stage{'s' if ',' in stages else ''} {stages}", *_block_lines(blocks)])


@takes_report
def stages(report: Report, ax: Axes | None = None) -> Figure:
    """Cycles per micro-batch of each pipeline stage (per call when the batching is unknown), the
    mean, and the bottleneck marked. When stages share an IPU, one bar per IPU (its stages under
    it): the profile's cycles are per IPU."""
    frame = stage_cycles(report)
    by_ipu = not frame.empty and frame["total_cycles"].isna().any() and not ipu_cycles(report).empty
    if by_ipu:
        frame = ipu_cycles(report)
    per_mb = not frame.empty and frame["cycles_per_micro_batch"].notna().all()
    column = "cycles_per_micro_batch" if per_mb else "total_cycles"
    if frame.empty or frame[column].isna().all():
        raise PlotDataError(f"stages: engine '{report.label}' has no per-stage cycles ({_why_no_stage_cycles(report)})")
    rows = len(frame) > MANY_BARS  # a POD64's 64 stages: one row each, down the page
    fig, ax = _figure(ax, (9.5, many_rows_height(len(frame), 2.0)) if rows else (max(5.5, 1.5 * len(frame) + 2), 4.2))
    cycles = frame[column].to_numpy(dtype="float64")
    colours = [PALETTE["highlight"] if b else PALETTE["compute"] for b in frame["bottleneck"]]
    place = range(len(frame))
    if rows:
        bar_collection(ax, place, [0.0] * len(frame), cycles, colours, horizontal=True)
    else:
        bars = ax.bar(place, cycles, color=colours, width=0.7)
    mean = float(cycles.mean())
    (ax.axvline if rows else ax.axhline)(mean, color=PALETTE["capacity"], linestyle="--", linewidth=1, zorder=1,
                                         label=f"mean over {'IPUs' if by_ipu else 'stages'}: {_fmt_cycles(mean)}")
    ax.legend(loc="lower right" if rows else "upper left", fontsize="small", frameon=False)
    several = len(frame) > 1
    from popviz.analysis.efficiency import share_text

    eff = _efficiency(report, frame) if per_mb and not by_ipu else None
    shares = [None] * len(frame) if eff is None else [{s["index"]: s["frac"] for s in eff["stages"]}.get(int(i))
                                                      for i in frame["stage"]]
    for k, (value, is_bottleneck, share) in enumerate(zip(cycles, frame["bottleneck"], shares, strict=True)):
        parts = [_fmt_cycles(value), *(["bottleneck"] if is_bottleneck and several else []),
                 *([f"{share_text(share)} of peak"] if share is not None else [])]
        weight = "bold" if is_bottleneck and several else "normal"
        if rows:  # one line at the bar's end
            ax.annotate(" · ".join(parts), (value, k), xytext=(3, 0), textcoords="offset points", ha="left",
                        va="center", fontsize="x-small", fontweight=weight, zorder=3)
            continue
        bar = bars[k]
        # a white box keeps the mean line from running through the figure
        ax.annotate("\n".join(parts), (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize="small",
                    fontweight=weight, zorder=3,
                    bbox={"boxstyle": "square,pad=0.15", "facecolor": "white", "edgecolor": "none"})
    if by_ipu:
        labels = [_ipu_label(i, s, b) for i, s, b in zip(frame["ipu"], frame["stages"], frame["blocks"], strict=True)]
    else:
        labels = [_stage_label(s, i, b) for s, i, b in zip(frame["stage"], frame["ipu"], frame["blocks"], strict=True)]
    if rows:
        ax.set_yticks(place)
        ax.set_yticklabels([clean(label.replace("\n", " · ")) for label in labels], fontsize="x-small")
        ax.set_ylim(len(frame) - 0.5, -0.5)
        ax.set_xlabel("cycles per micro-batch" if per_mb else "cycles over the calls profiled")
        _axis_formatter(ax.xaxis, _fmt_cycles)
        ax.set_xlim(0, cycles.max() * 1.35)  # room for the labels at the bars' ends
    else:
        ax.set_xticks(place)
        ax.set_xticklabels([clean(label) for label in labels], fontsize="small")  # measured before drawing (SVG)
        ax.set_ylabel("cycles per micro-batch" if per_mb else "cycles over the calls profiled")
        _axis_formatter(ax.yaxis, _fmt_cycles)
        ax.set_ylim(0, cycles.max() * 1.3)
    ratio = cycles.max() / mean if mean else float("nan")
    what = "IPU (stages share IPUs)" if by_ipu else "stage"
    set_title(ax, _title(report, f"cycles per {what} (slowest / mean = {ratio:.2f})"))
    note = None
    if eff is not None and any(x is not None for x in shares) and eff.get("flops_source") == "capture":
        note = (f"achieved efficiency: {eff['flops_counted']} FLOPs counted by the capture hooks\n"
                f"per measured cycle / {eff['architecture']} {eff['precision']} peak")
    elif eff is not None and any(x is not None for x in shares):
        note = (f"{'estimated ' if eff['estimated'] else ''}achieved efficiency: {eff['flops_counted']} "
                f"{'estimated ' if eff['flops_estimated'] and not eff['estimated'] else ''}FLOPs per cycle / "
                f"{eff['architecture']} {eff['precision']} peak")
    if note is not None:
        if rows:
            ax.set_xlabel(f"{ax.get_xlabel()}\n{note.replace(chr(10), ' ')}", fontsize="small")
        else:
            ax.set_xlabel(note, fontsize="small")
    return fig


def _efficiency(report: Report, frame) -> dict | None:
    """The achieved-efficiency figures of the stages drawn (:mod:`popviz.analysis.efficiency`)."""
    from popviz.analysis.efficiency import achieved

    rows = [{"index": int(i), "cycles": float(c)} for i, c in zip(frame["stage"], frame["cycles_per_micro_batch"],
                                                                   strict=True)]
    return achieved(report, rows)[0]
