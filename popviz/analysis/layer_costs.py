"""The report's layers as the planner's :class:`~popviz.analysis.planner.LayerCost`s: tied
projections and returning heads folded into the layers they run with, recomputation intervals
and cycles carried over."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from popviz.analysis.planner import LayerCost
from popviz.analysis.stash_modes import stash_modes


def _rerun(x: Any) -> int:
    """A report layer's recomputed forward cycles (0 for tables that do not record them)."""
    return int(getattr(x, "recompute_cycles", 0) or 0)


def layer_costs(layers: Sequence) -> list[LayerCost]:
    """:class:`LayerCost`s from a report's layers (:class:`popviz.model.Layer`, in order).

    A layer ``tied_to`` another (a projection sharing the embeddings' weights) must run on that
    layer's IPU, wherever it comes in the sequence: its cycles, stash and temporaries are added to
    that layer's (its shared weights are already counted there). A head placed back on the first
    layer's IPU after the last movable layer (:func:`returning_heads`) is folded into the first
    layer the same way. Gradient accumulators
    (``accumulator_bytes``) stay on the IPU like the weights, so they count in ``weight_bytes``."""
    table = layers
    names = {x.name for x in layers}
    folded = {x.name: x for x in layers if x.tied_to is not None and x.tied_to in names}
    layers = list(layers)
    # the recomputed activations each layer's temporary holds in the report's own placement: its
    # stage's layers of the same recomputation group (taken out, so a split adds its own)
    interval: dict[tuple, int] = {}
    for x in layers:
        group = getattr(x, "recompute_group", None)
        if group is not None:
            key = (getattr(x, "stage", None), group)
            interval[key] = interval.get(key, 0) + getattr(x, "recompute_bytes", 0)

    def own(x) -> tuple[int, int, int | None]:
        """(temporary without its interval's recomputed bytes, recomputed bytes, group)."""
        group = getattr(x, "recompute_group", None)
        if group is None:
            return x.temporary_bytes, 0, None
        live = interval.get((getattr(x, "stage", None), group), 0)
        return max(0, x.temporary_bytes - live), getattr(x, "recompute_bytes", 0), group

    # under Pipeline recomputation, each layer's stash in a stage that recomputes it and in one that
    # does not (the split decides which: analysis.stash_modes)
    modes = stash_modes(layers, getattr(table, "recomputation", None))
    returning = returning_heads(layers)
    movable = [i for i, x in enumerate(layers) if getattr(x, "role", "layer") == "layer"]
    after_last = {x.name for i, x in enumerate(layers) if movable and i > movable[-1]}
    out = []
    for index, x in enumerate(layers):
        if x.name in folded or x.name in returning:
            continue
        extra = [t for t in folded.values() if t.tied_to == x.name]
        if index == 0:
            extra += [t for t in layers if t.name in returning]
        tail = [t for t in extra if t.name in after_last]
        temp, again, group = own(x)
        mode = modes.get(x.name) if modes else None
        if mode is not None:  # a folded part runs where its partner does, and is stashed as measured
            folded_bytes = sum(t.activation_bytes for t in extra)
            again, group = mode.recompute_bytes, mode.recompute_group
            reestimated = {"plain_activation_bytes": mode.plain_bytes + folded_bytes,
                           "recomputed_activation_bytes": mode.recomputed_bytes + folded_bytes,
                           "stash_input_bytes": mode.stash_input_bytes,
                           "stage_input_bytes": mode.stage_input_bytes}
        else:
            reestimated = {}
        out.append(LayerCost(**reestimated,
            tail_fwd_cycles=sum(t.fwd_cycles for t in tail),
            tail_bwd_cycles=sum(t.bwd_cycles for t in tail),
            tail_activation_bytes=sum(t.activation_bytes for t in tail),
            name=x.name,
            fwd_cycles=x.fwd_cycles + sum(t.fwd_cycles for t in extra),
            bwd_cycles=x.bwd_cycles + sum(t.bwd_cycles for t in extra),
            weight_bytes=sum(t.weight_bytes + getattr(t, "accumulator_bytes", 0) for t in (x, *extra)),
            param_bytes=sum(t.weight_bytes for t in (x, *extra)),
            optimizer_bytes=x.optimizer_bytes + sum(t.optimizer_bytes for t in extra),
            activation_bytes=x.activation_bytes + sum(t.activation_bytes for t in extra),
            temporary_bytes=temp, other_temporary_bytes=max([t.temporary_bytes for t in extra], default=0),
            pin=x.pin, recompute_bytes=again, recompute_group=group,
            recompute_cycles=_rerun(x) + sum(_rerun(t) for t in extra), checkpoint=bool(getattr(x, "checkpoint", False)),
            code_bytes=sum(int(getattr(t, "code_bytes", 0) or 0) for t in (x, *extra)),
        ))
    return out


