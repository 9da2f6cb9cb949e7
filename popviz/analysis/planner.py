"""The pipeline split that balances the stages and fits in memory, from per-layer costs.

Pure functions over :class:`LayerCost` sequences (no Report, no files): the exact split of a layer
sequence into N contiguous stages (one per IPU) that minimises the slowest stage's cycles subject
to each IPU's memory under a headroom. Exact dynamic programming, not greedy.

Memory on the IPU holding stage ``s`` of ``N`` (0-based):
weights + optimizer state (unless offloaded) + activation stash × in-flight micro-batches
+ the largest temporary of its layers + code overhead. In training, stage ``s`` holds
``2 * (N - s) - 1`` micro-batches' activations in flight (earlier stages hold more; N counts
``PlanSettings.extra_stages`` too, e.g. a tied projection back on the first IPU); in inference,
one.

The DP is indexed by the number of stages *remaining*, on which the stash depth depends, so one
table answers every N in 1..max at once: O(max_N × L²) segment checks. The time a split's
pipeline takes, and a split refined for it, are in :mod:`popviz.analysis.pipeline_time`.

The module is over 600 lines because the DP, the stage memory model it evaluates (each layer's
stash in a stage that recomputes it and in one that does not) and the no-fit explanation, which
reruns the DP per lever, share the private prefix sums (``_Prefix``); the stash figures are derived
apart (:mod:`popviz.analysis.stash_modes`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from popviz.analysis.thresholds import IPU_FULL_FRAC

DEFAULT_HEADROOM_FRAC = IPU_FULL_FRAC
"""Default fraction of each IPU's memory a plan may fill: the fill above which the memory analysis
warns (MEM003), so that a split the plan proposes is not then flagged by ``popviz analyse``."""

PIN_FIRST = "first"
PIN_LAST = "last"


@dataclass(frozen=True)
class LayerCost:
    """One layer's costs: cycles per micro-batch and bytes."""

    name: str
    fwd_cycles: int
    bwd_cycles: int = 0
    weight_bytes: int = 0
    optimizer_bytes: int = 0
    activation_bytes: int = 0
    """Bytes stashed per micro-batch in flight (what the pipeline keeps for the backward)."""
    temporary_bytes: int = 0
    pin: str | None = None
    """``"first"`` (must be on the first IPU), ``"last"`` (on the last) or None."""
    tail_fwd_cycles: int = 0
    """Of ``fwd_cycles``, the part that runs in a stage after the last IPU's, back on this layer's
    IPU (a tied projection folded into its partner, :func:`layer_costs`)."""
    tail_bwd_cycles: int = 0
    """Of ``bwd_cycles``, the tied projection's backward (run in that extra stage)."""
    tail_activation_bytes: int = 0
    """Of ``activation_bytes``, the tied projection's: stashed at the last stage's depth (one
    micro-batch), not at the depth of the stage it shares an IPU with."""
    recompute_bytes: int = 0
    """Activations the backward recomputes (PopART's recomputation already on): live, with the
    other layers' of the same stage and ``recompute_group``, while that interval's backward runs,
    on top of ``temporary_bytes``."""
    recompute_group: int | None = None
    """The layer's recomputation interval, stage aside (None: not recomputed)."""
    other_temporary_bytes: int = 0
    """Temporaries of the parts folded into this layer (a tied projection, a returning head),
    which run in a stage of their own: outside its recomputation interval."""
    recompute_cycles: int = 0
    """Of ``bwd_cycles``, the recomputed forward in the report's placement (0: not recomputed)."""
    checkpoint: bool = False
    """A ``recomputationCheckpoint`` output is made in this layer."""
    code_bytes: int = 0
    """Code of its operations and updates on its IPU (0 when the table does not record it: then
    all code is in ``PlanSettings.code_bytes``)."""
    param_bytes: int = 0
    """Of ``weight_bytes``, the parameters' own (the rest: gradient accumulators): what
    ``model.half()`` halves when the accumulators keep PopTorch's float32 accum type."""
    stash_input_bytes: int = 0
    """Of ``activation_bytes``, its stage's input: in the report's placement it starts a stage
    that recomputes, which stashes what crossed from the previous IPU."""
    stage_input_bytes: int = 0
    """What a recomputing stage starting at this layer stashes as its input, per micro-batch."""
    plain_activation_bytes: int | None = None
    """Its stash (tail included) in a stage that does not recompute it: under PopART's Pipeline
    recomputation the part of the last stage after its last checkpoint, where its recomputed
    activations (``recompute_bytes``) are stashed instead. None: not re-estimated, as measured."""
    recomputed_activation_bytes: int | None = None
    """Its stash (tail included, stage input aside) in a stage that recomputes it; its
    ``recompute_bytes`` and ``recompute_group`` are then what that recomputation makes again and
    its interval. None: not re-estimated, ``activation_bytes - stash_input_bytes``."""


