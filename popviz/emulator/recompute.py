"""Recomputation as PopART does it: which forward operations run again in the backward pass, and
what a training stage must stash for the micro-batches in flight.

PopART's ``SessionOptions.autoRecomputation`` (PopTorch: ``opts._Popart.set("autoRecomputation",
N)``) takes a ``RecomputationType`` (graphcore/popart ``willow/include/popart/sessionoptions.hpp``):
None = 0, Standard = 1, NormOnly = 2, Pipeline = 3, RecomputeAll = 4. PopTorch sets it to
Pipeline itself when a pipelined model (the default execution mode) uses more than one IPU and the
script did not set it (graphcore/poptorch ``popart_compiler/source/Compiler.cpp``,
``setOptionIfNotSet(options.autoRecomputation, RecomputationType::Pipeline, ...)``).

What each type recomputes (graphcore/popart ``willow/src/recompute.cpp``,
``willow/src/transforms/pipeline.cpp``), as modelled here on the measured ATen operations:

* **Pipeline**: every forward operation on the path to the loss is recomputed, except the
  outputs of ``poptorch.recomputationCheckpoint`` and the final forward stage from its last
  checkpoint to the loss (``setFinalFwdStageRecomputation``: running those twice in a row buys no
  liveness). Each stage stashes its inputs (what crossed from the previous IPU, or the host
  inputs) and its checkpoint outputs per micro-batch in flight.
* **RecomputeAll**: the same over the whole graph: everything after the last checkpoint up to the
  loss is not recomputed (``allCheckpointAfterLastCheckpoint``) unless
  ``explicitRecomputation`` is set; so with no checkpoint nothing is recomputed.
* **Standard**: PopART picks checkpoints itself: the forward operations are cut into decreasing
  intervals (sizes K, K − 1, …, 1 with K = ⌊0.75 (⌊√(2n)⌋ − 1)⌋, ``willow/src/intervals.cpp``)
  and in each the point of least live memory is kept; the rest of an interval is recomputed.
  Here the operation with the smallest output stands for that point.
* **NormOnly**: only normalisations are recomputed.
* **None**: nothing; every tensor autograd saves is stashed.

Only operations that grow gradient ops are recomputed (an operation on the inputs and frozen
weights alone is not: recomputation exists to feed the backward), and a stage that recomputes
nothing stashes no checkpoint outputs.

A saved tensor need not be stashed when the operation that produced it is recomputed (the
backward makes it again); it must be when it is a checkpoint's output, a stage input or made by
an operation that is not recomputed. The recomputed activations of one interval between
checkpoints (one micro-batch's) are live while that interval's backward runs: the cost model
counts them with the temporaries. Within an interval, PopART reruns only what each backward
operation needs (:func:`_chains`): recomputed operations that share no tensor (a weight computed
from parameters alone, beside a block's activations) are live apart. The recomputed operations'
forward cycles are added to the backward's.

This module does not import torch at import time; :func:`checkpoint` is called by the emulated
``poptorch.recomputationCheckpoint`` while a measurement runs.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from popviz.emulator.cost_inputs import EngineSetup, Measurement


class RecomputationType(enum.IntEnum):
    """PopART's ``RecomputationType`` values (``None`` is spelled ``NONE``)."""

    NONE = 0
    Standard = 1
    NormOnly = 2
    Pipeline = 3
    RecomputeAll = 4

    @property
    def label(self) -> str:
        return "None" if self is RecomputationType.NONE else self.name


OPTION = "_Popart.autoRecomputation"
EXPLICIT_OPTION = "_Popart.explicitRecomputation"
NORM_OPS = frozenset({"native_layer_norm", "layer_norm", "native_batch_norm", "batch_norm",
                      "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                      "_native_batch_norm_legit_no_training", "native_group_norm", "group_norm",
                      "instance_norm", "rms_norm", "_fused_rms_norm"})
