"""Memory over the compiled program's steps, per IPU: always-live plus not-always-live bytes at
each liveness step, each IPU's peak marked with what runs there, and the IPU's capacity."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.plot._style import PALETTE, PlotDataError, _figure, _title, beside, set_title, takes_report

MAX_POINTS = 1500
"""Points drawn per IPU: a longer liveness table is reduced to the largest value of each of this
many runs of steps (the peak is always among them)."""
MAX_CURVES = 8
"""IPUs drawn: those with the highest peaks (the title says how many were left out)."""
CURVE_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")


@takes_report
def liveness_frame(report: Report):
    """``ipu``, ``step``, ``program``, ``not_always_live_bytes``, ``always_live_bytes`` and
    ``live_bytes`` (their sum) per liveness step, at most :data:`MAX_POINTS` steps per IPU (``ipu``
    null: the replica's total, when the report has no per-IPU liveness)."""
    if report.liveness is None:
        from popviz.model.frames import unrun_reason

        why = unrun_reason(report) or ("a profile whose libpva has no livenessProgramSteps, or a report "
                                       "from before they were read")
        raise PlotDataError(f"liveness: engine '{report.label}' has no liveness steps ({why})")
    return report.liveness_steps(max_points=MAX_POINTS)


@takes_report
def liveness(report: Report, ax: Axes | None = None) -> Figure:
    """Bytes live at each program step per IPU (always live + not always live), with each IPU's
    peak marked (and named by its operation or program) and the capacity line."""
    from popviz.analysis.memory_liveness import _short, peaks
    from popviz.analysis.thresholds import IPU_FULL_FRAC
    from popviz.model.liveness import liveness_frame as reduced

    if report.liveness is None:
        liveness_frame(report)  # the PlotDataError saying why there is none
    rows = {r["ipu"]: r for r in peaks(report) or []}
    lv = report.liveness
    order = sorted(rows, key=lambda k: -(rows[k]["peak_bytes"] or rows[k]["not_always_live_bytes"]))
    shown = order[:MAX_CURVES]
    frame = reduced(lv, MAX_POINTS, ipus=shown)  # only the curves drawn (8 of a POD64's 64 IPUs)
    own = ax is None
    fig, ax = _figure(ax, (9.5, 4.6))
    mib = 2**20
    handles = []
    top = 0.0
    for i, k in enumerate(shown):
        f = frame[frame["ipu"].isna()] if k is None else frame[frame["ipu"] == k]
        colour = CURVE_COLOURS[i % len(CURVE_COLOURS)]
        y = f["live_bytes"] / mib
        (line,) = ax.plot(f["step"], y, color=colour, linewidth=1.1,
                          label=f"IPU{k}" if k is not None else "all IPUs (total)")
        handles.append(line)
        top = max(top, float(y.max()))
        r = rows[k]
        peak_y = ((r["peak_bytes"] if r["peak_bytes"] is not None else r["not_always_live_bytes"]) / mib)
        ax.plot([r["peak_step"]], [peak_y], marker="v", color=colour, markersize=7, zorder=4)
        what = _short(r)
        if i == 0 or (r["peak_pct"] or 0) > 100 * IPU_FULL_FRAC:
            ax.annotate(f"peak {what}\nstep {r['peak_step']:,}", (r["peak_step"], peak_y), xytext=(6, 4),
                        textcoords="offset points", fontsize="x-small", color=colour, zorder=5)
        if lv.always_live_bytes and k is not None and i == 0:
            ax.axhline(lv.always_live_bytes.get(k, 0) / mib, color=colour, linestyle=":", linewidth=0.9,
                       label=f"IPU{k} always live")
            handles.append(ax.lines[-1])
    t = report.target
    if t is not None:
        capacity = t.bytes_per_ipu / mib if lv.per_ipu else t.bytes_per_ipu * max(1, len(lv.always_live_bytes)) / mib
        handles.insert(0, ax.axhline(capacity, color=PALETTE["capacity"], linestyle="--", linewidth=1,
                                     label=f"capacity {capacity:,.1f} MiB"))
        top = max(top, capacity)
    ax.set_ylim(0, top * 1.15 if top else 1)
    ax.set_xlim(0, max(1, len(lv) - 1))
    ax.set_xlabel(f"program step (liveness; {len(lv):,} steps)")
    ax.set_ylabel("MiB live (always + not always live)")
    left_out = len(order) - len(shown)
    what = "memory live over the program steps"
    if left_out:
        what += f" ({len(shown)} of {len(order)} IPUs: the highest peaks)"
    if own:
        fig.legend(handles=handles, loc="outside right center", fontsize="small", frameon=False)
    else:
        beside(ax, handles)
    set_title(ax, _title(report, what))
    return fig
