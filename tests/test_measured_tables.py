"""Tables only a real run measures, read through the libpva test double: stream copies by
destination (host vs remote buffer, measured bytes), Lightweight Profiling blocks and
System Analyser host traces (.pvti). Every name is optional: a profile without them reads as
before."""

from __future__ import annotations

import sys

import pytest

from conftest import FAKE_PVA, run_cli


@pytest.fixture
def fake_pva(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE_PVA))
    monkeypatch.delitem(sys.modules, "pva", raising=False)
    import pva

    return pva


def _load(tmp_path, pva, data: dict, debug: bool = True, engine: str = "training"):
    import popviz

    (tmp_path / engine).mkdir(parents=True, exist_ok=True)
    pva.write_data(tmp_path / engine / "profile.pop", data)
    if debug:
        (tmp_path / engine / "debug.cbor").write_bytes(b"\xa0")
    return popviz.load(tmp_path)


def test_offloaded_optimizer_is_not_blamed_on_the_host(tmp_path, fake_pva):
    import popviz

    reports = _load(tmp_path, fake_pva, fake_pva.offloaded_optimizer())
    table = reports[0].streams.frame
    rules = dict(zip(table["program"], zip(table["destination"], table["rule"], strict=True), strict=False))
    assert rules["optimizerState/load0"] == ("remote buffer", "debug context")
    assert rules["RB_1/store"] == ("remote buffer", "program name")
    assert rules["inputCopy"] == ("host", "program name")
    assert rules["weightsFromHost"] == ("host", "program name")
    e = popviz.analyse(reports).engines[0]
    h = e.metrics["host_io"]
    codes = [f.code for f in e.findings]
    assert "HIO001" not in codes and "HIO004" in codes
    # per call: 4 input copies of 200 cycles on IPU0; per IPU 2 × (500 + 6,000 + 500) remote cycles
    ipu0 = h["ipus"][0]
    assert ipu0["stream_copy_cycles"] == 2 * 4 * 200
    assert ipu0["remote_buffer_frac"] == pytest.approx(2 * 2 * 7000 / ipu0["total_cycles"])
    assert ipu0["remote_buffer_bytes_per_call"] == 8_000_000  # 4 MB loaded + 4 MB stored
    assert (h["host_bytes_per_call"], h["host_bytes_basis"]) == (200_000, "measured")
    shares = e.metrics["pipeline"]["cycle_shares"]  # the call's time: streaming memory, not host
    assert shares["remote_frac"] > 0.5 and shares["host_frac"] < 0.02
    hio4 = next(f for f in e.findings if f.code == "HIO004")
    assert "not host I/O" in hio4.title and "useOnChipStorage" in hio4.recommendation


def test_without_debug_contexts_an_unnamed_remote_copy_is_unknown_and_said_so(tmp_path, fake_pva):
    import popviz

    reports = _load(tmp_path, fake_pva, fake_pva.offloaded_optimizer(), debug=False)
    table = reports[0].streams.frame
    assert set(table.loc[table["program"] == "optimizerState/load0", "destination"]) == {"unknown"}
    assert any("destination of 2 stream-copy program(s)" in n for n in reports[0].provenance.notes)
    e = popviz.analyse(reports).engines[0]
    assert e.metrics["host_io"]["ipus"][0]["unknown_destination_frac"] > 0
    assert "counted as host" in e.outputs["host_io"].caption


def test_a_profile_without_the_new_names_reads_as_before(tmp_path, fake_pva):
    reports = _load(tmp_path, fake_pva, fake_pva.pipeline_profile(), debug=False)
    r = reports[0]
    assert r.blocks is None and r.host_trace is None
    assert set(r.streams.frame["destination"]) == {"host"}  # inputCopy, weightsFromHost
    assert r.streams.frame["data_in_bytes"].isna().all()
    assert any("bytes per copy" in n for n in r.provenance.notes)


def test_run_microseconds_with_start_and_end(tmp_path, fake_pva):
    data = fake_pva.single_ipu_inference()
    for run in data["runs"]:
        run["microseconds"] = {"start": 1000.0, "end": 1000.0 + run["microseconds"]}
    r = _load(tmp_path, fake_pva, data, debug=False, engine="inference")[0]
    assert r.execution.runs["duration_seconds"].round(9).tolist() == [round(20_000 / 1.33e9, 9)] * 3


def _blocks(per_ipu: dict[int, int], executions: int) -> list:
    """One top-level block per micro-batch on tile 0 of each IPU (4 tiles per IPU), plus a
    nested one inside (not counted twice) and a flush (not stage work)."""
    rows = []
    for ipu, cycles in per_ipu.items():
        for k in range(executions):
            start = 10_000 * k
            rows.append({"tile": 4 * ipu, "program": f"stage{ipu}", "start": start, "end": start + cycles})
            rows.append({"tile": 4 * ipu, "program": f"stage{ipu}/op", "start": start + 1, "end": start + 10})
        rows.append({"tile": 4 * ipu, "program": "flush", "start": 0, "end": 99, "kind": "flush"})
    return rows


