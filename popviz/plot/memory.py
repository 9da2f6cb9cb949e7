"""Memory per IPU by category, and per tile as a heat map."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.model import frames
from popviz.plot._style import (
    MANY_BARS,
    MAX_MEMORY_CATEGORIES,
    MAX_TILE_MARKERS,
    MAX_TILE_PANELS,
    MEMORY_COLOURS,
    PALETTE,
    PlotDataError,
    _data,
    _figure,
    _title,
    bar_collection,
    beside,
    many_rows_height,
    memory_colours,
    new_figure,
    set_title,
    takes_report,
)


@takes_report
def memory_by_ipu(report: Report):
    """Bytes per IPU and category (``Report.memory_by_ipu()``; see ``popviz.model.frames.memory_by_ipu``)."""
    return _data("memory", frames.memory_by_ipu, report)


SMALL_USE_FRAC = 0.25
"""When every IPU uses less than this share of its capacity, the memory figure's axis fits the
bars, not the capacity (which is then named off the scale), so the categories stay readable."""


def _pressure(row) -> tuple[str, bool]:
    """The label over an IPU's bar and whether it is under pressure (as the memory analysis
    judges: overflowing or nearly full tiles, or a mean fill above IPU_FULL_FRAC)."""
    import pandas as pd

    from popviz.analysis.thresholds import IPU_FULL_FRAC, TILE_FULL_FRAC

    pct = row["used_pct"]
    label = "" if pd.isna(pct) else f"{pct:.1f}%"
    oom, hot = row.get("tiles_overflowing"), row.get("tiles_over_90pct")
    if not pd.isna(oom) and oom:
        return f"{label}\n{int(oom):,} tiles OOM", True
    if not pd.isna(hot) and hot:
        return f"{label}\n{int(hot):,} tiles > {100 * TILE_FULL_FRAC:.0f}%", True
    if pd.isna(hot) and not pd.isna(pct):
        return label, pct > 100 * IPU_FULL_FRAC or bool(row["used_bytes"] > (row["capacity_bytes"] or 0) > 0)
    return label, False


@takes_report
def memory(report: Report, ax: Axes | None = None) -> Figure:
    """Memory per IPU stacked by category (largest at the bottom; gaps on top), with the IPU's
    capacity line and the used % on each bar; IPUs under pressure are labelled in vermillion."""
    from matplotlib.patches import Patch

    frame = memory_by_ipu(report)
    if frame.empty:
        raise PlotDataError(f"memory: engine '{report.label}' has no memory rows")
    own = ax is None
    rows = len(frame) > MANY_BARS  # a POD64's 64 IPUs: one row each, down the page
    fig, ax = _figure(ax, (10.5, many_rows_height(len(frame), 1.6)) if rows else
                      (max(7.5, 1.1 * len(frame) + 4.5), 4.6))
    # a category empty on every IPU (an inference engine's optimizer state) is not drawn nor listed
    cats = [c for c in frames.category_columns(frame) if frame[c].fillna(0).sum() > 0]
    totals = frame[cats].sum().sort_values(ascending=False)
    shown_cats = list(totals.index[:MAX_MEMORY_CATEGORIES])
    other = [c for c in cats if c not in shown_cats]
    mib = 2**20
    x = list(range(len(frame)))
    bottom = [0.0] * len(frame)
    handles = []

    def stack(values, colour, label, **style) -> None:
        nonlocal bottom
        if rows:
            bar_collection(ax, x, bottom, values, colour, horizontal=True, hatch=style.get("hatch"),
                           edgecolors=style.get("edgecolor", "face"), linewidths=style.get("linewidth", 0))
        else:
            ax.bar(x, values, bottom=bottom, color=colour, width=0.7, **style)
        handles.append(Patch(facecolor=colour, label=label, **style))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]

    colours = memory_colours([c[:-len("_bytes")] for c in shown_cats])
    for cat in shown_cats:
        stack((frame[cat] / mib).tolist(), colours[cat[:-len("_bytes")]], cat[:-len("_bytes")])
    if other:
        stack((frame[other].sum(axis=1) / mib).tolist(), MEMORY_COLOURS[-1], f"other ({len(other)} categories)")
    if not cats:  # no categories: one bar of the total
        stack((frame["used_bytes"] / mib).tolist(), MEMORY_COLOURS[0], "used")
    elif frame["gaps_bytes"].any():
        stack((frame["gaps_bytes"] / mib).tolist(), "white", "gaps", edgecolor="#777777", hatch="////",
              linewidth=0.5)
    top = max(bottom)
    capacities = frame["capacity_bytes"].dropna()
    capacity = float(capacities.max()) / mib if len(capacities) else None
    set_limit = ax.set_xlim if rows else ax.set_ylim
    if capacity is not None and top < SMALL_USE_FRAC * capacity:
        set_limit(0, top * (1.45 if rows else 1.3))
        ax.text(0.99, 0.01 if rows else 0.97, f"capacity {capacity:,.0f} MiB per IPU (off the scale)",
                transform=ax.transAxes, ha="right", va="bottom" if rows else "top", fontsize="small")
    else:
        limit = max(capacity or 0.0, top)
        set_limit(0, limit * (1.3 if rows else 1.18))
    capacity_key = []
    if capacity is not None and capacity <= (ax.get_xlim() if rows else ax.get_ylim())[1]:
        line = (ax.axvline if rows else ax.axhline)(capacity, color=PALETTE["capacity"], linestyle="--",
                                                     linewidth=1, zorder=1, label=f"capacity {capacity:,.0f} MiB")
        capacity_key = [line]
    for i, row in frame.iterrows():
        label, pressed = _pressure(row)
        if not label:
            continue
        style = {"fontweight": "bold" if pressed else "normal", "color": PALETTE["highlight"] if pressed else "black",
                 "zorder": 3}
        if rows:  # one line at the bar's end
            ax.annotate(label.replace("\n", " · "), (bottom[i], x[i]), xytext=(3, 0), textcoords="offset points",
                        ha="left", va="center", fontsize="x-small", **style)
        else:
            ax.annotate(label, (x[i], bottom[i]), xytext=(0, 3), textcoords="offset points", ha="center",
                        va="bottom", fontsize="small", **style,
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"})
    names = [f"IPU{i}" for i in frame["ipu"]]
    if rows:
        ax.set_yticks(x)
        ax.set_yticklabels(names, fontsize="x-small")
        ax.set_ylim(len(frame) - 0.5, -0.5)
        ax.set_xlabel("MiB (including gaps)")
    else:
        ax.set_xticks(x)
        ax.set_xticklabels(names)
        ax.set_ylabel("MiB (including gaps)")
    handles = capacity_key + (handles if rows else handles[::-1])  # the legend reads like the stack
    if own:
        fig.legend(handles=handles, loc="outside right center", fontsize="small", frameon=False)
    else:
        beside(ax, handles)
    set_title(ax, _title(report, "memory per IPU by category"))
    return fig


@takes_report
def tile_memory(report: Report):
    """Per-tile memory (``Report.tile_memory()``; see ``popviz.model.frames.tile_memory``)."""
    return _data("tiles", frames.tile_memory, report)


@takes_report
def tiles(report: Report, ipu: int | None = None, ax: Axes | None = None) -> Figure:
    """Per-tile memory as a heat map, one panel per IPU (tiles row by row), tiles above 90%
    outlined and overflowing tiles crossed out."""
    import math

    import numpy as np

    from popviz.analysis.thresholds import TILE_FULL_FRAC

    frame = tile_memory(report)
    if frame["used_pct"].isna().all():
        raise PlotDataError(f"tiles: engine '{report.label}' has no target, so the tiles' capacity is unknown")
    full_pct = 100 * TILE_FULL_FRAC
    ipus = sorted(int(i) for i in frame["ipu"].unique())
    if ipu is not None:
        if ipu not in ipus:
            raise PlotDataError(f"tiles: engine '{report.label}' has no IPU {ipu} (IPUs: {ipus})")
        ipus = [ipu]
    n_tiles = int(frame["tile"].max()) + 1
    if report.target:
        n_tiles = max(n_tiles, report.target.tiles_per_ipu)
    if len(ipus) > MAX_TILE_PANELS:  # a POD: one row per IPU, every IPU shown
        return _tile_matrix(report, frame, ipus, n_tiles, ax)
    cols = int(math.ceil(math.sqrt(n_tiles * 2)))
    rows = int(math.ceil(n_tiles / cols))
    if ax is not None:
        fig, axes = ax.figure, [ax]
        ipus = ipus[:1]
    else:
        ncols = min(len(ipus), 2)
        nrows = int(math.ceil(len(ipus) / ncols))
        fig = new_figure((5.2 * ncols + 1.2, 2.9 * nrows + 0.8))
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
        for extra in axes[len(ipus):]:
            extra.set_visible(False)
    from matplotlib import colormaps

    marked = {"circle": False, "cross": False}
    cmap = colormaps["viridis"].with_extremes(over=PALETTE["highlight"], bad="white")
    image = None
    for panel, i in zip(axes, ipus, strict=False):
        sub = frame[frame["ipu"] == i]
        grid = np.full(rows * cols, np.nan)
        grid[sub["tile"].to_numpy()] = sub["used_pct"].to_numpy()
        image = panel.imshow(grid.reshape(rows, cols), cmap=cmap, vmin=0, vmax=100, aspect="auto",
                             interpolation="nearest")
        full = sub["used_pct"] > full_pct
        hot = sub[full & ~sub["overflowing"]]["tile"].to_numpy()
        over = sub[sub["overflowing"]]["tile"].to_numpy()
        if 0 < len(hot) <= MAX_TILE_MARKERS:
            panel.scatter(hot % cols, hot // cols, s=30, facecolors="none", edgecolors="black", linewidths=1)
            marked["circle"] = True
        if 0 < len(over) <= MAX_TILE_MARKERS:
            panel.scatter(over % cols, over // cols, s=40, marker="x", color="black", linewidths=1.5)
            marked["cross"] = True
        panel.set_xticks([])
        panel.set_yticks([])
        worst = float(sub["used_pct"].max()) if len(sub) else 0.0
        panel.set_title(f"IPU{i}: fullest tile {worst:.0f}% · {len(over):,} overflowing · "
                        f"{int(full.sum()):,} above {full_pct:.0f}%", fontsize="small",
                        color=PALETTE["highlight"] if len(over) else "black",
                        fontweight="bold" if len(over) else "normal")
    if image is not None:
        fig.colorbar(image, ax=axes[:len(ipus)], label="tile memory used %", extend="max", shrink=0.8)
    from matplotlib.lines import Line2D

    keys = [Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="black",
                   label=f"tile above {full_pct:.0f}%")] if marked["circle"] else []
    if marked["cross"]:
        keys.append(Line2D([], [], marker="x", linestyle="", color="black", label="tile overflowing"))
    title = _title(report, f"memory per tile ({cols} tiles per row; above 100% in vermillion)")
    if ax is None:
        if keys:
            fig.legend(handles=keys, loc="outside lower center", ncol=len(keys), frameon=False, fontsize="small")
        fig.suptitle(title)
    else:  # the caller's figure keeps its own title: this panel says what it shows, and its key
        if keys:
            ax.legend(handles=keys, loc="upper left", bbox_to_anchor=(0.0, -0.02), ncol=len(keys), frameon=False,
                      fontsize="small")
        set_title(ax, f"{title}\n{ax.get_title()}", fontsize="small")
    return fig


MAX_TILE_COLUMNS = 736
"""Columns of the one-row-per-IPU tile map: more tiles than this are drawn as the fullest of each
run of tiles (1,472 tiles: of each pair), so no overflowing tile disappears between pixels."""


def _tile_matrix(report: Report, frame, ipus: list[int], n_tiles: int, ax: Axes | None) -> Figure:
    """Per-tile memory of many IPUs as one heat map, a row per IPU; each row's fullest tile and
    its counts of overflowing and nearly full tiles written beside it."""
    import math

    import numpy as np
    from matplotlib import colormaps

    from popviz.analysis.thresholds import TILE_FULL_FRAC

    full_pct = 100 * TILE_FULL_FRAC
    group = max(1, math.ceil(n_tiles / MAX_TILE_COLUMNS))
    cols = math.ceil(n_tiles / group)
    pct = frame["used_pct"].to_numpy(dtype="float64")
    known = ~np.isnan(pct)
    row = np.searchsorted(ipus, frame["ipu"].to_numpy())
    grid = np.full(len(ipus) * cols, -np.inf)
    np.maximum.at(grid, row[known] * cols + frame["tile"].to_numpy()[known] // group, pct[known])
    grid[np.isneginf(grid)] = np.nan  # no tile there (or no figure for it)
    over = frame["overflowing"].to_numpy(dtype=bool)
    n_over = np.bincount(row, weights=over, minlength=len(ipus)).astype("int64")
    n_full = np.bincount(row, weights=known & (np.where(known, pct, 0) > full_pct), minlength=len(ipus)).astype("int64")
    worst = np.full(len(ipus), np.nan)
    np.fmax.at(worst, row[known], pct[known])
    own = ax is None
    if own:
        fig = new_figure((11.5, many_rows_height(len(ipus), 1.9)))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    cmap = colormaps["viridis"].with_extremes(over=PALETTE["highlight"], bad="white")
    image = ax.imshow(grid.reshape(len(ipus), cols), cmap=cmap, vmin=0, vmax=100, aspect="auto",
                      interpolation="nearest", extent=(0, cols * group, len(ipus) - 0.5, -0.5))
    ax.set_yticks(range(len(ipus)))
    ax.set_yticklabels([f"IPU{i}" for i in ipus], fontsize="x-small")
    ax.set_xlabel("tile")
    ax.tick_params(axis="x", labelsize="small")
    for k in range(len(ipus)):
        bad = n_over[k] > 0
        ax.annotate(f"fullest {worst[k]:.0f}% · {n_over[k]:,} overflowing · {n_full[k]:,} above {full_pct:.0f}%"
                    if not np.isnan(worst[k]) else "no figures", (1.0, k), xycoords=("axes fraction", "data"),
                    xytext=(4, 0), textcoords="offset points", va="center", fontsize="xx-small",
                    color=PALETTE["highlight"] if bad else "black", fontweight="bold" if bad else "normal")
    if own:  # under the map: the rows' figures are beside it
        fig.colorbar(image, ax=ax, extend="max", location="bottom", shrink=0.6, aspect=50, pad=0.01)
        ax.set_xlabel("tile  ·  colour: tile memory used %")
    else:
        fig.colorbar(image, ax=ax, label="tile memory used %", extend="max", shrink=0.8)
    each = f"; each column the fullest of {group} tiles" if group > 1 else ""
    title = _title(report, f"memory per tile, a row per IPU ({n_tiles:,} tiles{each}; above 100% in vermillion)")
    if own:
        set_title(ax, title)
    else:
        set_title(ax, f"{title}\n{ax.get_title()}", fontsize="small")
    return fig
