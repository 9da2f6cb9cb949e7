"""The three analyses on Reports built with popviz.testing, with exact expected numbers.

The numbers follow from the builder rules in docs/testing.md: a forward stage costing c cycles per
micro-batch costs 2c backward, each weight update c/2, so a training stage's work per micro-batch is
3c + (c/2)/G.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from popviz import testing
from popviz.analysis import host_io, memory, pipeline, thresholds
from popviz.model import ExecutionTable, ModelConfig, Provenance, Report, Stage
from popviz.model.aggregate import RunCycles, cycle_totals

ROOT = Path(__file__).resolve().parent.parent
TILE = 638_976  # Mk2 bytes per tile


def codes(out, severity=None):
    return [f.code for f in out.findings if severity is None or f.severity == severity]


def only(out, code):
    [f] = [f for f in out.findings if f.code == code]
    return f


# -------------------------------------------------------------------------------------- pipeline

def test_one_stage_three_times_the_others():
    r = testing.pipeline_report([1000, 3000, 1000, 1000], gradient_accumulation=64,
                                blocks=[["embed"], ["layer1-4"], ["layer5-8"], ["head"]])
    out = pipeline.analyse(r)
    m = out.metrics
    # per micro-batch: 3c + (c/2)/64
    assert [s["cycles"] for s in m["stages"]] == [3007.8125, 9023.4375, 3007.8125, 3007.8125]
    assert [s["total_cycles"] for s in m["stages"]] == [192_500, 577_500, 192_500, 192_500]
    assert m["micro_batches_per_call"] == 64 and m["calls_counted"] == 1
    assert m["bottleneck_stage"] == 1
    assert m["imbalance_ratio"] == 2.0
    assert m["balanced_gain_frac"] == 1.0
    assert m["idle_frac_other_ipus"] == pytest.approx(2 / 3)
    assert [round(s["idle_frac"], 6) for s in m["stages"]] == [0.666667, 0.0, 0.666667, 0.666667]
    assert m["counted_program_types"] == ["OnTileExecute", "DoExchange"]
    assert codes(out) == ["PIPE001"]  # G = 64: ramp efficiency 64/70 = 91.4%, no PIPE003
    f = only(out, "PIPE001")
    assert f.severity == "warning"
    assert "stage 1 (IPU1)" in f.title
    assert "stage 1 (layer1-4) takes 9,023 cycles per micro-batch, 2.00× the mean over 4 stages (4,512)" \
        in f.evidence
    assert "idle 66.7% of each pipeline cycle" in f.evidence
    assert "Move about 4,512 cycles per micro-batch (50% of its work) out of stage 1 into stage 0" \
        in f.recommendation
    assert "poptorch.BeginBlock" in f.recommendation and "up to 100%" in f.recommendation
    assert list(out.table.columns) == ["stage", "IPU", "blocks", "cycles/micro-batch", "idle %"]
    assert out.table["cycles/micro-batch"].tolist() == [3008, 9023, 3008, 3008]
    assert out.table["stage"].tolist() == ["0", "1 ◀", "2", "3"]


def test_an_unbalanced_likely_pessimistic_estimate_says_to_check_the_slowest_stage_on_hardware():
    import dataclasses

    r = testing.pipeline_report([1000, 3000, 1000, 1000], gradient_accumulation=64, source="emulator",
                                estimated=True)
    assert "pessimistic" not in only(pipeline.analyse(r), "PIPE001").recommendation
    r.config = dataclasses.replace(r.cfg, options={"emulator": {"small_products_share": 0.6}})
    assert only(pipeline.analyse(r), "PIPE001").recommendation.endswith(
        " The estimate is likely pessimistic (see throughput): small products are overcharged, so check which "
        "stage is slowest on hardware before moving blocks (docs/emulator.md, B10: the estimate picked its "
        "Linear stage, the trace shows the convolution stages).")


def test_balanced_pipeline_has_no_pipeline_warning():
    out = pipeline.analyse(testing.pipeline_report([1000] * 4, gradient_accumulation=64))
    m = out.metrics
    assert m["imbalance_ratio"] == 1.0 and m["balanced_gain_frac"] == 0.0
    # time-weighted: host copies dominate these small stages, the ramp costs little time
    assert m["ramp_efficiency_count_frac"] == 64 / 70 and m["ramp_efficiency_basis"] == "time"
    assert round(m["ramp_efficiency_frac"], 4) == 0.9846
    assert out.findings == []
    assert "◀" not in "".join(out.table["stage"])


def test_gradient_accumulation_below_pipeline_depth_is_an_error():
    out = pipeline.analyse(testing.pipeline_report([200_000] * 4, gradient_accumulation=6))
    m = out.metrics
    assert m["pipeline_stages"] == 7
    assert m["ramp_efficiency_count_frac"] == 0.5 and round(m["ramp_efficiency_frac"], 4) == 0.6705
    assert codes(out) == ["PIPE002"]  # the error replaces the ramp warning
    f = only(out, "PIPE002")
    assert f.severity == "error"
    assert "G = 6 < S = 2N - 1 = 7 pipeline stages for N = 4 forward stages" in f.evidence
    assert "opts.Training.gradientAccumulation(7)" in f.recommendation
    assert "opts.Training.gradientAccumulation(27) reaches 90%" in f.recommendation


def test_gradient_accumulation_equal_to_depth_has_low_efficiency():
    out = pipeline.analyse(testing.pipeline_report([200_000] * 4, gradient_accumulation=7))
    m = out.metrics
    assert m["ramp_efficiency_count_frac"] == 7 / 13
    # ramp time is the same per weight update: 0.9/0.1 × 7 × (1 - 0.7036)/0.7036 -> 27
    assert round(m["ramp_efficiency_frac"], 4) == 0.7036
    assert m["micro_batches_for_target"] == 27
    f = only(out, "PIPE003")
    assert f.severity == "warning" and f.title == "Low pipeline ramp efficiency: 70.4%"
    assert "G + S - 1 = 13 pipeline cycles" in f.evidence
    assert "the count bound G/(G+S-1) is 53.8%" in f.evidence
    assert "opts.Training.gradientAccumulation(27)" in f.recommendation
    assert "PIPE002" not in codes(out)


@pytest.mark.parametrize("g,expected", [(10, ["warning"]), (12, ["info"]), (24, ["info"]), (64, [])])
def test_ramp_efficiency_thresholds(g, expected):
    # S = 7, time-weighted: G = 10 77.2% < 80% warning; 12 80.3% and 24 89.1% info; 64 95.6% none
    out = pipeline.analyse(testing.pipeline_report([200_000] * 4, gradient_accumulation=g))
    assert [f.severity for f in out.findings if f.code == "PIPE003"] == expected


def test_micro_batches_for_target_is_exact():
    for s, expected in [(1, 1), (3, 18), (7, 54), (15, 126)]:
        assert pipeline.micro_batches_for(0.9, s) == max(s, expected)
        g = pipeline.micro_batches_for(0.9, s)
        assert pipeline.ramp_efficiency(g, s) >= 0.9
        assert g == s or pipeline.ramp_efficiency(g - 1, s) < 0.9


def test_pipelined_inference_with_too_few_device_iterations():
    out = pipeline.analyse(testing.pipeline_report([1000] * 4, mode="inference", device_iterations=3))
    f = only(out, "PIPE002")
    assert f.severity == "error" and "D = 3 < S = N = 4 pipeline stages" in f.evidence
    assert "opts.deviceIterations(4)" in f.recommendation
    assert out.metrics["micro_batches_per_call"] == 3


def test_pipelined_inference_ramp_uses_device_iterations():
    out = pipeline.analyse(testing.pipeline_report([200_000] * 4, mode="inference", device_iterations=8))
    m = out.metrics
    assert m["pipeline_stages"] == 4 and m["ramp_efficiency_count_frac"] == 8 / 11
    assert round(m["ramp_efficiency_frac"], 4) == 0.7308
    assert m["micro_batches_for_target"] == 27
    assert [s["cycles"] for s in m["stages"]] == [200_000.0] * 4
    assert "opts.deviceIterations(27)" in only(out, "PIPE003").recommendation


def test_sharded_execution_uses_one_ipu_at_a_time():
    r = testing.pipeline_report([140_000, 126_000, 126_000, 205_000], mode="inference",
                                strategy="ShardedExecution", device_iterations=32)
    out = pipeline.analyse(r)
    m = out.metrics
    assert [s["cycles"] for s in m["stages"]] == [140_000.0, 126_000.0, 126_000.0, 205_000.0]
    assert m["pipelining_speedup_ratio"] == 597_000 / 205_000
    # sharded: each IPU waits while the others run their stages
    assert [s["idle_frac"] for s in m["stages"]] == [1 - c / 597_000 for c in (140_000, 126_000, 126_000,
                                                                             205_000)]
    assert m["ramp_efficiency_frac"] is None  # not a pipeline
    # elapsed per call: 32 micro-batches of (input 2000 + 8363, stages 597,000, 3 syncs of 50
    # and 3 copies of 400, output 2000 + 107, final sync 50)
    elapsed = 32 * (10_363 + 597_000 + 3 * 450 + 2_107 + 50)
    assert m["utilisation_frac"] == pytest.approx(32 * 597_000 / (4 * elapsed))
    f = only(out, "PIPE004")
    assert f.severity == "warning"
    assert f"IPU utilisation {100 * m['utilisation_frac']:.1f}%" in f.evidence
    assert "at most 25.0% even if balanced" in f.evidence
    assert "poptorch.PipelinedExecution" in f.recommendation and "up to 2.9×" in f.recommendation
    assert "2.7× at the current D = 32" in f.recommendation  # 2.912 × 32/35
    assert "PIPE001" not in codes(out)  # balance does not limit a sharded model


def test_single_ipu_model_has_no_pipeline_findings():
    out = pipeline.analyse(testing.single_ipu_report(5000))
    assert out.findings == []
    [nc] = out.not_checked
    assert nc.check == "pipeline checks" and "runs on IPU0 with no execution strategy" in nc.reason
    assert out.table is None and out.metrics["stages"] == []


def test_memory_only_report_checks_config_but_not_cycles():
    out = pipeline.analyse(testing.pipeline_report([1000] * 4, gradient_accumulation=16, execution=False))
    assert [n.check for n in out.not_checked] == ["stage cycles and balance"]
    assert "no execution profile" in out.not_checked[0].reason
    assert out.metrics["ramp_efficiency_frac"] == 16 / 22  # from the configuration alone
    assert out.metrics["imbalance_ratio"] is None
    assert [s["cycles"] for s in out.metrics["stages"]] == [None] * 4
    assert codes(out) == ["PIPE003"]


def test_stages_sharing_an_ipu_are_balanced_per_ipu():
    # IPU0 runs stages 0 and 2 (like BERT's tied MLM head back on IPU0): it does twice IPU1's work
    r = testing.pipeline_report([1000, 1000, 1000], stage_ipus=[0, 1, 0], gradient_accumulation=64)
    out = pipeline.analyse(r)
    m = out.metrics
    [nc] = out.not_checked
    assert nc.check == "cycles of each stage" and "IPU0 (stages 0 and 2)" in nc.reason
    assert m["balance_basis"] == "ipu" and m["bottleneck_ipu"] == 0 and m["bottleneck_stage"] is None
    assert m["imbalance_ratio"] == 385000 / ((385000 + 192500) / 2) == 4 / 3
    assert m["ipus"] == [
        {"ipu": 0, "stages": [0, 2], "cycles": 385000 / 64, "total_cycles": 385000, "idle_frac": 0.0},
        {"ipu": 1, "stages": [1], "cycles": 192500 / 64, "total_cycles": 192500, "idle_frac": 0.5}]
    assert [s["cycles"] for s in m["stages"]] == [None, 192500 / 64, None]  # stage 1 is alone on IPU1
    assert m["rebalance_to_ipu"] == 1
    [f] = out.findings
    assert f.code == "PIPE001" and f.title == "Unbalanced pipeline: IPU0 (stages 0 and 2) is the bottleneck"
    assert f.evidence.startswith("IPU0 runs stages 0 and 2 (0: B1; 2: B3): 6,016 cycles per micro-batch, "
                                 "1.33× the mean over 2 IPUs (4,512); the other IPUs idle 50.0%")
    assert f.recommendation.startswith("Move about 1,504 cycles per micro-batch (25% of its work) off IPU0 "
                                       "towards IPU1 (50% idle, the least loaded)")
    assert list(out.table["IPU"]) == ["0 ◀", "1"] and list(out.table["stages"]) == ["0, 2", "1"]
    assert list(out.table["cycles/micro-batch"]) == [6016, 3008]
    assert out.caption.startswith("◀ bottleneck · imbalance 1.33 (max/mean over IPUs: stages share IPUs)")
    assert r.ipu_cycles()["cycles_per_micro_batch"].tolist() == [6016, 3008]  # 385000 / 64, 192500 / 64, rounded
    assert r.stage_cycles()["bottleneck"].tolist() == [True, False, True]


def test_stages_sharing_an_ipu_balanced_per_ipu_give_no_finding():
    out = pipeline.analyse(testing.pipeline_report([500, 1000, 500], stage_ipus=[0, 1, 0],
                                                   gradient_accumulation=64))
    assert out.metrics["imbalance_ratio"] == 1.0 and out.findings == []


def test_missing_config_is_not_checked():
    r = testing.pipeline_report([1000] * 4, with_config=False)
    out = pipeline.analyse(r)
    assert out.findings == [] and out.metrics["stages"] == []
    assert "no configuration recorded" in out.not_checked[0].reason
    out = host_io.analyse(r)  # stream copies need no configuration; output counts do
    assert out.not_checked[0].check == "output mode"
    assert "no configuration recorded" in out.not_checked[0].reason
    assert out.metrics["outputs_per_call"] is None and out.metrics["stream_copy_frac"] > 0.7


def test_weight_copy_runs_are_not_counted_as_calls():
    r = testing.pipeline_report([1000, 3000, 1000, 1000], gradient_accumulation=64)
    copy = pd.DataFrame({"run": 1, "step": [0, 0, 0, 0, 1, 1, 1, 1],
                         "program": ["weightsFromHost"] * 4 + ["rearrange"] * 4,
                         "program_type": ["StreamCopyMid"] * 4 + ["OnTileExecute"] * 4,
                         "ipu": [0, 1, 2, 3] * 2, "cycles": [90_000] * 4 + [500] * 4})
    r2 = r.replace(execution=ExecutionTable(pd.concat([r.execution.steps, copy], ignore_index=True)))
    assert cycle_totals(r2.execution).calls() == [0]
    a, b = pipeline.analyse(r).metrics, pipeline.analyse(r2).metrics
    assert b["calls_counted"] == 1 and b["stages"] == a["stages"]
    assert host_io.analyse(r2).metrics["ipus"] == host_io.analyse(r).metrics["ipus"]


def test_two_identical_calls_give_the_same_per_micro_batch_cycles():
    r = testing.pipeline_report([1000, 3000], gradient_accumulation=8)
    second = r.execution.steps.assign(run=1)
    r2 = r.replace(execution=ExecutionTable(pd.concat([r.execution.steps, second], ignore_index=True)))
    a, b = pipeline.analyse(r).metrics, pipeline.analyse(r2).metrics
    assert b["calls_counted"] == 2
    assert [s["cycles"] for s in b["stages"]] == [s["cycles"] for s in a["stages"]]
    assert [s["total_cycles"] for s in b["stages"]] == [2 * s["total_cycles"] for s in a["stages"]]


def test_run_cycles_agree_with_pandas_in_any_block_size_and_row_order():
    r = testing.pipeline_report([1000, 3000, 1000], output_mode="All", gradient_accumulation=8,
                                device_iterations=2)
    steps = r.execution.steps
    second = steps.assign(run=3, cycles=steps["cycles"] * 2)  # a second call, twice as long
    copy = steps[steps["program_type"] == "StreamCopyMid"].assign(run=1)  # a copy-only run
    steps = pd.concat([steps, second, copy], ignore_index=True)
    shuffled = steps.sample(frac=1.0, random_state=0)
    per_run_ipu = steps.groupby(["run", "ipu"])["cycles"].sum()
    longest = per_run_ipu.groupby("run").max()
    compute = steps[steps["program_type"] == "OnTileExecute"].groupby("run")["cycles"].sum()
    expected = (steps.groupby(["ipu", "program_type"], observed=True)["cycles"].sum()
                .reset_index().astype({"program_type": "str"}))
    for frame, bins in ((steps, 2**21), (steps, 1), (shuffled, 2**21), (shuffled, 5)):
        rc = RunCycles(ExecutionTable(frame).steps, max_dense_bins=bins)
        assert rc.runs.tolist() == [0, 1, 3]
        assert rc.longest.tolist() == longest.tolist()
        assert rc.compute.tolist() == [compute[0], 0, compute[3]]
        assert rc.calls() == [0, 3]
        assert rc.elapsed([0, 3]) == longest[0] + longest[3]
        got = rc.by_ipu_type([0, 1, 3])
        assert got["program_type"].dtype == "str" and got["ipu"].is_monotonic_increasing
        merged = got.merge(expected, on=["ipu", "program_type"], how="outer")
        assert len(merged) == len(expected) == len(got)
        assert (merged["cycles_x"] == merged["cycles_y"]).all()
        assert rc.by_ipu_type([1])["program_type"].unique().tolist() == ["StreamCopyMid"]


def test_empty_report_is_not_checked_everywhere():
    r = Report(name="x", provenance=Provenance(source="bundle"))
    for mod in (pipeline, memory, host_io):
        out = mod.analyse(r)
        assert out.findings == [] and out.not_checked, mod.NAME


def test_phased_execution_is_not_analysed():
    cfg = ModelConfig(mode="training", execution_strategy="SerialPhasedExecution",
                      stages=(Stage(0, 0), Stage(1, 1)), gradient_accumulation=4)
    r = testing.pipeline_report([1000, 1000]).replace(config=cfg)
    out = pipeline.analyse(r)
    assert out.findings == [] and "SerialPhasedExecution" in out.not_checked[0].reason


# ---------------------------------------------------------------------------------------- memory

def test_ipu_with_fullest_tile_at_97pct_and_12_tiles_over_90pct():
    r = testing.pipeline_report([1000] * 4, memory_frac=0.5, hot_tiles={1: [(11, 0.93), (1, 0.97)]})
    out = memory.analyse(r)
    m = out.metrics
    ipu1 = m["ipus"][1]
    assert ipu1["tiles"] == 1472
    assert ipu1["tiles_over_90pct"] == 12
    assert ipu1["tiles_overflowing"] == 0
    assert ipu1["max_tile_bytes"] == 619_807  # round(0.97 * 638,976)
    assert ipu1["max_tile_pct"] == 100 * 619_807 / TILE
    assert round(ipu1["max_tile_pct"], 2) == 97.0
    assert ipu1["used_bytes"] == 1460 * 319_488 + 11 * 594_248 + 619_807
    assert ipu1["capacity_bytes"] == 1472 * TILE
    assert [i["tiles_over_90pct"] for i in m["ipus"]] == [0, 12, 0, 0]
    assert codes(out) == ["MEM002"]
    f = only(out, "MEM002")
    assert f.severity == "warning" and f.title == "IPU1 is nearly full: fullest tile at 97.0%"
    assert f.evidence.startswith("fullest tile 1349 holds 619,807 B (605.3 KiB), 97.0% of its 624.0 KiB; "
                                 "12 of 1,472 tiles are above 90%; IPU1 is 50.4% full overall "
                                 "(451.7 MiB of 897.0 MiB)")
    assert "40% always-live / 60% not-always-live" in f.evidence
    # training, optimizer on chip, variables 38%: offload first; not-always-live 60%: lower AMP
    assert f.recommendation.startswith("Levers: (1) variables are 38% of IPU1's bytes")
    assert "useOnChipStorage(False)" in f.recommendation
    assert 'opts.setAvailableMemoryProportion({"IPU1": 0.3})' in f.recommendation
    row = out.table.iloc[1]
    assert (row["IPU"], row["max tile %"], row["tiles >90%"], row["OOM tiles"]) == (1, 97.0, 12, 0)


def test_overflowing_tile_is_an_error_naming_the_ipu():
    r = testing.pipeline_report([1000] * 4, memory_frac=[0.5, 0.5, 0.6, 0.5], hot_tiles={2: [(3, 1.05)]})
    out = memory.analyse(r)
    ipu2 = out.metrics["ipus"][2]
    assert ipu2["tiles_overflowing"] == 3
    assert ipu2["overflowing_tiles"] == [0, 490, 981]
    assert ipu2["overflow_bytes"] == 3 * (670_925 - TILE)
    assert ipu2["max_tile_pct"] == 100 * 670_925 / TILE
    f = only(out, "MEM001")
    assert f.severity == "error" and f.title == "IPU2 is out of memory: 3 tiles overflow"
    assert f.evidence.startswith("3 of 1,472 tiles on IPU2 (tiles 0, 490, 981) exceed their 624.0 KiB, "
                                 "by 95,847 B (93.6 KiB) "
                                 "in total; fullest tile 0 holds 670,925 B (655.2 KiB), 105.0% of its "
                                 "capacity; IPU2 is 60.1% full overall")
    assert codes(out, "error") == ["MEM001"]


def test_spread_between_ipus_is_a_finding_and_names_where_to_move():
    r = testing.pipeline_report([1000, 1000], memory_frac=[0.95, 0.5], hot_tiles={0: [(5, 0.98)]},
                                blocks=[["embeddings", "layer0-5"], ["layer6-11"]])
    out = memory.analyse(r)
    assert out.metrics["fullest_ipu"] == 0
    f = only(out, "MEM004")
    assert f.severity == "warning"
    assert "IPU0 uses 95.0% of its memory, IPU1 50.0% (45.0 points less" in f.evidence
    assert "IPU0 holds embeddings, layer0-5" in f.recommendation
    assert round(out.metrics["spread_pct"], 1) == 45.0
    levers = only(out, "MEM002").recommendation
    # ranked by the bytes they save: the move is the one lever the report can size
    assert levers.startswith("Levers ((1) alone gets IPU0 under 90% of its memory): (1) move blocks off IPU0 to "
                             "IPU1 (50% used) (saves about")
    assert "serialize the embedding on IPU0" in levers


def test_levers_follow_the_evidence():
    # inference: no optimizer offload, no recomputation; always-live dominant: no AMP lever
    r = testing.pipeline_report([1000, 1000], mode="inference", memory_frac=[0.6, 0.6],
                                hot_tiles={0: [(1, 0.95)]}, blocks=[["layer0"], ["layer1"]])
    mem = testing.tile_memory(r.target, [0.6, 0.6], hot_tiles={0: [(1, 0.95)]}, always_live_frac=0.8)
    out = memory.analyse(r.replace(memory=mem))
    rec = only(out, "MEM002").recommendation
    assert "TensorLocations" not in rec and "recompute" not in rec and "in flight" not in rec
    # always-live bytes dominate: a lower available memory proportion would not free them
    assert rec == ("80% of IPU0's bytes are always live (largest category variable, 38%), which neither a "
                   "lower available memory proportion nor recomputation frees: move blocks off IPU0 "
                   "(poptorch.BeginBlock ipu_id).")
    # no categories to say what holds the bytes: the generic fallback
    bare = testing.tile_memory(r.target, [0.6, 0.6], hot_tiles={0: [(1, 0.95)]}, always_live_frac=0.8,
                               categories=None)
    rec = only(memory.analyse(r.replace(memory=bare)), "MEM002").recommendation
    assert rec == ("Lower the available memory proportion (opts.setAvailableMemoryProportion) or move "
                   "blocks off IPU0 (poptorch.BeginBlock ipu_id).")
    # optimizer already off chip: no offload lever
    r2 = testing.pipeline_report([1000, 1000], hot_tiles={0: [(1, 0.95)]}, optimizer_state_on_chip=False,
                                 available_memory_proportion={0: 0.2})
    rec2 = only(memory.analyse(r2), "MEM002").recommendation
    assert "TensorLocations" not in rec2
    assert 'lower the available memory proportion (now 0.2) with opts.setAvailableMemoryProportion({"IPU0": 0.1})' \
        in rec2
    assert "poptorch.recomputationCheckpoint" in rec2
    assert "fewer micro-batches in flight: stage 0 stashes activations of about 3 micro-batches" in rec2


def test_per_ipu_memory_skips_tile_checks():
    r = testing.pipeline_report([1000, 1000], memory_level="ipu", memory_frac=[0.93, 1.02],
                                source="emulator", estimated=True)
    out = memory.analyse(r)
    m = out.metrics
    assert m["level"] == "ipu"
    assert [i["max_tile_pct"] for i in m["ipus"]] == [None, None]
    assert [i["tiles_over_90pct"] for i in m["ipus"]] == [None, None]
    assert [n.check for n in out.not_checked] == ["fullest tile, tiles above 90%, overflowing tiles",
                                                  "liveness peak (step, program, layer)"]  # a builder's report
    assert "(an estimate)" in out.not_checked[0].reason
    assert codes(out) == ["MEM003", "MEM001"]
    assert only(out, "MEM001").title == "IPU1 is out of memory"
    assert "18,811,453 B (17.9 MiB) more than its capacity (per-IPU estimate)" in only(out, "MEM001").evidence
    assert only(out, "MEM003").title == "IPU0 is 93% full"
    assert "max tile %" not in out.table.columns
    assert "per-IPU figures only (estimated)" in out.caption


def test_memory_without_target_or_memory():
    r = testing.pipeline_report([1000, 1000])
    out = memory.analyse(r.replace(target=None))
    assert out.metrics["ipus"][0]["used_pct"] is None and out.metrics["ipus"][0]["used_bytes"] > 0
    assert out.findings == [] and "no target" in out.not_checked[0].reason
    out = memory.analyse(r.replace(memory=None))
    assert out.metrics["ipus"] == [] and out.not_checked[0].reason == "no memory data in this report"


def test_memory_categories_and_liveness():
    out = memory.analyse(testing.pipeline_report([1000], memory_frac=0.5, strategy=None))
    ipu0 = out.metrics["ipus"][0]
    excluding = 1472 * round(319_488 * 0.98)
    assert sum(ipu0["categories"].values()) == excluding
    assert ipu0["always_live_bytes"] + ipu0["not_always_live_bytes"] == excluding
    assert out.table.iloc[0]["top category"] == "variable 38%"


# -------------------------------------------------------------------------------------- host I/O

FOUR_MB = {"out": ((1000, 1000), "float32")}  # 4,000,000 B per micro-batch


def test_output_mode_all_with_100_device_iterations_and_a_4mb_output():
    r = testing.single_ipu_report(2_000_000, mode="inference", device_iterations=100, output_mode="All",
                                  outputs=FOUR_MB)
    out = host_io.analyse(r)
    m = out.metrics
    assert m["output_mode"] == "All" and m["outputs_per_call"] == 100
    assert m["output_bytes_per_micro_batch"] == 4_000_000
    assert m["output_bytes_per_call"] == 400_000_000
    assert m["input_bytes_per_call"] == 100 * 16 * 784 * 4
    assert m["alternatives"]["Final"] == {"outputs_per_call": 1, "return_period": None,
                                          "output_bytes_per_call": 4_000_000}
    assert m["alternatives"]["Sum"]["output_bytes_per_call"] == 4_000_000
    assert m["alternatives"]["EveryN"] == {"outputs_per_call": 1, "return_period": 100,
                                           "output_bytes_per_call": 4_000_000}
    f = only(out, "HIO002")
    assert f.severity == "warning"
    assert f.title == "OutputMode.All moves 400,000,000 B (381.5 MiB) per call"
    assert "D·G·R = 100 copies of each output per call (D = 100, G = 1, R = 1)" in f.evidence
    assert "saving 396,000,000 B (377.7 MiB) per call" in f.evidence
    assert "opts.outputMode(poptorch.OutputMode.Final)" in f.recommendation
    assert "saving 396,000,000 B (377.7 MiB) per call" in f.recommendation
    # each output copy: 2000 wait + round(4e6 / 6) transfer, beside 2M cycles of compute
    assert m["ipus"][0]["stream_copy_cycles"] == 100 * (2000 + 8363 + 2000 + 666_667)
    assert codes(out) == ["HIO002", "HIO001"]


def test_output_mode_final_has_no_host_io_warning():
    r = testing.single_ipu_report(2_000_000, mode="inference", device_iterations=100, output_mode="Final",
                                  outputs=FOUR_MB)
    out = host_io.analyse(r)
    m = out.metrics
    assert m["outputs_per_call"] == 1 and m["output_bytes_per_call"] == 4_000_000
    copies = 100 * (2000 + 8363) + 2000 + 666_667
    total = 100 * (10_363 + 2_000_000 + 50) + 668_667 + 50
    assert m["ipus"][0]["stream_copy_cycles"] == copies and m["ipus"][0]["total_cycles"] == total
    assert m["stream_copy_frac"] == copies / total
    assert m["call_device_seconds"] == total / 1.33e9
    assert out.findings == []


def test_training_with_output_mode_all_is_info_below_a_mib_and_a_warning_above():
    r = testing.pipeline_report([400_000] * 4, gradient_accumulation=64, device_iterations=4,
                                output_mode="All")
    out = host_io.analyse(r)
    assert out.metrics["outputs_per_call"] == 256 and out.metrics["output_bytes_per_call"] == 1024
    f = only(out, "HIO002")
    # 1,020 B saved per call: worth knowing, not worth failing a gate
    assert f.severity == "info" and "Training returns every micro-batch's outputs" in f.title
    assert "saving 1,020 B per call" in f.recommendation
    assert codes(out) == ["HIO002"]
    # 2,048 float32 logits per micro-batch: 255 x 8,192 B = 2,088,960 B saved, over OUTPUT_BYTES_SAVED_INFO
    big = testing.pipeline_report([400_000] * 4, gradient_accumulation=64, device_iterations=4,
                                  output_mode="All", outputs={"logits": ((2048,), "float32")})
    f = only(host_io.analyse(big), "HIO002")
    assert f.severity == "warning" and "saving 2,088,960 B (2.0 MiB) per call" in f.recommendation


def test_training_with_every_n_says_which_batches_come_back():
    r = testing.pipeline_report([400_000] * 4, gradient_accumulation=64, device_iterations=4,
                                output_mode="EveryN", output_return_period=2)
    f = only(host_io.analyse(r), "HIO002")
    assert f.title == "Training returns the outputs of one batch in 2, 128 copies per call (OutputMode.EveryN(2))"


def test_default_output_mode_resolves_per_mode():
    t = host_io.analyse(testing.pipeline_report([400_000] * 2, gradient_accumulation=8))
    assert t.metrics["output_mode"] == "Final" and t.metrics["output_mode_set"] == "Default"
    i = host_io.analyse(testing.single_ipu_report(2_000_000, mode="inference", device_iterations=10))
    assert i.metrics["output_mode"] == "All" and i.metrics["outputs_per_call"] == 10
    assert i.findings == []  # 10 × 640 B: inference below the info threshold


@pytest.mark.parametrize("mode,period,expected", [("All", None, 64), ("EveryN", 2, 32), ("Final", None, 2),
                                                  ("Sum", None, 2)])
def test_outputs_per_call_by_mode(mode, period, expected):
    # D = 4, G = 8, R = 2
    r = testing.pipeline_report([400_000] * 2, gradient_accumulation=8, device_iterations=4,
                                replication_factor=2, output_mode=mode, output_return_period=period)
    m = host_io.analyse(r).metrics
    assert m["outputs_per_call"] == expected
    assert m["output_bytes_per_call"] == 4 * expected
    assert m["replication_factor"] == 2


def test_host_wait_dominated_copies():
    r = testing.single_ipu_report(100_000, mode="inference", device_iterations=64, host_wait_cycles=60_000)
    out = host_io.analyse(r)
    f = only(out, "HIO001")
    assert f.title.startswith("IPU0 waits for the host")
    assert "defaultPrefetchBufferingDepth" in f.recommendation
    m = out.metrics
    assert m["host_wait_frac"] / m["stream_copy_frac"] > 0.5


def test_an_output_that_is_most_of_the_bytes_is_named():
    # a hidden state returned beside the logits: Final or Sum would lose every prediction; the
    # lever that keeps them is not returning the hidden state
    outputs = {"logits": ((8, 3), "float32"), "hidden\n[bold]": ((8, 128, 256), "float32")}
    r = testing.single_ipu_report(2_000_000, mode="inference", device_iterations=32, output_mode="All",
                                  outputs=outputs)
    f = only(host_io.analyse(r), "HIO002")
    assert f.recommendation.endswith(
        " Most of it is one output: 'hidden\\n[bold]' (8×128×256 float32) is 1,048,576 B (1.0 MiB) of the "
        "1,048,672 B (1.0 MiB) returned per micro-batch; if the host does not use it, stop returning it from forward.")
    even = testing.single_ipu_report(2_000_000, mode="inference", device_iterations=32, output_mode="All",
                                     outputs={"a": ((1000, 1000), "float32"), "b": ((1000, 200), "float32")})
    assert "Most of it is one output" not in only(host_io.analyse(even), "HIO002").recommendation  # 83%


def test_device_iterations_too_low():
    r = testing.single_ipu_report(5000, mode="inference", device_iterations=1, output_mode="All")
    out = host_io.analyse(r)
    m = out.metrics
    # input 2000 + 8363, forward 5000, output 2000 + 107, sync 50
    assert m["call_device_seconds"] == 17_520 / 1.33e9
    assert m["recommended_device_iterations"] == 3796  # ceil(0.05 s / 13.2 µs)
    f = only(out, "HIO003")
    assert "opts.deviceIterations(3796)" in f.recommendation
    assert f.evidence.startswith("one call keeps the IPUs busy for 13 µs with D = 1, under 10.0 ms")
    assert "pessimistic" not in f.recommendation
    # an estimate the emulator calls likely pessimistic: the recommendation is a lower bound
    import dataclasses

    est = testing.single_ipu_report(5000, mode="inference", device_iterations=1, output_mode="All",
                                    source="emulator", estimated=True)
    est.config = dataclasses.replace(est.cfg, options={"emulator": {"small_products_share": 0.95}})
    assert only(host_io.analyse(est), "HIO003").recommendation == (
        "Set opts.deviceIterations(3796) (about 50.0 ms per call); poptorch.DataLoader built with the same options "
        "then yields batches 3796× larger: its dataset must hold at least 3,796 micro-batches (D × G × R), or the "
        "loader yields no batch at all. The estimate is likely pessimistic (see throughput): calls are shorter "
        "on an IPU, so this is a lower bound.")


def test_device_iterations_proposed_are_a_multiple_of_the_return_period():
    # OutputMode.EveryN(4): PopART refuses a return period that does not divide D
    import dataclasses

    r = testing.single_ipu_report(5000, mode="inference", device_iterations=7, output_mode="EveryN")
    r.config = dataclasses.replace(r.cfg, output_return_period=7)
    out = host_io.analyse(r)
    n = out.metrics["recommended_device_iterations"]
    unrounded = math.ceil(7 * 0.05 / out.metrics["call_device_seconds"])  # 50 ms per call
    assert unrounded % 7 != 0 and n == -(-unrounded // 7) * 7
    assert f"opts.deviceIterations({n})" in only(out, "HIO003").recommendation


def test_run_durations_take_precedence_over_cycles():
    r = testing.single_ipu_report(5000, mode="inference", device_iterations=1)
    runs = pd.DataFrame({"run": [0], "name": ["main"], "duration_seconds": [0.2]})
    r2 = r.replace(execution=ExecutionTable(r.execution.steps, runs))
    out = host_io.analyse(r2)
    assert out.metrics["call_device_seconds"] == 0.2 and "HIO003" not in codes(out)


def test_memory_only_report_host_io():
    out = host_io.analyse(testing.pipeline_report([1000] * 2, execution=False))
    assert [n.check for n in out.not_checked] == ["stream-copy share, device time per call"]
    assert out.metrics["outputs_per_call"] == 1 and out.metrics["stream_copy_frac"] is None


def test_output_sizes_not_recorded():
    out = host_io.analyse(testing.pipeline_report([400_000] * 2, output_mode="All", with_host_io=False))
    assert out.metrics["outputs_per_call"] == 16 and out.metrics["output_bytes_per_call"] is None
    assert "output tensor sizes not recorded" in out.not_checked[0].reason
    f = only(out, "HIO002")
    assert "16 copies (sizes not recorded)" in f.evidence


# ----------------------------------------------------------------------------------- consistency

def test_every_finding_code_and_threshold_is_documented():
    doc = (ROOT / "docs" / "analyses.md").read_text()
    source = "".join((ROOT / "popviz" / "analysis" / f"{n}.py").read_text()
                     for n in ("pipeline", "memory", "host_io"))
    emitted = set(re.findall(r'"((?:PIPE|MEM|HIO)\d{3})"', source))
    assert emitted == {"PIPE001", "PIPE002", "PIPE003", "PIPE004", "PIPE005", "MEM001", "MEM002", "MEM003", "MEM004",
                       "MEM005",
                       "HIO001", "HIO002", "HIO003"}
    for code in emitted:
        assert f"`{code}`" in doc, code
    names = [n for n in vars(thresholds) if n.isupper()]
    assert len(names) >= 15
    for name in names:
        assert f"`{name}" in doc, name
        assert isinstance(getattr(thresholds, name), (int, float))
    assert math.isclose(thresholds.RAMP_EFFICIENCY_TARGET_FRAC, 0.9)


def test_one_stage_pipeline_counts_as_single_ipu():
    cfg = ModelConfig(mode="training", execution_strategy="PipelinedExecution", stages=(Stage(0, 0),),
                      gradient_accumulation=4)
    out = pipeline.analyse(testing.single_ipu_report(5000).replace(config=cfg))
    assert out.findings == []
    assert out.not_checked[0].reason.startswith("the model runs on IPU0 (PipelinedExecution, every stage")


def test_pipe001_ties_move_work_towards_the_least_loaded_stage():
    from popviz.analysis import pipeline

    r = testing.pipeline_report([3000, 3000, 2000, 1000], mode="inference", device_iterations=64,
                                host_wait_cycles=0, host_bytes_per_cycle=1e9, tiles_per_ipu=8)
    [f] = [f for f in pipeline.analyse(r).findings if f.code == "PIPE001"]
    assert "stage 0 (B1) takes 3,000 cycles per micro-batch (stage 1 is as slow)" in f.evidence
    assert f.recommendation.startswith(
        "Move about 750 cycles per micro-batch (25% of its work) out of stage 0 towards stage 3 "
        "(IPU3, 67% idle, the least loaded): shift each poptorch.BeginBlock(layer, ipu_id=...) "
        "boundary between stage 0 and stage 3")


# ------------------------------------------------------------------------- where the cycles go

@pytest.mark.parametrize("kw", [dict(gradient_accumulation=7), dict(gradient_accumulation=64),
                                dict(mode="inference", device_iterations=8),
                                dict(mode="inference", device_iterations=8, strategy="ShardedExecution")])
def test_cycle_shares_add_up_to_the_elapsed_cycles(kw):
    r = testing.pipeline_report([200_000, 300_000, 150_000, 200_000], **kw)
    m = pipeline.analyse(r).metrics
    sh = m["cycle_shares"]
    parts = ("useful", "weight_update", "imbalance", "ramp", "exchange", "host", "other")
    assert sum(sh[f"{p}_cycles"] for p in parts) == sh["ipus"] * sh["elapsed_cycles"] == sh["ipu_cycles"]
    assert sh["ipus"] == 4 and all(sh[f"{p}_cycles"] >= 0 for p in parts)
    assert sum(sh[f"{p}_frac"] for p in parts) == pytest.approx(1.0, abs=1e-12)
    # useful work + weight update is the utilisation
    assert sh["useful_frac"] + sh["weight_update_frac"] == pytest.approx(m["utilisation_frac"], abs=1e-12)
    assert sh["bottleneck_ipu"] == 1


# ------------------------------------------------------------------------------ nothing fits

BERT_BLOCKS = [["embeddings", "encoder.layer.0-2"], ["encoder.layer.3-5"], ["encoder.layer.6-8"],
               ["encoder.layer.9-11", "qa_outputs"]]
EMULATOR_CATEGORIES = {"weights": 0.25, "optimizerState": 0.25, "gradientAccumulators": 0.1,
                       "activationStash": 0.3, "temporaries": 0.05, "codeAndExchange": 0.05}


def test_a_model_that_cannot_fit_gets_the_no_fit_statement_and_no_move():
    # BERT-base in FP32 over 4 IPUs: 214%, 137%, 101% and 65% of an IPU (129% of the four)
    fracs = [2.14, 1.37, 1.01, 0.65]
    r = testing.pipeline_report([1000] * 4, memory_level="ipu", memory_frac=fracs, estimated=True,
                                blocks=BERT_BLOCKS)
    r = r.replace(memory=testing.ipu_memory(r.target, fracs, categories=EMULATOR_CATEGORIES))
    out = memory.analyse(r)
    assert codes(out) == ["MEM005", "MEM001", "MEM001", "MEM001"]
    f = out.findings[0]
    assert (f.severity, f.title) == ("error", "The model does not fit on 4 IPUs: no split of it can")
    assert "129.3% of them combined, 1,100,470,027 B (1.0 GiB) over" in f.evidence
    assert out.metrics["total_over_bytes"] == 1_100_470_027
    assert "spread the model over at least 6 IPUs" in f.recommendation
    # levers with the bytes each saves, largest first
    # no layers: offloading's saving is an upper bound (the largest tensor's state stays while it updates)
    assert "(2) optimizer state off chip saves up to 1,191,376,374 B (1.1 GiB)" in f.recommendation
    assert "(4) recomputation saves up to about 714,825,824 B" in f.recommendation
    assert "recompute_checkpoint_every_layer" in f.recommendation
    for g in out.findings:  # never onto a full IPU, nor any move: no split fits
        assert "move blocks" not in g.recommendation.lower() and "MEM004" != g.code
    # the stash dominates the not-always-live bytes: the available memory proportion is not offered
    assert not any("setAvailableMemoryProportion" in g.recommendation for g in out.findings)
    ipu0 = out.findings[1].recommendation
    # the levers it sizes do not close the gap, said with the one it cannot size kept (never dropped)
    assert ipu0.startswith("Levers (none enough alone, nor all together: they save 986,284,503 B (940.6 MiB) of "
                           "the 1,166,310,114 B (1.1 GiB) that would get IPU0 under 90% of its memory; (4) cannot "
                           "be sized): (1) the optimizer state is 25% of IPU0's bytes")
    assert ipu0.endswith("(4) serialize the embedding on IPU0 (optimum-graphcore: embedding_serialization_factor; "
                         "PopTorch: poptorch.serializedMatMul for the vocabulary projection).")
    assert "(saves about 493,142,252 B (470.3 MiB)); (2) fewer micro-batches in flight" in ipu0


def test_no_move_onto_an_ipu_that_would_then_be_full():
    # the fit is fine overall, but IPU1 (85%) cannot take IPU0's excess over 90% (20 points)
    r = testing.pipeline_report([1000] * 3, memory_level="ipu", memory_frac=[1.1, 0.85, 0.3])
    out = memory.analyse(r)
    assert "MEM005" not in codes(out)
    rec = only(out, "MEM001").recommendation
    assert "(1) move blocks off IPU0 to IPU2 (30% used)" in rec  # IPU2 can: 30% + 20% fits
    assert "to IPU1" not in rec


# -------------------------------------------------------------------- host I/O and the options

def test_recomputation_turned_off_by_the_script_is_the_lever_to_undo():
    # the script set autoRecomputation to None on a 4-IPU pipeline: checkpoints would do nothing,
    # PopTorch's default (Pipeline) is what it turned off
    fracs = [2.14, 1.37, 1.01, 0.65]
    r = testing.pipeline_report([1000] * 4, memory_level="ipu", memory_frac=fracs, estimated=True,
                                blocks=BERT_BLOCKS)
    r = r.replace(memory=testing.ipu_memory(r.target, fracs, categories=EMULATOR_CATEGORIES))
    for value in (0, "RecomputationType.NoRecompute"):
        off = _with_options(r, {"other": {"popart": {"autoRecomputation": value}}})
        f = memory.analyse(off).findings[0]
        assert ("(4) recomputation saves up to about 714,825,824 B (681.7 MiB) of the 1,429,651,649 B (1.3 GiB) "
                "activation stash: turn recomputation back on: the script sets autoRecomputation to None") in f.recommendation
        assert "recompute_checkpoint_every_layer" not in f.recommendation
    pipeline_default = _with_options(r, {"other": {"popart": {"autoRecomputation": 3}}})
    assert "recompute_checkpoint_every_layer" in memory.analyse(pipeline_default).findings[0].recommendation


def _with_options(report, options):
    import dataclasses

    return report.replace(config=dataclasses.replace(report.cfg, options=options))


def test_host_io_never_proposes_what_the_options_already_set():
    r = testing.pipeline_report([1000] * 2, mode="inference", device_iterations=4, host_wait_cycles=200_000)
    rec = only(host_io.analyse(r), "HIO001").recommendation
    assert 'opts._Popart.set("defaultPrefetchBufferingDepth", 3)' in rec
    assert "opts.enableSyntheticData(True)" in rec
    set_already = _with_options(r, {"other": {"popart": {"defaultPrefetchBufferingDepth": 3}}})
    rec = only(host_io.analyse(set_already), "HIO001").recommendation
    assert "defaultPrefetchBufferingDepth" not in rec and "DataLoaderMode.Async) if it is not already" in rec


def test_synthetic_data_has_no_input_bytes():
    r = testing.pipeline_report([1000] * 2, mode="inference", device_iterations=4)
    assert host_io.analyse(r).metrics["input_bytes_per_call"] == 200_704
    out = host_io.analyse(_with_options(r, {"other": {"popart": {"syntheticDataMode": 2}}}))
    assert out.metrics["input_bytes_per_call"] is None
    [nc] = [n for n in out.not_checked if n.check == "input bytes per call"]
    assert nc.reason.startswith("not meaningful: synthetic data is enabled")


def test_float16_inputs_are_not_told_to_be_float16():
    kw = dict(mode="inference", device_iterations=4, host_bytes_per_cycle=0.01, host_wait_cycles=0)
    wide = testing.pipeline_report([1000] * 2, **kw)
    assert "narrower dtypes (int32 or float16 instead of int64 or float32: input)" in \
        only(host_io.analyse(wide), "HIO001").recommendation
    half = testing.pipeline_report([1000] * 2, inputs={"x": ((16, 784), "float16")}, **kw)
    assert "narrower dtypes" not in only(host_io.analyse(half), "HIO001").recommendation


def test_transfer_levers_follow_the_bytes_each_direction_moves():
    kw = dict(mode="inference", device_iterations=4, host_bytes_per_cycle=0.01, host_wait_cycles=0,
              output_mode="All")
    # inputs 4 x 16 x 784 float32 = 200,704 B a call, outputs 4 x 160 B: no output lever
    small_out = only(host_io.analyse(testing.pipeline_report([1000] * 2, **kw)), "HIO001").recommendation
    assert small_out == (
        "The transfers themselves take the time (per call 200,704 B (196.0 KiB) in, 2,560 B (2.5 KiB) "
        "out: the inputs are 98.7% of the bytes): move fewer bytes — send inputs in narrower dtypes "
        "(int32 or float16 instead of int64 or float32: input), or do preprocessing on the IPU.")
    # outputs 4 x 16 x 10^6 float32 = 256,000,000 B: the output levers only, the output mode first
    big = testing.pipeline_report([1000] * 2, outputs={"logits": ((16, 1_000_000), "float32")}, **kw)
    assert only(host_io.analyse(big), "HIO001").recommendation == (
        "The transfers themselves take the time (per call 200,704 B (196.0 KiB) in, 256,000,000 B "
        "(244.1 MiB) out: the outputs are 99.9% of the bytes): move fewer bytes — return fewer outputs "
        "(opts.outputMode(poptorch.OutputMode.Final) or Sum, if the host does not need every "
        "prediction), or return outputs in float16.")


def test_estimated_reports_never_quote_the_emulator_wall_time_as_host_time():
    from popviz.model import CallStats, HostIO

    stats = HostIO(tensors=testing.pipeline_report([1000]).host_io.tensors, calls=10, call_stats=(
        CallStats("wall_seconds", count=10, sum=4.829, min=0.4, max=0.5, p50=0.48),))
    for estimated, quoted in ((False, True), (True, False)):
        r = testing.pipeline_report([1000] * 2, mode="inference", device_iterations=4, estimated=estimated)
        f = only(host_io.analyse(r.replace(host_io=stats)), "HIO003")
        assert ("measured wall time per call 482.9 ms" in f.evidence) == quoted


def test_anchored_tensors_are_counted_with_their_return_mode():
    r = testing.pipeline_report([1000] * 2, gradient_accumulation=4, device_iterations=2)
    # opts.anchorTensor("grad_w", "Gradient___w", poptorch.OutputMode.All) and one with the default
    anchors = {"grad_w": ["Gradient___w", False, 2, 1], "grad_b": ["Gradient___b", True, 2, 1]}
    out = host_io.analyse(_with_options(r, {"other": {"anchored_tensors": anchors}}))
    assert out.metrics["anchored_tensors"] == [
        {"name": "grad_b", "output_mode": "Final", "return_period": None, "copies_per_call": 1,
         "bytes_per_call": None},
        {"name": "grad_w", "output_mode": "All", "return_period": None, "copies_per_call": 8,
         "bytes_per_call": None}]
    assert "anchored tensor bytes" in [n.check for n in out.not_checked]


def test_a_profile_without_on_tile_compute_has_no_calls():
    r = testing.pipeline_report([1000, 3000])
    steps = r.execution.steps
    no_compute = steps[steps["program_type"] != "OnTileExecute"].copy()
    no_compute["program_type"] = no_compute["program_type"].astype("str")  # no OnTileExecute category
    r2 = r.replace(execution=ExecutionTable(no_compute))
    rc = cycle_totals(r2.execution)
    assert rc.calls() == [] and rc.compute.tolist() == [0]
    assert rc.longest.tolist() == [no_compute.groupby("ipu")["cycles"].sum().max()]
    out = pipeline.analyse(r2)
    assert any("executes on-tile compute" in n.reason for n in out.not_checked)


def test_run_cycles_renumber_ipu_indices_far_apart():
    steps = pd.DataFrame({"run": [0, 0, 0, 1, 1, 1], "step": [0, 1, 2, 0, 1, 2],
                          "program": ["a", "b", "c"] * 2,
                          "program_type": ["OnTileExecute", "Sync", "OnTileExecute"] * 2,
                          "ipu": [0, 10**8, 5, 0, 10**8, 2**30], "cycles": [10, 20, 30, 40, 50, 60]})
    rc = RunCycles(ExecutionTable(steps).steps)
    assert rc.runs.tolist() == [0, 1] and rc.longest.tolist() == [30, 60]
    assert rc.compute.tolist() == [40, 100] and rc.calls() == [1]  # 40 < half of 100
    assert rc.elapsed([1]) == 60 and rc.elapsed([0, 1]) == 90
    got = rc.by_ipu_type([0, 1])
    assert got.values.tolist() == [[0, "OnTileExecute", 50], [5, "OnTileExecute", 30],
                                   [10**8, "Sync", 70], [2**30, "OnTileExecute", 60]]


def test_batching_line_names_optimizer_state_only_for_training():
    # a capture may record PopART's on-chip default for an inference executor, which has no optimizer
    from dataclasses import replace

    from popviz.render.text import batching_line

    training = testing.pipeline_report([1000, 2000], mode="training", optimizer_state_on_chip=False)
    assert batching_line(training).endswith(" · optimizer state off chip")
    inference = testing.pipeline_report([1000, 2000], mode="inference")
    inference = replace(inference, config=replace(inference.config, optimizer_state_on_chip=True))
    assert "optimizer" not in batching_line(inference)
    assert batching_line(inference).startswith("device iterations ")


def test_memory_says_why_an_ipu_runs_no_stage():
    """PopTorch attaches every IPU up to the highest a stage uses (rounded up to a power of two):
    one with no stage still has a memory row, holding only runtime code; the caption says so."""
    out = memory.analyse(testing.pipeline_report([1000, 1000], stage_ipus=[0, 2]))
    assert list(out.table["IPU"]) == [0, 1, 2]
    assert out.caption.splitlines()[-1] == (
        "IPU1 runs no stage: PopTorch attaches every IPU up to the highest a stage uses, rounded up to a power "
        "of two (autoRoundNumIPUs), and it holds only the runtime's code and buffers")
    assert "no stage" not in (memory.analyse(testing.pipeline_report([1000, 1000])).caption or "")


def test_a_wait_set_by_bytes_gets_byte_levers_not_more_device_iterations():
    # 4 micro-batches of 16 float16 images (4.8 MB each) in a call of ~9.9 ms: the host must hand
    # over 19.3 MB in it, 1.94 GB/s, near what one host thread serves (2.35 GB/s)
    kw = dict(mode="inference", device_iterations=4, host_bytes_per_cycle=6.0, host_wait_cycles=2_000_000,
              inputs={"pixels": ((16, 3, 224, 224), "float16"), "labels": ((16,), "int64")})
    out = host_io.analyse(testing.pipeline_report([1000] * 2, **kw))
    one = only(out, "HIO001")
    assert one.title == "IPU0 waits for the host: 84.8% of its cycles in stream copies"
    assert one.recommendation == (
        "The host cannot hand over the inputs fast enough: one host thread needs ~8.2 ms to pass the call's "
        "19,268,096 B (18.4 MiB) of inputs to Poplar (~2.35 GB/s per thread, docs/emulator.md), 82.5% of the "
        "9.9 ms the call keeps the IPUs busy (the IPU waits for the part its compute does not hide). That wait "
        "grows with the bytes: more device iterations or a deeper prefetch do not shorten it. Send pixels as "
        "uint8, normalised on the IPU.")
    # the call is short too (9.9 ms): HIO003's longer calls spread its fixed cost, and say they leave this
    # wait as it is, not contradict HIO001
    assert only(out, "HIO003").recommendation == (
        "Set opts.deviceIterations(21) (about 50.0 ms per call); poptorch.DataLoader built with the same options "
        "then yields batches 5× larger: its dataset must hold at least 21 micro-batches (D × G × R), or the loader "
        "yields no batch at all. This spreads each call's fixed cost over more samples; the wait for the "
        "input bytes (HIO001) stays the same per sample.")
    # two replicas on one host process: more callback threads or PopRun instances help too
    two = only(host_io.analyse(testing.pipeline_report([1000] * 2, replication_factor=2, **kw)), "HIO001")
    assert "needs ~16.4 ms to pass the call's 38,536,192 B (36.8 MiB) of inputs" in two.recommendation
    assert "per thread, docs/emulator.md), longer than the 9.9 ms the call keeps" in two.recommendation
    assert two.recommendation.endswith(
        "Send pixels as uint8, normalised on the IPU, serve the stream callbacks on more "
        "threads (engine options {\"streamCallbacks.multiThreadMode\": \"collaborative\", "
        "\"streamCallbacks.numWorkerThreads\": \"auto\"}), or split the replicas over more PopRun instances "
        "(each has its own host process).")
    # a few bytes per call and long waits: the round trips, not the bytes
    few = dict(kw, inputs={"x": ((16, 784), "float32")})
    assert only(host_io.analyse(testing.pipeline_report([1000] * 2, **few)), "HIO001").recommendation.startswith(
        "The host does not keep up: raise opts.deviceIterations(27) (HIO003) so each call")  # HIO003's figure


def test_a_negligible_input_is_not_told_to_narrow():
    kw = dict(mode="inference", device_iterations=4, host_bytes_per_cycle=0.01, host_wait_cycles=0,
              inputs={"x": ((16, 784), "float16"), "ids": ((16,), "int64")})
    rec = only(host_io.analyse(testing.pipeline_report([1000] * 2, **kw)), "HIO001").recommendation
    assert "narrower dtypes" not in rec and rec.endswith("do preprocessing on the IPU.")


def test_float_images_are_told_uint8_in_both_kinds_of_host_wait():
    kw = dict(mode="inference", device_iterations=4, host_bytes_per_cycle=0.01, host_wait_cycles=0,
              inputs={"images": ((16, 3, 32, 32), "float32"), "ids": ((16,), "int64")})
    rec = only(host_io.analyse(testing.pipeline_report([1000] * 2, **kw)), "HIO001").recommendation
    assert rec.endswith("move fewer bytes — send images as uint8, normalised on the IPU, or do preprocessing "
                        "on the IPU.")


def test_pipe002_reads_cleanly_after_reconciling():
    """Was: "Set opts.deviceIterations(27) or more; opts.deviceIterations(27) reaches 90% ramp
    efficiency (one value for PIPE002: PIPE002: ramp efficiency 90% needs 27; PIPE002: at least the
    pipeline depth S needs ≥ 4)": PIPE002's two values were reconciled with each other."""
    from popviz.analysis import analyse
    from popviz.model import ReportSet

    report = testing.pipeline_report([20_000_000] * 4, mode="inference", device_iterations=2)
    engine = analyse(ReportSet([report])).engines[0]
    f = next(f for f in engine.findings if f.code == "PIPE002")
    assert f.title == "Device iterations below the pipeline depth: PopTorch rejects this"
    assert f.recommendation == ("Set opts.deviceIterations(4) or more; opts.deviceIterations(27) reaches 90% ramp "
                                "efficiency.")


