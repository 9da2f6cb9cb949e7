"""Memory per IPU by category, and per tile as a heat map."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

from popviz.plot._style import (
    MAX_MEMORY_CATEGORIES,
    MAX_TILE_MARKERS,
    MAX_TILE_PANELS,
    MEMORY_COLOURS,
    PALETTE,
    PlotDataError,
    _figure,
    _metrics,
    _need,
    _title,
    new_figure,
)


def memory_by_ipu(report: Report):
    """Bytes per IPU and category with capacity and used % (a DataFrame, one row per IPU)."""
    import pandas as pd

    _need(report, "memory", "memory", "the report has no memory figures")
    m = _metrics(report, "memory")
    rows = []
    for r in m["ipus"]:
        row = {"ipu": r["ipu"], "used_bytes": r["used_bytes"], "capacity_bytes": r["capacity_bytes"],
               "used_pct": r["used_pct"]}
        row.update({f"{k}_bytes": v for k, v in (r.get("categories") or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows).fillna(0)


def memory(report: Report, ax: Axes | None = None) -> Figure:
    """Memory per IPU stacked by category, with the IPU's capacity and the used % on each bar."""
    frame = memory_by_ipu(report)
    if frame.empty:
        raise PlotDataError(f"memory: engine '{report.label}' has no memory rows")
    fig, ax = _figure(ax, (max(5.0, 1.1 * len(frame) + 3), 4.5))
    cats = [c for c in frame.columns if c.endswith("_bytes") and c not in ("used_bytes", "capacity_bytes")]
    totals = frame[cats].sum().sort_values(ascending=False)
    shown_cats = list(totals.index[:MAX_MEMORY_CATEGORIES])
    other = [c for c in cats if c not in shown_cats]
    gib = 2**20
    x = range(len(frame))
    bottom = [0.0] * len(frame)
    for colour, cat in zip(MEMORY_COLOURS, shown_cats, strict=False):
        values = (frame[cat] / gib).tolist()
        ax.bar(x, values, bottom=bottom, color=colour, label=cat[:-len("_bytes")])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    if other:
        values = (frame[other].sum(axis=1) / gib).tolist()
        ax.bar(x, values, bottom=bottom, color=MEMORY_COLOURS[-1], label=f"other ({len(other)})")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    if not cats:  # no categories: one bar of the total
        bottom = (frame["used_bytes"] / gib).tolist()
        ax.bar(x, bottom, color=MEMORY_COLOURS[0], label="used")
    capacity = float(frame["capacity_bytes"].max()) / gib
    ax.axhline(capacity, color=PALETTE["capacity"], linestyle="--", linewidth=1)
    ax.annotate(f"capacity {capacity:,.0f} MiB", (len(frame) - 0.5, capacity), xytext=(0, 3),
                textcoords="offset points", ha="right", va="bottom", fontsize="small")
    for i, (top, pct) in enumerate(zip(bottom, frame["used_pct"], strict=True)):
        over = pct > 100
        ax.annotate(f"{pct:.1f}%", (i, top), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize="small", fontweight="bold" if over else "normal",
                    color=PALETTE["highlight"] if over else "black")
    ax.set_xticks(list(x))
    ax.set_xticklabels([f"IPU{i}" for i in frame["ipu"]])
    ax.set_ylabel("MiB")
    ax.set_ylim(0, max(capacity, max(bottom)) * 1.15)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small", frameon=False)
    ax.set_title(_title(report, "memory per IPU by category"))
    return fig


def tile_memory(report: Report):
    """Per-tile memory with the tile's used % (``ipu``, ``tile``, ``used_bytes``, ``used_pct``,
    ``overflowing``)."""
    mem = _need(report, "memory", "tiles", "the report has no memory figures")
    if mem.level != "tile":
        raise PlotDataError(f"tiles: engine '{report.label}' has per-IPU memory only (no per-tile figures; "
                            "an emulated report cannot have them)")
    f = mem.frame
    per_tile = report.target.bytes_per_tile if report.target else None
    out = f[["ipu", "tile"]].copy()
    out["used_bytes"] = f["total_bytes_including_gaps"]
    out["used_pct"] = 100.0 * out["used_bytes"] / per_tile if per_tile else float("nan")
    out["overflowing"] = f["overflow_bytes"] > 0
    return out


def tiles(report: Report, ipu: int | None = None, ax: Axes | None = None) -> Figure:
    """Per-tile memory as a heat map, one panel per IPU (tiles row by row), tiles above 90%
    outlined and overflowing tiles crossed out."""
    import math

    import numpy as np

    frame = tile_memory(report)
    ipus = sorted(int(i) for i in frame["ipu"].unique())
    if ipu is not None:
        if ipu not in ipus:
            raise PlotDataError(f"tiles: engine '{report.label}' has no IPU {ipu} (IPUs: {ipus})")
        ipus = [ipu]
    ipus = ipus[:MAX_TILE_PANELS]
    n_tiles = int(frame["tile"].max()) + 1
    if report.target:
        n_tiles = max(n_tiles, report.target.tiles_per_ipu)
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

    cmap = colormaps["viridis"].with_extremes(over=PALETTE["highlight"], bad="white")
    image = None
    for panel, i in zip(axes, ipus, strict=False):
        sub = frame[frame["ipu"] == i]
        grid = np.full(rows * cols, np.nan)
        grid[sub["tile"].to_numpy()] = sub["used_pct"].to_numpy()
        image = panel.imshow(grid.reshape(rows, cols), cmap=cmap, vmin=0, vmax=100, aspect="auto",
                             interpolation="nearest")
        hot = sub[(sub["used_pct"] > 90) & ~sub["overflowing"]]["tile"].to_numpy()
        over = sub[sub["overflowing"]]["tile"].to_numpy()
        if 0 < len(hot) <= MAX_TILE_MARKERS:
            panel.scatter(hot % cols, hot // cols, s=30, facecolors="none", edgecolors="black", linewidths=1,
                          label="> 90%")
        if 0 < len(over) <= MAX_TILE_MARKERS:
            panel.scatter(over % cols, over // cols, s=40, marker="x", color="black", linewidths=1.5,
                          label="overflowing")
        panel.set_xticks([])
        panel.set_yticks([])
        worst = float(sub["used_pct"].max()) if len(sub) else 0.0
        panel.set_title(f"IPU{i}: fullest tile {worst:.0f}%, {len(over)} overflowing, {len(hot)} > 90%",
                        fontsize="small")
    if image is not None:
        fig.colorbar(image, ax=axes[:len(ipus)], label="tile memory used %", extend="max", shrink=0.8)
    fig.suptitle(_title(report, f"memory per tile ({cols} tiles a row)"))
    return fig
