"""What each memory lever saves, from the memory categories (the emulator's), without overlap.

A lever is a change to the categories of every IPU (:data:`Cats`): offloading the optimizer state
empties ``optimizerState`` (but its largest tensor's state comes back as a temporary while its
update runs), halving the micro-batch halves what scales with it, ``model.half()`` halves what is
float32 and becomes float16. Applying levers one after the other gives what they save *together*:
halving the precision after offloading saves nothing more on the optimizer state, and two levers
that both halve the stash save three quarters of it, not all of it.

What the report records decides what a lever touches:

- the model's precision: bytes per parameter (``options["model"]``: ``parameter_bytes`` /
  ``parameters``), else the float dtypes of its host inputs (:func:`precision`);
- the optimizer's accumulator types (``options["optimizer"]``: ``accum_type``,
  ``first_order_momentum_accum_type``, ...): PopTorch keeps gradient accumulators and optimizer
  state in those types (float32 by default) whatever the model's dtype, so ``model.half()`` does
  not shrink them;
- whether the temporaries scale with the micro-batch: the emulator's are an operation's operands
  and result (activation-sized) — unless the optimizer state is off chip, when the largest
  tensor's state is on chip while its update runs and may be the larger temporary for a big
  layer (weight-sized: neither the micro-batch nor the model's dtype shrinks it). Then the
  temporaries halve down to that state (sized from the layers), and not at all without layers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from popviz.analysis.model_precision import FLOAT16, accumulators_typed, precision

if TYPE_CHECKING:
    from popviz.model import Report

__all__ = ["FLOAT16", "accumulators_typed", "precision"]  # re-exported: the levers' callers use them

RECOMPUTE_BACK_ON = ("turn recomputation back on: the script sets autoRecomputation to None, so no stage "
                     "recomputes and recomputationCheckpoint does nothing; remove "
                     "opts._Popart.set(\"autoRecomputation\", ...) (PopTorch then recomputes each stage of a "
                     "multi-IPU pipeline) or set it to 3 (Pipeline) or 1 (Standard)")

ENABLE_RECOMPUTATION = ("enable recomputation: opts._Popart.set(\"autoRecomputation\", 1) (outside a "
                        "multi-IPU pipeline PopTorch recomputes nothing by default, and "
                        "recomputationCheckpoint alone does nothing)")


def pipelined(cfg: Any) -> bool:
    """A multi-stage pipeline: PopTorch recomputes its stages by default, and micro-batches are in
    flight."""
    return cfg.execution_strategy == "PipelinedExecution" and cfg.num_stages > 1


Cats = dict[str, int]
"""Bytes per memory category of one IPU (plus ``moved``: bytes moved to another IPU, negative)."""
Change = Callable[[int, Cats], Cats]
"""A lever: (IPU, its categories) -> its categories with the lever applied."""

def temporaries_scale(report: Report) -> bool:
    """Whether the temporaries are activation-sized (see the module's docstring)."""
    cfg = report.cfg
    return not (cfg.mode == "training" and cfg.optimizer_state_on_chip is False)


def streamed_state(report: Report) -> dict[int, int] | None:
    """Per IPU, the optimizer state of its largest layer (an upper bound on its largest tensor's):
    on chip while that tensor's update runs once the state is offloaded. None without layers."""
    if report.layers is None:
        return None
    out: dict[int, int] = {}
    for x in report.layers:
        if x.ipu is not None:
            out[x.ipu] = max(out.get(x.ipu, 0), x.optimizer_bytes)
    return out


STREAMED = "streamedOptimizerState"
"""Pseudo-category an offloaded optimizer state leaves on chip: its largest tensor's state, live
while that update runs, after the backward, so not together with the operations' temporaries."""


def recomputation_turned_off(report: Report) -> bool:
    """The script set PopART's ``autoRecomputation`` to None (0, ``RecomputationType.NoRecompute``):
    then a multi-IPU pipeline does not recompute its stages (PopTorch's default) and
    ``poptorch.recomputationCheckpoint`` has no effect."""
    from popviz.analysis.host_io import recorded_option

    value = recorded_option(report, "autoRecomputation")
    return value is not None and str(getattr(value, "value", value)).split(".")[-1].lower() in (
        "0", "none", "norecompute")


def total(cats: Cats) -> int:
    rest = sum(v for k, v in cats.items() if k not in ("temporaries", STREAMED))
    return rest + max(cats.get("temporaries", 0), cats.get(STREAMED, 0))


def apply(rows: Sequence[tuple[int, Cats]], changes: Sequence[Change]) -> int:
    """Bytes the ``changes`` save together over ``rows`` (IPU, categories), one after the other."""
    saved = 0
    for ipu, cats in rows:
        new = dict(cats)
        for change in changes:
            new = change(ipu, new)
        saved += total(cats) - total(new)
    return saved


def _half(cats: Cats, *names: str) -> Cats:
    return {k: (v - v // 2 if k in names else v) for k, v in cats.items()}


def offload_optimizer(report: Report) -> Change:
    streamed = streamed_state(report) or {}

    def change(ipu: int, cats: Cats) -> Cats:
        return {**cats, "optimizerState": 0, STREAMED: streamed.get(ipu, 0)}
    return change


def offload_accumulators(_ipu: int, cats: Cats) -> Cats:
    return {**cats, "gradientAccumulators": 0}


def recompute(_ipu: int, cats: Cats) -> Cats:
    return _half(cats, "activationStash")


def _activation_sized(report: Report, names: Sequence[str]) -> Change:
    """Halve ``names`` and the temporaries as far as they are an operation's (activation-sized):
    with the optimizer state off chip the temporaries category is the larger of the largest
    operation's working memory and the largest tensor's streamed state, so they halve down to
    that state (per IPU, :func:`streamed_state`) and no further; without layers to size the state,
    not at all."""
    if temporaries_scale(report):
        return lambda _ipu, cats: _half(cats, *names, "temporaries")
    streamed = streamed_state(report)

    def change(ipu: int, cats: Cats) -> Cats:
        new = _half(cats, *names)
        temps = cats.get("temporaries", 0)
        if streamed is not None and temps:
            new["temporaries"] = max(temps - temps // 2, min(temps, streamed.get(ipu, 0)))
        return new
    return change


def temporaries_shrink(report: Report, rows: Sequence[tuple[int, Cats]]) -> bool:
    """Whether halving the activations shrinks the temporaries of some IPU of ``rows`` (always
    when they are activation-sized; with the optimizer state off chip, where an operation's
    working memory is above the largest tensor's streamed state)."""
    if temporaries_scale(report):
        return True
    streamed = streamed_state(report)
    return streamed is not None and any(cats.get("temporaries", 0) > streamed.get(ipu, 0) for ipu, cats in rows)


def lower_proportion(report: Report, ipu: int) -> tuple[float, float, str]:
    """(current, proposed, ``now 0.3`` / ``PopTorch's default 0.6``) available memory proportion
    of ``ipu``: half the current one, not below the smallest the memory findings propose. Every
    finding that proposes a lower proportion for an IPU (MEM001-003, MEM006) uses this value."""
    from popviz.analysis.thresholds import (
        DEFAULT_AVAILABLE_MEMORY_PROPORTION,
        MIN_AVAILABLE_MEMORY_PROPORTION,
    )

    set_amp = report.cfg.available_memory_proportion.get(ipu)
    cur = set_amp if set_amp is not None else DEFAULT_AVAILABLE_MEMORY_PROPORTION
    new = max(MIN_AVAILABLE_MEMORY_PROPORTION, round(cur / 2, 2))
    return cur, new, (f"now {cur:g}" if set_amp is not None else f"PopTorch's default {cur:g}")


def keep_batch_text(training: bool) -> str:
    """What keeps the batch when the micro-batch halves: G in training (D would halve the samples
    per weight update, only keeping those per call), D in inference."""
    return ("doubling gradientAccumulation to keep the global batch" if training else
            "doubling deviceIterations to keep the samples per call")


def halve_micro_batch(report: Report) -> Change:
    return _activation_sized(report, ("activationStash",))


def to_float16(report: Report) -> Change:
    """``model.half()`` with float16 inputs: the weights (unless already float16), the stash, the
    activation-sized temporaries, and the accumulators when they follow the parameters' type."""
    names = ["activationStash"]
    if precision(report) != "float16":
        names.append("weights")
    if not accumulators_typed(report):
        names.append("gradientAccumulators")
    return _activation_sized(report, names)


def moved(excess: int) -> Change:
    return lambda _ipu, cats: {**cats, "moved": cats.get("moved", 0) - excess}


def closing(rows: Sequence[tuple[int, Cats]], changes: Sequence[Change | None], need: int
            ) -> tuple[int | None, int]:
    """(the fewest leading levers that save ``need`` together, or None; what all of them save
    together). Levers that cannot be sized (None) count for nothing."""
    sized = [c for c in changes if c is not None]
    for k in range(1, len(changes) + 1):
        if changes[k - 1] is None:
            continue
        if apply(rows, [c for c in changes[:k] if c is not None]) >= need:
            return k, apply(rows, sized)
    return None, apply(rows, sized)


def rows_of(ipu_rows: Sequence[dict[str, Any]]) -> list[tuple[int, Cats]]:
    """(IPU, categories) of the memory analysis' rows that have categories."""
    return [(r["ipu"], dict(r["categories"])) for r in ipu_rows if r["categories"]]


def fewest_ipus(report: Report) -> tuple[int | None, str] | None:
    """``popviz plan``'s verdict on how many IPUs the model needs (MEM005 quotes it): ``(k, "")``
    when a split over k IPUs fits, ``(None, why)`` when no number of IPUs up to
    :data:`planner.MAX_IPUS_SEARCHED` is enough (at layer granularity), None without layers or
    when the planner cannot run on the report."""
    from popviz.analysis import layer_costs, planner
    from popviz.analysis._common import nbytes
    from popviz.analysis.layer_plan import settings_for
    from popviz.errors import PopvizError

    if report.layers is None or report.target is None:
        return None
    try:
        costs = layer_costs.layer_costs(report.layers)
        settings, _notes = settings_for(report, costs)
        top = min(len(costs), planner.MAX_IPUS_SEARCHED)
        by = planner.plan(costs, top, settings).by_ipus
    except (PopvizError, ValueError):
        return None
    k = next((k for k in sorted(by) if by[k] is not None), None)
    if k is not None:
        return k, ""
    optimizer = settings.training and not settings.offload_optimizer
    big = max(costs, key=lambda c: c.weight_bytes + (c.optimizer_bytes if optimizer else 0))
    held = big.weight_bytes + (big.optimizer_bytes if optimizer else 0)
    why = (f"`popviz plan` finds no split that fits on up to {top} IPUs (it moves the report's "
           f"{layer_costs.units_text([getattr(x, 'role', 'layer') for x in report.layers])} whole)")
    if held > settings.budget_bytes:
        src = next((x for x in report.layers if x.name == big.name), None)
        parts = ["weights", *(["gradient accumulators"] if getattr(src, "accumulator_bytes", 0) else []),
                 *(["optimizer state"] if optimizer and big.optimizer_bytes else [])]
        what = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
        why += (f"; {big.name} alone holds {nbytes(held)} of {what}, over an IPU's "
                f"{settings.headroom_frac:.0%} budget of {nbytes(settings.budget_bytes)}")
    return None, why
