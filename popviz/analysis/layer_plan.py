"""``popviz plan``'s result: a Report's per-layer costs turned into the pipeline split to use.

Pure functions over a Report (no files): the planner's settings from the report (memory of one
IPU from the target, training from the mode, optimizer state offloaded or not, code overhead from
the measured memory), the current split beside the proposed one, the throughput change with the
ramp efficiency, the change as code, and, when nothing fits, why (:func:`planner.explain_no_fit`).
Calibration (:func:`calibrate`) spreads a real report's measured per-stage figures over the
layers in the proportions of an emulator estimate of the same model.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from popviz.analysis import layer_costs, pipeline_time, planner
from popviz.analysis._common import module_expr
from popviz.analysis.planner import DEFAULT_HEADROOM_FRAC, PlanSettings, Shortfall, Split
from popviz.analysis.throughput import small_products_share
from popviz.errors import UsageError
from popviz.model.numbers import reserved_ipus

if TYPE_CHECKING:
    from collections.abc import Sequence

    from popviz.model import Layer, Report
    from popviz.plan_file import PlanFile

DEFAULT_AMP_FRAC = 0.6
"""PopTorch's default available memory proportion (temporaries of matmuls/convolutions)."""
AMP_STEP_FRAC = 0.05
"""Proposed available memory proportions are rounded down to this step."""
CALIBRATED_NOTE = "calibrated: measured per-stage figures spread by the emulator's per-layer proportions"
NO_LAYERS = ("has no per-layer costs; record them by running the model under the emulator: "
             "popviz capture --emulate -o DIR -- python train.py (then popviz plan DIR, or, for a profile "
             "from an IPU, popviz plan REPORT --calibrate DIR)")
COMPILE_FAILED_NOTE = "compilation failed: "
"""How a capture records a failed compile among the report's notes (``capture.recorder``)."""
ERROR_LINE_CHARS = 160
"""The most characters of the one-line error for a report whose compile failed."""


def no_layers(report: Report) -> str:
    """Why ``report`` has no per-layer costs, in one line naming it: its compile failed before
    anything was estimated (the recorded error quoted, shortened to fit the line), or it was not
    run under the emulator."""
    from popviz import escape
    from popviz.model.frames import never_called, not_reached

    if never_called(report) or not_reached(report):
        return (f"{report.label}: no per-layer costs: "
                + ("the script never called it (RUN001)" if never_called(report)
                   else f"it was not reached ({not_reached(report)})")
                + "; capture a run that calls it")
    failed = next((n[len(COMPILE_FAILED_NOTE):] for n in report.provenance.notes
                   if n.startswith(COMPILE_FAILED_NOTE)), None)
    if failed is None or report.memory is not None or report.execution is not None:
        return f"{report.label} {NO_LAYERS}"
    head = f"{report.label}: compile failed before any estimate: "
    tail = "; fix it, capture again"
    error = escape.term(failed.split("': ", 1)[-1].strip())  # "Error: 'kind': message" -> message
    room = ERROR_LINE_CHARS - len(head) - len(tail)
    if len(error) > room:
        error = error[:max(0, room - 1)].rstrip() + "…"
    return head + error + tail


@dataclass
class StageView:
    ipu: int
    first_layer: str
    last_layer: str
    entries: int
    """Entries of the layer table on this IPU (embeddings, heads and the loss included)."""
    layers: int
    """Repeated layers (role ``layer``) on this IPU: optimum-graphcore's ``layers_per_ipu``."""
    cycles: int
    memory_bytes: int
    capacity_bytes: int
    stash_depth: int

    @property
    def memory_pct(self) -> float:
        return 100 * self.memory_bytes / self.capacity_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"ipu": self.ipu, "first_layer": self.first_layer, "last_layer": self.last_layer,
                "entries": self.entries, "layers": self.layers, "cycles": self.cycles,
                "memory_bytes": self.memory_bytes, "memory_pct": round(self.memory_pct, 2),
                "stash_depth": self.stash_depth}


