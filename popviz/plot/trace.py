"""The execution trace of one call per IPU, and where each IPU's time goes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.plot._style import (
    MAX_BARS_PER_IPU,
    PALETTE,
    TIMELINE_CATEGORIES,
    PlotDataError,
    _category,
    _cycle_axis,
    _figure,
    _legend,
    _need,
    _title,
)


def steps_frame(report: Report, run: int | None = None):
    """One executor call's steps with ``start_cycle`` filled (steps without one follow the
    previous step on their IPU), ``end_cycle`` and the timeline ``category``."""
    import numpy as np

    from popviz.analysis.aggregate import cycle_totals

    execution = _need(report, "execution", "timeline", "an out-of-memory compile never runs")
    if run is None:
        runs = cycle_totals(execution).calls()
        if not runs:
            raise PlotDataError(f"timeline: engine '{report.label}' has no run with on-tile compute")
        run = runs[0]
    steps = execution.steps
    s = steps[steps["run"] == run]
    if s.empty:
        raise PlotDataError(f"timeline: engine '{report.label}' has no steps in run {run}")
    s = s.sort_values(["ipu", "step"], kind="stable")
    cycles = s["cycles"].to_numpy(dtype="int64")
    start = s["start_cycle"].to_numpy(dtype="float64", na_value=np.nan)
    if np.isnan(start).any():  # lay out steps without a start one after another per IPU
        ipu = s["ipu"].to_numpy()
        cum = np.cumsum(cycles)
        first = np.r_[True, ipu[1:] != ipu[:-1]]
        base = np.maximum.accumulate(np.where(first, np.arange(len(ipu)), 0))
        offset = cum - cycles - (cum[base] - cycles[base])
        start = np.where(np.isnan(start), offset, start)
    programs = s["program"].astype("str").to_numpy()
    types = s["program_type"].astype("str").to_numpy()
    pairs = {(p, t): _category(p, t) for p, t in set(zip(programs, types, strict=True))}
    out = s[["ipu", "program", "program_type", "cycles"]].copy()
    out["start_cycle"] = start.astype("int64")
    out["end_cycle"] = out["start_cycle"] + cycles
    out["category"] = [pairs[(p, t)] for p, t in zip(programs, types, strict=True)]
    return out.reset_index(drop=True)


def _bars(start, end, cat_codes, n_categories: int, max_bars: int):
    """(start, width, category code) arrays for one IPU, binned when there are too many."""
    import numpy as np

    if len(start) <= max_bars:
        return start, end - start, cat_codes
    lo, hi = float(start.min()), float(end.max())
    width = (hi - lo) / max_bars or 1.0
    b = np.minimum(((start - lo) / width).astype("int64"), max_bars - 1)
    weight = np.bincount(b * n_categories + cat_codes, weights=end - start, minlength=max_bars * n_categories)
    weight = weight.reshape(max_bars, n_categories)
    dominant = weight.argmax(axis=1)
    used = weight.sum(axis=1) > 0
    idx = np.flatnonzero(used)
    return lo + idx * width, np.full(len(idx), width), dominant[idx]


def timeline(report: Report, ax: Axes | None = None, *, run: int | None = None) -> Figure:
    """The execution trace of one executor call per IPU (PopVision's execution view), coloured by
    forward, backward, weight update, exchange, host copy and sync/idle; the IPU with the most
    compute is marked as the bottleneck."""
    import numpy as np

    frame = steps_frame(report, run)
    scale, unit = _cycle_axis(report)
    ipus = sorted(int(i) for i in frame["ipu"].unique())
    own = ax is None
    fig, ax = _figure(ax, (11, (0.5 if len(ipus) <= 16 else 0.22) * len(ipus) + 1.8))
    codes = {c: i for i, c in enumerate(TIMELINE_CATEGORIES)}
    cat = frame["category"].map(codes).to_numpy()
    ipu_col = frame["ipu"].to_numpy()
    start = frame["start_cycle"].to_numpy(dtype="float64")
    end = frame["end_cycle"].to_numpy(dtype="float64")
    busy = np.bincount(ipu_col, weights=np.where(np.isin(cat, [0, 1, 2, 3]), end - start, 0))
    bottleneck = int(np.argmax(busy)) if busy.any() else None
    seen: set[int] = set()
    order = np.argsort(ipu_col, kind="stable")
    bounds = np.searchsorted(ipu_col[order], [*ipus, ipus[-1] + 1])
    for row in range(len(ipus)):
        sel = order[bounds[row]:bounds[row + 1]]
        xs, ws, cs = _bars(start[sel], end[sel], cat[sel], len(TIMELINE_CATEGORIES), MAX_BARS_PER_IPU)
        for code in np.unique(cs):
            mask = cs == code
            ax.broken_barh(list(zip(xs[mask] * scale, ws[mask] * scale, strict=True)), (row - 0.4, 0.8),
                           facecolors=PALETTE[TIMELINE_CATEGORIES[code]], linewidth=0)
            seen.add(int(code))
    ax.set_yticks(range(len(ipus)))
    ax.set_yticklabels([f"IPU{i}" + ("  bottleneck" if i == bottleneck and len(ipus) > 1 else "") for i in ipus])
    for label, ipu in zip(ax.get_yticklabels(), ipus, strict=True):
        if ipu == bottleneck and len(ipus) > 1:
            label.set_color(PALETTE["highlight"])
            label.set_fontweight("bold")
    ax.set_ylim(len(ipus) - 0.5, -0.5)
    ax.set_xlim(0, float(end.max()) * scale)
    ax.set_xlabel(f"time in the call ({unit})")
    from matplotlib.patches import Patch

    _legend(fig, ax, own, [Patch(color=PALETTE[TIMELINE_CATEGORIES[c]], label=TIMELINE_CATEGORIES[c])
                           for c in sorted(seen)])
    steps = len(frame)
    ax.set_title(_title(report, f"execution trace of one call ({steps:,} steps)"))
    return fig


BREAKDOWN_PARTS = ("compute", "exchange", "sync / idle", "host copy")


def time_shares(report: Report):
    """Per IPU, the share (%) of an executor call's cycles in compute, exchange, sync/idle and
    host copy (columns ``compute_pct``, ``exchange_pct``, ``sync_idle_pct``, ``host_copy_pct``)."""
    import pandas as pd

    from popviz.analysis.aggregate import cycle_totals

    execution = _need(report, "execution", "breakdown", "an out-of-memory compile never runs")
    totals = cycle_totals(execution)
    runs = totals.calls()
    if not runs:
        raise PlotDataError(f"breakdown: engine '{report.label}' has no run with on-tile compute")
    agg = totals.by_ipu_type(runs)
    part = agg["program_type"].map(lambda t: {"compute": "compute", "backward": "compute", "forward": "compute",
                                               "weight update": "compute"}.get(_category("", t), _category("", t)))
    table = agg.assign(part=part).pivot_table(index="ipu", columns="part", values="cycles", aggfunc="sum",
                                              fill_value=0)
    for p in BREAKDOWN_PARTS:
        if p not in table:
            table[p] = 0
    other = [c for c in table.columns if c not in BREAKDOWN_PARTS]
    total = table.sum(axis=1)
    out = pd.DataFrame({"ipu": table.index.astype(int)})
    for p in BREAKDOWN_PARTS:
        col = p.replace(" / ", "_").replace(" ", "_") + "_pct"
        out[col] = (100.0 * table[p] / total).to_numpy()
    out["other_pct"] = (100.0 * table[other].sum(axis=1) / total).to_numpy() if other else 0.0
    return out.reset_index(drop=True)


def breakdown(report: Report, ax: Axes | None = None) -> Figure:
    """Per IPU, the share of an executor call spent computing, exchanging, syncing/idle and in
    host copies (shares add up to 100%)."""
    frame = time_shares(report)
    own = ax is None
    fig, ax = _figure(ax, (9, (0.45 if len(frame) <= 16 else 0.22) * len(frame) + 1.8))
    left = [0.0] * len(frame)
    names = [*BREAKDOWN_PARTS, "other"]
    for name in names:
        col = name.replace(" / ", "_").replace(" ", "_") + "_pct"
        values = frame[col].tolist()
        if not any(values):
            continue
        bars = ax.barh(range(len(frame)), values, left=left, color=PALETTE[name], label=name)
        for bar, v in zip(bars, values, strict=True):
            if v >= 6:
                ax.text(bar.get_x() + v / 2, bar.get_y() + bar.get_height() / 2, f"{v:.0f}%", ha="center",
                        va="center", fontsize="x-small", color="white" if name in ("compute", "host copy") else "black")
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_yticks(range(len(frame)))
    ax.set_yticklabels([f"IPU{i}" for i in frame["ipu"]])
    ax.set_ylim(len(frame) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the call's cycles (%)")
    _legend(fig, ax, own, ax.get_legend_handles_labels()[0])
    ax.set_title(_title(report, "where each IPU's time goes"))
    return fig