@dataclass(frozen=True)
class PlanSettings:
    capacity_bytes: int
    """Memory of one IPU."""
    headroom_frac: float = DEFAULT_HEADROOM_FRAC
    training: bool = True
    offload_optimizer: bool = False
    code_bytes: int = 0
    """Fixed code/overhead bytes on every IPU (beside the layers' own ``code_bytes``)."""
    extra_stages: int = 0
    """Forward stages beyond one per IPU: 1 when a tied projection runs on the first IPU again
    after the last (:func:`extra_stages`). Each deepens every IPU's stash by two micro-batches."""
    recompute: bool = False
    """Recompute activations in the backward pass: one micro-batch's activations live per stage
    (a lower bound: the stage inputs still stashed are not counted), one more forward pass."""
    pipeline_recompute: bool = False
    """The report recomputes as PopART's ``Pipeline`` type: every forward stage but the last runs
    its layers' forward again before their backward, the last only up to its last checkpoint; so
    a layer moved into or out of the last stage gains or loses its recomputed forward."""

    @property
    def last_stage_recomputes_less(self) -> bool:
        """Under ``pipeline_recompute`` the last stage recomputes only up to its last checkpoint
        (a tied projection's extra stage after it, or the ``recompute`` lever, leave every stage
        as measured or recomputing)."""
        return self.training and self.pipeline_recompute and not self.recompute and self.extra_stages == 0

    @property
    def budget_bytes(self) -> int:
        return int(self.capacity_bytes * self.headroom_frac)


@dataclass(frozen=True)
class StagePlan:
    first: int
    stop: int
    cycles: int
    memory_bytes: int
    stash_depth: int


@dataclass(frozen=True)
class Split:
    """A split of the layers into stages; ``stages[i]`` runs on IPU ``i``."""

    stages: tuple[StagePlan, ...]
    bottleneck_cycles: int
    fits: bool

    @property
    def layers_per_ipu(self) -> list[int]:
        return [s.stop - s.first for s in self.stages]


@dataclass
class PlanResult:
    best: Split | None
    """The fastest fitting split over every N tried (None when none fits)."""
    by_ipus: dict[int, Split | None] = field(default_factory=dict)
    """The best fitting split for each N (None when N stages cannot fit)."""


def stash_depth(stage: int, n_stages: int, training: bool, recompute: bool = False) -> int:
    """Micro-batches whose activations stage ``stage`` of ``n_stages`` holds at once."""
    if not training or recompute:
        return 1
    return 2 * (n_stages - stage) - 1


def _depth(stages_left: int, settings: PlanSettings) -> int:
    """Stash depth of the first of ``stages_left`` remaining stages."""
    return stash_depth(0, stages_left + settings.extra_stages, settings.training, settings.recompute)


def own_rerun(layer: LayerCost, settings: PlanSettings) -> int:
    """The forward a stage that recomputes ``layer`` runs again before its backward, its tied
    part aside: the measured recomputation; under ``pipeline_recompute`` for a layer the report
    did not recompute (in its last stage), its forward; with the ``recompute`` lever, its forward."""
    if settings.recompute or (settings.pipeline_recompute and not layer.recompute_cycles):
        return layer.fwd_cycles - layer.tail_fwd_cycles
    return layer.recompute_cycles


def layer_cycles(layer: LayerCost, settings: PlanSettings) -> tuple[int, int]:
    """A layer's forward plus backward cycles per micro-batch, in a stage that recomputes it and
    in one that does not (they differ only under ``pipeline_recompute``): the measured
    recomputation comes out of its backward and :func:`own_rerun` goes in."""
    if not settings.training:
        return layer.fwd_cycles, layer.fwd_cycles
    plain = layer.fwd_cycles + layer.bwd_cycles - layer.recompute_cycles
    tail = layer.tail_fwd_cycles if settings.recompute else 0
    return plain + own_rerun(layer, settings) + tail, plain