@dataclass
class SplitView:
    stages: list[StageView]
    bottleneck_cycles: int
    fits: bool
    pipeline_stages: int
    """S: 2N - 1 in training, N in inference."""
    ramp_efficiency_frac: float | None
    """G / (G + S - 1) with the report's G (D in inference); None when G is not recorded."""
    micro_batches_per_second: float
    """clock / bottleneck × ramp efficiency (1 when unknown); weight updates and copies aside."""
    fills_pipeline: bool = True
    """False when G (D) is below S: PopTorch refuses to compile such a pipeline."""
    micro_batches: int | None = None
    """G (D) its ramp and rate are for: the report's, or S when the report's is below S (what
    the plan's code then sets; PopTorch refuses fewer)."""

    @property
    def layers_per_ipu(self) -> list[int]:
        return [s.layers for s in self.stages]

    @property
    def entries_per_ipu(self) -> list[int]:
        return [s.entries for s in self.stages]

    def to_dict(self) -> dict[str, Any]:
        return {"ipus": len(self.stages), "layers_per_ipu": self.layers_per_ipu,
                "entries_per_ipu": self.entries_per_ipu, "bottleneck_cycles": self.bottleneck_cycles,
                "fits": self.fits, "pipeline_stages": self.pipeline_stages,
                "ramp_efficiency_frac": self.ramp_efficiency_frac,
                "micro_batches_per_second": self.micro_batches_per_second,
                "fills_pipeline": self.fills_pipeline, "micro_batches": self.micro_batches,
                "stages": [s.to_dict() for s in self.stages]}


@dataclass
class LayerPlan:
    engine: str
    estimated: bool
    layer_source: str
    settings: PlanSettings
    micro_batches: int | None
    """G (training) or D (inference): the micro-batches per ramp."""
    ipus: int
    exact_ipus: bool
    layer_names: list[str]
    layer_roles: list[str]
    notes: list[str] = field(default_factory=list)
    current: SplitView | None = None
    proposed: SplitView | None = None
    by_ipus: dict[int, SplitView | None] = field(default_factory=dict)
    shortfall: Shortfall | None = None
    available_memory_proportion: list[float] | None = None
    """Per IPU of the proposed split, when its memory needs a lower proportion than now."""
    table: tuple[Layer, ...] = ()
    """Every layer of the report's table (``layer_names`` leaves out tied layers folded into
    their partner)."""
    current_ipus: list[int] = field(default_factory=list)
    """The IPUs the report's stages run on, in pipeline order (the plan numbers its own 0..n-1)."""

    @property
    def throughput_change_frac(self) -> float | None:
        if self.current is None or self.proposed is None:
            return None
        return self.proposed.micro_batches_per_second / self.current.micro_batches_per_second - 1

    @property
    def improves(self) -> bool:
        """The proposed split differs from the current one and is faster."""
        change = self.throughput_change_frac
        return (change is not None and change > 1e-9 and self.current is not None
                and self.proposed is not None
                and self.proposed.entries_per_ipu != self.current.entries_per_ipu)

    def placements(self) -> list[tuple[str, int]]:
        """Every layer of the table and its IPU under the proposed split (a tied layer with
        its partner), in execution order."""
        assert self.proposed is not None
        owner = [s.ipu for s in self.proposed.stages for _ in range(s.entries)]
        ipu = dict(zip(self.layer_names, owner, strict=True))
        rows = []
        for x in self.table or ():
            where = ipu.get(x.name, ipu.get(x.tied_to or ""))
            if where is not None:
                rows.append((x.name, where))
        return rows

    def plan_file(self) -> PlanFile:
        """The proposed split as a plan file (``--split FILE``)."""
        from popviz.plan_file import PlanFile

        assert self.proposed is not None
        roles = {x.name: x.role for x in self.table}
        moved = tuple((name, ipu) for name, ipu in self.placements() if roles[name] == "layer")
        return PlanFile(ipus=len(self.proposed.stages), layers_per_ipu=tuple(self.proposed.layers_per_ipu),
                        placements=moved, engine=self.engine, source="popviz plan")

    def to_dict(self) -> dict[str, Any]:
        s = self.settings
        return {
            "engine": self.engine, "estimated": self.estimated, "layer_source": self.layer_source,
            "settings": {"capacity_bytes": s.capacity_bytes, "headroom_frac": s.headroom_frac,
                         "budget_bytes": s.budget_bytes, "training": s.training,
                         "offload_optimizer": s.offload_optimizer, "code_bytes": s.code_bytes,
                         "micro_batches": self.micro_batches},
            "ipus": self.ipus, "exact_ipus": self.exact_ipus, "notes": list(self.notes),
            "current": self.current.to_dict() if self.current else None,
            "proposed": self.proposed.to_dict() if self.proposed else None,
            "throughput_change_frac": self.throughput_change_frac,
            "by_ipus": {str(k): (v.to_dict() if v else None) for k, v in self.by_ipus.items()},
            "available_memory_proportion": self.available_memory_proportion,
            "placements": ([{"layer": n, "ipu": i} for n, i in self.placements()]
                           if self.proposed else None),
            "code": code_dict(self) if self.proposed else None,
            "no_fit": _shortfall_dict(self.shortfall) if self.shortfall else None,
        }


