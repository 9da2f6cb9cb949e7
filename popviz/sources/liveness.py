"""Poplar's liveness report read through libpva: not-always-live bytes at every program step.

Names read (each optional; docs/sources.md lists what happens without each):

- ``compilation.livenessProgramSteps[i]`` with ``.program.name`` and ``.notAlwaysLiveMemory.bytes``
  (graphcore/tensorflow ``tensorflow/python/ipu/tests/keras/keras_pipeline_recomputation_test.py``:
  peak liveness is the tiles' ``memory.alwaysLiveBytes`` plus the largest step's bytes);
- ``.notAlwaysLiveMemoryForIpu(k).bytes`` (graphcore/ipu_tensorflow_addons
  ``ipu_tensorflow_addons/keras/experimental/auto_pipeline/utils/pva_utils.py``,
  ``get_max_live_memory``);
- ``.notAlwaysLiveMemory.variables`` with ``.name`` and ``.size``, read at each IPU's peak step only
  (graphcore-research/flash-attention-ipu ``demo/profile_utils.py``, ``get_step_variables``).

Values are per replica. Each step's values are read once, in C-level loops over the IPUs
(``map`` with ``attrgetter``), into compact int64 buffers: no Python object is kept per step.
"""

from __future__ import annotations

from typing import Any

from popviz.model import LivenessTable, MemoryTable, StepLabel, Target

CONTRIBUTORS = 5
"""Largest variables named at each peak step."""
PROGRESS_EVERY = 8192


def read_liveness(pva_report: Any, memory: MemoryTable | None, target: Target) -> LivenessTable | None:
    """The profile's liveness table, or None when its libpva has no ``livenessProgramSteps`` (or
    they are empty)."""
    from array import array
    from operator import attrgetter

    import numpy as np

    from popviz.ui import progress

    steps = getattr(pva_report.compilation, "livenessProgramSteps", None)
    if steps is None:
        return None
    n_ipus = int(target.ipus_per_replica or target.num_ipus)
    ipus = range(n_ipus)
    codes = array("i")
    per_ipu = array("q")
    totals = array("q")
    names: dict[str, int] = {}
    get_bytes = attrgetter("bytes")
    by_ipu = True
    count = 0
    try:
        total = len(steps)
    except TypeError:
        total = None
    for step in steps:
        try:
            name = str(step.program.name)
        except AttributeError:
            name = "?"
        codes.append(names.setdefault(name, len(names)))
        if by_ipu:
            try:
                per_ipu.extend(map(get_bytes, map(step.notAlwaysLiveMemoryForIpu, ipus)))
            except (AttributeError, TypeError, IndexError):
                by_ipu = False  # an SDK without per-IPU liveness: the replica's total only
                del per_ipu[count * n_ipus:]
                totals.extend(_totals_so_far(per_ipu, count, n_ipus))
                per_ipu = array("q")
        if not by_ipu:
            totals.append(int(step.notAlwaysLiveMemory.bytes))
        count += 1
        if count % PROGRESS_EVERY == 0:
            progress(f"liveness step {count:,}" + (f" of {total:,}" if total else ""))
    if not count:
        return None
    import pandas as pd

    labels_of = sorted(names, key=names.__getitem__)
    programs = pd.Categorical.from_codes(np.frombuffer(codes, dtype="int32"),
                                         categories=pd.Index(labels_of, dtype="str"))
    notes: list[str] = []
    if by_ipu:
        matrix = np.frombuffer(per_ipu, dtype="int64").reshape(count, n_ipus)
        total_bytes = matrix.sum(axis=1) if n_ipus > 1 else matrix[:, 0].copy()
    else:
        matrix = None
        total_bytes = np.frombuffer(totals, dtype="int64")
        notes.append("liveness per IPU not in this profile (its libpva has no notAlwaysLiveMemoryForIpu): "
                     "steps give the replica's total over all IPUs")
    always = {}
    if memory is not None:
        per = memory.per_ipu()
        always = {int(r.ipu): int(r.always_live_bytes) for r in per.itertuples(index=False)}
    table = LivenessTable(programs=programs, total_bytes=total_bytes, ipu_bytes=matrix,
                          ipus=tuple(ipus) if by_ipu else (), always_live_bytes=always, notes=tuple(notes))
    return _with_contributors(table, steps)


def _totals_so_far(per_ipu: Any, count: int, n_ipus: int) -> list[int]:
    """Replica totals of the steps already read per IPU (when a later step has no per-IPU bytes)."""
    import numpy as np

    if not count:
        return []
    return [int(x) for x in np.frombuffer(per_ipu, dtype="int64").reshape(count, n_ipus).sum(axis=1)]


def peak_steps(table: LivenessTable) -> list[int]:
    """The distinct steps at which an IPU (or, without per-IPU figures, the replica) peaks."""
    steps = [table.peak(k)[0] for k in table.ipus] if table.per_ipu else [table.peak()[0]]
    return sorted(set(steps))


def _with_contributors(table: LivenessTable, steps: Any) -> LivenessTable:
    """Labels for the peak steps with the largest variables live there (when libpva has them)."""
    labels = []
    for s in peak_steps(table):
        found: tuple[tuple[str, int], ...] = ()
        try:
            variables = steps[s].notAlwaysLiveMemory.variables
            found = tuple(sorted(((str(v.name), int(v.size)) for v in variables if int(v.size) >= 0),
                                 key=lambda v: -v[1])[:CONTRIBUTORS])
        except (AttributeError, TypeError, IndexError, ValueError):
            found = ()
        labels.append(StepLabel(step=s, contributors=found))
    table.labels = tuple(labels)
    return table


def label_layers(table: LivenessTable, operations: list) -> LivenessTable:
    """``table`` with the layer and operation (PopTorch's debug contexts) running at each labelled
    step: the operation whose programs include the step's program (the first one found)."""
    import dataclasses

    owner: dict[str, Any] = {}
    for op in operations:
        for p in op.programs:
            owner.setdefault(p, op)
    labels = []
    for x in table.labels:
        op = owner.get(table.program(x.step))
        labels.append(dataclasses.replace(x, layer=op.layer, operation=op.name, op_type=op.op_type or None)
                      if op is not None else x)
    table.labels = tuple(labels)
    return table
