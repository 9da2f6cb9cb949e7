"""Pipeline balance: cycles per stage, the bottleneck, ramp efficiency, sharded utilisation.

Per-stage cycles are source-independent: the ``OnTileExecute`` and ``DoExchange`` cycles of the
stage's IPU, summed over the runs that are executor calls and divided by the micro-batches those
calls processed. Every micro-batch passes every stage exactly once, ramp-up and ramp-down
included, so this equals the work a stage does in one steady-state pipeline cycle. Syncs (waiting),
inter-IPU copies (``GlobalExchange``) and host transfers (``StreamCopy*``) are not stage work and
are not counted. docs/analyses.md lists the limits.
"""

from __future__ import annotations

from typing import Any

from popviz.analysis import efficiency as eff
from popviz.analysis import pipeline_blocks as pblocks
from popviz.analysis import pipeline_gain as pg
from popviz.analysis._common import ceil_exact, num, pct
from popviz.analysis.cycles import (
    decompose,
    ramp_hidden_by_host,
    shares_line,
    sync_floor_cycles,
    weight_update_cycles,
)
from popviz.analysis.findings import AnalysisOutput, Collector
from popviz.analysis.thresholds import (
    IMBALANCE_WARN_RATIO,
    RAMP_EFFICIENCY_TARGET_FRAC,
    RAMP_EFFICIENCY_WARN_FRAC,
    TIE_FRAC,
)
from popviz.analysis.throughput import pessimistic_caution
from popviz.model import ModelConfig, Report
from popviz.model.aggregate import cycle_totals
from popviz.model.frames import compile_failed, no_execution_reason, unrun_reason
from popviz.model.numbers import reserved_ipus, tied_for_most

NAME = "pipeline"
SLOWEST_STAGE_CAUTION = ("small products are overcharged, so check which stage is slowest on hardware before "
                         "moving blocks (docs/emulator.md, B10: the estimate picked its Linear stage, the trace "
                         "shows the convolution stages)")
COUNTED_TYPES = ("OnTileExecute", "DoExchange")
"""Program types counted as a stage's work."""
PHASED = ("SerialPhasedExecution", "ParallelPhasedExecution")
INFERRED_KEYS = ("mode", "execution_strategy", "stages", "gradient_accumulation", "device_iterations")
"""Configuration fields these metrics rest on that may have been inferred from the profile."""
CAPTURE_HINT = "record it with `popviz capture -- python train.py`"


def empty_metrics(cfg: ModelConfig) -> dict[str, Any]:
    return {
        "mode": cfg.mode,
        "strategy": cfg.execution_strategy,
        "num_stages": cfg.num_stages or None,
        "pipeline_stages": None,
        "counted_program_types": list(COUNTED_TYPES),
        "calls_counted": None,
        "micro_batches_per_call": None,
        "stages": [],
        "imbalance_ratio": None,
        "bottleneck_stage": None,
        "bottleneck_ipu": None,
        "balance_basis": None,
        "ipus": [],
        "idle_frac_other_ipus": None,
        "balanced_gain_frac": None,
        "balanced_call_gain_frac": None,
        "utilisation_frac": None,
        "ramp_efficiency_frac": None,
        "ramp_efficiency_basis": None,
        "ramp_efficiency_count_frac": None,
        "ramp_target_frac": RAMP_EFFICIENCY_TARGET_FRAC,
        "micro_batches_for_target": None,
        "pipelining_speedup_ratio": None,
        "cycle_shares": None,
        "call_cycles_per_micro_batch": None,
        "rebalance_to_ipu": None,
        "stage_cycles_basis": None,
        "inferred": [k for k in INFERRED_KEYS if cfg.is_inferred(k)],
        "efficiency": None,
    }


def ramp_efficiency(micro_batches: int, pipeline_stages: int) -> float:
    """G / (G + S - 1): the share of pipeline cycles in which the pipeline is full."""
    return micro_batches / (micro_batches + pipeline_stages - 1)


def micro_batches_for(target_frac: float, pipeline_stages: int) -> int:
    """The smallest G with G / (G + S - 1) >= target_frac."""
    return max(pipeline_stages, ceil_exact(target_frac * (pipeline_stages - 1), 1 - target_frac))


