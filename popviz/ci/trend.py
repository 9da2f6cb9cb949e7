"""Step changes in a metric's history, asv-style: the runs where the level of a series changed.

The series is read in run order as segments of constant level. A segment's level is the median
of its runs (so one odd run does not move it). A new segment — a step — starts at a run when that
run, and the ``min_size - 1`` runs after it, all differ from the current level by more than the
metric's comparison threshold (the same thresholds as ``popviz compare``), on the same side.
Deterministic metrics (cycles, bytes: the same program gives the same figure) use ``min_size``
1, so any run can be a step, the newest included; noisy ones (wall times) need
:data:`NOISY_MIN_RUNS` runs in a row beyond the threshold, so a single slow run is not a step.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from popviz.ci.history import History, Run
    from popviz.ci.thresholds import Rule

NOISY_MIN_RUNS = 3
"""Runs needed on each side of a step in a non-deterministic metric."""
SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Step:
    index: int
    """Position in the series of the first value of the new level."""
    before: float
    """Median of the segment before the step."""
    after: float
    """Median of the segment from the step on."""


def find_steps(values: Sequence[float], differs: Callable[[float, float], bool], min_size: int = 1) -> list[Step]:
    """The step changes in ``values`` (in order). ``differs(a, b)`` says whether two levels differ by
    more than the threshold; a step needs ``min_size`` runs in a row beyond it. Linear in the runs
    (times log): the current segment's median is kept by :class:`RunningMedian`."""
    values = [float(v) for v in values]
    min_size = max(1, int(min_size))
    cuts: list[int] = []
    level = RunningMedian()
    if values:
        level.add(values[0])
    for i in range(1, len(values) - min_size + 1):
        median = level.median()
        if not differs(median, values[i]):  # the common case, decided by one comparison
            level.add(values[i])
            continue
        window = values[i:i + min_size]
        if all(differs(median, v) for v in window) and (all(v > median for v in window)
                                                         or all(v < median for v in window)):
            cuts.append(i)
            level = RunningMedian()
        level.add(values[i])
    bounds = [0, *cuts, len(values)]
    return [Step(cut, statistics.median(values[bounds[k]:cut]), statistics.median(values[cut:bounds[k + 2]]))
            for k, cut in enumerate(cuts)]


class RunningMedian:
    """The median of a growing list, as :func:`statistics.median` gives it, in O(log n) per value:
    the lower half in a max-heap, the upper half in a min-heap."""

    def __init__(self) -> None:
        self._low: list[float] = []  # negated: a max-heap
        self._high: list[float] = []

    def add(self, value: float) -> None:
        if self._low and value > -self._low[0]:
            heapq.heappush(self._high, value)
        else:
            heapq.heappush(self._low, -value)
        if len(self._low) > len(self._high) + 1:
            heapq.heappush(self._high, -heapq.heappop(self._low))
        elif len(self._high) > len(self._low):
            heapq.heappush(self._low, -heapq.heappop(self._high))

    def median(self) -> float:
        if len(self._low) > len(self._high):
            return -self._low[0]
        return (-self._low[0] + self._high[0]) / 2


def sparkline(values: Sequence[float], width: int = 24) -> str:
    """The last ``width`` values as block characters, lowest to highest, on a scale at least
    :data:`SPARK_MIN_SPAN` of the largest value tall: a +0.5% wobble stays flat instead of
    spanning the whole height as a +300% step would."""
    tail = [float(v) for v in values][-width:]
    if not tail:
        return ""
    lo, hi = min(tail), max(tail)
    span = max(hi - lo, SPARK_MIN_SPAN * max(abs(lo), abs(hi)))
    if span == 0:
        return SPARK[0] * len(tail)
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * len(SPARK)))] for v in tail)


SPARK_MIN_SPAN = 0.1
"""The smallest change, relative to the values, that a trend line draws at full height."""


# ------------------------------------------------------------------------ trends of a history

