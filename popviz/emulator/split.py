"""``--split``: re-place an unmodified script's blocks by layer-level module.

With ``POPVIZ_EMULATOR_SPLIT`` (``popviz emulate --split``) the script's own blocks
are ignored: each layer-level module starts a block on the IPU the split gives it. The movable
layers are placed in module order by ``layers_per_ipu`` (or by name from a plan file's
``placements``, which may also name the other parts); a tied module goes on its partner's IPU;
parts before the first movable layer go on the first IPU, parts between two layers with the
layer before them, parts after the last layer with the tied module that follows them (the rest
of a head around a tied projection), else on the last IPU.

This module does not import torch.
"""

from __future__ import annotations

import os

from popviz.block_names import user_path
from popviz.emulator.structure import SPLIT_ENV, LayerSetupError, Structure
from popviz.plan_file import PlanFile


def split_from_env() -> PlanFile | None:
    raw = os.environ.get(SPLIT_ENV, "").strip()
    if not raw:
        return None
    from popviz.errors import PopvizError
    from popviz.plan_file import parse_split

    try:
        return parse_split(raw)
    except PopvizError as exc:
        raise LayerSetupError(exc.message) from None


def split_map(structure: Structure, plan: PlanFile) -> dict[str, int]:
    """Layer-level module -> IPU for ``plan`` (one-line errors when it does not fit the model)."""
    movable = [u for u in structure.units if u in structure.movable]
    what = plan.source or plan.describe()
    ipu_of: dict[str, int] = {}
    if plan.placements:
        known = set(structure.units)
        # the layer table names layers as the user's model has them (popviz.block_names.user_path)
        alias = {user_path(u): u for u in structure.units if user_path(u) not in known}
        for name, ipu in plan.placements:
            name = alias.get(name, name)
            if name not in known:
                sample = ", ".join(movable[:3]) + (" ..." if len(movable) > 3 else "")
                raise LayerSetupError(f"--split {what}: layer {name!r} is not a layer of this model "
                                      f"(its layers at depth {structure.depth}: {sample}); make the plan from "
                                      "a report of this model")
            ipu_of[name] = ipu
        missing = [u for u in movable if u not in ipu_of]
        if missing:
            raise LayerSetupError(f"--split {what}: the plan places no IPU for layer {missing[0]!r} "
                                  f"({len(missing)} of the model's {len(movable)} layers missing)")
    else:
        if sum(plan.layers_per_ipu) != len(movable):
            names = [repr(m) for m in movable]
            sample = (", ".join(names) if len(names) <= 4 else f"{names[0]}, {names[1]} ... {names[-1]}") or "none"
            raise LayerSetupError(f"--split {what}: covers {sum(plan.layers_per_ipu)} layers; the model has "
                                  f"{len(movable)} at module depth {structure.depth} ({sample}); the counts must "
                                  f"add up to {len(movable)}")
        i = 0
        for ipu, count in enumerate(plan.layers_per_ipu):
            for name in movable[i:i + count]:
                ipu_of[name] = ipu
            i += count
    last_ipu = plan.ipus - 1
    units = list(structure.units)
    first_movable = next((i for i, u in enumerate(units) if u in structure.movable), len(units))
    last_movable = max((i for i, u in enumerate(units) if u in structure.movable), default=-1)
    previous = 0
    for i, unit in enumerate(units[:last_movable + 1]):
        if unit not in ipu_of:
            partner = structure.tied.get(unit)
            ipu_of[unit] = (ipu_of.get(partner, 0) if partner is not None
                            else 0 if i < first_movable else previous)
        previous = ipu_of[unit]
    # after the last layer: with the tied part that follows (a head around a tied projection),
    # else on the last IPU
    follow = last_ipu
    for unit in reversed(units[last_movable + 1:]):
        partner = structure.tied.get(unit)
        if unit in ipu_of:
            follow = ipu_of[unit]
        elif partner is not None:
            follow = ipu_of.get(partner, 0)
            ipu_of[unit] = follow
        else:
            ipu_of[unit] = follow
    return ipu_of


__all__ = ["split_from_env", "split_map"]