def micro_batches_for_time(target_frac: float, g: int, eff: float, pipeline_stages: int) -> int:
    """The smallest G' reaching ``target_frac`` time-weighted: the ramp time per weight update
    stays the same while the steady-state work grows with G, so eff(G') = G'w / (G'w + R) with
    R/w = G (1 - eff) / eff measured at the current G."""
    ramp_per_work = g * (1 - eff) / eff
    need = ceil_exact(target_frac * ramp_per_work, 1 - target_frac)
    return max(pipeline_stages, g + 1, need)


def _micro_batches_per_call(cfg: ModelConfig) -> int | None:
    d = cfg.device_iterations
    if cfg.mode == "training":
        g = cfg.gradient_accumulation
        return d * g if d is not None and g is not None else None
    if cfg.mode == "inference":
        return d
    return None


def _blocks(stage) -> str:
    return ", ".join(stage.blocks) or f"stage {stage.index}"


def analyse(report: Report) -> AnalysisOutput:
    cfg = report.cfg
    o = Collector(NAME, empty_metrics(cfg))
    m = o.out.metrics
    unrun = unrun_reason(report)
    if unrun is not None and not compile_failed(report):  # a failed compile's options still tell (PIPE002)
        o.skip("pipeline checks", unrun)
        return o.out
    if not report.has("config"):
        if report.target is not None and report.target.ipus_per_replica == 1:
            o.skip("pipeline checks", "the model runs on one IPU: there are no stages to balance "
                   "and no pipeline to fill")
        else:
            o.skip("stage balance, ramp efficiency, sharding",
                   "no configuration recorded (execution strategy, stages, batching); record it by "
                   "running under `popviz capture` or `popviz emulate`")
        return o.out
    if cfg.inferred and not cfg.stages:
        o.skip("stage balance, ramp efficiency", "no configuration recorded, and the profile has no "
               f"execution to infer the stages from (out-of-memory compile?); {CAPTURE_HINT}")
        return o.out
    strategy = cfg.execution_strategy
    if strategy in PHASED:
        o.skip("stage balance, ramp efficiency", f"{strategy} is not analysed by popviz yet "
               "(phases run one after another, not as a pipeline)")
        return o.out
    if cfg.num_stages == 0 and strategy is not None:
        o.skip("stage balance, ramp efficiency", f"{strategy} is set but no stages are recorded; the "
               "stage to IPU map is needed")
        return o.out
    if len(cfg.stage_ipus) <= 1:
        where = f"IPU{cfg.stage_ipus[0]}" if cfg.stage_ipus else "one IPU"
        how = "with no execution strategy" if strategy is None else f"({strategy}, every stage there)"
        if cfg.stage_ipus:  # one stage on IPU2 still needs IPUs 0 to 2 reserved
            _power_of_two(report, o)
        o.skip("pipeline checks", f"the model runs on {where} {how}: there are no stages to balance "
               "and no pipeline to fill")
        return o.out
    pipelined = strategy == "PipelinedExecution"
    _power_of_two(report, o)
    _stage_cycles(report, o, pipelined)
    if pipelined:
        _ramp(report, o)
    if m["imbalance_ratio"] is not None:
        _table(report, o)
    if strategy == "ShardedExecution":
        _sharded(report, o)
    m["num_stages"] = cfg.num_stages
    eff.collect(report, o)  # achieved FLOPs per cycle against the IPU's peak
    line = getattr(o, "blocks_line", None)
    if line:
        o.out.caption = f"{o.out.caption}\n{line}" if o.out.caption else line
    o.out.findings.sort(key=lambda f: f.code)  # balance (PIPE001) before ramp (PIPE003)
    return o.out


# ------------------------------------------------------------------------------- IPU count