def _shortfall_dict(sf: Shortfall) -> dict[str, Any]:
    return {"entries_per_ipu": sf.split.layers_per_ipu, "budget_bytes": sf.budget_bytes,
            "overflow_bytes": sf.overflow_bytes,
            "memory_bytes_per_ipu": [st.memory_bytes for st in sf.split.stages],
            "overflow_bytes_per_ipu": sf.overflow_bytes_per_ipu,
            "levers": [{"lever": lv.name, "saved_bytes": lv.saved_bytes, "closes_gap": lv.closes_gap,
                        "value": lv.value} for lv in sf.levers]}


# ------------------------------------------------------------------------------------ settings

def micro_batches(report: Report, training: bool) -> int | None:
    cfg = report.cfg
    return cfg.gradient_accumulation if training else cfg.device_iterations


def planned_layers(table: Sequence[Layer], costs: Sequence[planner.LayerCost]) -> list[Layer]:
    """The table's layers the planner's costs stand for, in order (a layer tied to another is
    folded into it by :func:`layer_costs.layer_costs`)."""
    by_name = {x.name: x for x in table}
    return [by_name[c.name] for c in costs]


def current_counts(layers: Sequence[Layer]) -> list[int] | None:
    """Entries per IPU of the current placement, when it is contiguous on IPUs 0, 1, ...
    (None otherwise, e.g. a head placed back on IPU 0)."""
    where = [x.stage if x.stage is not None else x.ipu for x in layers]
    if any(w is None for w in where):
        return None
    counts: list[int] = []
    for w in where:
        if w == len(counts) - 1:
            counts[-1] += 1
        elif w == len(counts):
            counts.append(1)
        else:
            return None
    return counts


def measured_bytes(report: Report) -> list[int] | None:
    if report.memory is None:
        return None
    per = report.memory.per_ipu()
    return [int(v) for v in per.sort_values("ipu")["total_bytes_including_gaps"]]


def settings_for(report: Report, costs: list[planner.LayerCost],
                 headroom_frac: float = DEFAULT_HEADROOM_FRAC) -> tuple[PlanSettings, list[str]]:
    """The planner's settings for ``report`` and what they assume, in words."""
    assert report.layers is not None and report.target is not None
    cfg = report.cfg
    training = cfg.mode == "training" if cfg.mode else any(x.bwd_cycles for x in costs)
    notes = []
    if cfg.mode is None:
        notes.append(f"mode not recorded: planned for {'training' if training else 'inference'}")
    base = PlanSettings(capacity_bytes=report.target.bytes_per_ipu, headroom_frac=headroom_frac,
                        training=training, offload_optimizer=cfg.optimizer_state_on_chip is False,
                        extra_stages=layer_costs.extra_stages(report.layers.layers) if training else 0,
                        pipeline_recompute=training and report.layers.recomputation == "Pipeline")
    counts = current_counts(planned_layers(report.layers, costs))
    measured = measured_bytes(report)
    code = 0
    if counts is not None and measured is not None and len(measured) >= len(counts):
        split = planner.evaluate(costs, counts, base)
        code = max(0, min(m - st.memory_bytes for m, st in zip(measured, split.stages, strict=False)))
        if code:
            from popviz.analysis._common import nbytes

            notes.append(f"code and other fixed memory: {nbytes(code)} per IPU (the smallest gap "
                         "between an IPU's measured memory and its layers' figures)")
    return replace(base, code_bytes=code), notes


# ----------------------------------------------------------------------------------- the plan

