"""The execution trace of one call per IPU, and where each IPU's time goes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.model import frames
from popviz.model.frames import TIMELINE_CATEGORIES
from popviz.model.numbers import tied_for_most
from popviz.plot._style import (
    MANY_BARS,
    MAX_BARS_PER_IPU,
    MAX_STEPS_DRAWN,
    PALETTE,
    _cycle_axis,
    _data,
    _figure,
    _legend,
    _title,
    bar_collection,
    many_rows_height,
    set_title,
    takes_report,
)


@takes_report
def steps_frame(report: Report, run: int | None = None):
    """One executor call's steps laid out in time (``Report.steps()``; see ``popviz.model.frames.steps``)."""
    return _data("timeline", frames.steps, report, run)


POD_TIME_BINS = 1000
"""Time bins per IPU of a binned timeline of more than MANY_BARS IPUs: about the axes' width in
pixels at 100 dpi (a finer image is only resampled down, at 64 IPUs most of the figure's time)."""
BAND_PIXELS = 20
"""Image rows per IPU in a binned timeline: each time bin's column is stacked by the share of its
cycles in each category (18 pixel rows: a share under about 3% may not show)."""


def _coverage(start, end, cat, n_categories: int, edges):
    """Cycles of each category inside each bin ``[edges[k], edges[k+1])`` of one IPU's steps
    (steps in time order, not overlapping): an (n_bins, n_categories) array. A step spanning
    several bins counts in each of them."""
    import numpy as np

    out = np.zeros((len(edges) - 1, n_categories))
    for c in np.unique(cat):
        sel = np.flatnonzero(cat == c)
        sel = sel[np.argsort(start[sel], kind="stable")]
        s, e = start[sel], end[sel]
        before = np.concatenate([[0.0], np.cumsum(e - s)])  # cycles of this category before step k
        k = np.searchsorted(s, edges, side="right") - 1  # the last step starting at or before the edge
        inside = np.where(k >= 0, np.minimum(edges - s[np.maximum(k, 0)], (e - s)[np.maximum(k, 0)]), 0.0)
        covered = np.where(k >= 0, before[np.maximum(k, 0)] + np.maximum(inside, 0.0), 0.0)
        out[:, c] = np.diff(covered)
    return out


def _rgba(colour: str):
    from matplotlib.colors import to_rgba

    return to_rgba(colour)