def _power_of_two(report: Report, o: Collector) -> None:
    """PIPE005: PopTorch reserves IPUs in powers of two and refuses a model whose process would
    use 3 (popart_compiler CompilerImpl.cpp) unless ``autoRoundNumIPUs(True)``, an offline target
    or the IPU Model. Checked only where the capture recorded the option (a profile from hardware
    cannot have such a count)."""
    cfg = report.cfg
    other = cfg.options.get("other") if isinstance(cfg.options.get("other"), dict) else {}
    if other.get("auto_round_num_ipus") is not False or other.get("connection_type") == 2 or other.get("use_model"):
        return
    per_replica = max(cfg.stage_ipus) + 1
    processes = max(1, int(other.get("Distributed.num_distributed_processes") or 1))
    local = max(1, (cfg.replication_factor or 1) // processes)
    n = per_replica * local
    rounded = reserved_ipus(n)
    if rounded == n:
        return
    o.find("PIPE005", "error", f"{n} IPUs: PopTorch reserves IPUs in powers of two and refuses this",
           f"the stages use IPU0 to IPU{per_replica - 1} ({per_replica} IPUs per replica × {local} replica(s) "
           f"in the process = {n}); PopTorch must reserve {rounded} and, with autoRoundNumIPUs off, stops at "
           f"compile (\"The model specifies the use of {n} IPUs, however PopTorch must reserve a minimum of "
           f"{rounded}…\")",
           f"Set opts.autoRoundNumIPUs(True) ({rounded} IPUs reserved, {rounded - n} idle), or place the blocks "
           "on a power-of-two number of IPUs (`popviz plan --ipus N` splits the layers).")


# ------------------------------------------------------------------------------------------- ramp

def _ramp(report: Report, o: Collector) -> None:
    cfg = report.cfg
    m = o.out.metrics
    n = cfg.num_stages
    if cfg.mode not in ("training", "inference"):
        o.skip("ramp efficiency", "mode (training or inference) not recorded")
        return
    training = cfg.mode == "training"
    s = 2 * n - 1 if training else n
    m["pipeline_stages"] = s
    g = cfg.gradient_accumulation if training else cfg.device_iterations
    what = "gradient accumulation" if training else "device iterations"
    if g is None:
        if cfg.is_inferred("mode") and training:
            o.skip("D vs G split", "the micro-batches per call are not split into device iterations "
                   "and gradient accumulation: the profile names no weight-update program, so "
                   f"neither can be inferred; {CAPTURE_HINT}")
        o.skip("ramp efficiency", f"{what} not recorded"
               + (" nor inferable from the profile" if cfg.inferred else ""))
        return
    count_eff = ramp_efficiency(g, s)
    shares = m["cycle_shares"]
    timed = shares is not None and shares["ramp_efficiency_frac"] is not None
    modelled = None if timed or g < s else _modelled_ramp(report)
    eff = shares["ramp_efficiency_frac"] if timed else modelled if modelled is not None else count_eff
    if (timed or modelled is not None) and eff < RAMP_EFFICIENCY_TARGET_FRAC:
        target = micro_batches_for_time(RAMP_EFFICIENCY_TARGET_FRAC, g, eff, s)
    elif timed or modelled is not None:
        target = g
    else:
        target = micro_batches_for(RAMP_EFFICIENCY_TARGET_FRAC, s)
    m["ramp_efficiency_frac"] = eff
    m["ramp_efficiency_basis"] = "time" if timed else "model" if modelled is not None else "count"
    if modelled is not None and not o.out.caption:
        o.out.caption = (f"ramp efficiency {pct(eff)} weighed by the estimate's per-layer cycles (no execution "
                         f"profile; S = {s}; count bound {'G' if training else 'D'}/({'G' if training else 'D'}+S-1) "
                         f"{pct(count_eff)})")
    m["ramp_efficiency_count_frac"] = count_eff
    m["micro_batches_for_target"] = target
    letter = "G" if training else "D"
    setter = ("opts.Training.gradientAccumulation({})" if training
              else "opts.deviceIterations({})")
    depth = (f"S = 2N - 1 = {s} pipeline stages for N = {n} forward stages" if training
             else f"S = N = {s} pipeline stages")
    if g < s:
        o.find("PIPE002", "error", f"{what.capitalize()} below the pipeline depth: PopTorch rejects this",
               f"{letter} = {g} < {depth}; PopTorch refuses to compile a pipeline that cannot be filled "
               f"({what} must be at least {s})",
               f"Set {setter.format(s)} or more; {setter.format(target)} reaches "
               f"{pct(RAMP_EFFICIENCY_TARGET_FRAC, 0)} ramp efficiency.")
        return
    host = report.host_io
    if (report.execution is None and report.memory is None and host is not None
            and host.compile_seconds is None and not host.calls):
        why = ("its compile failed; the error is in the capture's summary and log" if host.compile_error
               else "no profile, no compile time and no call recorded")
        o.skip("ramp efficiency", f"this engine never compiled ({why}): no pipeline ran to fill or drain")
        return
    if eff < RAMP_EFFICIENCY_TARGET_FRAC:
        severity = "warning" if eff < RAMP_EFFICIENCY_WARN_FRAC else "info"
        lost = s - 1
        batch_note = (" The global batch grows with G: keep it by lowering the micro-batch size, "
                      "or retune the learning rate." if training else
                      " Each call then consumes more samples (the DataLoader given the same options "
                      "follows).")
        if timed:
            how = (f"the bottleneck IPU{shares['bottleneck_ipu']} works {pct(eff)} of the time it is not "
                   f"copying (time-weighted ramp efficiency; the count bound {letter}/({letter}+S-1) "
                   f"is {pct(count_eff)})")
        elif modelled is not None:
            how = (f"the slowest stage works {pct(eff)} of the time (ramp efficiency weighed by the "
                   f"per-layer cycles of this estimate, as popviz plan does: no execution profile; the "
                   f"count bound {letter}/({letter}+S-1) is {pct(count_eff)})")
        else:
            how = (f"ramp efficiency {letter}/({letter}+S-1) = {pct(eff)} (a bound counted in pipeline "
                   "cycles: no execution profile to weigh them by time)")
        o.find("PIPE003", severity, f"Low pipeline ramp efficiency: {pct(eff)}",
               f"{letter} = {g} micro-batches per {'weight update' if training else 'call'} take "
               f"{letter} + S - 1 = {g + s - 1} pipeline cycles ({depth}); {lost} of them only fill "
               f"or drain the pipeline: {how}",
               f"Set {setter.format(target)} to reach {pct(RAMP_EFFICIENCY_TARGET_FRAC, 0)} "
               f"({letter} = {target}).{batch_note}")


# ------------------------------------------------------------------------------------ stage cycles

def _stage_cycles(report: Report, o: Collector, pipelined: bool) -> None:
    cfg = report.cfg
    m = o.out.metrics
    stages = cfg.stages
    check = "stage cycles and balance"
    m["stages"] = [{**s.to_dict(), "cycles": None, "total_cycles": None, "idle_frac": None}
                   for s in stages]
    shared = sorted({s.ipu for s in stages if sum(t.ipu == s.ipu for t in stages) > 1})
    if report.execution is None:
        o.skip(check, f"no execution profile in this report ({no_execution_reason(report)}): cycles per "
               "stage are unknown")
        return
    totals_of = cycle_totals(report.execution)
    runs = totals_of.calls()
    if not runs:
        o.skip(check, "no run in the execution profile executes on-tile compute")
        return
    by_type = totals_of.by_ipu_type(runs)
    part = by_type[by_type["program_type"].isin(COUNTED_TYPES)]
    per_ipu = part.groupby("ipu")["cycles"].sum()
    missing = [s for s in stages if int(per_ipu.get(s.ipu, 0)) <= 0]
    if missing:
        o.skip(check, "the execution profile has no compute on "
               + ", ".join(f"IPU{s.ipu} (stage {s.index})" for s in missing))
        return
    per_ipu, m["stage_cycles_basis"], line = pblocks.per_ipu_cycles(
        report, per_ipu, sorted({s.ipu for s in stages}), len(runs), _micro_batches_per_call(cfg))
    o.blocks_line = line  # type: ignore[attr-defined]  # added to the caption once it is written
    if shared:
        _ipu_balance(report, o, pipelined, shared, per_ipu, runs, by_type)
        return
    m["bottleneck_ipu"] = None  # set below with the stage
    totals = [int(per_ipu[s.ipu]) for s in stages]
    calls = len(runs)
    mb = _micro_batches_per_call(cfg)
    m["calls_counted"] = calls
    m["micro_batches_per_call"] = mb
    per_mb = [t / (calls * mb) for t in totals] if mb else [None] * len(totals)
    biggest = max(totals)
    mean = sum(totals) / len(totals)
    b = totals.index(biggest)
    # Idle share of each stage's IPU in the steady state: a pipeline cycle lasts as long as the
    # slowest stage; sharded stages run one after another, so a micro-batch takes their sum.
    sharded = cfg.execution_strategy == "ShardedExecution"
    span = sum(totals) if sharded else biggest
    idle = [1 - t / span for t in totals]
    for row, t, c, i in zip(m["stages"], totals, per_mb, idle, strict=True):
        row.update(cycles=c, total_cycles=t, idle_frac=i)
    others = [i for k, i in enumerate(idle) if k != b]
    elapsed = totals_of.elapsed(runs)
    ipus = cfg.stage_ipus
    m.update(imbalance_ratio=biggest / mean, bottleneck_stage=stages[b].index, bottleneck_ipu=stages[b].ipu,
             balance_basis="stage",
             idle_frac_other_ipus=sum(others) / len(others), balanced_gain_frac=biggest / mean - 1,
             utilisation_frac=sum(totals) / (len(ipus) * elapsed) if elapsed else None)
    if sharded:
        m["pipelining_speedup_ratio"] = sum(totals) / biggest
    updates = weight_update_cycles(report.execution, runs)
    m["cycle_shares"] = decompose(by_type, list(ipus), elapsed,
                                  updates,
                                  sync_floor_cycles(report.execution, runs), _remote(report, runs))
    pg.call_figures(m, elapsed, calls, mb, None if sharded else biggest - mean)
    ratio = biggest / mean
    if pipelined and ratio >= IMBALANCE_WARN_RATIO:
        st = stages[b]
        # Work moves towards the least loaded stage; when it is not a neighbour (the neighbour is
        # as busy, e.g. two stages tie as the slowest), every boundary in between shifts.
        to = min((k for k in range(len(stages)) if k != b), key=lambda k: (totals[k], abs(k - b)))
        ties = [k for k, t in enumerate(totals) if k != b and t >= biggest * (1 - TIE_FRAC)]
        m["rebalance_to_ipu"] = stages[to].ipu
        tie_text = (f" (stage{'s' if len(ties) > 1 else ''} {', '.join(str(stages[k].index) for k in ties)}"
                    f" {'are' if len(ties) > 1 else 'is'} as slow)" if ties else "")
        if abs(to - b) == 1:
            where = (f"into stage {stages[to].index} (IPU{stages[to].ipu}, {pct(idle[to], 0)} idle): "
                     "move its poptorch.BeginBlock(layer, ipu_id=...) boundary by a layer or more")
        else:
            where = (f"towards stage {stages[to].index} (IPU{stages[to].ipu}, {pct(idle[to], 0)} idle, the "
                     f"least loaded): shift each poptorch.BeginBlock(layer, ipu_id=...) boundary between "
                     f"stage {st.index} and stage {stages[to].index} by a layer or more")
        unit = "cycles per micro-batch" if mb else "cycles in the profile"
        values = per_mb if mb else totals
        shed = values[b] - sum(values) / len(values)
        guess = (f"; {cfg.inferred['stages']}, as no capture manifest records them"
                 if cfg.is_inferred("stages") else "")
        o.find("PIPE001", "warning",
               f"Unbalanced pipeline: stage {st.index} (IPU{st.ipu}) is the bottleneck",
               f"stage {st.index}{f' ({_blocks(st)})' if st.blocks else ''} takes {num(round(values[b]))} {unit}{tie_text}, "
               f"{ratio:.2f}× the mean over {len(stages)} stages ({num(round(sum(values) / len(values)))});"
               f" the other IPUs idle {pct(sum(others) / len(others))} of each pipeline cycle "
               f"(counted: {' + '.join(COUNTED_TYPES)}){guess}",
               f"Move about {num(round(shed))} {unit} ({pct(shed / values[b], 0)} of its work) out of "
               f"stage {st.index} {where} (optimum-graphcore: layers_per_ipu). "
               + pg.balanced_text(m, ratio - 1, "stages") + pg.update_text(report, st, updates, totals[b])
               + pessimistic_caution(report, SLOWEST_STAGE_CAUTION))


def _remote(report: Report, runs: list[int]) -> dict[int, int]:
    """Per IPU, stream-copy cycles that move remote buffers (streaming memory), not host data."""
    from popviz.analysis.host_streams import split

    return {ipu: d["remote"] for ipu, d in (split(report, runs) or {}).items()}


def _shared_names(stages, ipu: int) -> str:
    return " and ".join(str(s.index) for s in stages if s.ipu == ipu)


def _ipu_balance(report: Report, o: Collector, pipelined: bool, shared: list[int], per_ipu,
                 runs: list[int], by_type) -> None:
    """Balance per IPU when stages share an IPU: the profile's cycles are per IPU, and an IPU runs
    each of its stages in every pipeline cycle, so the busiest IPU sets the pipeline's pace."""
    cfg = report.cfg
    m = o.out.metrics
    stages = cfg.stages
    ipus = cfg.stage_ipus
    totals = [int(per_ipu[i]) for i in ipus]
    calls = len(runs)
    mb = _micro_batches_per_call(cfg)
    m["calls_counted"] = calls
    m["micro_batches_per_call"] = mb
    per_mb = [t / (calls * mb) for t in totals] if mb else [None] * len(totals)
    biggest = max(totals)
    mean = sum(totals) / len(totals)
    b = totals.index(biggest)
    sharded = cfg.execution_strategy == "ShardedExecution"
    span = sum(totals) if sharded else biggest
    idle = [1 - t / span for t in totals]
    m["ipus"] = [{"ipu": i, "stages": [s.index for s in stages if s.ipu == i], "cycles": c,
                  "total_cycles": t, "idle_frac": f}
                 for i, t, c, f in zip(ipus, totals, per_mb, idle, strict=True)]
    by_ipu = {row["ipu"]: row for row in m["ipus"]}
    for row in m["stages"]:  # a stage alone on its IPU has the IPU's cycles; shared ones stay unknown
        if row["ipu"] not in shared:
            ipu_row = by_ipu[row["ipu"]]
            row.update(cycles=ipu_row["cycles"], total_cycles=ipu_row["total_cycles"],
                       idle_frac=ipu_row["idle_frac"])
    others = [f for k, f in enumerate(idle) if k != b]
    totals_of = cycle_totals(report.execution)
    elapsed = totals_of.elapsed(runs)
    on_b = [s for s in stages if s.ipu == ipus[b]]
    m.update(imbalance_ratio=biggest / mean, bottleneck_ipu=ipus[b], balance_basis="ipu",
             bottleneck_stage=on_b[0].index if len(on_b) == 1 else None,
             idle_frac_other_ipus=sum(others) / len(others), balanced_gain_frac=biggest / mean - 1,
             utilisation_frac=sum(totals) / (len(ipus) * elapsed) if elapsed else None)
    if sharded:
        m["pipelining_speedup_ratio"] = sum(totals) / biggest
    updates = weight_update_cycles(report.execution, runs)
    m["cycle_shares"] = decompose(by_type, list(ipus), elapsed,
                                  updates,
                                  sync_floor_cycles(report.execution, runs), _remote(report, runs))
    pg.call_figures(m, elapsed, calls, mb, None if sharded else biggest - mean)
    names = ", ".join(f"IPU{i} (stages {_shared_names(stages, i)})" for i in shared)
    o.skip("cycles of each stage", f"stages share an IPU: {names}; the profile's cycles are per "
           "IPU, so they cannot be split between those stages: balance is measured per IPU (an IPU "
           "runs each of its stages in every pipeline cycle)")
    ratio = biggest / mean
    if not (pipelined and ratio >= IMBALANCE_WARN_RATIO):
        return
    ipu = ipus[b]
    to = min((k for k in range(len(ipus)) if k != b), key=lambda k: (totals[k], abs(k - b)))
    m["rebalance_to_ipu"] = ipus[to]
    unit = "cycles per micro-batch" if mb else "cycles in the profile"
    values = per_mb if mb else totals
    shed = values[b] - sum(values) / len(values)
    ties = [k for k, t in enumerate(totals) if k != b and t >= biggest * (1 - TIE_FRAC)]
    tie_text = (f" (IPU{', IPU'.join(str(ipus[k]) for k in ties)} {'are' if len(ties) > 1 else 'is'} as slow)"
                if ties else "")
    runs_what = (f"stages {_shared_names(stages, ipu)}" if len(on_b) > 1 else f"stage {on_b[0].index}")
    blocks = "; ".join(f"{s.index}: {_blocks(s)}" for s in on_b if s.blocks)
    o.find("PIPE001", "warning",
           f"Unbalanced pipeline: IPU{ipu} ({runs_what}) is the bottleneck",
           f"IPU{ipu} runs {runs_what}{f' ({blocks})' if blocks else ''}: {num(round(values[b]))} "
           f"{unit}{tie_text}, {ratio:.2f}× the mean over {len(ipus)} IPUs "
           f"({num(round(sum(values) / len(values)))}); the other IPUs idle "
           f"{pct(sum(others) / len(others))} of each pipeline cycle (counted per IPU, as stages "
           f"share IPUs: {' + '.join(COUNTED_TYPES)})",
           f"Move about {num(round(shed))} {unit} ({pct(shed / values[b], 0)} of its work) off IPU{ipu} "
           f"towards IPU{ipus[to]} ({pct(idle[to], 0)} idle, the least loaded): shift the "
           f"poptorch.BeginBlock(layer, ipu_id=...) boundaries so IPU{ipu} runs fewer layers, keeping "
           f"parts tied to it in place (optimum-graphcore: layers_per_ipu). "
           + pg.balanced_text(m, ratio - 1, "IPUs") + pessimistic_caution(report, SLOWEST_STAGE_CAUTION))


def _table(report: Report, o: Collector) -> None:
    import pandas as pd

    stages = report.cfg.stages
    m = o.out.metrics
    per_ipu = m["balance_basis"] == "ipu"
    rows = m["ipus"] if per_ipu else m["stages"]
    per_mb = [row["cycles"] for row in rows]
    totals = [row["total_cycles"] for row in rows]
    idle = [row["idle_frac"] for row in rows]
    marked = m["imbalance_ratio"] > 1.0
    has_mb = per_mb[0] is not None
    col = "cycles/micro-batch" if has_mb else "cycles (profile)"
    values = [round(v) for v in per_mb] if has_mb else totals
    # every row tied for the most cycles is the bottleneck (as the figures and Report.stage_cycles mark it)
    known = [k for k, t in enumerate(totals) if t is not None]
    tied = {k for k, t in zip(known, tied_for_most([totals[k] for k in known]), strict=True) if t}
    if per_ipu:
        b = [row["ipu"] for row in rows].index(m["bottleneck_ipu"])
        tied = tied or {b}
        o.out.table = pd.DataFrame({
            "IPU": [f"{row['ipu']}{' ◀' if k in tied and marked else ''}" for k, row in enumerate(rows)],
            "stages": [", ".join(map(str, row["stages"])) for row in rows],
            "blocks": ["; ".join(_blocks(s) for s in stages if s.ipu == row["ipu"]) for row in rows],
            col: pd.array(values, dtype="int64"),
            "idle %": [round(100 * i, 1) for i in idle],
        })
    else:
        b = [s.index for s in stages].index(m["bottleneck_stage"])
        tied = tied or {b}
        o.out.table = pd.DataFrame({
            "stage": [f"{s.index}{' ◀' if k in tied and marked else ''}" for k, s in enumerate(stages)],
            "IPU": [s.ipu for s in stages],
            "blocks": [_blocks(s) for s in stages],
            col: pd.array(values, dtype="int64"),
            "idle %": [round(100 * i, 1) for i in idle],
        })
    parts = [f"{'◀ bottleneck · ' if marked else ''}imbalance {m['imbalance_ratio']:.2f} (max/mean"
             + (" over IPUs: stages share IPUs)" if per_ipu else ")")]
    if report.cfg.execution_strategy == "PipelinedExecution" and marked:
        call = m.get("balanced_call_gain_frac")
        # What a call gains first: the stages' own gain ignores the host copies, syncs and ramp.
        parts.append(f"balanced: up to +{pg.gain_pct(call)} per call (+{pct(m['balanced_gain_frac'], 0)} for the "
                     "stages alone)" if call is not None else
                     f"balanced: up to +{pct(m['balanced_gain_frac'], 0)} throughput")
    if m["utilisation_frac"] is not None:
        parts.append(f"IPU utilisation {pct(m['utilisation_frac'], 0)}")
    lines = [" · ".join(parts)]
    if m["cycle_shares"] is not None:
        lines.append(shares_line(m["cycle_shares"], report.cfg.execution_strategy == "ShardedExecution"))
    if m["ramp_efficiency_frac"] is not None:
        letter = "G" if report.cfg.mode == "training" else "D"
        basis = {"time": "time-weighted", "model": "weighed by the per-layer estimate"}.get(
            m["ramp_efficiency_basis"], "counted")
        reach = (f"{letter} = {m['micro_batches_for_target']} reaches {pct(RAMP_EFFICIENCY_TARGET_FRAC, 0)}"
                 if m["ramp_efficiency_frac"] < RAMP_EFFICIENCY_TARGET_FRAC else
                 f"count bound {letter}/({letter}+S-1) {pct(m['ramp_efficiency_count_frac'])}")
        if ramp_hidden_by_host(m):
            # the bottleneck's waits while the pipeline fills coincide with the other IPUs' host
            # copies, and the breakdown counts them as host time: its time-weighted figure (near
            # 100%) would read as no ramp at all, so the count bound is shown
            lines.append(f"ramp efficiency: the count bound {letter}/({letter}+S-1) is "
                         f"{pct(m['ramp_efficiency_count_frac'])} (S = {m['pipeline_stages']}); in this call the "
                         "ramp's waits overlap host transfers and count there")
        else:
            lines.append(f"ramp efficiency {pct(m['ramp_efficiency_frac'])} {basis} "
                         f"(S = {m['pipeline_stages']}; {reach})")
    calls = m["calls_counted"]
    lines.append(f"counted: {' + '.join(COUNTED_TYPES)} over {calls} call{'s' if calls != 1 else ''}")
    o.out.caption = "\n".join(lines)


def _modelled_ramp(report: Report) -> float | None:
    """Without an execution profile, the current split's time-weighted ramp efficiency from the
    report's per-layer cycles (an estimate's layer table), as ``popviz plan`` computes it: with
    one stage much slower than the others the count bound G/(G+S-1) is far too low."""
    if report.execution is not None or report.layers is None or report.target is None:
        return None
    from popviz.analysis import layer_plan
    from popviz.errors import PopvizError

    try:
        view = layer_plan.current_view(report)
    except (PopvizError, ValueError):
        return None
    return view.ramp_efficiency_frac if view is not None else None


# ---------------------------------------------------------------------------------------- sharded

def _sharded(report: Report, o: Collector) -> None:
    cfg = report.cfg
    m = o.out.metrics
    n = cfg.num_stages
    ipus = len(cfg.stage_ipus)
    util = m["utilisation_frac"]
    speedup = m["pipelining_speedup_ratio"]
    evidence = (f"ShardedExecution runs the {n} stages one after another, so one of the {ipus} IPUs "
                f"works at a time: ")
    if util is not None:
        evidence += f"IPU utilisation {pct(util)} (at most {pct(1 / ipus)} even if balanced)"
    else:
        evidence += f"utilisation at most {pct(1 / ipus)} (no execution profile to measure it)"
    training = cfg.mode == "training"
    need = f"gradientAccumulation ≥ {2 * n - 1}" if training else f"deviceIterations ≥ {n}"
    rec = "Pipeline the same stages: opts.setExecutionStrategy(poptorch.PipelinedExecution(...))"
    if speedup is not None:
        rec += f"; with the measured stage cycles a full pipeline gives up to {speedup:.1f}× the throughput"
        g = cfg.gradient_accumulation if training else cfg.device_iterations
        s = 2 * n - 1 if training else n
        if g is not None and g >= s:
            rec += (f" ({speedup * ramp_efficiency(g, s):.1f}× at the current "
                    f"{'G' if training else 'D'} = {g} after ramp-up and ramp-down)")
    rec += f". It needs {need}"
    rec += (" and memory for the activations stashed by the earlier stages." if training else ".")
    o.find("PIPE004", "warning", "Sharded execution: one IPU works at a time", evidence, rec)