def _view(split: Split, report: Report, layers: Sequence[Layer], costs: Sequence[planner.LayerCost],
          settings: PlanSettings, g: int | None) -> SplitView:
    work = pipeline_time.stage_work(costs, split.layers_per_ipu, settings)
    n = len(split.stages)
    forward = len(work)  # one more than the IPUs with a tied projection back on the first IPU
    s = 2 * forward - 1 if settings.training else forward
    assert report.target is not None
    clock = report.target.clock_hz
    fills = g is None or g >= s or n == 1
    g = g if fills else s  # PopTorch refuses G < S: its figures are at the G the plan's code sets
    if g and split.bottleneck_cycles:
        # G micro-batches through the pipeline, ramp-up and ramp-down included; the ramp
        # efficiency is the share of that time the slowest IPU's steady state would take.
        elapsed = pipeline_time.pipeline_cycles(work, g, settings.training)
        eff = min(1.0, g * split.bottleneck_cycles / elapsed) if elapsed else None
        rate = clock * g / elapsed if elapsed else 0.0
    else:
        eff = None
        rate = clock / split.bottleneck_cycles if split.bottleneck_cycles else 0.0
    stages = [StageView(ipu=i, first_layer=layers[st.first].name, last_layer=layers[st.stop - 1].name,
                        entries=st.stop - st.first,
                        layers=sum(x.role == "layer" for x in layers[st.first:st.stop]),
                        cycles=st.cycles, memory_bytes=st.memory_bytes,
                        capacity_bytes=settings.capacity_bytes, stash_depth=st.stash_depth)
              for i, st in enumerate(split.stages)]
    return SplitView(stages, split.bottleneck_cycles, split.fits, s, eff, rate, fills_pipeline=fills,
                     micro_batches=g)


def current_view(report: Report, costs: list[planner.LayerCost] | None = None,
                 settings: PlanSettings | None = None) -> SplitView | None:
    """The current split as the plan models it (None when it is not one run of layers per IPU)."""
    assert report.layers is not None
    costs = costs if costs is not None else layer_costs.layer_costs(report.layers)
    settings = settings if settings is not None else settings_for(report, costs)[0]
    kept = planned_layers(report.layers, costs)
    counts = current_counts(kept)
    return None if counts is None else _view(planner.evaluate(costs, counts, settings), report, kept, costs,
                                             settings, micro_batches(report, settings.training))


def report_stage_ipus(report: Report) -> list[int]:
    """The IPUs of the report's pipeline stages in order, each once."""
    return list(dict.fromkeys(s.ipu for s in report.cfg.stages if s.ipu is not None))


def _as_reported(report: Report, now: SplitView) -> str | None:
    """The report's own figures for the current split beside the model's (they differ by what
    the model leaves out), so that plan and analyse never show two numbers for one thing
    unexplained."""
    from popviz.analysis._common import num
    from popviz.errors import PopvizError

    parts = []
    # the plan numbers its stages' IPUs 0..n-1; the report's may skip one (blocks on 0, 2, 3)
    ids = report_stage_ipus(report)
    index = {ipu: k for k, ipu in enumerate(ids)} if len(ids) == len(now.stages) else {}
    with contextlib.suppress(PopvizError, KeyError, ValueError):
        ipc = report.ipu_cycles()
        if len(ipc):
            top = ipc.loc[ipc["cycles_per_micro_batch"].idxmax()]
            ipu = int(top["ipu"])
            model = {st.ipu: st.cycles for st in now.stages}.get(index.get(ipu, ipu))
            parts.append(f"IPU{ipu} {num(round(float(top['cycles_per_micro_batch'])))} cycles/µb"
                         + (f" (model {num(model)})" if model is not None else ""))
    with contextlib.suppress(PopvizError, KeyError, ValueError):
        mem = report.memory_by_ipu()
        if len(mem) and mem["used_pct"].notna().any():
            top = mem.loc[mem["used_pct"].idxmax()]
            ipu = int(top["ipu"])
            model_pct = {st.ipu: st.memory_pct for st in now.stages}.get(index.get(ipu, ipu))
            parts.append(f"IPU{ipu} {float(top['used_pct']):.1f}% full"
                         + (f" (model {model_pct:.1f}%)" if model_pct is not None else ""))
    with contextlib.suppress(PopvizError, KeyError, ValueError, TypeError):
        # the analysis weighs the ramps by the trace's time; the plan by its own pipeline model
        from popviz.analysis.cycles import ramp_hidden_by_host
        from popviz.model.frames import analysis_metrics

        pm = analysis_metrics(report, "pipeline")
        hidden = ramp_hidden_by_host(pm)  # analyse then shows the count bound, as here
        eff = pm.get("ramp_efficiency_count_frac" if hidden else "ramp_efficiency_frac")
        if eff is not None and now.ramp_efficiency_frac is not None:
            parts.append(f"ramp efficiency {100 * eff:.1f}%{' (count bound)' if hidden else ''} "
                         f"(model {100 * now.ramp_efficiency_frac:.1f}%: the fill and drain of G micro-batches "
                         "weighed by its stage cycles, where the trace also has host copies and syncs; it "
                         "rates both splits so)")
    if not parts:
        return None
    return ("now, as the report (and popviz analyse) has it: " + "; ".join(parts)
            + ". The model's cycles leave out inter-IPU copies and syncs, the same on both sides of the "
            "comparison")


