"""Matplotlib figures of a Report: the execution trace, stage balance, memory, tiles, the share of
each IPU's time, host I/O per output mode, and two reports side by side.

Each function takes a Report (``compare``: two), an optional ``ax`` to draw into, and returns the
Figure. Figures are built with matplotlib's object API (no pyplot state), so they work in
notebooks, scripts and servers alike; matplotlib is imported only when a figure is drawn. The
figures draw what the analyses computed (``popviz.analysis``), so a plot and the console never
disagree. A figure whose data the report lacks raises :class:`PlotDataError` with one line naming
what is missing.

>>> import popviz, popviz.plot
>>> fig = popviz.plot.memory(popviz.load("sample_reports/mnist_pipeline")["training"])
>>> fig.savefig("memory.png")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from popviz.errors import PopvizError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from popviz.model import Report

# Okabe & Ito's palette: distinguishable with every common colour-vision deficiency and in grey.
PALETTE: dict[str, str] = {
    "forward": "#0072B2",       # blue
    "backward": "#56B4E9",      # sky blue
    "weight update": "#009E73",  # green
    "compute": "#0072B2",
    "exchange": "#E69F00",      # orange: inter-IPU copies and on-IPU exchange
    "sync / idle": "#D9D9D9",   # light grey: waiting
    "host copy": "#D55E00",     # vermillion
    "other": "#999999",
    "base": "#999999",
    "new": "#0072B2",
    "highlight": "#D55E00",
    "capacity": "#000000",
}
"""One palette for every figure (category -> colour)."""

MEMORY_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442", "#D55E00", "#999999")
"""Memory categories in order of size; the last colour is 'other'."""

TIMELINE_CATEGORIES = ("forward", "backward", "weight update", "compute", "exchange", "host copy",
                       "sync / idle", "other")
MAX_BARS_PER_IPU = 3000
"""A timeline row with more steps than this is drawn from time bins, each coloured by what took
most of it (a 10^6-step trace then draws in seconds and looks the same at screen resolution)."""
MAX_MEMORY_CATEGORIES = 7
MAX_TILE_PANELS = 16
MAX_TILE_MARKERS = 300
"""Above this many tiles over 90% (or overflowing) on one IPU, the colour alone marks them."""
FIGURE_NAMES = ("timeline", "stages", "memory", "tiles", "breakdown", "host_io")
"""The per-report figures, in the order ``popviz plot`` writes them."""


class PlotDataError(PopvizError):
    """The report lacks the data a figure needs."""


# ----------------------------------------------------------------------------- shared helpers

_FIGURE_CLASS: type | None = None


def new_figure(size: tuple[float, float]) -> Figure:
    """A matplotlib Figure (no pyplot state) that Jupyter shows as a PNG on its own."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        from matplotlib.figure import Figure as _Base

        class PopvizFigure(_Base):
            def _repr_png_(self) -> bytes:
                import io

                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=90)
                return buf.getvalue()

        _FIGURE_CLASS = PopvizFigure
    return _FIGURE_CLASS(figsize=size, layout="constrained")


def _figure(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = new_figure(size)
    return fig, fig.add_subplot()


def _title(report: Report, what: str) -> str:
    estimated = " (estimated)" if report.provenance and report.provenance.estimated else ""
    return f"{report.label}: {what}{estimated}"


def _need(report: Report, part: str, figure: str, why: str) -> Any:
    value = getattr(report, part)
    if value is None:
        raise PlotDataError(f"{figure}: engine '{report.label}' has no {part} table ({why})")
    return value


def _metrics(report: Report, analysis: str) -> dict[str, Any]:
    from popviz.analysis import registry

    return registry()[analysis](report).metrics


def _category(program: str, program_type: str) -> str:
    if program_type.startswith("StreamCopy"):
        return "host copy"
    if program_type == "Sync":
        return "sync / idle"
    if program_type in ("GlobalExchange", "DoExchange") or "exchange" in program_type.lower():
        return "exchange"
    if program_type == "OnTileExecute":
        name = program.lower()
        if "backward" in name or "grad" in name:
            return "backward"
        if "update" in name or "optimi" in name or "weight" in name:
            return "weight update"
        if "forward" in name:
            return "forward"
        return "compute"
    return "other"


def _cycle_axis(report: Report) -> tuple[float, str]:
    """Scale and unit of a cycle axis: milliseconds when the clock is known."""
    clock = report.target.clock_hz if report.target else None
    if clock:
        return 1e3 / clock, "ms"
    return 1.0, "cycles"


def _legend(fig: Figure, ax: Axes, own: bool, handles: list) -> None:
    """A one-row legend under the plot on figures popviz made; inside the axes on the caller's."""
    if own:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 7), frameon=False,
                   fontsize="small")
    else:
        ax.legend(handles=handles, fontsize="small")


def _fmt_cycles(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"


def _axis_formatter(ax_axis, fmt) -> None:
    from matplotlib.ticker import FuncFormatter

    ax_axis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt(v)))


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


# ----------------------------------------------------------------------------- timeline

def steps_frame(report: Report, run: int | None = None):
    """One executor call's steps with ``start_cycle`` filled (steps without one follow the
    previous step on their IPU), ``end_cycle`` and the timeline ``category``."""
    import numpy as np

    from popviz.analysis._common import call_runs, run_cycles

    execution = _need(report, "execution", "timeline", "an out-of-memory compile never runs")
    if run is None:
        runs = call_runs(run_cycles(execution))
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


# ----------------------------------------------------------------------------- stages

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


# ----------------------------------------------------------------------------- memory

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


# ----------------------------------------------------------------------------- tiles

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


# ----------------------------------------------------------------------------- breakdown

BREAKDOWN_PARTS = ("compute", "exchange", "sync / idle", "host copy")


def time_shares(report: Report):
    """Per IPU, the share (%) of an executor call's cycles in compute, exchange, sync/idle and
    host copy (columns ``compute_pct``, ``exchange_pct``, ``sync_idle_pct``, ``host_copy_pct``)."""
    import pandas as pd

    from popviz.analysis._common import call_runs, run_cycles

    execution = _need(report, "execution", "breakdown", "an out-of-memory compile never runs")
    agg = run_cycles(execution)
    runs = call_runs(agg)
    if not runs:
        raise PlotDataError(f"breakdown: engine '{report.label}' has no run with on-tile compute")
    agg = agg[agg["run"].isin(runs)]
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


# ----------------------------------------------------------------------------- host I/O

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


# ----------------------------------------------------------------------------- compare

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


def figures(report: Report, only: Sequence[str] | None = None) -> dict[str, Figure | PlotDataError]:
    """Every per-report figure (``FIGURE_NAMES``, or those in ``only``): the Figure, or the
    PlotDataError saying why it cannot be drawn."""
    out: dict[str, Figure | PlotDataError] = {}
    for name in only or FIGURE_NAMES:
        try:
            out[name] = globals()[name](report)
        except PlotDataError as exc:
            out[name] = exc
    return out


__all__ = ["FIGURE_NAMES", "PALETTE", "PlotDataError", "breakdown", "compare", "figures", "host_io",
           "key_metrics", "memory", "memory_by_ipu", "output_modes", "stage_cycles", "stages", "steps_frame",
           "tile_memory", "tiles", "time_shares", "timeline"]
