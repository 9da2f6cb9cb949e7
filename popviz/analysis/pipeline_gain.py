"""What PIPE001 says balancing gains: the whole call's throughput gain next to the steady
state's, and the part of the bottleneck stage's cycles no split moves (its IPU's weight update)."""

from __future__ import annotations

from typing import Any

from popviz.analysis._common import pct
from popviz.analysis.thresholds import WEIGHT_UPDATE_NOTE_FRAC
from popviz.model import Report


def update_text(report: Report, st: Any, updates: dict[int, int], total: int) -> str:
    """PIPE001's sentence on the bottleneck IPU's weight update when it is a large share of the
    stage's cycles: it runs once per G micro-batches, outside the pipeline, so no split of the
    layers balances it away; a streamed (off-chip) optimizer state is what makes it long."""
    update = updates.get(st.ipu, 0)
    if not total or update < WEIGHT_UPDATE_NOTE_FRAC * total:
        return ""
    cfg = report.cfg
    g = cfg.gradient_accumulation
    text = (f" {pct(update / total, 0)} of stage {st.index}'s cycles are IPU{st.ipu}'s weight update, run once "
            f"per {f'G = {g}' if g else 'G'} micro-batches after the pipeline drains: balancing the layers "
            "leaves it where it is")
    if cfg.optimizer_state_on_chip is False:
        return text + ("; it streams the optimizer state from off-chip memory: keep the state on chip "
                       "(opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings()"
                       ".useOnChipStorage(True))) if the memory table shows the room, or raise "
                       "gradient accumulation to spread the update over more micro-batches.")
    return text + "; raising gradient accumulation spreads it over more micro-batches."


def call_figures(m: dict, elapsed: float, calls: int, mb: int | None, saved: float | None) -> None:
    """Cycles per micro-batch of the whole calls and, when balancing would save ``saved`` cycles
    (slowest − mean, over the counted calls; None when sharded), the whole call's throughput gain:
    host copies, syncs, the ramp and the weight update stay as they are."""
    if not (mb and elapsed):
        return
    call = m["call_cycles_per_micro_batch"] = elapsed / (calls * mb)
    per_mb = saved / (calls * mb) if saved is not None else 0.0
    if 0 < per_mb < call:
        m["balanced_call_gain_frac"] = call / (call - per_mb) - 1


def gain_pct(frac: float) -> str:
    """A whole call's gain: one decimal below 10% (+2.2%), none above."""
    return pct(frac, 1 if frac < 0.1 else 0)


def balanced_text(m: dict, steady: float, what: str) -> str:
    """The last sentence of PIPE001: the gain in the steady state and, where the profile gives
    the calls' time, for the whole call."""
    call = m.get("balanced_call_gain_frac")
    text = f"Balanced {what} would raise throughput by up to {pct(steady, 0)}"
    if call is None:
        return text + "."
    return (text + f" in the steady state, about +{gain_pct(call)} for the whole call "
            "(its host copies, syncs and ramp stay).")