def test_pipeline_prefers_lightweight_profiling_blocks(tmp_path, fake_pva):
    import popviz

    data = fake_pva.pipeline_profile()  # the steps make stage 2 the bottleneck (2,000 + 4,000)
    data["blocks"] = _blocks({0: 9000, 1: 3000, 2: 3000, 3: 3000}, executions=32)
    e = popviz.analyse(_load(tmp_path, fake_pva, data)).engines[0]
    p = e.metrics["pipeline"]
    assert p["stage_cycles_basis"] == "lightweight profiling blocks"
    assert [s["cycles"] for s in p["stages"]] == [9000, 3000, 3000, 3000]
    assert p["bottleneck_stage"] == 0
    assert "measured by Lightweight Profiling blocks" in e.outputs["pipeline"].caption


def test_blocks_missing_on_an_ipu_fall_back_to_steps(tmp_path, fake_pva):
    import popviz

    data = fake_pva.pipeline_profile()
    data["blocks"] = _blocks({0: 9000, 1: 3000}, executions=4)
    e = popviz.analyse(_load(tmp_path, fake_pva, data)).engines[0]
    assert e.metrics["pipeline"]["stage_cycles_basis"] == "execution steps"
    assert "no block on IPU2, IPU3" in e.outputs["pipeline"].caption


def test_host_trace_splits_each_call(tmp_path, fake_pva):
    import popviz

    data = fake_pva.pipeline_profile()
    (tmp_path / "training").mkdir()
    fake_pva.write_trace(tmp_path / "Tue_Nov_24_2020_4242.pvti", fake_pva.training_loop_trace())
    reports = _load(tmp_path, fake_pva, data)
    calls = reports[0].host_trace.calls
    assert calls["executor_seconds"].tolist() == [0.02] * 4
    assert calls["data_loading_seconds"].tolist()[1:] == [0.006] * 3
    assert calls["other_host_seconds"].round(9).tolist()[1:] == [0.001] * 3
    e = popviz.analyse(reports).engines[0]
    t = e.metrics["host_io"]["host_trace"]
    assert (t["executor_seconds"], t["data_loading_seconds"], t["calls"]) == (0.02, 0.006, 4)
    assert "data loading 6.00 ms (22%)" in e.outputs["host_io"].caption