def recompute_cut(layers: Sequence[LayerCost], first: int, stop: int) -> int:
    """For ``layers[first:stop]``, the last stage of a split of ``layers``: PopART's Pipeline
    recomputation runs ``layers[first:cut]`` again, up to the stage's last checkpoint (a lone
    stage, on one IPU, recomputes nothing: ``first``)."""
    if first > 0:
        for k in range(stop - 1, first - 1, -1):
            if layers[k].checkpoint:
                return k + 1
    return first


class _Prefix:
    def __init__(self, layers: Sequence[LayerCost], settings: PlanSettings) -> None:
        self.layers = layers
        self.cyc = [0]
        self.cyc_last = [0]  # as in a stage that does not recompute them
        self.fixed = [0]
        self.act = [0]  # the stash in a stage that recomputes them (their stage inputs aside)
        self.act_plain = [0]  # in one that does not
        for layer in layers:
            c, plain = layer_cycles(layer, settings)
            self.cyc_last.append(self.cyc_last[-1] + plain)
            f = layer.weight_bytes + layer.tail_activation_bytes + layer.code_bytes  # the last stage stashes one
            if settings.training and not settings.offload_optimizer:
                f += layer.optimizer_bytes
            self.cyc.append(self.cyc[-1] + c)
            self.fixed.append(self.fixed[-1] + f)
            again = (layer.recomputed_activation_bytes if layer.recomputed_activation_bytes is not None
                     else layer.activation_bytes - layer.stash_input_bytes)
            kept = layer.plain_activation_bytes if layer.plain_activation_bytes is not None else layer.activation_bytes
            self.act.append(self.act[-1] + again - layer.tail_activation_bytes)
            self.act_plain.append(self.act_plain[-1] + kept - layer.tail_activation_bytes)
        self.inp = [layer.stage_input_bytes for layer in layers]
        self.temp = [layer.temporary_bytes for layer in layers]
        self.again = [(layer.recompute_group, layer.recompute_bytes) for layer in layers]
        # not recomputed: a re-estimated layer's recomputed activations are stashed instead
        self.again_plain = [(None, 0) if layer.plain_activation_bytes is not None else a
                            for layer, a in zip(layers, self.again, strict=True)]
        self.other = [layer.other_temporary_bytes for layer in layers]
        self.code = settings.code_bytes
        self.last_rule = settings.last_stage_recomputes_less

    def cut(self, first: int, stop: int) -> int:
        """Where the stage holding layers[first:stop] stops recomputing: under Pipeline
        recomputation the last stage (``stop`` = the end) after its last checkpoint."""
        if not self.last_rule or stop != len(self.layers):
            return stop
        return recompute_cut(self.layers, first, stop)

    def cycles(self, first: int, stop: int) -> int:
        """Cycles per micro-batch of the stage holding layers[first:stop]: under Pipeline
        recomputation the last stage (``stop`` = the end) does not recompute its layers after its
        last checkpoint."""
        cut = self.cut(first, stop)
        return self.cyc[cut] - self.cyc[first] + self.cyc_last[stop] - self.cyc_last[cut]

    def stash(self, first: int, stop: int) -> int:
        """Bytes the stage holding layers[first:stop] stashes per micro-batch in flight (a tied
        projection's aside): its recomputed layers' stash and, unless it is the first stage, its
        input; its other layers' whole stash."""
        cut = self.cut(first, stop)
        inp = self.inp[first] if 0 < first < cut else 0
        return self.act[cut] - self.act[first] + inp + self.act_plain[stop] - self.act_plain[cut]

    def stage_temp(self, first: int, stop: int) -> int:
        """The largest temporary of layers[first:stop] on one IPU, with the recomputed
        activations of its recomputation interval (that stage's layers of the same group)."""
        cut = self.cut(first, stop)
        t = _StageTemp(self)
        for k in range(first, stop):
            t.add(k, plain=k >= cut)
        return t.value

    def memory(self, first: int, stop: int, depth: int) -> int:
        """Bytes the IPU holding layers[first:stop] needs at stash depth ``depth``."""
        return (self.fixed[stop] - self.fixed[first] + self.stash(first, stop) * depth
                + self.stage_temp(first, stop) + self.code)

    def scan(self, first: int, depth: int) -> Iterator[tuple[int, int]]:
        """``(stop, memory)`` of the stages starting at ``first``, one layer more each time, as
        stages that are not the last (the DP's inner loop: O(1) per step)."""
        t = _StageTemp(self)
        inp = self.inp[first] if first > 0 else 0
        for j in range(first + 1, len(self.layers) + 1):
            t.add(j - 1)
            yield j, (self.fixed[j] - self.fixed[first] + (self.act[j] - self.act[first] + inp) * depth
                      + t.value + self.code)


