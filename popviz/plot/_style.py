"""What every figure shares: the palette, limits, the error for missing data and small helpers."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from popviz.errors import UsageError
from popviz.model.frames import MissingDataError

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
    "streaming memory": "#CC79A7",  # reddish purple: copies to and from remote buffers
    "other": "#999999",
    "base": "#999999",
    "new": "#0072B2",
    "highlight": "#D55E00",
    "capacity": "#000000",
}
"""One palette for every figure (category -> colour)."""

MEMORY_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#F0E442", "#D55E00", "#999999")
"""Colours of memory categories (:func:`memory_colours`); the last is 'other'."""

KNOWN_MEMORY_CATEGORIES = ("weights", "optimizerState", "gradientAccumulators", "activationStash", "temporaries",
                           "codeAndExchange")
"""The emulator's categories, each always drawn in the same colour (docs/emulator.md)."""


def memory_colours(categories: list[str]) -> dict[str, str]:
    """A colour per category that depends neither on the categories' sizes nor on which others
    are there, so one category keeps its colour from figure to figure: each of the emulator's own
    has its colour; any other (libpva's) takes the rest in the order of their names."""
    palette = MEMORY_COLOURS[:-1]
    out = {c: palette[KNOWN_MEMORY_CATEGORIES.index(c)] for c in categories if c in KNOWN_MEMORY_CATEGORIES}
    others = sorted(c for c in categories if c not in KNOWN_MEMORY_CATEGORIES)
    free = [c for c in palette if c not in out.values()] or list(palette)
    out.update({c: free[k % len(free)] for k, c in enumerate(others)})
    return out

MAX_BARS_PER_IPU = 3000
"""When an IPU has more steps than this, the timeline is drawn from this many time bins per IPU,
each stacked by the share of its cycles in each category (a 10^6-step trace then draws in seconds,
and no work vanishes into a bin that mostly waited)."""
MAX_STEPS_DRAWN = 20_000
"""Above this many steps in the call (all IPUs together) the timeline is binned as well: a POD64's
64 IPUs x 1,500 steps as 96,000 rectangles took longer to draw than the rest of the figures."""
MANY_BARS = 16
"""Above this many bars (stages, IPUs) the stages and memory figures draw one row per bar,
horizontally, ROW_INCHES apart (64 IPUs then read down a page instead of across a 75-inch figure),
and every bar chart draws its bars as one collection per colour series."""
ROW_INCHES = 0.22
"""Height of one IPU's or stage's row in a figure of many rows (timeline, breakdown, memory, stages)."""
MAX_MEMORY_CATEGORIES = 7
MAX_TILE_PANELS = 16
MAX_TILE_MARKERS = 300
"""Above this many tiles over 90% (or overflowing) on one IPU, the colour alone marks them."""
FIGURE_NAMES = ("timeline", "stages", "memory", "tiles", "breakdown", "host_io", "liveness")
"""The per-report figures, in the order ``popviz plot`` writes them."""


class PlotDataError(MissingDataError):
    """The report lacks the data a figure needs (the message starts with the figure's name)."""


def as_report(value: Any, what: str) -> Report:
    """``value`` as the one Report a figure or table draws: a Report; a ReportSet, or a directory
    or bundle path, holding exactly one engine; anything else is a one-line UsageError saying
    what to pass (``popviz.load(dir)["training"]``), never an AttributeError from deep inside."""
    from popviz.model import Report, ReportSet

    if isinstance(value, Report):
        return value
    if isinstance(value, (str, os.PathLike)):
        from popviz.sources.discover import load

        value = load(value)
    if isinstance(value, ReportSet):
        if len(value) == 1:
            return value[0]
        engines = ", ".join(repr(label) for label in value.labels) or "none"
        first = repr(value.labels[0]) if len(value) else "'training'"
        raise UsageError(f"{what} draws one engine and this set holds {len(value)} ({engines}); pick one: "
                         f"reports[{first}]")
    raise UsageError(f"{what} takes a Report (e.g. popviz.load(dir)['training']), not {type(value).__name__}")


F = TypeVar("F", bound=Callable[..., Any])