def extra_stages(layers: Sequence) -> int:
    """1 when a layer ``tied_to`` one before the first movable layer (role ``layer``) comes after
    the last one (a tied projection that takes the pipeline back to the first IPU, as BERT's
    masked-LM head does), or a head returns to the first IPU (:func:`returning_heads`): the
    pipeline then has one forward stage more than it has IPUs."""
    roles = [getattr(x, "role", "layer") for x in layers]
    movable = [i for i, r in enumerate(roles) if r == "layer"]
    if not movable:
        return 0
    index = {x.name: i for i, x in enumerate(layers)}
    for i, x in enumerate(layers):
        partner = index.get(x.tied_to) if x.tied_to is not None else None
        if partner is not None and partner < movable[0] and i > movable[-1]:
            return 1
    return 1 if returning_heads(layers) else 0


def returning_heads(layers: Sequence) -> set[str]:
    """Names of the layers after the last movable one (role ``layer``) that the report places back
    on the first layer's IPU while the last movable layer is on another: a head returning to
    IPU 0 (optimum-graphcore's BERT puts its pooler and classifier there). They run in an extra
    stage on that IPU, like a tied projection, and do not make another IPU. Layers ``tied_to``
    another are left to :func:`layer_costs`' tying."""
    layers = list(layers)
    roles = [getattr(x, "role", "layer") for x in layers]
    movable = [i for i, r in enumerate(roles) if r == "layer"]
    if not movable:
        return set()
    first_ipu = getattr(layers[0], "ipu", None)
    last_ipu = getattr(layers[movable[-1]], "ipu", None)
    if first_ipu is None or last_ipu is None or first_ipu == last_ipu:
        return set()
    return {x.name for x in layers[movable[-1] + 1:]
            if getattr(x, "ipu", None) == first_ipu and getattr(x, "tied_to", None) is None}


def units_text(roles: Sequence[str]) -> str:
    """``9 layers (12 parts with the others)``: the report's movable layers and all the parts a
    split places (embeddings, heads...), as ``popviz plan``, PIPE001 and MEM005 all say it."""
    n = sum(r == "layer" for r in roles)
    return f"{n} layer{'s' if n != 1 else ''}" + (f" ({len(roles)} parts with the others)" if len(roles) != n else "")


def revisited_ipu(layers: Sequence[Any]) -> tuple[str, int, int] | None:
    """``(layer, its IPU, the IPU before it)`` of the first layer placed back on an earlier IPU
    than the layer before it, among the layers the planner moves (tied projections and heads
    returning to the first IPU are folded into their partners by then), or None. A forward
    that revisits its IPUs this way (DINO's teacher after its student, MAE's decoder after its
    encoder) has no split into one contiguous run of layers per IPU."""
    previous = None
    for x in layers:
        if x.ipu is None:
            continue
        if previous is not None and x.ipu < previous:
            return x.name, x.ipu, previous
        previous = x.ipu
    return None