class _StageTemp:
    """The running stage temporary as layers are added to a stage, one at a time (the DP's inner
    loop): ``max(temporary + its interval's recomputed bytes)`` over the stage's layers."""

    def __init__(self, p: _Prefix) -> None:
        self.p = p
        self.value = 0
        self.sums: dict[int, int] = {}
        self.peak: dict[int, int] = {}

    def add(self, k: int, plain: bool = False) -> None:
        temp = self.p.temp[k]
        group, nbytes = (self.p.again_plain if plain else self.p.again)[k]
        self.value = max(self.value, self.p.other[k])
        if group is None:
            self.value = max(self.value, temp)
            return
        self.sums[group] = self.sums.get(group, 0) + nbytes
        self.peak[group] = max(self.peak.get(group, 0), temp)
        self.value = max(self.value, self.peak[group] + self.sums[group])


def stage_temporary_bytes(layers: Sequence[LayerCost], settings: PlanSettings, first: int = 0,
                          stop: int | None = None) -> int:
    """The largest temporary on the IPU holding ``layers[first:stop]`` (one stage of a split of
    ``layers``; by default all of them), recomputed activations of its recomputation intervals
    included."""
    return _Prefix(layers, settings).stage_temp(first, len(layers) if stop is None else stop)


def stage_memory_bytes(
    layers: Sequence[LayerCost], first: int, stop: int, depth: int, settings: PlanSettings
) -> int:
    """Bytes the IPU holding layers[first:stop] (one stage of a split of ``layers``) needs at
    stash depth ``depth``."""
    return _Prefix(layers, settings).memory(first, stop, depth)


def _check(layers: Sequence[LayerCost], settings: PlanSettings) -> tuple[int, int]:
    """(lowest allowed boundary, highest allowed boundary) from the pins."""
    if not layers:
        raise ValueError("no layers to split")
    if settings.capacity_bytes <= 0 or not 0 < settings.headroom_frac <= 1:
        raise ValueError("capacity must be positive and headroom in (0, 1]")
    n = len(layers)
    firsts = [i for i, layer in enumerate(layers) if layer.pin == PIN_FIRST]
    lasts = [i for i, layer in enumerate(layers) if layer.pin == PIN_LAST]
    lo = (max(firsts) + 1) if firsts else 1
    hi = min(lasts) if lasts else n - 1
    return lo, hi


