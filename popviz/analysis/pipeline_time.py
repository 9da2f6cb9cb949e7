"""The time a split's pipeline takes (its stages' cycles over G micro-batches, ramps included),
and a split refined for that time rather than for its slowest stage alone. Pure functions over
the planner's :class:`~popviz.analysis.planner.LayerCost` sequences."""

from __future__ import annotations

from collections.abc import Sequence

from popviz.analysis.planner import LayerCost, PlanSettings, Split, evaluate, own_rerun, recompute_cut


def stage_work(layers: Sequence[LayerCost], layers_per_ipu: Sequence[int],
               settings: PlanSettings) -> list[tuple[int, int, int]]:
    """The pipeline's forward stages of a split as (IPU, forward, backward) cycles per
    micro-batch: one per IPU, then a stage back on the first IPU for a tied projection's part
    (``tail_*_cycles``). A recomputed layer's backward includes its forward run again
    (:func:`~popviz.analysis.planner.own_rerun`)."""
    out = []
    tail_f = tail_b = 0
    i = 0
    for ipu, k in enumerate(layers_per_ipu):
        part = layers[i:i + k]
        last = settings.last_stage_recomputes_less and ipu == len(layers_per_ipu) - 1
        cut = recompute_cut(layers, i, i + k) if last else i + k
        again = [i + j < cut for j in range(k)]
        i += k
        f = sum(x.fwd_cycles - x.tail_fwd_cycles for x in part)
        b = 0
        if settings.training:  # the measured recomputation out, this stage's in
            b = sum(x.bwd_cycles - x.recompute_cycles - x.tail_bwd_cycles + (own_rerun(x, settings) if r else 0)
                    for x, r in zip(part, again, strict=True))
        out.append((ipu, f, b))
        if any(x.tail_fwd_cycles or x.tail_bwd_cycles for x in part):
            tf = sum(x.tail_fwd_cycles for x in part)
            tb = sum(x.tail_bwd_cycles for x in part) if settings.training else 0
            tail_f, tail_b = tf, tb + (tf if settings.training and settings.recompute else 0)
            tail_ipu = ipu
    if tail_f or tail_b:
        out.append((tail_ipu, tail_f, tail_b))
    return out


def pipeline_cycles(stages: Sequence[tuple[int, int, int]], micro_batches: int, training: bool) -> int:
    """Cycles ``micro_batches`` take through a pipeline of forward ``stages`` ((IPU, forward,
    backward) cycles per micro-batch), in PopART's schedule (``popviz/schedule.py``): training has
    S = 2N - 1 pipeline slots (the last forward and first backward share one), inference N; a
    micro-batch enters each pipeline cycle; a pipeline cycle lasts as long as the IPU with the
    most work in it, counting every active stage an IPU holds. Syncs, inter-IPU copies, host
    transfers and the weight update are left out. Steady-state cycles are all alike, so this is
    O(S²) whatever the number of micro-batches."""
    g = int(micro_batches)
    n = len(stages)
    if n == 0 or g <= 0:
        return 0
    if training:
        slots = [(ipu, f + (b if k == n - 1 else 0)) for k, (ipu, f, b) in enumerate(stages)]
        slots += [(stages[k][0], stages[k][2]) for k in range(n - 2, -1, -1)]
    else:
        slots = [(ipu, f) for ipu, f, _ in stages]
    s = len(slots)

    def cycle(t: int) -> int:
        per: dict[int, int] = {}
        for p in range(max(0, t - g + 1), min(s, t + 1)):
            ipu, c = slots[p]
            per[ipu] = per.get(ipu, 0) + c
        return max(per.values())

    last = g + s - 1  # pipeline cycles
    if g >= s:
        ramp = sum(cycle(t) for t in range(s - 1)) + sum(cycle(t) for t in range(g, last))
        return cycle(s - 1) * (g - s + 1) + ramp
    return sum(cycle(t) for t in range(last))


MAX_REFINE_EVALUATIONS = 2000
"""Splits :func:`refine` times at most (each O(S²) cycles plus O(L) memory)."""


def refine(layers: Sequence[LayerCost], split: Split, settings: PlanSettings, micro_batches: int,
           max_evaluations: int = MAX_REFINE_EVALUATIONS) -> Split:
    """``split`` improved for the time G micro-batches take (:func:`pipeline_cycles`) rather
    than for the slowest stage alone: boundaries move one layer at a time while the split still
    fits and gets faster. The exact plan minimises the slowest IPU; where an IPU runs two stages
    (a tied projection back on the first IPU) it also works through the ramp, so the fastest
    split can differ."""
    def time_of(counts: list[int]) -> int:
        return pipeline_cycles(stage_work(layers, counts, settings), micro_batches, settings.training)

    counts = split.layers_per_ipu
    best_t = time_of(counts)
    best = split
    evaluations = 0
    improved = True
    while improved and evaluations < max_evaluations:
        improved = False
        for b in range(len(counts) - 1):
            for d in (-1, 1):
                cand = list(counts)
                cand[b] += d
                cand[b + 1] -= d
                if min(cand) <= 0:
                    continue
                evaluations += 1
                trial = evaluate(layers, cand, settings)
                if not trial.fits:
                    continue
                t = time_of(cand)
                if t < best_t:
                    best_t, best, counts, improved = t, trial, cand, True
    return best