def test_three_ipus_without_auto_round_is_an_error():
    """PopTorch refuses a process on 3 IPUs unless autoRoundNumIPUs(True); the capture records the
    option (options.other), a profile from hardware cannot have the count."""
    from popviz.model import ModelConfig

    report = testing.pipeline_report([200_000] * 3, gradient_accumulation=16)
    cfg = report.config
    off = dataclasses.replace(cfg, options={**cfg.options, "other": {"auto_round_num_ipus": False}})
    out = pipeline.analyse(report.replace(config=off))
    f = only(out, "PIPE005")
    assert f.severity == "error" and f.title == "3 IPUs: PopTorch reserves IPUs in powers of two and refuses this"
    assert f.recommendation.startswith("Set opts.autoRoundNumIPUs(True) (4 IPUs reserved, 1 idle)")
    on = dataclasses.replace(cfg, options={**cfg.options, "other": {"auto_round_num_ipus": True}})
    assert "PIPE005" not in codes(pipeline.analyse(report.replace(config=on)))
    assert "PIPE005" not in codes(pipeline.analyse(report))  # not recorded: a profile from hardware
    assert isinstance(cfg, ModelConfig)
    # one stage on IPU2 (--split layers_per_ipu=0,0,8): IPUs 0 to 2 are still needed, and refused
    lone = dataclasses.replace(off, stages=(dataclasses.replace(cfg.stages[0], ipu=2),))
    out = pipeline.analyse(report.replace(config=lone))
    assert only(out, "PIPE005").title.startswith("3 IPUs: PopTorch reserves IPUs in powers of two")
    assert out.not_checked[0].reason.startswith("the model runs on IPU2")


def test_an_execution_profile_of_zero_cycles_is_skipped_not_divided_by():
    """Every step at 0 cycles (a damaged profile, a reviewer's hostile copy): host_io divided by the
    number of runs with compute, zero, and the CLI said "internal error"."""
    r = testing.pipeline_report([1000] * 2, mode="inference", device_iterations=4)
    steps = r.execution.steps.copy()
    steps["cycles"] = 0
    zero = r.replace(execution=ExecutionTable(steps, r.execution.runs))
    out = host_io.analyse(zero)
    assert [n.reason for n in out.not_checked if n.check == "stream-copy share, device time per call"] == [
        "no run in the execution profile has a step with cycles (every step of it counts 0)"]
    assert out.metrics["call_device_seconds"] is None and out.metrics["stream_copy_frac"] is None