def plan(
    layers: Sequence[LayerCost], max_ipus: int, settings: PlanSettings, *, exact_n: bool = False
) -> PlanResult:
    """The fastest fitting split for every N in 1..max_ipus (only ``max_ipus`` if ``exact_n``).

    Boundaries respect pins: every ``first``-pinned layer is on IPU 0, every ``last``-pinned one on
    the last IPU. Among splits with the same bottleneck, the one with the smallest peak memory wins.
    """
    n = len(layers)
    lo, hi = _check(layers, settings)
    p = _Prefix(layers, settings)
    budget = settings.budget_bytes
    inf = float("inf")
    max_n = min(max_ipus, n)
    # g[r][i]: (bottleneck, peak memory) for layers[i:] on r stages, first of them at depth(r);
    # nxt[r][i]: where that first stage stops.
    g: list[list[tuple[float, float]]] = [[(inf, inf)] * (n + 1) for _ in range(max_n + 1)]
    nxt: list[list[int]] = [[-1] * (n + 1) for _ in range(max_n + 1)]
    g[0][n] = (0, 0)

    def allowed(b: int) -> bool:  # a boundary between stages at index b (0 < b < n)
        return lo <= b <= hi

    for r in range(1, max_n + 1):
        depth = _depth(r, settings)
        prev, cur, nx = g[r - 1], g[r], nxt[r]
        for i in range(n - 1, -1, -1):
            if i > 0 and not allowed(i):
                continue
            best = (inf, inf)
            best_j = -1
            # the last stage (r = 1) holds every layer left, and may recompute only some
            scan = [(n, p.memory(i, n, depth))] if r == 1 else p.scan(i, depth)
            for j, mem in scan:
                if mem > budget:
                    break  # memory only grows with more layers
                rest = prev[j]
                if rest[0] == inf:
                    continue
                if j < n and not allowed(j):
                    continue
                cyc = p.cycles(i, j)
                cand = (max(cyc, rest[0]), max(mem, rest[1]))
                if cand < best:
                    best, best_j = cand, j
            cur[i] = best
            nx[i] = best_j

    result = PlanResult(best=None)
    tries = [max_n] if exact_n else range(1, max_n + 1)
    for r in tries:
        if g[r][0][0] == inf:
            result.by_ipus[r] = None
            continue
        stages = []
        i = 0
        for left in range(r, 0, -1):
            j = nxt[left][i]
            depth = _depth(left, settings)
            stages.append(
                StagePlan(
                    first=i,
                    stop=j,
                    cycles=p.cycles(i, j),
                    memory_bytes=p.memory(i, j, depth),
                    stash_depth=depth,
                )
            )
            i = j
        split = Split(tuple(stages), int(g[r][0][0]), fits=True)
        result.by_ipus[r] = split
        if result.best is None or split.bottleneck_cycles < result.best.bottleneck_cycles:
            result.best = split
    return result


def evaluate(
    layers: Sequence[LayerCost], layers_per_ipu: Sequence[int], settings: PlanSettings
) -> Split:
    """The cycles and memory of a given split (e.g. the current one), fitting or not."""
    if sum(layers_per_ipu) != len(layers) or any(k <= 0 for k in layers_per_ipu):
        raise ValueError(
            f"layers_per_ipu {list(layers_per_ipu)} must be positive and add up to {len(layers)}"
        )
    p = _Prefix(layers, settings)
    n_stages = len(layers_per_ipu)
    stages = []
    i = 0
    for s, k in enumerate(layers_per_ipu):
        j = i + k
        depth = stash_depth(s, n_stages + settings.extra_stages, settings.training, settings.recompute)
        mem = p.memory(i, j, depth)
        stages.append(StagePlan(i, j, p.cycles(i, j), mem, depth))
        i = j
    lo, hi = _check(layers, settings)
    pins_ok = all(lo <= st.first <= hi for st in stages[1:])
    fits = pins_ok and all(st.memory_bytes <= settings.budget_bytes for st in stages)
    return Split(tuple(stages), max(st.cycles for st in stages), fits)


MAX_IPUS_SEARCHED = 64
"""The most IPUs the no-fit explanation tries when asking whether more IPUs would fit (a POD64)."""
REPLICAS_SEARCHED = (2, 4, 8, 16)
"""Replication factors the no-fit explanation tries for sharding the optimizer state."""
LEVERS = ("offload_optimizer", "recompute", "halve_micro_batch", "float16", "more_ipus", "replicas")


@dataclass(frozen=True)
class Lever:
    """One way to close a memory gap: the bytes it saves on the fullest IPU, and whether a split
    fits with it alone."""

    name: str
    """One of :data:`LEVERS`."""
    saved_bytes: int
    closes_gap: bool
    value: int | None = None
    """IPUs (``more_ipus``) or replicas (``replicas``) the lever needs; None otherwise."""


@dataclass(frozen=True)
class Shortfall:
    """Why no split fits: the split that needs the least memory, by how much it misses, and what
    each lever would save."""

    split: Split
    """The split of the layers over the IPUs with the smallest peak memory."""
    budget_bytes: int
    levers: tuple[Lever, ...]

    @property
    def overflow_bytes(self) -> int:
        """Bytes the fullest IPU of :attr:`split` is over its budget."""
        return max(0, max(st.memory_bytes for st in self.split.stages) - self.budget_bytes)

    @property
    def overflow_bytes_per_ipu(self) -> list[int]:
        return [max(0, st.memory_bytes - self.budget_bytes) for st in self.split.stages]

    @property
    def levers_bytes(self) -> dict[str, int]:
        return {lv.name: lv.saved_bytes for lv in self.levers}


