"""The liveness table of an estimated report, from the emulator's simulated schedule of one call.

Each step of the call's schedule (:func:`popviz.schedule.simulate`) is one liveness step. On each
IPU the not-always-live bytes at a step are, as the memory table counts them (``docs/emulator.md``):

- the activation stash of every stage on that IPU: ``saved_bytes`` for each micro-batch whose
  forward has run and whose backward has not (training; in a pipeline up to 2(N - i) - 1);
- while a stage's forward runs, the micro-batch it is making (``saved_bytes``) and the stage's
  temporaries (its largest operation's working bytes); while its backward runs, the temporaries
  (the micro-batch's stash is freed at its end);
- while the weight update runs with the optimizer state off chip, the state streamed on chip
  (the memory table's temporaries, where they exceed the stages').

So the peak of each IPU equals its memory-table not-always-live bytes (the stash at full depth
plus the temporaries). Always-live bytes are the rest of the memory table (weights, optimizer
state, accumulators, code). Everything here is an estimate; the report's provenance says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from popviz.model import LayerTable, LivenessTable, MemoryTable, StepLabel


def _stage_of(program: str) -> tuple[int, str] | None:
    """(stage, ``forward`` / ``backward``) of a ``stage<i>/<pass>`` program."""
    if not program.startswith("stage"):
        return None
    head, _, kind = program.partition("/")
    try:
        return int(head[5:]), kind
    except ValueError:
        return None


def estimate(steps: Any, stages: Sequence[Any], memory: MemoryTable, training: bool,
             optimizer_on_chip: bool, layers: LayerTable | None = None) -> LivenessTable | None:
    """The estimated liveness table (None for a schedule without steps)."""
    import numpy as np
    import pandas as pd

    if steps is None or not len(steps):
        return None
    per = memory.frame.set_index("ipu")
    ipus = [int(k) for k in per.index]
    col = {k: j for j, k in enumerate(ipus)}
    first = steps.drop_duplicates("step").sort_values("step")
    programs = [str(p) for p in first["program"]]
    temps_cat = per["cat_temporaries_bytes"] if "cat_temporaries_bytes" in per else None
    streamed = {}
    for k in ipus:
        stage_temp = max((s.temporary_bytes for s in stages if s.ipu == k), default=0)
        cat = int(temps_cat[k]) if temps_cat is not None else 0
        streamed[k] = cat if training and not optimizer_on_chip and cat > stage_temp else 0
    in_flight = [0] * len(stages)
    out = np.zeros((len(programs), len(ipus)), dtype="int64")
    stash = np.zeros(len(ipus), dtype="int64")
    for n, program in enumerate(programs):
        row = stash.copy()
        which = _stage_of(program)
        if which is not None and which[0] < len(stages):
            i, kind = which
            s = stages[i]
            j = col.get(s.ipu)
            if j is not None:
                if kind == "forward":
                    row[j] += (s.saved_bytes if training else 0) + s.temporary_bytes
                    if training:
                        in_flight[i] += 1
                        stash[j] += s.saved_bytes
                elif kind == "backward":
                    row[j] += s.temporary_bytes
                    if in_flight[i]:
                        in_flight[i] -= 1
                        stash[j] -= s.saved_bytes
        elif program == "weightUpdate":
            for k, b in streamed.items():
                row[col[k]] += b
        out[n] = row
    always = {k: int(per.loc[k, "always_live_bytes"]) for k in ipus}
    table = LivenessTable(programs=pd.Categorical(programs), total_bytes=out.sum(axis=1), ipu_bytes=out,
                          ipus=tuple(ipus), always_live_bytes=always,
                          notes=("estimated from the emulator's schedule of one call: stash, temporaries and "
                                 "the streamed optimizer state per step",))
    table.labels = tuple(_label(table, k, stages, layers, training) for k in _peak_ipus(table))
    return table


def _peak_ipus(table: LivenessTable) -> list[int]:
    return [k for k in table.ipus if table.peak(k)[1] > 0]


def _label(table: LivenessTable, ipu: int, stages: Sequence[Any], layers: LayerTable | None,
           training: bool) -> StepLabel:
    """The peak step of ``ipu``: its stage's layer with the largest temporaries, and what is live."""
    step, _nal = table.peak(ipu)
    which = _stage_of(table.program(step))
    layer = None
    contributors = []
    for s in stages:
        if s.ipu != ipu:
            continue
        depth = s.stash_depth if training else 0
        if depth and s.saved_bytes:
            contributors.append((f"stage {s.index} activation stash (up to {depth} micro-batches)",
                                 int(s.saved_bytes * depth)))
    if which is not None and which[0] < len(stages):
        s = stages[which[0]]
        contributors.append((f"stage {s.index} {which[1]} temporaries", int(s.temporary_bytes)))
        if layers is not None:
            mine = [x for x in layers if x.stage == s.index]
            if mine:
                layer = max(mine, key=lambda x: x.temporary_bytes).name
    contributors.sort(key=lambda c: -c[1])
    # (the stash figures are each stage's full depth; at the peak step they are as live as the schedule has them)
    return StepLabel(step=step, layer=layer, contributors=tuple(contributors), contributors_scope="ipu")
