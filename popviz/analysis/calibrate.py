"""A real report's layers from an emulator estimate of the same model and split (``popviz plan
--calibrate``): the estimate's per-layer proportions scaled to the measured per-stage figures."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from popviz.analysis.layer_plan import CALIBRATED_NOTE, NO_LAYERS, measured_bytes
from popviz.errors import UsageError

if TYPE_CHECKING:
    from popviz.model import Report


def calibrate(real: Report, estimate: Report) -> Report:
    """``real`` with layers from ``estimate`` (an emulated report of the same model, same split)
    whose cycles and bytes are scaled, stage by stage, to ``real``'s measured per-stage cycles
    and per-IPU memory."""
    from popviz.analysis.pipeline import analyse as pipeline
    from popviz.model import LayerTable

    if estimate.layers is None:
        raise UsageError(f"{estimate.label} (the estimate to calibrate with) {NO_LAYERS}")
    stage_of = [x.stage if x.stage is not None else x.ipu for x in estimate.layers]
    if any(k is None for k in stage_of):
        raise UsageError(f"{estimate.label}: its layers record no stage, so they cannot be matched "
                         "to the measured stages")
    real_stages = pipeline(real).metrics["stages"]
    est_stages = pipeline(estimate).metrics["stages"]
    if not real_stages or any(s.get("cycles") is None for s in real_stages):
        raise UsageError(f"{real.label} has no measured cycles per stage and micro-batch (it needs an "
                         "execution profile and the recorded pipeline configuration)")
    n = max(stage_of) + 1
    if len(real_stages) != n or len(est_stages) != n or any(s.get("cycles") is None for s in est_stages):
        raise UsageError(f"{real.label} has {len(real_stages)} stages and the estimate "
                         f"{estimate.label} {n}: calibrate with an emulated run of the same model "
                         "and split")
    real_mem, est_mem = measured_bytes(real), measured_bytes(estimate)
    cyc = [r["cycles"] / e["cycles"] if e["cycles"] else 1.0
           for r, e in zip(real_stages, est_stages, strict=True)]
    ipu_of = [s["ipu"] for s in real_stages]
    mem = [real_mem[i] / est_mem[i] if real_mem and est_mem and i < min(len(real_mem), len(est_mem))
           and est_mem[i] else 1.0 for i in ipu_of]
    out = [replace(x, fwd_cycles=round(x.fwd_cycles * cyc[k]), bwd_cycles=round(x.bwd_cycles * cyc[k]),
                   recompute_cycles=min(round(x.bwd_cycles * cyc[k]), round(x.recompute_cycles * cyc[k])),
                   weight_bytes=round(x.weight_bytes * mem[k]),
                   optimizer_bytes=round(x.optimizer_bytes * mem[k]),
                   activation_bytes=round(x.activation_bytes * mem[k]),
                   temporary_bytes=round(x.temporary_bytes * mem[k]),
                   recompute_bytes=round(x.recompute_bytes * mem[k]), code_bytes=round(x.code_bytes * mem[k]),
                   **({"accumulator_bytes": round(x.accumulator_bytes * mem[k])}
                      if hasattr(x, "accumulator_bytes") else {}))
           for x, k in zip(estimate.layers, stage_of, strict=True)]
    table = LayerTable(layers=tuple(out), source="calibrated", depth=estimate.layers.depth,
                       micro_batch_size=estimate.layers.micro_batch_size, recomputation=estimate.layers.recomputation,
                       notes=(f"{CALIBRATED_NOTE} (estimate: {estimate.label})",))
    return real.replace(layers=table)