def takes_report(fn: F) -> F:
    """Let ``fn``'s first argument be anything :func:`as_report` accepts."""
    @functools.wraps(fn)
    def wrapper(report: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(as_report(report, f"popviz.plot.{fn.__name__}"), *args, **kwargs)
    return wrapper  # type: ignore[return-value]


def _data(figure: str, table, *args: Any, **kwargs: Any):
    """``table(*args)`` (a ``popviz.model.frames`` function), its MissingDataError named after ``figure``."""
    try:
        return table(*args, **kwargs)
    except PlotDataError:
        raise
    except MissingDataError as exc:
        raise PlotDataError(f"{figure}: {exc.message}") from None


_FIGURE_CLASS: type | None = None


def new_figure(size: tuple[float, float]) -> Figure:
    """A matplotlib Figure (no pyplot state) that Jupyter shows as a PNG on its own."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        from matplotlib.figure import Figure as _Base

        class PopvizFigure(_Base):
            def draw(self, renderer):  # type: ignore[no-untyped-def]
                import matplotlib

                # tick labels are made while drawing: no mathtext for them either
                with matplotlib.rc_context({"text.parse_math": False}):
                    _plain_text(self)
                    return super().draw(renderer)

            def _repr_png_(self) -> bytes:
                import io

                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=90)
                return buf.getvalue()

        _FIGURE_CLASS = PopvizFigure
    return _FIGURE_CLASS(figsize=size, layout="constrained")


def many_rows_height(rows: int, extra: float = 1.8) -> float:
    """Figure height (inches) of ``rows`` rows of ROW_INCHES plus ``extra`` for titles and legend."""
    return ROW_INCHES * rows + extra


def bar_collection(ax: Axes, position: Any, start: Any, length: Any, colours: Any, *, horizontal: bool,
                   thickness: float = 0.7, **style: Any) -> Any:
    """Bars as one PolyCollection added to ``ax``: bar ``k`` at ``position[k]`` (its centre, across
    the value axis), from ``start[k]`` for ``length[k]`` along it (``horizontal``: along x). One
    collection draws 64 x 9 stacked bars in a few milliseconds, where as many Rectangle patches
    took most of a POD64 memory figure's time."""
    import numpy as np
    from matplotlib.collections import PolyCollection

    p = np.asarray(position, dtype="float64")
    a = np.asarray(start, dtype="float64")
    b = a + np.asarray(length, dtype="float64")
    lo, hi = p - thickness / 2, p + thickness / 2
    if horizontal:
        corners = [(a, lo), (a, hi), (b, hi), (b, lo)]
    else:
        corners = [(lo, a), (hi, a), (hi, b), (lo, b)]
    verts = np.stack([np.stack(c, axis=1) for c in corners], axis=1)
    style.setdefault("linewidths", 0)
    coll = PolyCollection(verts, facecolors=colours, **style)
    ax.add_collection(coll)
    return coll


def clean(value: str) -> str:
    """``value`` with every character no font or file format can hold (controls, lone
    surrogates) as U+FFFD, line breaks kept."""
    if not value or value.replace("\n", "").isprintable():
        return value
    return "\n".join("".join(c if c.isprintable() else "\ufffd" for c in line) for line in value.split("\n"))


def _plain_text(fig: Figure) -> None:
    """Names from files are data in figures too: no text is read as mathtext (``$\\foo{$`` would
    fail the drawing) and characters no font or file format can hold (controls, lone
    surrogates) become U+FFFD. Runs before every drawing of a figure popviz made."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter

    for t in fig.findobj(Text):
        t.set_parse_math(False)
        value = t.get_text()
        if value != clean(value):
            t.set_text(clean(value))
    for ax in fig.axes:  # tick labels are re-made from their formatter while drawing
        for axis in (ax.xaxis, ax.yaxis):
            formatter = axis.get_major_formatter()
            if isinstance(formatter, FixedFormatter):
                formatter.seq = [clean(str(v)) for v in formatter.seq]


def _figure(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = new_figure(size)
    return fig, fig.add_subplot()


def set_title(ax: Axes, text: str, fontsize: str = "large") -> None:
    """``ax``'s title, its lines wrapped to the figure's width (matplotlib's own ``wrap=True``
    measures the text as mathtext, which a name with ``$`` breaks)."""
    import textwrap

    from matplotlib.font_manager import FontProperties

    points = FontProperties(size=fontsize).get_size_in_points()
    width = max(20, int(ax.figure.get_figwidth() * 72 / (points * 0.58)))  # ~0.58 em per character
    ax.set_title("\n".join(textwrap.fill(line, width) or line for line in text.split("\n")), fontsize=fontsize)


def _title(report: Report, what: str) -> str:
    estimated = " (estimated)" if report.provenance and report.provenance.estimated else ""
    return f"{report.label}: {what}{estimated}"


def _cycle_axis(report: Report) -> tuple[float, str]:
    """Scale and unit of a cycle axis: milliseconds when the clock is known."""
    clock = report.target.clock_hz if report.target else None
    if clock:
        return 1e3 / clock, "ms"
    return 1.0, "cycles"


def _legend(fig: Figure, ax: Axes, own: bool, handles: list) -> None:
    """A one-row legend under the plot on figures popviz made; on the caller's axes, beside them
    (never over the data: save with ``bbox_inches="tight"`` or a constrained layout)."""
    if own:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 7), frameon=False,
                   fontsize="small")
    else:
        beside(ax, handles)


def beside(ax: Axes, handles: list) -> None:
    """A legend just right of ``ax``: on a caller's axes it must not cover the bars or rows."""
    ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              frameon=False)


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


def _bytes_unit(largest: float) -> tuple[float, str]:
    """(divisor, unit) so that an axis of bytes up to ``largest`` reads in round binary units."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if largest >= size:
            return float(size), unit
    return 1.0, "bytes"
