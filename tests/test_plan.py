"""One plan per engine: one value per option across findings, actions ranked by gain; and on
every sample the cycle shares add up to 100% and agree with the utilisation."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

import popviz
from popviz import testing
from popviz.analysis import analyse
from popviz.model import ReportSet

from conftest import ROOT

SETTER = re.compile(r"(opts\.[A-Za-z_.]+)\((\d+)\)")
PARTS = ("useful", "weight_update", "imbalance", "ramp", "exchange", "host", "other")


def _values(engine) -> dict[str, set[int]]:
    seen: dict[str, set[int]] = defaultdict(set)
    for f in engine.findings:
        for setter, value in SETTER.findall(f.recommendation):
            seen[setter].add(int(value))
    return seen


def test_ramp_and_call_time_agree_on_one_device_iterations():
    r = testing.pipeline_report([200_000] * 4, mode="inference", device_iterations=4)
    [e] = analyse(ReportSet([r])).engines
    assert [f.code for f in e.findings] == ["PIPE003", "HIO003"]
    assert _values(e) == {"opts.deviceIterations": {184}}  # not 27 in one and 184 in the other
    [d] = e.plan.decisions
    assert (d.option, d.value, d.current) == ("device_iterations", 184, 4)
    assert d.reasons == ["PIPE003: ramp efficiency 90% needs ≥ 27",
                         "HIO003: about 50 ms of device time per call needs 184"]
    assert "(one value for HIO003 and PIPE003: " in e.findings[0].recommendation
    [ramp, calls] = e.plan.actions
    assert (ramp.code, round(ramp.throughput_gain_frac, 4), ramp.gain_text) == \
        ("PIPE003", 0.5726, "about +57% throughput (estimated)")
    assert (calls.code, calls.gain_text) == ("HIO003", "gain not estimated")


@pytest.mark.parametrize("sample", ["bert_pipeline", "mnist_pipeline", "oom_compile"])
def test_samples_one_value_per_option_and_shares_add_up(sample):
    result = analyse(popviz.load(ROOT / "sample_reports" / sample))
    for e in result.engines:
        assert all(len(v) == 1 for v in _values(e).values()), (e.report.label, _values(e))
        p = e.metrics["pipeline"]
        sh = p["cycle_shares"]
        if e.report.execution is None:
            assert sh is None
            continue
        assert sum(sh[f"{k}_cycles"] for k in PARTS) == sh["ipus"] * sh["elapsed_cycles"]
        assert sum(sh[f"{k}_frac"] for k in PARTS) == pytest.approx(1.0, abs=1e-12)
        assert sh["useful_frac"] + sh["weight_update_frac"] == pytest.approx(p["utilisation_frac"], abs=1e-12)
        # actions ranked: errors first, then by throughput gain, then bytes
        gains = [a.throughput_gain_frac or 0 for a in e.plan.actions if a.severity != "error"]
        assert gains == sorted(gains, reverse=True)


def test_bert_training_plan_ranks_balance_before_ramp_before_outputs():
    result = analyse(popviz.load(ROOT / "sample_reports" / "bert_pipeline"))
    plan = result.engines[1].plan
    assert [a.code for a in plan.actions] == ["PIPE001", "PIPE003", "HIO002", "MEM002", "MEM004"]
    assert plan.actions[0].gain_text == "up to +30% throughput"
    # the whole call's gain: (slowest − mean) cycles per micro-batch saved from each call's
    # 2,167,260.25 cycles per micro-batch; the steady state alone would gain 37%
    p = result.engines[1].metrics["pipeline"]
    cycles = [s["cycles"] for s in p["stages"]]
    saved = max(cycles) - sum(cycles) / 4
    assert p["call_cycles_per_micro_batch"] == 2167260.25 and saved == pytest.approx(501875.0)
    assert p["balanced_call_gain_frac"] == pytest.approx(2167260.25 / (2167260.25 - 501875.0) - 1)
    assert round(p["balanced_gain_frac"], 4) == 0.3708 and round(p["balanced_call_gain_frac"], 4) == 0.3014
    # the outputs' share of the transfer time: under 0.1% of the call
    assert plan.actions[2].gain_text == "under +0.1% throughput, 192,700 B (188.2 KiB) less per call"


def test_balance_advice_respects_a_full_destination():
    # stage 1 is the bottleneck; stage 0's IPU, where work would go, is 90% full
    r = testing.pipeline_report([1000, 3000], memory_level="ipu", memory_frac=[0.9, 0.5],
                                gradient_accumulation=64)
    [e] = analyse(ReportSet([r])).engines
    f = next(f for f in e.findings if f.code == "PIPE001")
    assert e.metrics["pipeline"]["rebalance_to_ipu"] == 0
    assert f.recommendation.endswith("(but IPU0 is already 90% full: move only layers whose memory fits there).")


def test_console_and_markdown_start_with_the_summary():
    import io

    from popviz.render import console, markdown

    result = analyse(popviz.load(ROOT / "sample_reports" / "bert_pipeline"))
    buf = io.StringIO()
    console.render(result, file=buf, width=200)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "summary"
    assert lines[1].strip() == ("2 engines; worst finding: warning, PIPE004 on inference: Sharded execution: "
                                "one IPU works at a time")
    assert lines[3].strip().startswith("training: 1. PIPE001 Unbalanced pipeline: stage 3 (IPU3) is the "
                                       "bottleneck (up to +30% throughput); 2. PIPE003")
    md = markdown.render(result)
    assert md.splitlines()[2:5] == ["**Summary**", "", "- " + lines[1].strip()]


def test_the_shared_value_carries_the_batch_ratio_with_it():
    # D = 8: the ramp needs 27, the call time 232; the "× larger" follows the shared value
    r = testing.pipeline_report([200_000] * 4, mode="inference", device_iterations=8)
    [e] = analyse(ReportSet([r])).engines
    [d] = e.plan.decisions
    value = d.value
    assert _values(e) == {"opts.deviceIterations": {value}}
    hio = next(f for f in e.findings if f.code == "HIO003")
    assert f"batches {value / 8:.0f}× larger" in hio.recommendation


def test_a_wait_for_the_host_gains_the_call_without_its_waits_and_leads_the_summary():
    from popviz.render.text import summary_lines

    # a long wait per input copy, and OutputMode.All in training: HIO001 and HIO002, both warnings
    r = testing.pipeline_report([1000] * 2, mode="training", output_mode="All", host_wait_cycles=200_000,
                                host_bytes_per_cycle=6.0)
    [e] = analyse(ReportSet([r])).engines
    hio = e.metrics["host_io"]
    w = hio["host_wait_frac"]
    [wait] = [a for a in e.plan.actions if a.code == "HIO001"]
    # a bound: the call without the host time no IPU is free of (IPU1 waits while IPU0 copies),
    # not IPU0's own wait alone (w / (1 - w) = +818%, which the other IPU's waits exceed)
    shares = e.metrics["pipeline"]["cycle_shares"]
    assert (shares["elapsed_cycles"], shares["least_host_cycles"]) == (3_591_059, 3_535_759)
    assert wait.throughput_gain_frac == pytest.approx(3_591_059 / (3_591_059 - 3_535_759) - 1)
    assert (round(w, 4), wait.gain_text, wait.gain_estimated) == (0.8911, "up to +6394% throughput", False)
    assert [a.code for a in e.plan.actions][:2] == ["HIO001", "HIO002"]  # the throughput gain ranks first
    assert summary_lines(analyse(ReportSet([r])))[0].startswith("1 engine; worst finding: warning, HIO001 on ")


def test_summary_says_how_many_more_findings_an_engine_section_holds():
    import popviz
    from popviz.render.text import summary_lines

    from conftest import SAMPLES

    lines = summary_lines(popviz.analyse(popviz.load(SAMPLES / "bert_pipeline")))
    [training] = [line for line in lines if line.startswith("training: 1.")]
    assert training.endswith("(under +0.1% throughput, 192,700 B (188.2 KiB) less per call); and 2 more "
                             "warnings below")


def test_transfer_bound_copies_gain_the_call_without_transfers_and_rank_before_the_outputs():
    # a reviewer's CNN: large float32 images in, OutputMode.All returning small logits in training.
    # The transfers take the time (2,000-cycle waits, 0.25 B/cycle), the inputs are 99% of the bytes:
    # HIO001's lever (fewer input bytes) can win x / (1 - x), HIO002's at most its bytes' share of x
    r = testing.pipeline_report([20_000] * 2, mode="training", output_mode="All", gradient_accumulation=8,
                                host_bytes_per_cycle=0.25, inputs={"images": ((4, 3, 32, 32), "float32")},
                                outputs={"logits": ((4, 10), "float32")})
    [e] = analyse(ReportSet([r])).engines
    hio = e.metrics["host_io"]
    x = hio["transfer_frac"]
    assert hio["input_bytes_per_call"] == 8 * 49_152 and hio["output_bytes_per_call"] == 8 * 160
    [copies] = [a for a in e.plan.actions if a.code == "HIO001"]
    # IPU1 copies little but waits while IPU0 copies: 1,609,984 host cycles of its 2,105,654
    assert e.metrics["pipeline"]["cycle_shares"]["least_host_cycles"] == 1_609_984
    assert copies.throughput_gain_frac == pytest.approx(2_105_654 / (2_105_654 - 1_609_984) - 1)
    assert x / (1 - x) < copies.throughput_gain_frac
    [outputs] = [a for a in e.plan.actions if a.code == "HIO002"]
    share = x * (7 * 160) / (8 * 49_152 + 8 * 160)
    assert outputs.throughput_gain_frac == pytest.approx(share / (1 - share))
    assert outputs.gain_estimated and outputs.gain_text.startswith("about +0.2% throughput (estimated)")
    assert outputs.bytes_saved_per_call == 7 * 160 and outputs.severity == "info"
    assert [a.code for a in e.plan.actions].index("HIO001") < [a.code for a in e.plan.actions].index("HIO002")
