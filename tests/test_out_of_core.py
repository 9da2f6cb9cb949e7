"""An execution table kept out of core (a bundle's execution.parquet read per row group) gives
exactly the figures of the same table in memory, and load, analyse and every figure never read
it whole (ExecutionTable.materialisations counts the times it is)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import popviz
from popviz import testing
from popviz.analysis import analyse
from popviz.errors import CorruptReportError
from popviz.model import ExecutionTable
from popviz.model.aggregate import RunCycles
from popviz.model.rowsource import FrameRows
from popviz.render.json import result_to_dict
from popviz.sources import bundle
from popviz.sources.bundle import write_bundle
from popviz.sources.parquet_rows import ParquetRows


def _report():
    """A pipelined report with a second call, a copy-only run (weights from the host, not a
    call), a weight-update program, Syncs and remote-buffer copies (several row groups once
    written with 7-row groups)."""
    r = testing.pipeline_report([1000, 3000, 1000], output_mode="All", gradient_accumulation=8,
                                device_iterations=2)
    steps = r.execution.steps
    second = steps.assign(run=3, cycles=steps["cycles"] * 2)
    copy = steps[steps["program_type"] == "StreamCopyMid"].assign(run=1)
    extra = pd.DataFrame({"run": [0, 0, 3, 0, 3], "step": [90, 91, 92, 93, 94],
                          "program": ["optimizer/weight_update", "RB_7/remote_load", "RB_7/remote_load",
                                      "sync", "sync"],
                          "program_type": ["OnTileExecute", "StreamCopyMid", "StreamCopyMid", "Sync", "Sync"],
                          "ipu": [1, 2, 2, 0, 0], "cycles": [400, 250, 250, 7, 3]})
    frame = pd.concat([steps, copy, extra, second], ignore_index=True)
    runs = pd.DataFrame({"run": [0, 1, 2, 3], "name": ["call0", "weights", "unused", "call1"]})
    return r.replace(execution=ExecutionTable(frame, runs))


@pytest.fixture
def out_of_core(monkeypatch, tmp_path):
    monkeypatch.setenv("POPVIZ_OUT_OF_CORE_ROWS", "0")
    monkeypatch.setattr(bundle, "ROW_GROUP_ROWS", 7)
    r = _report()
    write_bundle(r, tmp_path / "training")
    return r, tmp_path / "training"


def _totals(rc: RunCycles):
    calls = rc.calls()
    return {"runs": rc.runs.tolist(), "longest": rc.longest.tolist(), "compute": rc.compute.tolist(),
            "calls": calls, "elapsed": rc.elapsed(calls), "mean": rc.mean_longest(),
            "types": sorted(map(tuple, rc.by_ipu_type(calls).astype({"ipu": "int64"}).values.tolist())),
            "all": sorted(map(tuple, rc.by_ipu_type(rc.runs.tolist()).astype({"ipu": "int64"}).values.tolist())),
            "only1": sorted(map(tuple, rc.by_ipu_type([1]).astype({"ipu": "int64"}).values.tolist())),
            "update": rc.weight_update(calls), "sync": rc.sync(calls), "sync3": rc.sync([3]),
            "programs": sorted((str(p), int(i), int(c)) for (p, i), c in rc.by_program_ipu(calls).items()),
            "copies": rc.copy_groups().astype({"program": "str", "program_type": "str"}).values.tolist()}


@pytest.mark.parametrize("combined_bins", [2**16, 0])  # one key per block, or keyed apart
def test_streamed_reduction_equals_pandas_and_the_in_memory_one(out_of_core, monkeypatch, combined_bins):
    from popviz.model import aggregate

    monkeypatch.setattr(aggregate, "COMBINED_MIN_BINS", combined_bins)
    r, path = out_of_core
    steps = r.execution.steps
    rows = ParquetRows(str(path / bundle.STEPS_FILE))
    assert len(rows._stats) == -(-len(steps) // 7) > 5  # several row groups
    ids = r.execution.runs["run"].to_numpy()
    expected = _totals(RunCycles(steps, run_ids=ids))
    for block in (1, 3, 7, 2**20):
        assert _totals(RunCycles(rows, run_ids=ids, block_rows=block)) == expected
        shuffled = steps.sample(frac=1.0, random_state=block)
        assert _totals(RunCycles(FrameRows(shuffled.reset_index(drop=True)), run_ids=ids,
                                 block_rows=block)) == expected
    # the figures themselves, from pandas
    calls = expected["calls"]
    assert calls == [0, 3]  # run 1 copies weights only; run 2 has no step
    part = steps[steps["run"].isin(calls)]
    by = part.groupby(["ipu", "program_type"], observed=True)["cycles"].sum()
    assert expected["types"] == sorted((int(i), str(t), int(c)) for (i, t), c in by.items() if c)
    per = steps.groupby(["run", "ipu"])["cycles"].sum().groupby("run").max()
    assert expected["longest"] == per.tolist() and expected["mean"] == per.mean()
    from popviz.model.names import WEIGHT_UPDATE_PROGRAM

    upd = part[part["program"].astype(str).str.contains(WEIGHT_UPDATE_PROGRAM)
               & part["program_type"].isin(["OnTileExecute", "DoExchange"])]
    assert expected["update"] == {int(i): int(c) for i, c in upd.groupby("ipu")["cycles"].sum().items()}
    assert expected["update"][1] == 9400  # the added optimizer step's 400 included
    sync = part[part["program_type"] == "Sync"]
    assert expected["sync"] == {int(i): (len(g), int(g["cycles"].sum()), int(g["cycles"].min()))
                                for i, g in sync.groupby("ipu")}
    s3 = sync.loc[(sync["run"] == 3) & (sync["ipu"] == 0), "cycles"]
    assert expected["sync3"][0] == (len(s3), int(s3.sum()), int(s3.min())) and int(s3.min()) == 3
    bp = part.groupby(["program", "ipu"], observed=True)["cycles"].sum()
    assert expected["programs"] == sorted((str(p), int(i), int(c)) for (p, i), c in bp.items())
    copies = steps[steps["program_type"].astype(str).str.startswith("StreamCopy")]
    g = copies.groupby(["run", "ipu", "program", "program_type"], observed=True)["cycles"].agg(["size", "sum"])
    assert sorted(tuple(x) for x in expected["copies"]) == sorted(
        (int(a), int(b), str(p), str(t), int(n), int(c)) for (a, b, p, t), (n, c) in g.iterrows())


def test_load_analyse_and_every_figure_never_read_the_table_whole(out_of_core, tmp_path):
    from popviz import plot

    r, path = out_of_core
    before = ExecutionTable.materialisations
    reports = popviz.load(path)
    loaded = reports[0]
    assert loaded.execution.on_disk and loaded.execution.num_rows == len(r.execution.steps)
    from popviz.model import ReportSet

    got, want = analyse(reports), analyse(ReportSet([r.replace(path=str(path))], root=reports.root))
    a, b = result_to_dict(got)["engines"][0], result_to_dict(want)["engines"][0]
    for key in ("metrics", "findings", "not_checked", "config"):
        assert json.dumps(a[key], sort_keys=True) == json.dumps(b[key], sort_keys=True), key
    figures = plot.figures(loaded)
    assert "timeline" in figures and not isinstance(figures["timeline"], Exception)
    for name, fig in figures.items():
        if not isinstance(fig, Exception):
            fig.savefig(tmp_path / f"{name}.png")
    pd.testing.assert_frame_equal(loaded.steps(), r.replace(path=None).steps(), check_categorical=False)
    pd.testing.assert_frame_equal(loaded.time_shares(), r.time_shares())
    assert ExecutionTable.materialisations == before
    # Asked for, the whole table is read (once) and equals what was written.
    assert loaded.execution.read(runs=[3], columns=["run", "cycles"]).reset_index(drop=True).equals(
        r.execution.steps.loc[r.execution.steps["run"] == 3, ["run", "cycles"]].reset_index(drop=True))
    assert ExecutionTable.materialisations == before
    assert loaded.execution == r.execution
    assert ExecutionTable.materialisations == before + 1
    assert "out of core" not in repr(loaded.execution)  # read now
    assert len(loaded.execution.steps) == len(r.execution.steps)


def test_the_boundary_checks_name_the_same_row_out_of_core(monkeypatch, tmp_path):
    r = _report()
    steps = r.execution.steps.copy()
    steps.loc[[9, 20], "cycles"] = -5
    bad = r.replace(execution=ExecutionTable(steps, r.execution.runs))
    messages = []
    for limit, where in ((10**9, "memory"), (0, "disk")):
        monkeypatch.setenv("POPVIZ_OUT_OF_CORE_ROWS", str(limit))
        monkeypatch.setattr(bundle, "ROW_GROUP_ROWS", 7)
        write_bundle(bad, tmp_path / where)
        with pytest.raises(CorruptReportError) as exc:
            popviz.load(tmp_path / where)
        messages.append(str(exc.value).replace(where, "X"))
    assert messages[0] == messages[1]
    assert "column 'cycles': cycles must not be negative (row 9: -5; 2 row(s) in all)" in messages[0]


def _with_liveness(r):
    from popviz.model import LivenessTable

    per = np.arange(40, dtype="int64").reshape(20, 2) * 1000
    return r.replace(liveness=LivenessTable(programs=pd.Categorical([f"p{k % 3}" for k in range(20)]),
                                            total_bytes=per.sum(axis=1), ipu_bytes=per, ipus=(0, 1),
                                            always_live_bytes={0: 5, 1: 6}))


def test_the_pass_beside_the_liveness_read_gives_the_same_figures_and_errors(monkeypatch, tmp_path):
    """With a liveness table the bundle reader runs the rows' pass on a thread while it reads
    the liveness: load waits for it, shares its result (one pass) and raises its errors."""
    from popviz.model import aggregate

    monkeypatch.setenv("POPVIZ_OUT_OF_CORE_ROWS", "0")
    monkeypatch.setattr(bundle, "ROW_GROUP_ROWS", 7)
    r = _with_liveness(_report())
    write_bundle(r, tmp_path / "good")
    passes = []
    real = aggregate.RunCycles.__init__

    def counted(self, *args, **kwargs):
        passes.append(1)
        real(self, *args, **kwargs)

    monkeypatch.setattr(aggregate.RunCycles, "__init__", counted)
    loaded = popviz.load(tmp_path / "good")[0]
    assert loaded.execution.on_disk and passes == [1]
    assert _totals(aggregate.cycle_totals(loaded.execution)) == _totals(RunCycles(r.execution.steps))
    assert passes == [1, 1] and loaded.liveness == r.liveness
    steps = r.execution.steps.copy()
    steps.loc[[9, 20], "cycles"] = -5
    write_bundle(r.replace(execution=ExecutionTable(steps, r.execution.runs)), tmp_path / "bad")
    with pytest.raises(CorruptReportError, match=r"column 'cycles': cycles must not be negative \(row 9: -5; "
                       r"2 row\(s\) in all\)"):
        popviz.load(tmp_path / "bad")


def test_a_bad_liveness_table_beside_the_pass_stops_it_before_the_error(monkeypatch, tmp_path):
    """The pass begun on its thread is ended (with its reader thread) before a later error is
    raised: no thread is left decoding while the interpreter exits (which can abort it)."""
    import threading

    monkeypatch.setenv("POPVIZ_OUT_OF_CORE_ROWS", "0")
    monkeypatch.setattr(bundle, "ROW_GROUP_ROWS", 7)
    write_bundle(_with_liveness(_report()), tmp_path / "b")
    meta_path = tmp_path / "b" / bundle.METADATA_FILE
    meta = json.loads(meta_path.read_text())
    meta["liveness"]["ipus"] = [0, 1, 5]  # no column for IPU 5
    meta_path.write_text(json.dumps(meta))
    from popviz.model import aggregate

    real = aggregate.RunCycles._block

    def slow(self, b):  # a pass still running when the liveness table is refused
        import time

        time.sleep(0.2)
        return real(self, b)

    monkeypatch.setattr(aggregate.RunCycles, "_block", slow)
    with pytest.raises(CorruptReportError, match="liveness table lacks column ipu5_bytes"):
        popviz.load(tmp_path / "b")
    assert [t.name for t in threading.enumerate() if t.name.startswith("popviz")] == []


def test_a_run_missing_from_the_runs_table_is_refused_out_of_core(monkeypatch, tmp_path):
    monkeypatch.setenv("POPVIZ_OUT_OF_CORE_ROWS", "0")
    r = _report()
    write_bundle(r, tmp_path / "b")
    runs = r.execution.runs[r.execution.runs["run"] != 3]
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(runs, preserve_index=False)
    meta = pq.read_schema(tmp_path / "b" / bundle.RUNS_FILE).metadata
    pq.write_table(table.replace_schema_metadata(meta), tmp_path / "b" / bundle.RUNS_FILE)
    with pytest.raises(CorruptReportError, match=r"refer to run\(s\) \[3\] missing from runs"):
        popviz.load(tmp_path / "b")


def test_materialising_a_large_table_says_how_big_it_is(monkeypatch, out_of_core):
    from popviz.model import tables

    monkeypatch.setattr(tables, "WARN_MATERIALISE_ROWS", 10)
    loaded = popviz.load(out_of_core[1])[0]
    assert loaded.execution.nbytes_in_memory == 32 * loaded.execution.num_rows
    with pytest.warns(ResourceWarning, match=r"reading all \d+ execution rows into memory .*execution.read"):
        loaded.execution.steps  # noqa: B018
    assert np.array_equal(loaded.execution.steps["cycles"].to_numpy(), out_of_core[0].execution.steps["cycles"])


def test_liveness_is_read_batch_by_batch_into_the_same_table(monkeypatch, tmp_path):
    from popviz.model import LivenessTable

    monkeypatch.setattr(bundle, "ROW_GROUP_ROWS", 7)  # several row groups, a dictionary each
    steps = 50
    per = np.arange(steps * 2, dtype="int64").reshape(steps, 2) * 1000
    names = [f"p{(k * 7) % 11}" for k in range(steps)]
    table = LivenessTable(programs=pd.Categorical(names), total_bytes=per.sum(axis=1), ipu_bytes=per,
                          ipus=(0, 1), always_live_bytes={0: 5, 1: 6})
    r = _report().replace(liveness=table)
    write_bundle(r, tmp_path / "b")
    got = popviz.load(tmp_path / "b")[0].liveness
    assert got == table
    assert list(got.programs.astype(str)) == names and got.peak(1) == table.peak(1)


def test_the_pva_adapter_writes_a_large_table_out_of_core_run_by_run(monkeypatch, tmp_path):
    """The adapter's buffers go to a temporary Parquet file after each run once they pass the
    bound (here 0 rows: after every run); the file is removed once open, the rows stay readable,
    and the report reads as the one held in memory."""
    import os
    import sys

    from conftest import FAKE_PVA

    monkeypatch.syspath_prepend(str(FAKE_PVA))
    monkeypatch.delitem(sys.modules, "pva", raising=False)
    import pva

    from popviz.sources.pva import read_profile

    steps = [{"name": "main/stage0", "type": "OnTileExecute", "cycles": [1200, 0], "start": [5000, 0]},
             {"name": "copy", "type": "GlobalExchange", "cycles": [300, 300], "start": [6200, 6200]},
             {"name": "optimizer/update", "type": "OnTileExecute", "cycles": [0, 2400], "start": [0, 6500]},
             {"name": "RB_2/out", "type": "StreamCopyMid", "cycles": [0, 700], "start": [0, 8900]},
             {"name": "sync", "type": "Sync", "cycles": [40, 30], "start": [9600, 9600]}]
    data = {"version": "3.3.0 (d8d3d63b1b)",
            "target": {"numIPUs": 2, "tilesPerIpu": 3, "bytesPerTile": 2000, "clockFrequency": 1.33e9,
                       "architecture": "Ipu2"},
            "tiles": [[{"inc": 1000, "exc": 900, "al": 400, "nal": 500, "over": 0, "cats": {"variable": 600}}
                       for _ in range(3)] for _ in range(2)],
            "runs": [{"name": f"Run {k}", "microseconds": 250.5 + k,
                      "steps": [dict(s, cycles=[c * (k + 1) for c in s["cycles"]],
                                     start=[c + 10_000 * k for c in s["start"]]) for s in steps]}
                     for k in range(3)]}
    (tmp_path / "training").mkdir()
    pva.write_data(tmp_path / "training" / "profile.pop", data)
    want = read_profile(tmp_path / "training" / "profile.pop")
    monkeypatch.setenv("POPVIZ_OUT_OF_CORE_ROWS", "0")
    got = read_profile(tmp_path / "training" / "profile.pop")
    assert got.execution.on_disk and not want.execution.on_disk
    assert not os.path.exists(got.execution.rows.path)  # the temporary file is gone, its rows are not
    assert got.execution.num_rows == len(want.execution.steps) == 21
    assert _totals(RunCycles(got.execution.rows, run_ids=[0, 1, 2])) == \
        _totals(RunCycles(want.execution.steps, run_ids=[0, 1, 2]))
    a = analyse(popviz.model.ReportSet([got]))
    b = analyse(popviz.model.ReportSet([want]))
    ea, eb = result_to_dict(a)["engines"][0], result_to_dict(b)["engines"][0]
    assert json.dumps(ea["metrics"], sort_keys=True) == json.dumps(eb["metrics"], sort_keys=True)
    assert [f["code"] for f in ea["findings"]] == [f["code"] for f in eb["findings"]]
    # start cycles relative to each run's first step, in every piece
    pd.testing.assert_frame_equal(got.execution.steps.astype({"program": str, "program_type": str}),
                                  want.execution.steps.astype({"program": str, "program_type": str}))


def test_a_table_out_of_core_is_written_again_without_being_read_whole(out_of_core, tmp_path):
    r, path = out_of_core
    loaded = popviz.load(path)[0]
    before = ExecutionTable.materialisations
    write_bundle(loaded, tmp_path / "again")
    assert ExecutionTable.materialisations == before
    again = popviz.load(tmp_path / "again")[0]
    assert again.execution.on_disk and len(ParquetRows(str(tmp_path / "again" / bundle.STEPS_FILE))._stats) > 1
    assert again.execution == r.execution


def test_the_reader_thread_stops_when_the_caller_does_and_passes_errors_on():
    import threading

    from popviz.sources.parquet_rows import prefetched

    made = []

    def blocks():
        for k in range(100):
            made.append(k)
            yield k

    got = prefetched(blocks(), depth=2)
    assert [next(got), next(got)] == [0, 1]
    got.close()  # the caller stops early: the thread ends, having made at most a few more
    assert len(made) <= 5 and not [t for t in threading.enumerate() if t.name == "popviz-parquet-reader"]

    def broken():
        yield 1
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(prefetched(broken()))
    assert list(prefetched(iter(range(5)), depth=0)) == list(range(5))
