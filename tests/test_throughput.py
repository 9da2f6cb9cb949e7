"""Throughput (popviz/analysis/throughput.py): samples per second per replica and for the whole
system, time per call and per micro-batch, in every output, and as a CI metric that gates."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from popviz import testing
from popviz.analysis import analyse
from popviz.analysis.throughput import throughput
from popviz.ci.baseline import EngineMetrics
from popviz.ci.compare import IMPROVED, REGRESSED, compare, fmt
from popviz.ci.metrics import LOWER_IS_WORSE, definition, engine_metrics
from popviz.model import ExecutionTable, ReportSet
from popviz.render import json as render_json
from popviz.render.markdown import render as markdown


def timed(durations=(0.5, 0.3), **kwargs):
    """A report (micro-batch 16 from its (16, 784) input) whose runs took ``durations`` seconds."""
    report = testing.single_ipu_report(5000, gradient_accumulation=4, device_iterations=2, replication_factor=2,
                                       **kwargs)
    steps = report.execution.steps
    both = pd.concat([steps, steps.assign(run=1)], ignore_index=True)
    runs = pd.DataFrame({"run": [0, 1], "name": ["a", "b"], "duration_seconds": list(durations)})
    report.execution = ExecutionTable(both, runs)
    return report


def test_samples_per_second_from_run_durations():
    t = throughput(timed())
    # one call: 16 x D 2 x G 4 x R 2 = 256 samples in the mean of 0.5 s and 0.3 s
    assert (t.samples_per_call, t.call_seconds, t.samples_per_second) == (256, 0.4, 640.0)
    assert t.samples_per_second_per_replica == 320.0 and t.micro_batch_seconds == 0.05
    assert (t.micro_batch_size, t.micro_batches_per_call, t.replicas, t.estimated) == (16, 8, 2, False)


def test_loop_rate_adds_the_measured_host_work_between_calls():
    import dataclasses

    report = timed()
    assert throughput(report).loop_samples_per_second is None  # not measured: no loop figure
    report.config = dataclasses.replace(report.cfg, options={"emulator": {"host_seconds_between_calls": 0.1}})
    t = throughput(report)
    # 256 samples per call of 0.4 s, plus 0.1 s of the script's own work between calls
    assert (t.host_seconds_between_calls, t.loop_samples_per_second, t.samples_per_second) == (0.1, 512.0, 640.0)
    out = analyse(ReportSet([report])).engines[0].outputs["throughput"]
    assert out.metrics["loop_samples_per_second"] == 512.0
    assert out.table.iloc[0][["host ms between calls", "loop samples/s"]].tolist() == [100.0, 512.0]
    assert out.caption.endswith("as the script's loop runs it: 512.0 samples/s (each call plus 100.00 ms of the "
                                "script's own host work between calls, measured on the machine that ran it)")
    for bad in (-1.0, "0.1", True, None, 10**400):  # a 400-digit JSON number is no float either
        report.config = dataclasses.replace(report.cfg, options={"emulator": {"host_seconds_between_calls": bad}})
        assert throughput(report).loop_samples_per_second is None


def test_call_time_from_cycles_when_durations_are_unknown():
    report = testing.single_ipu_report(5000, gradient_accumulation=4, device_iterations=2)
    busiest = int(report.execution.steps.groupby("ipu")["cycles"].sum().max())
    t = throughput(report)
    assert t.call_seconds == busiest / 1.33e9
    assert t.samples_per_second == 16 * 2 * 4 / (busiest / 1.33e9)


def test_inference_counts_no_gradient_accumulation():
    report = testing.single_ipu_report(5000, mode="inference", device_iterations=3)
    t = throughput(report)
    assert t.samples_per_call == 16 * 3 and t.micro_batches_per_call == 3


def test_unknown_without_execution_or_micro_batch():
    out = analyse(ReportSet([testing.single_ipu_report(execution=False)])).engines[0].outputs["throughput"]
    assert set(out.metrics.values()) == {None}
    assert out.not_checked[0].reason == ("no execution profile was recorded: the engine did not run, or execution "
                                         "profiling was off")
    bare = analyse(ReportSet([testing.single_ipu_report(with_host_io=False)])).engines[0].outputs["throughput"]
    assert bare.not_checked[0].reason == "the micro-batch size or the call's time is unknown"


def test_estimated_reports_say_so_in_every_output():
    result = analyse(ReportSet([timed(source="emulator", estimated=True)]))
    out = result.engines[0].outputs["throughput"]
    assert out.caption == ("estimated by the emulator's cost model: 640.0 samples/s for the whole system "
                           "(2 replicas × 320.0) · one call: 256 samples (micro-batch 16 × 8 micro-batches × "
                           "2 replicas) in 400.00 ms, 50.00 ms per micro-batch")
    doc = json.loads(render_json.render(result))
    assert doc["analyses"][-1] == "throughput"
    assert doc["engines"][0]["metrics"]["throughput"]["samples_per_second"] == 640.0
    assert doc["engines"][0]["metrics"]["throughput"]["call_seconds"] == 0.4
    assert doc["engines"][0]["metrics"]["throughput"]["estimated"] is True
    assert "estimated by the emulator's cost model: 640.0 samples/s" in markdown(result)
    measured = analyse(ReportSet([timed()])).engines[0].outputs["throughput"]
    assert measured.caption.startswith("640.0 samples/s for the whole system")


def test_estimates_dominated_by_small_products_are_called_pessimistic():
    import dataclasses

    report = timed(source="emulator", estimated=True)
    report.config = dataclasses.replace(report.cfg, options={"emulator": {"small_products_share": 0.934}})
    out = analyse(ReportSet([report])).engines[0].outputs["throughput"]
    assert out.caption.endswith(" in 400.00 ms, 50.00 ms per micro-batch · likely pessimistic: 93% of the "
                                "estimated operation cycles are small matmuls or convolutions, which public "
                                "hardware traces ran several times faster than the cost model charges "
                                "(docs/emulator.md, T1 and B10)")
    assert "likely pessimistic: 93%" in markdown(analyse(ReportSet([report])))
    # an untrusted bundle's value is shown only when it is a share (NaN never loads: options are JSON);
    # a measured report never says so
    # below 0.5 is not a share the emulator writes ("likely pessimistic: 0%" would be absurd)
    for bad in ("0.9", True, 1.5, 0.0, 1e-9, 0.49, -0.2, None, [0.9], 10**400):
        report.config = dataclasses.replace(report.cfg, options={"emulator": {"small_products_share": bad}})
        assert "pessimistic" not in analyse(ReportSet([report])).engines[0].outputs["throughput"].caption
    measured = timed()
    measured.config = dataclasses.replace(measured.cfg, options={"emulator": {"small_products_share": 0.9}})
    assert "pessimistic" not in analyse(ReportSet([measured])).engines[0].outputs["throughput"].caption


def test_json_validates_against_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    result = analyse(ReportSet([timed(), testing.single_ipu_report(execution=False, name="oom")]))
    jsonschema.validate(json.loads(render_json.render(result)), render_json.schema())


def test_ci_metric_gates_a_drop():
    d = definition("throughput.samples_per_second")
    assert (d.unit, d.direction, d.deterministic) == ("samples_per_second", LOWER_IS_WORSE, True)
    result = analyse(ReportSet([timed()]))
    assert engine_metrics(result.engines[0])["throughput.samples_per_second"] == 640.0

    def side(value):
        return [EngineMetrics(name="training", instance=None, source="bundle", estimated=False, config={},
                              metrics={"throughput.samples_per_second": value})]

    rows = {r.metric: r for r in compare(side(640.0), side(600.0), []).rows}
    assert rows["throughput.samples_per_second"].verdict == REGRESSED  # 6.25% fewer samples/s, over 1%
    rows = {r.metric: r for r in compare(side(600.0), side(640.0), []).rows}
    assert rows["throughput.samples_per_second"].verdict == IMPROVED
    assert fmt(640.0, "samples_per_second") == "640.0/s"
    assert fmt(123_456.0, "samples_per_second") == "123.5k/s"
