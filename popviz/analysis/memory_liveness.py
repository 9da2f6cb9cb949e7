"""The liveness peak of each IPU: the program step where its not-always-live bytes peak, what
runs there (program, layer, operation), always-live vs not-always-live bytes at that step, the
largest variables live there, and, when the peak does not fit (MEM006), what to change there.

Poplar's liveness report is the compiled program's steps in order; the memory an IPU needs at a
step is its always-live bytes (code, weights, constants: live at every step) plus the
not-always-live bytes of that step, so its peak is what must fit (as Graphcore's TensorFlow tests
compute peak liveness: graphcore/tensorflow
``tensorflow/python/ipu/tests/keras/keras_pipeline_recomputation_test.py``).

Part of the memory analysis (``metrics["memory"]["liveness"]``); the levers agree with the
other memory findings (one value per option: :func:`memory_levers.lower_proportion`).
"""

from __future__ import annotations

import re
from typing import Any

from popviz.analysis import memory_levers as ml
from popviz.analysis._common import nbytes, pct
from popviz.analysis.findings import Collector
from popviz.analysis.thresholds import IPU_FULL_FRAC
from popviz.model import Report

SERIALISABLE_OP = re.compile(r"matmul|gemm|conv|embed|gather", re.IGNORECASE)
"""Operation types whose work can be split into serial pieces (poptorch.serializedMatMul,
optimum-graphcore's embedding_serialization_factor)."""
PROPORTION_OP = re.compile(r"matmul|gemm|conv", re.IGNORECASE)
"""Operation types the available memory proportion governs (matmuls and convolutions)."""
CONTRIBUTORS_SHOWN = 3


def peaks(report: Report) -> list[dict[str, Any]] | None:
    """One dict per IPU (the JSON ``memory.liveness`` rows), or None without a liveness table.
    Without per-IPU liveness, one row for the replica (``ipu`` null)."""
    lv = report.liveness
    if lv is None:
        return None
    cap = report.target.bytes_per_ipu if report.target is not None else None
    rows = []
    for k in (lv.ipus if lv.per_ipu else (None,)):
        step, nal = lv.peak(k)
        al = (lv.always_live_bytes.get(k) if k is not None else
              (sum(lv.always_live_bytes.values()) if lv.always_live_bytes else None))
        label = lv.label(step)
        total = al + nal if al is not None else None
        capacity = cap if k is not None else (cap * len(lv.always_live_bytes) if cap and lv.always_live_bytes else None)
        rows.append({
            "ipu": k, "peak_step": step, "steps": len(lv), "program": lv.program(step),
            "layer": label.layer if label else None, "operation": label.operation if label else None,
            "op_type": label.op_type if label else None,
            "always_live_bytes": al, "not_always_live_bytes": nal, "peak_bytes": total,
            "capacity_bytes": capacity,
            "peak_pct": 100 * total / capacity if total is not None and capacity else None,
            "contributors": [{"name": n, "bytes": b} for n, b in (label.contributors if label else ())],
            "contributors_scope": label.contributors_scope if label else None,
        })
    return rows


def analyse(report: Report, o: Collector) -> None:
    """Add the liveness rows to the memory metrics, MEM006 per IPU whose peak is over
    ``IPU_FULL_FRAC`` of its capacity, and a caption line for the fullest peak."""
    rows = peaks(report)
    o.out.metrics["liveness"] = rows
    if rows is None:
        o.skip("liveness peak (step, program, layer)",
               "no liveness steps in this report (libpva's livenessProgramSteps, or an estimate's schedule)")
        return
    lv = report.liveness
    if not lv.per_ipu:
        for note in lv.notes:
            o.skip("liveness per IPU", note)
    est = " (estimated)" if report.provenance.estimated else ""
    for row in rows:
        if row["ipu"] is None or row["peak_pct"] is None or row["peak_pct"] <= 100 * IPU_FULL_FRAC:
            continue
        over = row["peak_bytes"] - row["capacity_bytes"]
        k = row["ipu"]
        where = _where(row)
        title = (f"IPU{k} overflows at liveness step {row['peak_step']:,} ({_short(row)})" if over > 0 else
                 f"IPU{k} peaks at {pct(row['peak_pct'] / 100, 0)} at liveness step {row['peak_step']:,} ({_short(row)})")
        evidence = (f"at step {row['peak_step']:,} of {row['steps']:,} ({where}) IPU{k} needs "
                    f"{nbytes(row['peak_bytes'])}{est}: {nbytes(row['always_live_bytes'])} always live + "
                    f"{nbytes(row['not_always_live_bytes'])} not always live, "
                    + (f"{nbytes(over)} over its {nbytes(row['capacity_bytes'])}" if over > 0 else
                       f"{pct(row['peak_pct'] / 100)} of its {nbytes(row['capacity_bytes'])}")
                    + _contributors(row))
        o.find("MEM006", "error" if over > 0 else "warning", title, evidence, _recommend(report, row))
    full = max((r for r in rows if r["peak_pct"] is not None), key=lambda r: r["peak_pct"], default=None)
    if full is not None:
        who = f"IPU{full['ipu']}" if full["ipu"] is not None else "the replica"
        line = (f"liveness{est}: {len(lv):,} steps; highest peak {who} at step {full['peak_step']:,} "
                f"({_short(full)}): {pct(full['peak_pct'] / 100)} of capacity, "
                f"{pct(full['not_always_live_bytes'] / full['peak_bytes'], 0)} of it not always live")
        o.out.caption = f"{o.out.caption}\n{line}" if o.out.caption else line