def make_plan(report: Report, *, ipus: int | None = None, max_ipus: int | None = None,
              headroom_frac: float = DEFAULT_HEADROOM_FRAC, explain: bool = True) -> LayerPlan:
    """The plan for ``report`` on exactly ``ipus`` IPUs, or on the best N in 1..``max_ipus``
    (default: exactly the IPUs of the current split, else of the target). When nothing fits,
    ``shortfall`` says why and a note quotes the report's own figures beside the model's (unless
    ``explain`` is False: the findings' hints need neither)."""
    if report.layers is None:
        raise UsageError(no_layers(report))
    if report.target is None:
        raise UsageError(f"{report.label} records no target (IPU memory unknown): "
                         "a report from popviz capture or the emulator has it")
    if not 0 < headroom_frac <= 1:
        raise UsageError(f"--headroom {headroom_frac} must be in (0, 1], e.g. 0.9")
    table = report.layers
    costs = layer_costs.layer_costs(table)
    settings, notes = settings_for(report, costs, headroom_frac)
    notes = [*table.notes, *notes]
    share = small_products_share(report) if report.provenance.estimated else None
    if share is not None:
        notes.append(f"the estimate is likely pessimistic: {share:.0%} of its operation cycles are small matmuls or "
                     "convolutions, which public hardware traces ran several times faster, so the slowest stage "
                     "here may not be the slowest on an IPU (docs/emulator.md, B10: the estimate picked the "
                     "Linear stage, the trace shows the convolution stages); check a split on hardware")
    g = micro_batches(report, settings.training)
    if g is None:
        notes.append(f"{'gradient accumulation' if settings.training else 'device iterations'} not "
                     "recorded: throughput compares the slowest stages only (no ramp)")
    kept = planned_layers(table, costs)
    revisit = layer_costs.revisited_ipu(kept)
    if revisit is not None:
        name, back, before = revisit
        raise UsageError(f"{report.label}: its layers go back to IPU {back} at {name} after IPU {before} (a "
                         "forward that revisits its IPUs, e.g. a student then a teacher, or an encoder then a "
                         "decoder, over the same IPUs); popviz plan proposes one contiguous run of layers per "
                         "IPU and would change that structure, so it does not plan this model: balance its "
                         "blocks from the per-stage cycles `popviz analyse` shows")
    counts = current_counts(kept)
    exact = max_ipus is None
    n = max_ipus or ipus or (len(counts) if counts else report.target.ipus_per_replica)
    out = LayerPlan(engine=report.label, estimated=report.provenance.estimated or table.source != "debug_context",
                    layer_source=table.source, settings=settings, micro_batches=g, ipus=n,
                    exact_ipus=exact, layer_names=[x.name for x in kept],
                    layer_roles=[x.role for x in kept], notes=notes, table=tuple(table),
                    current_ipus=report_stage_ipus(report))
    if counts is not None:
        out.current = current_view(report, costs, settings)
        as_reported = _as_reported(report, out.current) if explain else None
        if as_reported:
            out.notes.append(as_reported)
    elif any(x.ipu is not None for x in table):
        out.notes.append("the current placement is not one contiguous run of layers per IPU: it is "
                         "not compared")
    if n > len(costs) and not exact:  # --max-ipus N tries 1..N: those the layers allow
        out.notes.append(f"--max-ipus {n}: {len(costs)} layers fill at most {len(costs)} IPUs (one layer "
                         f"per IPU), so 1 to {len(costs)} are tried")
        n = out.ipus = len(costs)
    if n > len(costs):
        raise UsageError(f"{n} IPUs for {len(costs)} layers: at most {len(costs)} (one layer per IPU)")
    if exact:
        most = planner.most_ipus(costs, n, settings)
        if most < n:
            pins = ", ".join(f"{x.name} ({x.pin})" for x in table if x.pin)
            raise UsageError(f"{n} IPUs: the pinned layers ({pins}) leave room for at most {most} "
                             f"stages; pass --ipus {most} or --max-ipus {n}")
    if report.cfg.execution_strategy == "ShardedExecution":
        notes.append("the model runs sharded (one IPU busy at a time): balance only pays off "
                     "pipelined (PipelinedExecution), which this plan assumes")
    result = planner.plan(costs, n, settings, exact_n=exact)
    tied_back = any(c.tail_fwd_cycles or c.tail_bwd_cycles for c in costs)
    for k, split in sorted(result.by_ipus.items()):
        if split is not None and g and tied_back:
            split = pipeline_time.refine(costs, split, settings, g)
        out.by_ipus[k] = _view(split, report, kept, costs, settings, g) if split else None
    fitting = [v for v in out.by_ipus.values() if v is not None]
    if fitting:
        # The fastest in micro-batches per second (ramp included); fewer IPUs on a tie; a
        # pipeline deeper than G (D) only when no other fits (PopTorch rejects it: G must grow).
        out.proposed = max(fitting, key=lambda v: (v.fills_pipeline, round(v.micro_batches_per_second, 6),
                                                   -len(v.stages)))
        if not out.proposed.fills_pipeline:
            letter = "G" if settings.training else "D"
            out.notes.append(f"{letter} = {g} is below the proposed pipeline's S = "
                             f"{out.proposed.pipeline_stages} stages: PopTorch rejects that; raise {letter} "
                             f"to {out.proposed.pipeline_stages} or more (the code below does; its ramp and "
                             f"rate are at {letter} = {out.proposed.pipeline_stages})")
        out.available_memory_proportion = _amp(out, report, costs)
    elif explain:
        out.shortfall = planner.explain_no_fit(costs, n, settings, float16=_float16(report, settings))
    return out