@takes_report
def timeline(report: Report, ax: Axes | None = None, *, run: int | None = None) -> Figure:
    """The execution trace of one executor call per IPU (PopVision's execution view), coloured by
    forward, backward, weight update, exchange, host copy and sync/idle; the IPU with the most
    compute is marked as the bottleneck. When an IPU has more than MAX_BARS_PER_IPU steps, or the
    call more than MAX_STEPS_DRAWN, every row is drawn from that many time bins, each bin's column stacked by the share of its cycles in
    each category (work at the bottom), so a 10^6-step trace draws in seconds."""
    import numpy as np

    frame = steps_frame(report, run)
    scale, unit = _cycle_axis(report)
    ipus = sorted(int(i) for i in frame["ipu"].unique())
    own = ax is None
    fig, ax = _figure(ax, (11, 0.5 * len(ipus) + 1.8 if len(ipus) <= MANY_BARS else many_rows_height(len(ipus))))
    n_cat = len(TIMELINE_CATEGORIES)
    cat = frame["category"].cat.codes.to_numpy().astype("int64")
    ipu_col = frame["ipu"].to_numpy()
    start = frame["start_cycle"].to_numpy(dtype="float64")
    end = frame["end_cycle"].to_numpy(dtype="float64")
    work = [TIMELINE_CATEGORIES.index(c) for c in ("forward", "backward", "weight update", "compute")]
    row_of = np.searchsorted(ipus, ipu_col)
    busy = np.bincount(row_of, weights=np.where(np.isin(cat, work), end - start, 0), minlength=len(ipus))
    # every IPU tied for the most compute; none when all are (a balanced pipeline has no bottleneck)
    bottleneck = {i for i, t in zip(ipus, tied_for_most(busy.tolist()), strict=True) if t} if busy.any() else set()
    xmax = float(end.max())
    order = np.argsort(row_of, kind="stable")  # steps_frame is sorted by IPU already: a no-op copy
    bounds = np.searchsorted(row_of[order], np.arange(len(ipus) + 1))
    colours = np.array([_rgba(PALETTE[c]) for c in TIMELINE_CATEGORIES])
    binned = int(np.diff(bounds).max()) > MAX_BARS_PER_IPU or len(frame) > MAX_STEPS_DRAWN
    seen: set[int] = set()
    if binned:  # one image band per IPU: as fast for 10^6 steps as for 10^3
        bins = MAX_BARS_PER_IPU if len(ipus) <= MANY_BARS else POD_TIME_BINS
        edges = np.linspace(0.0, xmax, bins + 1)
        width = edges[1] - edges[0]
        rgba = np.vstack([np.rint(colours * 255), [[0, 0, 0, 0]]]).astype("uint8")  # last: nothing ran
        image = np.zeros((len(ipus) * BAND_PIXELS, bins, 4), dtype="uint8")
        pixels = np.arange(BAND_PIXELS - 2)  # 1 blank pixel row above and below each band
        for row in range(len(ipus)):
            sel = order[bounds[row]:bounds[row + 1]]
            share = _coverage(start[sel], end[sel], cat[sel], n_cat, edges) / width
            top = np.rint(np.cumsum(share, axis=1) * len(pixels))  # (bins, categories), in pixel rows
            # pixel p of a bin (from the bottom) shows the first category whose stack top is above it
            which = (top[:, None, :] <= pixels[None, :, None]).sum(axis=2)  # (bins, pixels); n_cat: empty
            band = rgba[which[:, ::-1]].transpose(1, 0, 2)  # top pixel row first
            image[row * BAND_PIXELS + 1:(row + 1) * BAND_PIXELS - 1] = band
            seen.update(int(c) for c in np.unique(which) if c < n_cat)
        ax.imshow(image, extent=(0.0, xmax * scale, len(ipus) - 0.5, -0.5), aspect="auto", interpolation="nearest")
    else:
        bar_collection(ax, row_of, start * scale, (end - start) * scale, colours[cat], horizontal=True,
                       thickness=0.8)
        seen.update(int(c) for c in np.unique(cat))
    ax.set_yticks(range(len(ipus)))
    ax.set_yticklabels([f"IPU{i}" + ("  bottleneck" if i in bottleneck else "") for i in ipus])
    for label, ipu in zip(ax.get_yticklabels(), ipus, strict=True):
        if ipu in bottleneck:
            label.set_color(PALETTE["highlight"])
            label.set_fontweight("bold")
    ax.set_ylim(len(ipus) - 0.5, -0.5)
    ax.set_xlim(0, xmax * scale)
    ax.set_xlabel(f"time in the call ({unit})")
    from matplotlib.patches import Patch

    _legend(fig, ax, own, [Patch(color=PALETTE[TIMELINE_CATEGORIES[c]], label=TIMELINE_CATEGORIES[c])
                           for c in sorted(seen)])
    what = f"{len(frame):,} steps" + (f"; {bins:,} time bins per IPU, each stacked by what it ran"
                                      if binned else "")
    set_title(ax, _title(report, f"execution trace of one call, {what}"))
    return fig


BREAKDOWN_PARTS = frames.SHARE_PARTS


@takes_report
def time_shares(report: Report):
    """Per IPU, the share (%) of the calls' cycles in each part (``Report.time_shares()``)."""
    return _data("breakdown", frames.time_shares, report)


@takes_report
def breakdown(report: Report, ax: Axes | None = None) -> Figure:
    """Per IPU, the share of an executor call spent computing, exchanging, syncing/idle and in
    host copies (shares add up to 100%)."""
    frame = time_shares(report)
    own = ax is None
    rows = len(frame) > MANY_BARS
    fig, ax = _figure(ax, (9, many_rows_height(len(frame)) if rows else 0.45 * len(frame) + 1.8))
    left = [0.0] * len(frame)
    names = [*BREAKDOWN_PARTS, "other"]
    handles = []
    from matplotlib.patches import Patch

    for name in names:
        col = frames.share_column(name)
        values = frame[col].tolist()
        if not any(values):
            continue
        if rows:  # one collection per part: 64 IPUs x 5 parts as patches cost more than the rest
            bar_collection(ax, range(len(frame)), left, values, PALETTE[name], horizontal=True, thickness=0.8)
            handles.append(Patch(color=PALETTE[name], label=name))
        else:
            ax.barh(range(len(frame)), values, left=left, color=PALETTE[name], label=name)
        for k, v in enumerate(values):
            if v >= 6:
                ax.text(left[k] + v / 2, k, f"{v:.0f}%", ha="center",
                        va="center", fontsize="x-small", color="white" if name in ("compute", "host copy") else "black")
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_yticks(range(len(frame)))
    ax.set_yticklabels([f"IPU{i}" for i in frame["ipu"]])
    ax.set_ylim(len(frame) - 0.5, -0.5)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the call's cycles (%)")
    _legend(fig, ax, own, handles if rows else ax.get_legend_handles_labels()[0])
    set_title(ax, _title(report, "where each IPU's time goes"))
    return fig
