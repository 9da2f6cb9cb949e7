"""Matplotlib figures of a Report: the execution trace, stage balance, memory, tiles, the share of
each IPU's time, host I/O per output mode, memory live over the program steps (liveness), and two
reports side by side.

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
from typing import TYPE_CHECKING

from popviz.plot._style import FIGURE_NAMES, PALETTE, PlotDataError, new_figure
from popviz.plot.compare import compare, key_metrics
from popviz.plot.host import host_io, output_modes
from popviz.plot.liveness import liveness, liveness_frame
from popviz.plot.memory import memory, memory_by_ipu, tile_memory, tiles
from popviz.plot.pipeline import ipu_cycles, stage_cycles, stages
from popviz.plot.trace import MAX_BARS_PER_IPU, breakdown, steps_frame, time_shares, timeline

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from popviz.model import Report

_DRAW = {"timeline": timeline, "stages": stages, "memory": memory, "tiles": tiles, "breakdown": breakdown,
         "host_io": host_io, "liveness": liveness}


def figures(report: Report, only: Sequence[str] | None = None) -> dict[str, Figure | PlotDataError]:
    """Every per-report figure (``FIGURE_NAMES``, or those in ``only``): the Figure, or the
    PlotDataError saying why it cannot be drawn."""
    out: dict[str, Figure | PlotDataError] = {}
    for name in only or FIGURE_NAMES:
        try:
            out[name] = _DRAW[name](report)
        except PlotDataError as exc:
            out[name] = exc
    return out


__all__ = ["FIGURE_NAMES", "MAX_BARS_PER_IPU", "PALETTE", "PlotDataError", "breakdown", "compare", "figures",
           "host_io", "ipu_cycles", "key_metrics", "liveness", "liveness_frame", "memory", "memory_by_ipu", "new_figure", "output_modes", "stage_cycles",
           "stages", "steps_frame", "tile_memory", "tiles", "time_shares", "timeline"]