"""ATen operations that are PopART norms (``Op::isNorm``: batch, group, layer and instance norm)."""


def parse_type(value: Any) -> RecomputationType:
    """``autoRecomputation`` as recorded: an int, an IntEnum (recorded by its name) or a name
    (``"Pipeline"``, ``"RecomputationType.Pipeline"``, any case). ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"autoRecomputation={value!r} is not a RecomputationType")
    if isinstance(value, enum.Enum):
        value = value.value if isinstance(value.value, int) else value.name
    if isinstance(value, int):
        try:
            return RecomputationType(value)
        except ValueError:
            pass
    elif isinstance(value, str):
        name = value.strip().rpartition(".")[2].lower()
        if name == "norecompute":  # popart's Python binding spells None so
            return RecomputationType.NONE
        for member in RecomputationType:
            if name in (member.label.lower(), member.name.lower()):
                return member
        if name.isdigit():
            return parse_type(int(name))
    raise ValueError(f"autoRecomputation={value!r} is not a RecomputationType (use 0-4 or one of "
                     f"{', '.join(m.label for m in RecomputationType)})")


# ------------------------------------------------------------------------------ tracking


@dataclass(frozen=True)
class Checkpoint:
    """One ``recomputationCheckpoint`` call during the measured forward pass."""

    segment: int
    position: int
    """Operations recorded before it: operation ``j`` is after it when ``j >= position``."""
    bytes: int
    """Bytes of the tensors it checkpoints (each counted once)."""
    keys: tuple[int, ...] = ()
    """Storage keys of those tensors (to recognise them among autograd's saved tensors)."""
    sizes: tuple[int, ...] = ()
    """Bytes of each of ``keys``."""


class CheckpointLog:
    """Checkpoints and each tensor's producing operation, for one :class:`Recorder`."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self.checkpoints: list[Checkpoint] = []
        self.producer_op: dict[int, int] = {}
        """Storage key -> index of the operation that produced it."""

    def produced(self, keys: Sequence[int | None], index: int) -> None:
        for key in keys:
            if key is not None and key not in self.producer_op:
                self.producer_op[key] = index

    def mark(self, tensors: Sequence[Any]) -> None:
        keys: dict[int, int] = {}
        for t in tensors:
            key = _key(t)
            if key is not None:
                keys.setdefault(key, _nbytes(t))
        if not keys:
            return
        rec = self.recorder
        self.checkpoints.append(Checkpoint(segment=max(rec.segment, 0), position=len(rec.ops),
                                           bytes=sum(keys.values()), keys=tuple(keys),
                                           sizes=tuple(keys.values())))


_active: list[CheckpointLog] = []


def checkpoint(tensors: Sequence[Any]) -> None:
    """Record ``tensors`` as recomputation checkpoints of the measurement running (if any)."""
    if _active:
        _active[-1].mark([t for t in tensors if hasattr(t, "untyped_storage")])


class tracking:
    """While a measurement runs, :func:`checkpoint` records into ``log``."""

    def __init__(self, log: CheckpointLog) -> None:
        self.log = log

    def __enter__(self) -> CheckpointLog:
        _active.append(self.log)
        return self.log

    def __exit__(self, *exc: Any) -> None:
        if self.log in _active:
            _active.remove(self.log)


# ------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class StashItem:
    """Bytes a stage stashes per micro-batch, at an operation position (for per-layer figures)."""

    segment: int
    position: int
    bytes: int


@dataclass(frozen=True)
class RecomputePlan:
    type: RecomputationType
    note: str
    """Which recomputation applied and why (a report note)."""
    recomputed: tuple[bool, ...]
    """Per operation of the measurement: run again in the backward pass."""
    stash: tuple[StashItem, ...]
    """What each stage stashes per micro-batch (add up per segment to ``stash_bytes``)."""
    live_bytes: tuple[int, ...]
    """Per operation: the recomputed activations of its interval (0 when not recomputed), live
    while that interval's backward runs."""
    made_bytes: tuple[int, ...] = ()
    """Per operation: the recomputed activations it makes itself (its interval's ``live_bytes``
    add them up); empty when nothing is recomputed."""
    groups: tuple[int, ...] = ()
    """Per operation: its interval, stage aside (Pipeline: the recomputationCheckpoints before
    it; operations of one stage and one group are recomputed together); empty when nothing is
    recomputed."""

    def stash_bytes(self, segments: int) -> list[int]:
        out = [0] * segments
        for item in self.stash:
            out[item.segment] += item.bytes
        return out

    @property
    def active(self) -> bool:
        return any(self.recomputed)


def resolve(m: Measurement, setup: EngineSetup) -> tuple[RecomputationType, str]:
    """The recomputation PopART applies to this engine, and why (in words)."""
    if not setup.training:
        return RecomputationType.NONE, ""
    ipus = len({s.ipu for s in m.segments})
    pipelined = setup.strategy in (None, "PipelinedExecution")
    raw = setup.options.get(OPTION)
    n_cp = len(m.checkpoints)
    cps = f"{n_cp} recomputationCheckpoint{'s' if n_cp != 1 else ''}"
    if raw is None:
        if pipelined and ipus > 1:
            return (RecomputationType.Pipeline,
                    f"Recomputation: Pipeline, PopTorch's default for a pipelined model on {ipus} IPUs "
                    f"(autoRecomputation not set; poptorch Compiler.cpp); {cps} kept as stashed tensors.")
        why = ("a single IPU" if ipus == 1 else f"{setup.strategy or 'no strategy'}")
        extra = f"; the {cps} {'has' if n_cp == 1 else 'have'} no effect without it" if n_cp else ""
        return (RecomputationType.NONE,
                f"Recomputation: None (autoRecomputation not set, and PopTorch sets Pipeline only for a "
                f"pipeline over more than one IPU, here {why}){extra}.")
    try:
        kind = parse_type(raw)
    except ValueError as exc:  # PopTorch refuses the option when it compiles
        from popviz.emulator.errors import CPP_ERROR, Error

        raise Error(f"{exc} (set with opts._Popart.set)", type=CPP_ERROR) from None
    if kind is RecomputationType.Pipeline and not (pipelined and ipus > 1):
        return (RecomputationType.NONE,
                f"Recomputation: None (autoRecomputation = Pipeline applies only to a pipeline over more "
                f"than one IPU; this engine runs on {ipus} IPU{'s' if ipus != 1 else ''}).")
    return kind, f"Recomputation: {kind.label} (autoRecomputation set by the script); {cps}."


def _decreasing_intervals(n: int) -> list[tuple[int, int]]:
    """PopART's ``getDecreasingIntervals(n)`` (``willow/src/intervals.cpp``)."""
    if n <= 1:
        return [(0, n)] if n else []
    k = int((int((2.0 * n) ** 0.5) - 1) * 0.75)
    out = []
    i0, size = 0, k
    while i0 + size <= n and size > 0:
        out.append((i0, i0 + size))
        i0 += size
        size -= 1
    while i0 < n:
        out.append((i0, i0 + 1))
        i0 += 1
    return out


def _chains(m: Measurement, rec: list[bool], interval: list[int]) -> list[int]:
    """Per operation: its recompute chain, the recomputed operations of one interval that make
    each other's inputs (connected through the tensors one makes and another reads). PopART
    reruns a recomputed operation when the first backward operation that needs it runs, with the
    recomputed operations it depends on and no others (``FindRequiredRecomputes``, its
    ``requiredRecomputes`` added before each backward task, graphcore/popart
    ``willow/src/popx/irlowering.cpp``): two chains that share no tensor — a block's activations
    and a weight computed from parameters only, as ``weight_norm``'s hook computes
    ``g · v / ‖v‖`` — are recomputed, and live, each while its own backward runs. Without the
    operations' inputs (``op_sources`` empty) an interval is one chain."""
    n = len(m.ops)
    if len(m.op_sources) != n:
        return list(interval)
    parent = list(range(n))

    def find(j: int) -> int:
        while parent[j] != j:
            parent[j] = parent[parent[j]]
            j = parent[j]
        return j

    for j, sources in enumerate(m.op_sources):
        if not rec[j]:
            continue
        for i in sources:
            if 0 <= i < n and rec[i] and interval[i] == interval[j]:
                a, b = find(i), find(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    return [find(j) for j in range(n)]


def _intervals(m: Measurement, kind: RecomputationType, explicit: bool) -> tuple[list[bool], list[int]]:
    """Per operation: recomputed, and an interval id (operations of one id are recomputed
    together)."""
    ops = m.ops
    n = len(ops)
    rec = [False] * n
    interval = [0] * n
    if kind is RecomputationType.NormOnly:
        for j, o in enumerate(ops):
            rec[j] = o.name.split(".")[0] in NORM_OPS
            interval[j] = j
        return rec, interval
    if kind is RecomputationType.Standard:
        for start, stop in _decreasing_intervals(n):
            keep = min(range(start, stop), key=lambda j: (ops[j].out_bytes, j))
            for j in range(start, stop):
                interval[j] = start
                rec[j] = j != keep and stop - start > 1
        return rec, interval
    cps = sorted(m.checkpoints, key=lambda c: c.position)
    if kind is RecomputationType.Pipeline:
        last = len(m.segments) - 1
        for j, o in enumerate(ops):
            mine = [c.position for c in cps if c.segment == o.segment]
            k = sum(1 for p in mine if p <= j)
            interval[j] = o.segment * (n + 1) + k
            rec[j] = not (o.segment == last and k == len(mine))
        return rec, interval
    # RecomputeAll
    positions = [c.position for c in cps]
    for j in range(n):
        k = sum(1 for p in positions if p <= j)
        interval[j] = k
        rec[j] = explicit or k < len(positions)
    return rec, interval


def plan(m: Measurement, setup: EngineSetup) -> RecomputePlan:
    """What is recomputed, stashed and live for this engine. A recomputing stage stashes what
    crossed from the previous IPU whole; the host inputs it saves count as saved tensors made
    outside the measurement (stashed)."""
    kind, note = resolve(m, setup)
    n = len(m.ops)
    if m.saved_slots:
        plain = tuple(StashItem(seg, index, nbytes) for seg, index, nbytes in m.saved_slots)
    else:  # a measurement without per-tensor slots: its per-segment totals, nothing to recompute
        first = {}
        for j, o in enumerate(m.ops):
            first.setdefault(o.segment, j)
        plain = tuple(StashItem(seg, first.get(seg, 0), nbytes) for seg, nbytes in enumerate(m.saved_bytes) if nbytes)
    if kind is RecomputationType.NONE or n == 0:
        return RecomputePlan(RecomputationType.NONE, note, (False,) * n, plain, (0,) * n)
    explicit = bool(setup.options.get(EXPLICIT_OPTION, False))
    rec, interval = _intervals(m, kind, explicit)
    # recomputation only feeds gradient ops: an operation autodiff grows none for (on the inputs and
    # frozen weights alone, as in a frozen first stage) is not run again, and a stage without any
    # stashes nothing for it
    rec = [again and o.has_backward for o, again in zip(m.ops, rec, strict=True)]
    if not m.saved_slots:  # per-segment totals only: the cycles are known, what is stashed is not
        return RecomputePlan(kind, f"{note} {sum(rec):,} of {n:,} forward operations recomputed in the "
                             "backward pass.", tuple(rec), plain, (0,) * n)
    chain = _chains(m, rec, interval)
    checkpoint_keys = {k for c in m.checkpoints for k in c.keys}
    stash: list[StashItem] = []
    live_by_interval: dict[int, int] = {}
    made = [0] * n
    counted: set[tuple[int, int]] = set()
    keys = m.saved_keys if len(m.saved_keys) == len(m.saved_slots) else [-1 - i for i in range(len(m.saved_slots))]
    producers = (m.saved_producers if len(m.saved_producers) == len(m.saved_slots)
                 else [None] * len(m.saved_slots))
    recomputing = {o.segment for o, again in zip(m.ops, rec, strict=True) if again}
    for (seg, index, nbytes), key, producer in zip(m.saved_slots, keys, producers, strict=True):
        if (seg, key) in counted:
            continue
        known = producer is not None and 0 <= producer < n
        if known and m.ops[producer].segment != seg:  # made in an earlier stage: this stage's input
            if seg not in recomputing:
                stash.append(StashItem(seg, index, nbytes))
                counted.add((seg, key))
            continue  # a recomputing stage stashes its inputs whole (below)
        if key in checkpoint_keys or not known or not rec[producer]:
            stash.append(StashItem(seg, index, nbytes))
            counted.add((seg, key))
        else:
            live_by_interval[chain[producer]] = live_by_interval.get(chain[producer], 0) + nbytes
            made[producer] += nbytes
    for c in m.checkpoints:  # checkpoint outputs no backward op saved: still needed to recompute
        if c.segment not in recomputing:
            continue  # a stage that recomputes nothing (no gradient ops: frozen) needs none
        missing = [(k, b) for k, b in zip(c.keys, c.sizes, strict=False) if (c.segment, k) not in counted]
        if missing:
            stash.append(StashItem(c.segment, c.position, sum(b for _, b in missing)))
            counted.update((c.segment, k) for k, _ in missing)
    for seg in range(1, len(m.segments)):
        first = next((j for j, o in enumerate(m.ops) if o.segment == seg), None)
        if first is None or seg not in recomputing:
            continue
        crossing = m.boundary_bytes if m.grad_boundary_bytes is None else m.grad_boundary_bytes
        nbytes = crossing[seg - 1]
        if nbytes:
            stash.append(StashItem(seg, first, nbytes))
    live = tuple(live_by_interval.get(chain[j], 0) if rec[j] else 0 for j in range(n))
    count = sum(rec)
    note = f"{note} {count:,} of {n:,} forward operations recomputed in the backward pass."
    if kind is RecomputationType.Pipeline:
        positions = sorted(c.position for c in m.checkpoints)
        groups = tuple(sum(1 for p in positions if p <= j) for j in range(n))
    else:
        groups = tuple(interval)
    return RecomputePlan(kind, note, tuple(rec), tuple(s for s in stash if s.bytes), live, tuple(made), groups)


__all__ = ["EXPLICIT_OPTION", "NORM_OPS", "OPTION", "Checkpoint", "CheckpointLog", "RecomputationType",
           "RecomputePlan", "StashItem", "checkpoint", "parse_type", "plan", "resolve", "tracking"]


def _key(t: torch.Tensor) -> int | None:
    """The tensor's storage (shared by its views): the storage object's own address, which a
    fake tensor (no data) has too."""
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):
        return None


def _nbytes(t: torch.Tensor) -> int:
    """Bytes the tensor's distinct elements take: a broadcast view (stride 0 along a dimension, as
    ``expand`` makes; ``F.normalize`` divides by its norm so) holds only its source's elements. So
    does PopART's: ``ExpandOpx::grow`` copies the input and returns a Poplar ``broadcast`` view of
    the copy (graphcore/popart ``willow/src/popx/op/expandx.cpp``), no tensor of the full shape."""
    try:
        sizes, strides = t.shape, t.stride()
    except (RuntimeError, NotImplementedError):  # a layout without strides (sparse): every element
        return t.numel() * t.element_size()
    n = 1
    for size, stride in zip(sizes, strides, strict=True):
        if stride != 0 or size == 0:
            n *= int(size)
    return n * t.element_size()