def _float16(report: Report, settings: planner.PlanSettings) -> str | None:
    """What ``model.half()`` halves of a float32 model's weights (the no-fit lever), as MEM005
    sizes it: the parameters, and the gradient accumulators too unless the optimizer names their
    accumulator type (float32 by default in PopTorch); None for a model not known to be float32."""
    from popviz.analysis.model_precision import accumulators_typed, precision

    if precision(report) != "float32":
        return None
    return "params" if settings.training and accumulators_typed(report) else "all"


def _amp(out: LayerPlan, report: Report, costs: list[planner.LayerCost]) -> list[float] | None:
    """Per IPU: the available memory proportion that leaves room for its temporaries beside
    everything else it holds, where the current one (PopTorch's 0.6 by default) would not."""
    assert out.proposed is not None
    s = out.settings
    props = []
    needed = False
    for st in out.proposed.stages:
        first = sum(x.entries for x in out.proposed.stages[:st.ipu])
        temp = planner.stage_temporary_bytes(costs, s, first, first + st.entries)
        free = (s.budget_bytes - (st.memory_bytes - temp)) / s.capacity_bytes
        now = report.cfg.available_memory_proportion.get(st.ipu, DEFAULT_AMP_FRAC)
        if free < now:
            needed = True
            props.append(max(AMP_STEP_FRAC, math.floor(round(free / AMP_STEP_FRAC, 6)) * AMP_STEP_FRAC))
        else:
            props.append(now)
    return [round(p, 2) for p in props] if needed else None


# --------------------------------------------------------------------------------------- code