def most_ipus(layers: Sequence[LayerCost], n_ipus: int, settings: PlanSettings) -> int:
    """The most IPUs (up to ``n_ipus``) the pins allow a split over, memory aside."""
    free = replace(settings, capacity_bytes=1 << 62, headroom_frac=1.0)
    by = plan(layers, n_ipus, free).by_ipus
    return max(k for k, v in by.items() if v is not None)


def least_memory_split(layers: Sequence[LayerCost], n_ipus: int, settings: PlanSettings) -> Split:
    """The split over ``n_ipus`` IPUs (fewer when the pins allow no more) with the smallest peak
    memory, the fastest among those; evaluated under ``settings`` (so ``fits`` may be False).

    Exact: the same dynamic programme as :func:`plan` with (peak memory, bottleneck) minimised."""
    n = most_ipus(layers, min(n_ipus, len(layers)), settings)
    lo, hi = _check(layers, settings)
    p = _Prefix(layers, settings)
    count = len(layers)
    inf = float("inf")
    g = [[(inf, inf)] * (count + 1) for _ in range(n + 1)]
    nxt = [[-1] * (count + 1) for _ in range(n + 1)]
    g[0][count] = (0, 0)
    for r in range(1, n + 1):
        depth = _depth(r, settings)
        for i in range(count - 1, -1, -1):
            if i > 0 and not lo <= i <= hi:
                continue
            best, best_j = (inf, inf), -1
            scan = [(count, p.memory(i, count, depth))] if r == 1 else p.scan(i, depth)
            for j, mem in scan:
                rest = g[r - 1][j]
                if rest[0] == inf or (j < count and not lo <= j <= hi):
                    continue
                cand = (max(mem, rest[0]), max(p.cycles(i, j), rest[1]))
                if cand < best:
                    best, best_j = cand, j
            g[r][i], nxt[r][i] = best, best_j
    counts, i = [], 0
    for left in range(n, 0, -1):
        j = nxt[left][i]
        counts.append(j - i)
        i = j
    return evaluate(layers, counts, settings)


