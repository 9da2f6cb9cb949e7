"""Each layer's stash in a stage that recomputes it and in one that does not, from a report's
layer table measured under PopART's ``Pipeline`` recomputation, so that ``popviz plan`` can move a
layer between the two (:class:`~popviz.analysis.planner.LayerCost`'s ``plain_activation_bytes``,
``recomputed_activation_bytes``, ``stash_input_bytes``, ``stage_input_bytes``).

What PopART does (graphcore/popart ``willow/src/transforms/pipeline.cpp``,
``willow/src/recompute.cpp``; ``popviz/emulator/recompute.py`` models it): under ``Pipeline``
recomputation every forward stage but the last runs its forward again before its backward, the
last stage only up to its last ``recomputationCheckpoint`` (``setFinalFwdStageRecomputation``).
A recomputing stage stashes, per micro-batch in flight, its input (what crossed from the previous
IPU) and its checkpoint outputs; every other tensor the backward needs is made again, live only
while its interval's backward runs. A stage that does not recompute stashes every tensor the
backward needs.

So a layer measured in a recomputing stage stashes, where nothing recomputes it, what it stashed
there plus what it recomputed (its ``recompute_bytes``); one measured past the last checkpoint of
the last stage (stashing everything) stashes, where a stage recomputes it, nothing of its own
(no checkpoint in it) and recomputes what it stashed. A checkpointed layer measured there keeps
its stash (its checkpoint's bytes are not recorded apart). A stage's input is measured at each of
the report's recomputing stage boundaries (the whole stash of such a stage's first layer, when it
makes no checkpoint); a boundary the report did not have is taken as the nearest measured one
(the same hidden state between a transformer's layers), none when no boundary was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PIPELINE = "Pipeline"
"""PopART's ``RecomputationType`` whose recomputation depends on the split (``LayerTable``)."""


@dataclass(frozen=True)
class StashModes:
    """One report layer's stash (bytes per micro-batch in flight) in both kinds of stage."""

    plain_bytes: int
    """In a stage that does not recompute it."""
    recomputed_bytes: int
    """In a stage that recomputes it, its stage input aside."""
    recompute_bytes: int
    """What that recomputation makes again (live while its interval's backward runs)."""
    recompute_group: int | None
    stash_input_bytes: int
    """Of its measured ``activation_bytes``, its measured stage's input."""
    stage_input_bytes: int
    """A recomputing stage's input when it starts at this layer."""


def stash_modes(layers: Sequence[Any], recomputation: str | None) -> dict[str, StashModes] | None:
    """Per layer name, its :class:`StashModes`; None when the table was not measured under
    ``Pipeline`` recomputation in training (nothing to re-estimate), or lacks stages."""
    layers = list(layers)
    if recomputation != PIPELINE or not layers or any(getattr(x, "stage", None) is None for x in layers):
        return None
    if not any(getattr(x, "recompute_group", None) is not None for x in layers):
        return None  # inference, or nothing recomputed: the stash is as measured
    recomputing = {x.stage for x in layers if x.recompute_group is not None}
    starts: dict[int, int] = {}  # index of a recomputing stage's first layer -> its measured input
    seen: set[int] = set()
    for i, x in enumerate(layers):
        if x.stage in seen:
            continue
        seen.add(x.stage)
        if i > 0 and x.stage in recomputing and x.recompute_group is not None and not x.checkpoint:
            starts[i] = x.activation_bytes
    out: dict[str, StashModes] = {}
    group = 0
    for i, x in enumerate(layers):
        if starts:
            near = min(starts, key=lambda k: (abs(k - i), k))
            stage_input = starts[near]
        else:
            stage_input = 0
        if x.recompute_group is not None:
            group = x.recompute_group
            own = x.activation_bytes - starts.get(i, 0)
            out[x.name] = StashModes(plain_bytes=own + x.recompute_bytes, recomputed_bytes=own,
                                     recompute_bytes=x.recompute_bytes, recompute_group=x.recompute_group,
                                     stash_input_bytes=starts.get(i, 0), stage_input_bytes=stage_input)
        elif x.checkpoint:  # its checkpoint's share of the stash is not recorded: kept as measured
            group += 1
            out[x.name] = StashModes(x.activation_bytes, x.activation_bytes, 0, None, 0, stage_input)
        else:
            out[x.name] = StashModes(plain_bytes=x.activation_bytes, recomputed_bytes=0,
                                     recompute_bytes=x.activation_bytes, recompute_group=group,
                                     stash_input_bytes=0, stage_input_bytes=stage_input)
    return out
