"""Achieved efficiency: the model's FLOPs per cycle as a fraction of the IPU's peak, per stage
and per layer.

FLOPs are the layer table's (``Layer.fwd_flops`` and, in training, ``Layer.bwd_flops``: the
products and convolutions the emulator measured, their backward counted as the cost model counts
it; on a measured profile, those the capture hooks counted on the model,
:mod:`popviz.sources.layer_flops`), so they are model FLOPs: a recomputed forward is work the cycles include but the FLOPs do not.
Cycles are per micro-batch: a stage's from the pipeline analysis (what its IPU executed), a
layer's its ``fwd_cycles + bwd_cycles``. The peak is the datasheet's for the report's architecture
and the model's precision (:mod:`popviz.model.ipu_peak`, :mod:`popviz.analysis.model_precision`),
over every tile of one IPU. A figure above 100% would mean FLOPs and cycles that cannot both be
right: it is not shown; the analysis says why and the pipeline analysis flags it (PIPE006).
"""

from __future__ import annotations

from typing import Any

from popviz.analysis._common import pct
from popviz.analysis.findings import Collector
from popviz.analysis.model_precision import precision
from popviz.model import Report
from popviz.model.ipu_peak import flops_per_tile_cycle
from popviz.model.layers import FLOPS_NOTE

CHECK = "achieved efficiency"


def _frac(flops: int, cycles: float | None, peak: float) -> float | None:
    if cycles is None or cycles <= 0:
        return None
    return flops / cycles / peak


FLOPS_SOURCES = {"emulator": "emulator", "calibrated": "estimate", "debug_context": "capture"}
"""Where a layer table's FLOPs come from, by its source: the emulator's count, an estimate's
(calibrated onto a measured profile), or the capture hooks' count on the model
(:mod:`popviz.sources.layer_flops`) beside a real profile's measured cycles."""
CAPTURE_BASIS = "FLOPs counted by the capture hooks on the model; cycles measured"


def _basis(estimated: bool, flops_source: str) -> str:
    if flops_source == "capture":
        return CAPTURE_BASIS
    return "FLOPs and cycles estimated" if estimated else "FLOPs estimated; cycles measured"


def _missing(report: Report) -> str:
    """Why the layer table has no FLOPs: its own FLOPs note where it has one."""
    layers = report.layers
    notes = [n for n in (layers.notes if layers is not None else ()) if n.startswith(FLOPS_NOTE)]
    if notes:
        return f"no FLOPs per layer: {notes[-1][len(FLOPS_NOTE):]}"
    return "no FLOPs per layer in this report"


