"""Stage cycles measured by Lightweight Profiling blocks, where the profile has them.

The detailed execution profile keeps one execution per program and is largely simulated (Graph
Analyser docs; graphcore/tutorials ``tutorials/popvision/lightweight_profiling/README.md``): the
blocks are the hardware's own start/end cycles of each execution of a ``Block`` program. Where
every stage's IPU has blocks, the pipeline analysis takes each IPU's work per micro-batch from
them (:meth:`popviz.model.measured.BlockTable.per_micro_batch`) and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from popviz.model import Report

STEPS_BASIS = "execution steps"
BLOCKS_BASIS = "lightweight profiling blocks"


def per_ipu_cycles(report: Report, per_ipu: pd.Series, ipus: list[int], calls: int,
                   micro_batches: int | None) -> tuple[pd.Series, str, str | None]:
    """(cycles per IPU over the counted calls, basis, caption line): the blocks' measured cycles
    per micro-batch times the micro-batches of the counted calls where every IPU in ``ipus`` has
    blocks and the micro-batches per call are known, else ``per_ipu`` (from the steps)."""
    blocks = report.blocks
    if blocks is None and report.provenance.source == "pva":
        return per_ipu, STEPS_BASIS, ("stage cycles from the execution steps: no Lightweight Profiling blocks "
                                      "in this profile (popviz capture --lwp measures them)")
    if blocks is None or not micro_batches:
        return per_ipu, STEPS_BASIS, None
    measured = blocks.per_micro_batch()
    if any(i not in measured for i in ipus):
        lacking = ", ".join(f"IPU{i}" for i in ipus if i not in measured)
        return per_ipu, STEPS_BASIS, (f"stage cycles from the execution steps: the Lightweight Profiling "
                                      f"blocks measure no block on {lacking}")
    out = per_ipu.copy().astype("float64")
    for i in ipus:
        out[i] = measured[i][0] * calls * micro_batches
    counts = sorted({measured[i][1] for i in ipus})
    return out, BLOCKS_BASIS, (f"stage cycles measured by Lightweight Profiling blocks ({len(blocks.frame):,} "
                               f"blocks; {'/'.join(f'{c:,}' for c in counts)} executions per IPU), not the "
                               "execution steps")
