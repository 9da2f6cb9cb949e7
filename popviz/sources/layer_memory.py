"""Per-layer activation, temporary and code bytes of a real profile, from its liveness steps and
its programs' code (for :mod:`popviz.sources.attribution`, which attributes cycles and weights).

How each figure is obtained (the layer table's notes repeat it):

- **code**: each program a layer's operations run (PopTorch's debug contexts) contributes its
  ``codeBytesByTile`` summed over the tiles, plus ``controlCodeByTile`` when it has no
  ``children`` (a parent's control code includes its children's: graphcore/popliner
  ``popliner/operation.py``; both names: graphcore/ipu_tensorflow_addons
  ``ipu_tensorflow_addons/keras/experimental/auto_pipeline/utils/pva_utils.py``). A program
  several layers run is split evenly between them, as its cycles are.
- **activation** (training only): on the layer's IPU, the liveness steps its forward programs
  occupy come in runs of consecutive steps; across each run the not-always-live bytes rise from
  the step before it to the step after it by what the forward leaves live for the backward. The
  figure is the median rise over its forward runs (0 when it falls).
- **temporary**: over every run of its forward and backward steps, the largest excess of the
  bytes inside the run over the higher of the levels just before and just after it: what its
  operations need only while they run.

Where this is wrong: steps of another IPU's programs or of unattributed programs (copies, syncs)
inside a layer's run count for the layer; a forward whose output is copied into a stash that
Poplar allocated before the pipeline (a stash buffer live from the start) shows no rise, so its
activation reads 0; with only the replica's total per step (no ``notAlwaysLiveMemoryForIpu``) on
more than one IPU, the figures are not derived at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from popviz.model import LivenessTable


def program_code_bytes(program: Any, cache: dict[str, int | None]) -> int | None:
    """Code bytes of one program over all tiles (None when libpva gives no ``codeBytesByTile``)."""
    name = str(getattr(program, "name", ""))
    if name in cache:
        return cache[name]
    try:
        code = int(sum(program.codeBytesByTile))
    except (AttributeError, TypeError, ValueError):
        cache[name] = None
        return None
    try:
        if not len(program.children):
            code += int(sum(program.controlCodeByTile))
    except (AttributeError, TypeError, ValueError):
        pass
    cache[name] = code = max(0, code)
    return code


def _runs(table: LivenessTable, programs: Sequence[str]):
    """(starts, stops) of the runs of consecutive steps whose program is one of ``programs``."""
    import numpy as np

    cats = table.programs.categories
    wanted = [cats.get_loc(p) for p in set(programs) if p in cats]
    if not wanted:
        return np.zeros(0, dtype="int64"), np.zeros(0, dtype="int64")
    mask = np.isin(table.programs.codes, np.asarray(wanted, dtype=table.programs.codes.dtype))
    edges = np.diff(np.concatenate(([0], mask.astype("int8"), [0])))
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


def run_figures(series, starts, stops):
    """Per run: (level just before, level just after, largest value inside). Before the first
    step and after the last nothing is live (0)."""
    import numpy as np

    padded = np.concatenate(([0], series, [0]))
    before = padded[starts]          # series[start - 1]
    after = padded[stops + 1]        # series[stop]
    if not len(starts):
        return before, after, before
    idx = np.empty(2 * len(starts), dtype="int64")
    idx[0::2], idx[1::2] = starts, stops
    inside = np.maximum.reduceat(np.concatenate((series, [0])), idx)[0::2]
    return before, after, inside


def layer_bytes(table: LivenessTable, ipu: int, fwd: Sequence[str], bwd: Sequence[str],
                training: bool) -> tuple[int, int]:
    """(activation, temporary) bytes of a layer on ``ipu`` whose forward runs the programs
    ``fwd`` and backward ``bwd`` (see the module's docstring)."""
    import numpy as np

    series = table.series(ipu)
    act = 0
    temp = 0
    starts, stops = _runs(table, fwd)
    if len(starts):
        before, after, inside = run_figures(series, starts, stops)
        if training:
            act = max(0, int(np.median(after - before)))
        temp = max(temp, int((inside - np.maximum(before, after)).max()))
    starts, stops = _runs(table, bwd)
    if len(starts):
        before, after, inside = run_figures(series, starts, stops)
        temp = max(temp, int((inside - np.maximum(before, after)).max()))
    return act, max(0, temp)


def usable(table: LivenessTable | None) -> str | None:
    """Why ``table`` cannot give per-layer bytes (None when it can)."""
    if table is None:
        return "the profile has no liveness steps (livenessProgramSteps)"
    if not table.per_ipu:
        return ("the profile's liveness has the replica's total per step only (no "
                "notAlwaysLiveMemoryForIpu), which mixes the IPUs")
    return None


NOTE_CODE = ("code bytes: codeBytesByTile (+ controlCodeByTile of programs without children) of the "
             "programs its operations run, summed over the tiles; a program several layers run split evenly")
NOTE_ACTIVATION = ("activation bytes: on its IPU, the median rise of not-always-live bytes across its "
                   "forward programs' runs of liveness steps (what the forward leaves live for the backward)")
NOTE_TEMPORARY = ("temporary bytes: the largest excess of not-always-live bytes inside a run of its "
                  "programs' liveness steps over the higher of the levels just before and after it")