@dataclass
class Trend:
    engine: str
    metric: str
    unit: str
    runs: list[Run]
    values: list[float]
    steps: list[Step]
    verdicts: list[str]
    """Per step: ``regressed`` or ``improved`` (the metric's direction)."""
    threshold: str
    config_changes: list[list[str]]
    """Per step: the configuration fields that changed at that run (``device_iterations: 10 → 4``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "metric": self.metric, "unit": self.unit, "threshold": self.threshold,
                "values": [{"run": r.id, "label": r.label, "value": v} for r, v in zip(self.runs, self.values, strict=True)],
                "steps": [{"run": self.runs[s.index].id, "label": self.runs[s.index].label, "before": s.before,
                           "after": s.after, "change": change(s.before, s.after, self.unit), "verdict": v,
                           "config_changes": c}
                          for s, v, c in zip(self.steps, self.verdicts, self.config_changes, strict=True)]}


def change(before: float, after: float, unit: str) -> str:
    """``+2.50pp`` for percentages, ``+12.00%`` otherwise (as compare shows it)."""
    from popviz.ci.compare import Row

    return Row("", "", unit, before, after, "", "").change


def trends(history: History, rules: Sequence[Rule] = (), patterns: Sequence[str] = ()) -> list[Trend]:
    """One Trend per (engine, metric) of ``history`` whose metric matches one of ``patterns`` (all
    when empty), in the order compare lists metrics."""
    import fnmatch

    from popviz.ci.compare import PLACED_METRIC, _metric_order
    from popviz.ci.metrics import HIGHER_IS_WORSE, definition, split_change
    from popviz.ci.thresholds import threshold_for

    out = []
    series = history.series()
    for (engine, metric) in sorted(series, key=lambda k: (k[0], _metric_order(k[1]))):
        if patterns and not any(fnmatch.fnmatchcase(metric, p) for p in patterns):
            continue
        try:
            d = definition(metric)
        except KeyError:
            continue  # a metric this popviz does not know (added by a newer one)
        t = threshold_for(metric, list(rules))
        points = series[(engine, metric)]
        values = [v for _, v in points]
        steps = find_steps(values, lambda a, b, t=t: t.exceeded(a, b), 1 if d.deterministic else NOISY_MIN_RUNS)
        verdicts = ["regressed" if (s.after > s.before) == (d.direction == HIGHER_IS_WORSE) else "improved"
                    for s in steps]
        runs = [r for r, _ in points]
        if PLACED_METRIC.match(metric):  # as compare: a per-stage or per-IPU figure across a re-split moved
            verdicts = ["moved" if split_change(history.engines[(runs[s.index - 1].id, engine)].config,
                                                history.engines[(runs[s.index].id, engine)].config)[0] else v
                        for s, v in zip(steps, verdicts, strict=True)]
        changed = [_config_changes(history, engine, runs[s.index - 1].id, runs[s.index].id) for s in steps]
        out.append(Trend(engine, metric, d.unit, runs, values, steps, verdicts, t.spec, changed))
    return out


def _config_changes(history: History, engine: str, before: int, after: int) -> list[str]:
    """What changed in the engine's configuration between two runs: ``field: old → new``."""
    from popviz.ci.metrics import PLACEMENT_FIELD, split_change

    a = history.engines[(before, engine)].config
    b = history.engines[(after, engine)].config
    out = [f"{k}: {_short(a.get(k))} → {_short(b.get(k))}" for k in sorted(set(a) | set(b))
           if k != PLACEMENT_FIELD and a.get(k) != b.get(k)]
    moved = split_change(a, b)[1]
    if moved:
        out.append("layers moved: " + ", ".join(f"{k} IPU{x} → IPU{y}" for k, x, y in moved))
    return out


def _short(value: Any) -> str:
    return " | ".join(map(str, value)) if isinstance(value, list) else str(value)


@dataclass(frozen=True)
class EnvironmentChange:
    """A run whose engine ran on another environment than that engine's previous run."""

    run: Run
    engine: str
    changes: list[str]
    """``Poplar SDK 3.2.0 → 3.3.0``, ... (popviz.ci.environment.changes)."""

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run.id, "label": self.run.label, "engine": self.engine, "changes": self.changes}


def environment_changes(history: History) -> list[EnvironmentChange]:
    """Per engine, the runs where its environment (SDK, popviz, PopTorch, torch, IPU, host)
    differs from its previous run's, in run order (a field one of them did not record is no
    change)."""
    from popviz.ci.environment import changes

    by_id = {r.id: r for r in history.runs}
    last: dict[str, dict[str, str]] = {}
    out = []
    for (run_id, engine), e in sorted(history.engines.items()):
        env = e.environment
        if engine in last and env:
            diff = changes(last[engine], env)
            if diff:
                out.append(EnvironmentChange(by_id[run_id], engine, diff))
        if env:
            last[engine] = env
    return out