def test_host_trace_on_the_cli_at_80_columns(tmp_path, fake_pva, fake_pva_env):
    (tmp_path / "training").mkdir()
    fake_pva.write_data(tmp_path / "training" / "profile.pop", fake_pva.offloaded_optimizer())
    fake_pva.write_trace(tmp_path / "run_4242.pvti", fake_pva.training_loop_trace())
    proc = run_cli("analyse", str(tmp_path), env={**fake_pva_env, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "executor call 20.00 ms" in out and "remote buffer %" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_capture_lwp_sets_the_engine_options_of_lightweight_profiling(tmp_path):
    import json

    from test_capture_cli import PY, capture

    code = "import os; print(os.environ['POPLAR_ENGINE_OPTIONS'])"
    proc = capture("-o", "out", "--lwp", "stage.*", "--", PY, "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    opts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (opts["profiler.programs.filter"], opts["debug.instrumentExternalExchange"]) == ("stage.*", "true")
    proc = capture("-o", "out2", "--", PY, "-c", code, cwd=tmp_path)
    assert "profiler.programs.filter" not in json.loads(proc.stdout.strip().splitlines()[-1])


def test_reports_without_a_stream_table_derive_one_by_program_name():
    from popviz import testing
    from popviz.model.measured import stream_copies

    r = testing.pipeline_report([1000, 2000])
    assert r.streams is None
    t = stream_copies(r).frame
    per = t.groupby(["program", "destination", "rule"])["steps"].sum().to_dict()
    assert per == {("input/begin", "host", "program name"): 16, ("input/end", "host", "program name"): 16,
                   ("input/mid", "host", "program name"): 16, ("output/begin", "host", "program name"): 1,
                   ("output/end", "host", "program name"): 1, ("output/mid", "host", "program name"): 1}
    assert t["data_in_bytes"].isna().all()


def test_timeline_colours_remote_buffer_copies_as_streaming_memory(tmp_path, fake_pva):
    r = _load(tmp_path, fake_pva, fake_pva.offloaded_optimizer())[0]
    counts = r.steps()["category"].value_counts()
    # the first call: per IPU 2 × (Begin + Mid + End) remote-buffer steps; 4 input copies on IPU0
    assert (counts["streaming memory"], counts["host copy"]) == (2 * 2 * 3, 4)


@pytest.mark.parametrize(("name", "types", "expected"), [
    ("RB_12/load", (), ("remote buffer", "program name")),
    ("remoteStore", (), ("remote buffer", "program name")),
    ("fromHost/input_ids", (), ("host", "program name")),
    ("RB_3/anchor", (), ("mixed", "program name")),
    ("copy_77", (), ("unknown", "none")),
    ("copy_77", ("RemoteLoad", "RemoteStore"), ("remote buffer", "debug context")),
    ("input", ("RemoteLoad",), ("remote buffer", "debug context")),  # the debug context wins
    ("copy_77", ("HostLoad", "RemoteStore"), ("mixed", "debug context")),
    ("TRB_1x", (), ("unknown", "none")),  # RB_ must start a name part
])
def test_destination_rule(name, types, expected):
    from popviz.model.measured import classify_stream

    assert classify_stream(name, types) == expected


def test_export_keeps_the_stream_and_block_tables(tmp_path, fake_pva, fake_pva_env):
    """popviz export on the IPU host, analyse elsewhere: the measured destinations and bytes (and
    blocks) travel in the bundle, so the bundle's analysis blames the host no more than the
    profile's."""
    import json

    data = fake_pva.offloaded_optimizer()
    data["blocks"] = _blocks({0: 3000, 1: 3000}, executions=8)
    _load(tmp_path / "run", fake_pva, data)
    proc = run_cli("export", str(tmp_path / "run"), "-o", str(tmp_path / "bundle"), env=fake_pva_env)
    assert proc.returncode == 0, proc.stderr
    import popviz

    bundle = popviz.load(tmp_path / "bundle")[0]
    profile = popviz.load(tmp_path / "run")[0]
    assert bundle.streams == profile.streams and bundle.blocks == profile.blocks
    docs = [json.loads(run_cli("analyse", str(tmp_path / d), "--json", env=fake_pva_env).stdout)
            for d in ("run", "bundle")]
    import jsonschema

    from popviz.render.json import schema

    for doc in docs:  # the new metrics follow the documented schema
        jsonschema.Draft202012Validator(schema()).validate(doc)
    assert docs[0]["engines"][0]["metrics"]["pipeline"]["stage_cycles_basis"] == "lightweight profiling blocks"
    assert docs[0]["engines"][0]["metrics"]["host_io"]["host_bytes_basis"] == "measured"
    codes = [[f["code"] for f in doc["engines"][0]["findings"]] for doc in docs]
    assert codes[0] == codes[1] and "HIO004" in codes[0] and "HIO001" not in codes[0]


def _trace(instance: str, loading: float):
    import pandas as pd

    from popviz.model.measured import HostTrace

    calls = pd.DataFrame({"instance": [instance] * 3, "pid": [1] * 3, "tid": [1] * 3, "call": [0, 1, 2],
                          "start_seconds": [0.0, 0.05, 0.1], "executor_seconds": [0.02] * 3,
                          "data_loading_seconds": [None, loading, loading], "other_host_seconds": [None, 0.001, 0.001]})
    threads = pd.DataFrame({"instance": [instance], "pid": [1], "tid": [1], "events": [6], "busy_seconds": [0.1],
                            "data_loading_seconds": [2 * loading], "executor_seconds": [0.06]})
    return HostTrace(calls.astype({"data_loading_seconds": "float64", "other_host_seconds": "float64"}), threads)


def test_inst003_names_the_host_part_the_traces_show():
    from popviz import testing
    from popviz.analysis import instances
    from popviz.model import CallStats, HostIO, ReportSet

    r = testing.pipeline_report([100, 100], tiles_per_ipu=4)
    reports = []
    for i, (p50, loading) in enumerate(((0.024, 0.003), (0.024, 0.003), (0.032, 0.009))):
        reports.append(r.replace(instance=f"instance-{i}", host_trace=_trace(f"instance-{i}", loading),
                                 host_io=HostIO(calls=10, call_stats=(CallStats(
                                     "wall_seconds", count=10, sum=10 * p50, min=p50, max=p50, p50=p50),))))
    out = instances.check(ReportSet(reports, root="run"))
    [f] = out["instance-2/training"].findings
    assert f.code == "INST003"
    assert f.recommendation.endswith("The host traces show where: data loading takes 9.00 ms per call here "
                                     "against 3.00 ms on the other instances (median), the largest difference "
                                     "of executor call, data loading and other host time.")
    assert "--pvti records" not in f.recommendation


def test_an_unreadable_host_trace_is_a_warning(tmp_path, fake_pva):
    (tmp_path / "training").mkdir()
    (tmp_path / "broken.pvti").write_text("not a trace")
    reports = _load(tmp_path, fake_pva, fake_pva.pipeline_profile())
    assert reports[0].host_trace is None
    assert any("broken.pvti: libpva cannot read this host trace" in w for w in reports.warnings)
