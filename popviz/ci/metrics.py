"""The flat, named metrics of an engine that CI compares: built from the analyses' metrics
(never recomputed), each with a unit, a direction and whether it is deterministic.

IPU execution is bulk-synchronous: the same program on the same data takes the same cycles, so
cycle and memory figures (from Poplar or from the emulator) do not drift between runs and their
default thresholds are tight. Host wall times are noisy and compared tolerantly.

Names are stable; docs/ci.md lists them. ``{i}`` is a stage index, ``{k}`` an IPU index.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from popviz.analysis.findings import EngineResult

HIGHER_IS_WORSE = "higher_is_worse"
LOWER_IS_WORSE = "lower_is_worse"


@dataclass(frozen=True)
class MetricDef:
    name: str
    unit: str
    """``cycles``, ``bytes``, ``pct`` (0-100), ``ratio``, ``count``, ``seconds`` or
    ``samples_per_second``."""
    direction: str
    deterministic: bool
    description: str


DEFINITIONS: tuple[MetricDef, ...] = (
    MetricDef("pipeline.cycles_per_micro_batch", "cycles", HIGHER_IS_WORSE, True,
              "cycles of the slowest stage per micro-batch (of the busiest IPU when stages share IPUs): "
              "the steady state's pace"),
    MetricDef("pipeline.call_cycles_per_micro_batch", "cycles", HIGHER_IS_WORSE, True,
              "elapsed cycles of the calls per micro-batch, ramp, syncs, copies and weight update "
              "included: the inverse of throughput"),
    MetricDef("pipeline.stage{i}.cycles_per_micro_batch", "cycles", HIGHER_IS_WORSE, True,
              "cycles of stage i per micro-batch"),
    MetricDef("pipeline.imbalance_ratio", "ratio", HIGHER_IS_WORSE, True, "slowest stage / mean stage"),
    MetricDef("pipeline.ramp_efficiency_pct", "pct", LOWER_IS_WORSE, True,
              "share of the pipeline's time with every stage busy"),
    MetricDef("pipeline.utilisation_pct", "pct", LOWER_IS_WORSE, True, "IPU utilisation over a call"),
    MetricDef("memory.ipu{k}.used_bytes", "bytes", HIGHER_IS_WORSE, True, "bytes used on IPU k"),
    MetricDef("memory.ipu{k}.used_pct", "pct", HIGHER_IS_WORSE, True, "IPU k's memory used, % of capacity"),
    MetricDef("memory.max_used_pct", "pct", HIGHER_IS_WORSE, True, "the fullest IPU's used %"),
    MetricDef("memory.fullest_tile_pct", "pct", HIGHER_IS_WORSE, True, "the fullest tile's used % (per-tile reports)"),
    MetricDef("memory.tiles_over_90pct", "count", HIGHER_IS_WORSE, True, "tiles above 90% (per-tile reports)"),
    MetricDef("memory.tiles_overflowing", "count", HIGHER_IS_WORSE, True, "tiles out of memory (per-tile reports)"),
    MetricDef("host_io.stream_copy_pct", "pct", HIGHER_IS_WORSE, True,
              "host transfers' share of the busiest-copying IPU's cycles"),
    MetricDef("host_io.output_bytes_per_call", "bytes", HIGHER_IS_WORSE, True, "bytes returned to the host per call"),
    MetricDef("host_io.input_bytes_per_call", "bytes", HIGHER_IS_WORSE, True, "bytes sent to the IPUs per call"),
    MetricDef("throughput.samples_per_second", "samples_per_second", LOWER_IS_WORSE, True,
              "samples per second of the whole system (estimated for emulated reports)"),
    MetricDef("instances.run_samples_per_second", "samples_per_second", LOWER_IS_WORSE, True,
              "samples per second of a whole PopRun run: the sum of its instances' (each instance's engine)"),
    MetricDef("time.compile_seconds", "seconds", HIGHER_IS_WORSE, False, "compile time (captured runs)"),
    MetricDef("time.call_wall_seconds", "seconds", HIGHER_IS_WORSE, False,
              "median wall time of an executor call (captured runs)"),
)
_BY_NAME = {d.name: d for d in DEFINITIONS}


def definition(name: str) -> MetricDef:
    """The definition of a concrete metric name (``pipeline.stage2.cycles_per_micro_batch`` ->
    the ``stage{i}`` pattern)."""
    found = _definition(name)
    if found is None:
        raise KeyError(name)
    return found


@functools.lru_cache(maxsize=4096)
def _definition(name: str) -> MetricDef | None:
    """:func:`definition` by name, remembered: a history's every value is checked against it
    (10⁵ runs × 40 metrics), with a few hundred names among them."""
    import re

    generic = re.sub(r"\.stage\d+\.", ".stage{i}.", re.sub(r"\.ipu\d+\.", ".ipu{k}.", name))
    return _BY_NAME.get(generic)


def _pct(frac: Any) -> float | None:
    return None if frac is None else 100.0 * float(frac)


def engine_metrics(engine: EngineResult) -> dict[str, float]:
    """Every metric the engine's analyses support, by name (metrics the report cannot give are
    left out, not set to zero)."""
    m = engine.metrics
    out: dict[str, float | None] = {}
    p = m.get("pipeline") or {}
    stages = [s for s in p.get("stages") or [] if s.get("cycles") is not None]
    per_ipu = [r for r in p.get("ipus") or [] if r.get("cycles") is not None]
    if per_ipu:  # stages share IPUs: the busiest IPU sets the pace
        out["pipeline.cycles_per_micro_batch"] = max(float(r["cycles"]) for r in per_ipu)
    elif stages:
        out["pipeline.cycles_per_micro_batch"] = max(float(s["cycles"]) for s in stages)
    for s in stages:
        out[f"pipeline.stage{s['index']}.cycles_per_micro_batch"] = float(s["cycles"])
    out["pipeline.call_cycles_per_micro_batch"] = p.get("call_cycles_per_micro_batch")
    out["pipeline.imbalance_ratio"] = p.get("imbalance_ratio")
    # a memory-only report's ramp weighed by its per-layer model is no share of a call that ran
    out["pipeline.ramp_efficiency_pct"] = (None if p.get("ramp_efficiency_basis") == "model"
                                           else _pct(p.get("ramp_efficiency_frac")))
    out["pipeline.utilisation_pct"] = _pct(p.get("utilisation_frac"))
    mem = m.get("memory") or {}
    ipus = mem.get("ipus") or []
    for row in ipus:
        out[f"memory.ipu{row['ipu']}.used_bytes"] = row.get("used_bytes")
        out[f"memory.ipu{row['ipu']}.used_pct"] = row.get("used_pct")
    if ipus:
        out["memory.max_used_pct"] = max(float(r["used_pct"]) for r in ipus)
        if mem.get("level") == "tile":
            out["memory.fullest_tile_pct"] = max(float(r["max_tile_pct"]) for r in ipus)
            out["memory.tiles_over_90pct"] = sum(int(r["tiles_over_90pct"]) for r in ipus)
            out["memory.tiles_overflowing"] = sum(int(r["tiles_overflowing"]) for r in ipus)
    h = m.get("host_io") or {}
    out["host_io.stream_copy_pct"] = _pct(h.get("stream_copy_frac"))
    out["host_io.output_bytes_per_call"] = h.get("output_bytes_per_call")
    out["host_io.input_bytes_per_call"] = h.get("input_bytes_per_call")
    out["throughput.samples_per_second"] = (m.get("throughput") or {}).get("samples_per_second")
    out["instances.run_samples_per_second"] = (m.get("instances") or {}).get("run_samples_per_second")
    host = engine.report.host_io
    if host is not None and not (engine.report.provenance and engine.report.provenance.estimated):
        out["time.compile_seconds"] = host.compile_seconds
        wall = host.stat("wall_seconds")
        if wall is not None and wall.count:
            out["time.call_wall_seconds"] = wall.p50 if wall.p50 is not None else wall.mean
    return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(float(v))}


def configuration(engine: EngineResult) -> dict[str, Any]:
    """What produced the metrics: the figures a configuration change shows first."""
    r = engine.report
    cfg = r.cfg
    target = r.target
    return {
        "mode": cfg.mode,
        "execution_strategy": cfg.execution_strategy,
        "device_iterations": cfg.device_iterations,
        "gradient_accumulation": cfg.gradient_accumulation,
        "replication_factor": cfg.replication_factor,
        "output_mode": cfg.output_mode,
        "stages": [f"IPU{s.ipu}: {', '.join(s.blocks) or '-'}" for s in cfg.stages],
        "target": (f"{target.architecture} x{target.num_ipus}" if target else None),
        **({"inputs": inputs} if (inputs := _inputs(r)) else {}),
        **({"trainable_parameters": n} if (n := _trainable(r)) is not None else {}),
        **({"layer_ipus": placement} if (placement := _layer_ipus(r)) else {}),
    }


def _trainable(report: Any) -> int | None:
    """Trainable parameters as the capture hooks counted them (``requires_grad``): freezing layers
    explains fewer backward cycles and less optimizer state."""
    model = report.cfg.options.get("model") if report.has("config") else None
    n = model.get("trainable_parameters") if isinstance(model, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None


MAX_INPUTS_LISTED = 8


def _inputs(report: Any) -> str | None:
    """The host inputs per micro-batch (``x 8×1×28×28 float32, y 8 int64``): a different
    micro-batch size or input shape explains changes in bytes, cycles and throughput."""
    from popviz.model.parts import tensors_text

    tensors = report.host_io.inputs if report.host_io is not None else ()
    return tensors_text(tensors, MAX_INPUTS_LISTED)[:500] if tensors else None


def _layer_ipus(report: Any) -> dict[str, int] | None:
    """Each layer's IPU (the report's layer table), when every layer has one: a split compared
    by what runs where, whatever the blocks are called."""
    layers = list(report.layers) if report.layers is not None else []
    if not layers or any(x.ipu is None for x in layers):
        return None
    return {x.name: int(x.ipu) for x in layers}


PLACEMENT_FIELD = "layer_ipus"


def split_change(base: dict[str, Any], new: dict[str, Any]) -> tuple[bool, list[tuple[str, int, int]]]:
    """Whether the split differs between two configurations, and the layers that moved
    (name, IPU before, IPU after). By the IPUs of the layers both sides record (whatever the
    blocks are called); when the layers differ and none of the common ones moved, or a side has
    no layer table, by the stages (IPUs and block names)."""
    a, b = base.get(PLACEMENT_FIELD), new.get(PLACEMENT_FIELD)
    if isinstance(a, dict) and isinstance(b, dict):
        moved = [(k, a[k], b[k]) for k in a if k in b and a[k] != b[k]]
        if moved or a.keys() == b.keys():  # the same layers on the same IPUs: the same split
            return bool(moved), moved
    sa, sb = base.get("stages"), new.get("stages")
    return bool(sa) and bool(sb) and sa != sb, []