def _scaled(layers: Sequence[LayerCost], *, optimizer_div: int = 1, activation_div: int = 1,
            temporaries: bool | str = True, weights: str | None = None) -> list[LayerCost]:
    """``temporaries``: whether the temporaries scale with the activations; ``"floor"``: down to
    the layer's optimizer state and no further (an offloaded state streamed in for its update,
    see analysis.memory_levers). ``weights``: ``"params"`` halves the parameters' bytes,
    ``"all"`` the accumulators' too."""
    temp_div = activation_div if temporaries else 1

    def temp(x: LayerCost, t: int) -> int:
        if temporaries != "floor":
            return t // temp_div
        return max(t // activation_div, min(t, x.optimizer_bytes))

    def weight(x: LayerCost) -> int:
        halved = x.param_bytes if weights == "params" else x.weight_bytes if weights == "all" else 0
        return x.weight_bytes - halved // 2
    return [replace(x, weight_bytes=weight(x), param_bytes=x.param_bytes - (x.param_bytes // 2 if weights else 0),
                    optimizer_bytes=x.optimizer_bytes // optimizer_div,
                    activation_bytes=x.activation_bytes // activation_div,
                    stash_input_bytes=x.stash_input_bytes // activation_div,
                    stage_input_bytes=x.stage_input_bytes // activation_div,
                    plain_activation_bytes=_div(x.plain_activation_bytes, activation_div),
                    recomputed_activation_bytes=_div(x.recomputed_activation_bytes, activation_div),
                    # its tied projection's share halves with it (else activation - tail goes negative)
                    tail_activation_bytes=x.tail_activation_bytes // activation_div,
                    temporary_bytes=temp(x, x.temporary_bytes),
                    recompute_bytes=x.recompute_bytes // activation_div,
                    other_temporary_bytes=temp(x, x.other_temporary_bytes)) for x in layers]


def _div(value: int | None, by: int) -> int | None:
    return None if value is None else value // by


def _fits(layers: Sequence[LayerCost], n: int, settings: PlanSettings) -> bool:
    return plan(layers, n, settings, exact_n=True).best is not None


def recomputes(layers: Sequence[Any]) -> bool:
    """Whether the layers already recompute (a checkpoint group, or PopTorch's default for a
    multi-IPU pipeline): recomputation is then no lever (plan's and MEM005's)."""
    return any(x.recompute_group is not None for x in layers)


def explain_no_fit(
    layers: Sequence[LayerCost], n_ipus: int, settings: PlanSettings, *, float16: str | None = None
) -> Shortfall:
    """For a layer sequence with no fitting split on ``n_ipus``: by how much the split needing
    the least memory misses, and what each lever (offloading the optimizer state, recomputation,
    half the micro-batch, float16, more IPUs, replicas sharding the optimizer state) saves on its
    fullest IPU and whether a split fits with that lever alone. ``float16``: what ``model.half()``
    halves of the weights of a float32 model (``"params"``, the accumulators keeping float32
    accum types; ``"all"``), None for no such lever (a float16 model, or its precision unknown)."""
    split = least_memory_split(layers, n_ipus, settings)
    n = len(split.stages)
    worst = max(split.stages, key=lambda st: st.memory_bytes)
    seg = layers[worst.first:worst.stop]
    opt = sum(x.optimizer_bytes for x in seg)
    tail = sum(x.tail_activation_bytes for x in seg)
    # its stash (a tied projection's aside) and temporaries as that split places its layers
    stash = _Prefix(layers, settings).stash(worst.first, worst.stop)
    temps = stage_temporary_bytes(layers, settings, worst.first, worst.stop)
    optimizer_used = settings.training and not settings.offload_optimizer
    # an offloaded optimizer state streamed in may be the larger temporary then: an operation's
    # temporaries shrink with the micro-batch down to the layer's state (as analysis.memory_levers
    # has it for MEM001/MEM005), sized on this split by evaluating it
    temps_scale = True if not (settings.training and settings.offload_optimizer) else "floor"

    def temps_saved() -> int:
        """What the worst stage's temporaries shrink by, halved down to the layers' state."""
        return temps - stage_temporary_bytes(_scaled(layers, activation_div=2, temporaries="floor"), settings,
                                             worst.first, worst.stop)
    recomputing = recomputes(layers)
    levers = [
        Lever("offload_optimizer", opt if optimizer_used else 0,
              optimizer_used and _fits(layers, n, replace(settings, offload_optimizer=True))),
        # already recomputing (PopTorch's default for a multi-IPU pipeline): nothing more to gain
        # this way (saves 0, so it is not shown)
        Lever("recompute", 0 if recomputing else stash * (worst.stash_depth - 1),
              settings.training and not settings.recompute and not recomputing
              and _fits(layers, n, replace(settings, recompute=True))),
        # half of what the stage's activations take, counted as its memory counts them: a tied
        # projection's (tail) activations are stashed once, not at the stage's depth
        Lever("halve_micro_batch",
              (stash * worst.stash_depth + tail + temps) // 2
              if temps_scale is True else (stash * worst.stash_depth + tail) // 2 + temps_saved(),
              _fits(_scaled(layers, activation_div=2, temporaries=temps_scale), n, settings)),
    ]
    if float16 is not None:
        # the weights, the stash and the activation-sized temporaries halve (as halving the
        # micro-batch does for the last two)
        halved = _scaled(layers, activation_div=2, temporaries=temps_scale, weights=float16)
        weights = sum((x.param_bytes if float16 == "params" else x.weight_bytes) // 2 for x in seg)
        levers.append(Lever("float16", levers[2].saved_bytes + weights, _fits(halved, n, settings)))
    peak = worst.memory_bytes
    top = min(len(layers), MAX_IPUS_SEARCHED)
    more = plan(layers, top, settings).by_ipus if top > n else {}
    need = next((k for k in sorted(more) if k > n and more[k] is not None), None)
    if need is not None:
        levers.append(Lever("more_ipus", peak - max(st.memory_bytes for st in more[need].stages),
                            True, need))
    elif top > n:
        most = least_memory_split(layers, top, settings)
        levers.append(Lever("more_ipus", max(0, peak - max(st.memory_bytes for st in most.stages)),
                            False, None))
    if optimizer_used and opt:
        reps = next((r for r in REPLICAS_SEARCHED
                     if _fits(_scaled(layers, optimizer_div=r), n, settings)), None)
        r = reps or REPLICAS_SEARCHED[-1]
        levers.append(Lever("replicas", opt - opt // r, reps is not None, reps))
    return Shortfall(split=split, budget_bytes=settings.budget_bytes, levers=tuple(levers))