def code_dict(plan: LayerPlan) -> dict[str, Any]:
    """The proposed split as PopTorch and optimum-graphcore code."""
    assert plan.proposed is not None
    # A block starts wherever execution moves to another IPU: each stage's first module, and a
    # part that runs back on an earlier IPU (a projection tied to the embeddings on IPU0).
    lines = []
    previous = None
    for name, ipu in plan.placements():
        if ipu != previous:
            expr = module_expr(name)
            lines.append(f"{expr} = poptorch.BeginBlock({expr}, ipu_id={ipu})")
        previous = ipu
    amp = plan.available_memory_proportion
    cfg = f"IPUConfig(layers_per_ipu={plan.proposed.layers_per_ipu}, ipus_per_replica={len(plan.proposed.stages)}"
    cfg += f", matmul_proportion={amp})" if amp else ")"
    popart_amp = ("opts.setAvailableMemoryProportion({"
                  + ", ".join(f'"IPU{i}": {p}' for i, p in enumerate(amp)) + "})") if amp else None
    n = len(plan.proposed.stages)
    # PopTorch reserves IPUs in powers of two: 3 IPUs per replica need it to round up to 4
    auto_round = (f"opts.autoRoundNumIPUs(True)  # {n} IPUs: PopTorch reserves {reserved_ipus(n)}"
                  if reserved_ipus(n) != n else None)
    depth = None
    if not plan.proposed.fills_pipeline:  # PopTorch needs G (D) >= the pipeline's stages
        setter = "opts.Training.gradientAccumulation" if plan.settings.training else "opts.deviceIterations"
        depth = (f"{setter}({plan.proposed.pipeline_stages})  # at least the {plan.proposed.pipeline_stages} "
                 "pipeline stages")
    return {"begin_block": lines, "ipu_config": cfg, "available_memory_proportion": popart_amp,
            "auto_round_num_ipus": auto_round, "pipeline_depth": depth,
            "split_argument": "layers_per_ipu=" + ",".join(map(str, plan.proposed.layers_per_ipu))}


# ------------------------------------------------------------------------- hint for findings

HINT_CODES = ("PIPE001", "MEM001", "MEM003", "MEM004", "MEM005")
"""Findings whose action names the plan's gain when ``popviz plan`` finds a better split."""


def plan_hint(report: Report) -> dict[str, Any] | None:
    """What ``popviz plan`` would propose for ``report``, when it has layers and the proposed
    split is faster than the current one or fits where the current one does not; else None."""
    return plan_outcome(report)[0]


def plan_outcome(report: Report) -> tuple[dict[str, Any] | None, str | None]:
    """``(hint, best_already)``: the hint of :func:`plan_hint`, or, when the current split fits
    and no split of the report's layers is faster, a sentence saying so (PIPE001 then cannot be
    fixed by moving whole layers)."""
    from popviz.errors import PopvizError

    if report.layers is None or report.target is None:
        return None, None
    try:
        plan = make_plan(report, explain=False)
    except (PopvizError, ValueError):
        return None, None
    if plan.proposed is None or plan.current is None:
        return None, None
    change = plan.throughput_change_frac or 0.0
    rescue = not plan.current.fits
    if not (plan.improves or rescue):
        units = layer_costs.units_text(plan.layer_roles)
        return None, (f"`popviz plan` finds no faster split of the report's {units} that fits (the "
                      "current one is the best at layer granularity); split a layer across blocks (a "
                      "BeginBlock inside it) or make the bottleneck's layers cheaper")
    if rescue and any(st.memory_bytes > plan.settings.capacity_bytes for st in plan.current.stages):
        # the current split cannot run at all: its throughput is only the model's
        rel = (f"{abs(100 * change):.0f}% {'faster' if change > 0 else 'slower'} than the current split would be"
               if round(100 * change) else "as fast as the current split would be")
        text = (f"`popviz plan` finds a split within {plan.settings.headroom_frac:.0%} of each IPU's "
                f"memory (the current one does not fit at all), {rel}")
    elif rescue:
        text = (f"`popviz plan` finds a split within {plan.settings.headroom_frac:.0%} of each IPU's "
                f"memory (the current one is not), at {100 * change:+.0f}% throughput")
    else:
        text = f"`popviz plan` finds a split with +{100 * change:.0f}% throughput that fits"
    text += f": layers_per_ipu={plan.proposed.layers_per_ipu}"
    if plan.available_memory_proportion:  # its cycles leave out what the lower proportions cost
        text += (f" with available memory proportions {plan.available_memory_proportion} (their slower matmuls "
                 "are not in that figure)")
    return {"command": "popviz plan", "throughput_gain_frac": change, "fits": True,
            "current_fits": plan.current.fits, "layers_per_ipu": plan.proposed.layers_per_ipu,
            "estimated": plan.estimated, "text": text}, None