def achieved(report: Report, stage_rows: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """(metrics, reason): the ``efficiency`` figures, or None and why they are not given.

    ``stage_rows`` are the pipeline analysis's stages (``index`` and ``cycles`` per micro-batch,
    None where unknown)."""
    figures, reason, _over = check(report, stage_rows)
    return figures, reason


def check(report: Report, stage_rows: list[dict[str, Any]]
          ) -> tuple[dict[str, Any] | None, str | None, list[dict[str, Any]]]:
    """:func:`achieved`, and the stages and layers whose FLOPs and cycles would put them above the
    IPU's peak (``what``, ``flops``, ``cycles``, ``frac``): then no figure is given."""
    layers = report.layers
    if layers is None or any(x.fwd_flops is None for x in layers):
        return None, _missing(report), []
    if report.target is None:
        return None, "no target recorded: the IPU's peak is unknown", []
    prec = precision(report)
    if prec is None:
        return None, "the model's precision is not recorded: its peak is unknown", []
    per_tile = flops_per_tile_cycle(report.target.architecture, prec)
    if per_tile is None:
        return None, f"no peak FLOPs known for a {report.target.architecture} IPU", []
    peak = per_tile * report.target.tiles_per_ipu
    training = report.cfg.mode == "training"
    backward = training and all(x.bwd_flops is not None for x in layers)

    def flops_of(x) -> int:
        return x.fwd_flops + (x.bwd_flops if backward else 0)

    def cycles_of(x) -> int:
        return x.fwd_cycles + (x.bwd_cycles if backward else 0)

    layer_rows = [{"name": x.name, "stage": x.stage, "flops": flops_of(x), "cycles": cycles_of(x),
                   "frac": _frac(flops_of(x), cycles_of(x), peak)} for x in layers]
    by_stage: dict[int, int] = {}
    for x in layers:
        if x.stage is not None:
            by_stage[x.stage] = by_stage.get(x.stage, 0) + flops_of(x)
    stages = []
    for row in stage_rows:
        # forward only (inference, or no backward FLOPs): the stage's cycles hold more than its forward
        cycles = row.get("cycles") if backward or not training else None
        flops = by_stage.get(row["index"])
        if flops is None:
            continue
        stages.append({"index": row["index"], "flops": flops, "cycles": cycles,
                       "frac": _frac(flops, cycles, peak)})
    over = [{"what": f"stage {s['index']}", **s} for s in stages if s["frac"] is not None and s["frac"] > 1]
    over += [{"what": f"layer {r['name']}", **r} for r in layer_rows if r["frac"] is not None and r["frac"] > 1]
    if over:
        return None, (f"{', '.join(x['what'] for x in over[:3])} would exceed the IPU's peak: the report's "
                      "FLOPs and cycles disagree"), over
    source = FLOPS_SOURCES.get(layers.source, "emulator")
    return {"estimated": report.provenance.estimated, "architecture": report.target.architecture,
            "precision": prec, "peak_flops_per_cycle": peak,
            "flops_counted": "forward+backward" if backward else "forward",
            "flops_estimated": source != "capture",
            "flops_source": source, "basis": _basis(report.provenance.estimated, source),
            "stages": stages, "layers": layer_rows}, None, []


def collect(report: Report, o: Collector) -> None:
    """The pipeline analysis's part: the ``efficiency`` metrics and their console line, or a
    not-checked line saying why not, and PIPE006 when FLOPs and cycles would exceed the peak."""
    figures, reason, over = check(report, o.out.metrics["stages"])
    o.out.metrics["efficiency"] = figures
    if figures is None:
        if report.layers is not None or report.provenance.source == "pva":  # else nothing to say it of
            o.skip(CHECK, reason or "")
        if over:  # above the peak, FLOPs or cycles are wrong
            o.find("PIPE006", "warning", *inconsistency(report, over))
        return
    line = caption(figures)
    o.out.caption = f"{o.out.caption}\n{line}" if o.out.caption else line


def inconsistency(report: Report, over: list[dict[str, Any]]) -> tuple[str, str, str]:
    """Title, evidence and recommendation of PIPE006: stages or layers (from :func:`check`) whose
    FLOPs per cycle would exceed the IPU's peak, which cannot be."""
    shown = "; ".join(f"{x['what']}: {x['flops']:,} FLOPs in {x['cycles']:,.0f} cycles per micro-batch = "
                      f"{pct(x['frac'], 0)}" for x in over[:3])
    more = f" (and {len(over) - 3} more)" if len(over) > 3 else ""
    prec = precision(report)
    if report.layers is not None and report.layers.source == "debug_context":
        fix = ("The FLOPs the capture hooks counted and the profile's cycles do not describe the same work: "
               "check that the debug contexts' layers are the modules the hooks counted (popviz-model.json's "
               "flops.modules, one micro-batch) and that the recorded D·G is the run's (cycles per micro-batch "
               "divide by it); capture the run again with popviz capture.")
    else:
        fix = ("The estimate's FLOPs and cycles disagree: a cost-model error. Report it to popviz with the "
               "report directory.")
    return ("Achieved efficiency above the IPU's peak: FLOPs and cycles are inconsistent",
            f"{shown}{more}, over the {report.target.architecture} {prec} peak; no efficiency figure is shown",
            fix)


def caption(eff: dict[str, Any]) -> str:
    """The console line: each stage's efficiency and the range over layers."""
    label = "estimated " if eff["estimated"] else ""
    if eff.get("flops_source") == "capture":
        head = (f"{label}achieved efficiency ({eff['flops_counted']} FLOPs counted by the capture hooks / "
                f"{eff['architecture']} {eff['precision']} peak; cycles measured):")
    else:
        flops = "estimated FLOPs" if eff["flops_estimated"] and not eff["estimated"] else "FLOPs"
        head = (f"{label}achieved efficiency ({eff['flops_counted']} {flops} / {eff['architecture']} "
                f"{eff['precision']} peak):")
    parts = [f"stage {s['index']} {share_text(s['frac'])}" for s in eff["stages"] if s["frac"] is not None]
    rated = [r for r in eff["layers"] if r["frac"] is not None and r["flops"] > 0]
    if rated:
        best = max(rated, key=lambda r: r["frac"])
        parts.append(f"layers up to {share_text(best['frac'])} ({best['name']})")
    return f"{head} {', '.join(parts) or 'no compute counted'}"


def share_text(frac: float) -> str:
    """A share of the peak as printed: one decimal below 10%, none above."""
    return pct(frac, 1 if frac < 0.1 else 0)


__all__ = ["CAPTURE_BASIS", "CHECK", "FLOPS_SOURCES", "achieved", "caption", "check", "collect", "inconsistency", "share_text"]