def _short(row: dict[str, Any]) -> str:
    """The operation at the peak, else its layer and program, else the program."""
    if row["operation"]:
        return row["operation"]
    return f"{row['layer']}, {row['program']}" if row["layer"] else row["program"]


def _where(row: dict[str, Any]) -> str:
    parts = [f"program {row['program']}"]
    if row["layer"]:
        parts.append(f"layer {row['layer']}")
    if row["operation"]:
        parts.append(f"operation {row['operation']}")
    return ", ".join(parts)


def _contributors(row: dict[str, Any]) -> str:
    items = row["contributors"][:CONTRIBUTORS_SHOWN]
    if not items:
        return ""
    scope = "on all IPUs" if row["contributors_scope"] == "replica" else f"on IPU{row['ipu']}"
    return (f"; largest live there ({scope}): "
            + ", ".join(f"{c['name']} {nbytes(c['bytes'])}" for c in items))


def _recommend(report: Report, row: dict[str, Any]) -> str:
    """What to change at the peak, in the memory findings' words and values."""
    cfg = report.cfg
    k = row["ipu"]
    training = cfg.mode == "training"
    op, layer, op_type = row["operation"], row["layer"], row["op_type"] or ""
    subject = f"the operation {op}" if op else f"the program {row['program']}"
    levers = []
    nal_dominates = row["not_always_live_bytes"] >= row["always_live_bytes"]
    if training and nal_dominates:
        if ml.recomputation_turned_off(report):
            levers.append(ml.RECOMPUTE_BACK_ON)
        elif ml.pipelined(cfg):
            levers.append("recompute more: PopTorch already recomputes each pipeline stage; add "
                          "poptorch.recomputationCheckpoint(x) on layer outputs inside "
                          + (f"{layer} (the layer that peaks)" if layer else f"the stage on IPU{k}")
                          + " so less of its forward is live at once")
        else:
            levers.append(ml.ENABLE_RECOMPUTATION + (f", with poptorch.recomputationCheckpoint(x) on {layer}'s output"
                                                  if layer else ""))
    cur, new, now = ml.lower_proportion(report, k)
    if new < cur and (PROPORTION_OP.search(op_type) or not op_type):
        target = (f"poptorch.set_available_memory(out, {new:g}) on the output of {op}, or "
                  if op and PROPORTION_OP.search(op_type) else "")
        levers.append(f"lower the available memory proportion ({now}) of {subject}: {target}"
                      f"opts.setAvailableMemoryProportion({{\"IPU{k}\": {new:g}}}) for the whole IPU")
    if op and SERIALISABLE_OP.search(op_type):
        levers.append(f"serialise {op}: poptorch.serializedMatMul(lhs, rhs, mode, factor) splits its "
                      "matmul into factor pieces (optimum-graphcore: embedding_serialization_factor "
                      "for an embedding)")
    if training and cfg.optimizer_state_on_chip and not nal_dominates:
        # first: the always-live bytes are most of the peak, which the other levers do not touch
        levers.insert(0, f"{pct(row['always_live_bytes'] / row['peak_bytes'], 0)} of the peak is always live: "
                      "offload the optimizer state with opts.TensorLocations.setOptimizerLocation("
                      "poptorch.TensorLocationSettings().useOnChipStorage(False))")
    if not levers:
        levers.append(f"move blocks off IPU{k} (poptorch.BeginBlock ipu_id): the always-live bytes "
                      "(code, weights) dominate its peak")
    if len(levers) == 1:
        return f"At step {row['peak_step']:,}: " + levers[0] + "."
    return (f"At step {row['peak_step']:,}: " + "; ".join(f"({i}) {lev}" for i, lev in enumerate(levers, 1)) + ".")
