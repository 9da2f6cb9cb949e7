"""Liveness (issue 44 items 1, 2, 7): the table read through the libpva double, each IPU's peak in
the memory analysis (MEM006), the liveness figure, the bundle, the emulator's estimate, and the
per-layer bytes ``popviz plan`` uses on a measured report."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import FAKE_PVA, run_cli


@pytest.fixture
def fake_pva(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE_PVA))
    monkeypatch.delitem(sys.modules, "pva", raising=False)
    import pva

    return pva


def _write(root, pva, data, debug=True):
    (root / "training").mkdir(parents=True)
    pva.write_data(root / "training" / "profile.pop", data)
    if debug:
        (root / "training" / "debug.cbor").write_bytes(b"\xa0")
    return root


def test_liveness_table_peaks_and_layer_bytes(tmp_path, fake_pva):
    import popviz

    r = popviz.load(_write(tmp_path, fake_pva, fake_pva.with_liveness(fake_pva.pipeline_profile())))[0]
    lv = r.liveness
    assert len(lv) == 104 and lv.ipus == (0, 1, 2, 3)
    # stage i stashes 2(4 - i) - 1 micro-batches of 10 bytes per cycle of work, plus 8 per cycle
    # of backward temporaries at the peak: 7 × 10,000 + 8,000 on IPU0
    assert [lv.peak(k) for k in range(4)] == [(47, 78_000), (37, 58_000), (28, 76_000), (20, 18_000)]
    assert [lv.program(lv.peak(k)[0]) for k in range(4)] == [f"stage{k}/bwd" for k in range(4)]
    assert lv.always_live_bytes == {k: 600_000 for k in range(4)}
    label = lv.label(37)
    assert (label.layer, label.operation, label.op_type) == ("layers.1", "layers.1/MatMulGrad", "MatMulGrad")
    assert label.contributors[0] == ("layers.2/act1", 20_000) and label.contributors_scope == "replica"
    assert int(lv.total_bytes[37]) == int(lv.ipu_bytes[37].sum())
    frame = r.layers.frame()
    assert frame["activation_bytes"].tolist() == [10_000, 10_000, 20_000, 10_000]
    assert frame["temporary_bytes"].tolist() == [8_000, 8_000, 16_000, 8_000]
    # (1,000 + 100) and (1,500 + 100) bytes per tile of code and control code, 4 tiles
    assert frame["code_bytes"].tolist() == [10_800] * 4
    assert any(n.startswith("activation bytes: on its IPU, the median rise") for n in r.layers.notes)


def test_an_sdk_without_per_ipu_liveness_or_without_liveness(tmp_path, fake_pva):
    import popviz
    from popviz.model import ReportSet

    data = fake_pva.with_liveness(fake_pva.pipeline_profile(), total_only=True)
    r = popviz.load(_write(tmp_path / "total", fake_pva, data))[0]
    assert not r.liveness.per_ipu and r.liveness.peak() == (47, 198_000)
    assert "no notAlwaysLiveMemoryForIpu" in r.liveness.notes[0]
    assert r.layers.frame()["activation_bytes"].tolist() == [0] * 4
    assert any("activation and temporary bytes: 0, the profile's liveness has the replica's total" in n
               for n in r.layers.notes)
    e = popviz.analyse(ReportSet([r])).engines[0]
    assert e.metrics["memory"]["liveness"][0]["ipu"] is None
    assert any(n.check == "liveness per IPU" for n in e.not_checked)
    old = popviz.load(_write(tmp_path / "old", fake_pva, fake_pva.pipeline_profile()))[0]
    assert old.liveness is None
    e = popviz.analyse(ReportSet([old])).engines[0]
    assert e.metrics["memory"]["liveness"] is None
    assert [n.reason for n in e.not_checked if n.check.startswith("liveness peak")] == [
        "no liveness steps in this report (libpva's livenessProgramSteps, or an estimate's schedule)"]
    assert old.layers.frame()["code_bytes"].tolist() == [0] * 4


@pytest.mark.parametrize("runs", [True, False], ids=["ran", "out-of-memory-compile"])
def test_ipu1_overflowing_at_one_step_is_named_with_its_lever(tmp_path, fake_pva, fake_pva_env, runs):
    _write(tmp_path, fake_pva, fake_pva.liveness_overflow(runs=runs))
    proc = run_cli("analyse", str(tmp_path), "--json", env=fake_pva_env)
    doc = json.loads(proc.stdout)
    import jsonschema

    from popviz.render.json import schema

    jsonschema.Draft202012Validator(schema()).validate(doc)  # memory.liveness is in the schema
    found = {f["code"]: f for f in doc["engines"][0]["findings"]}
    mem006 = found["MEM006"]
    assert mem006["severity"] == "error"
    assert mem006["title"] == "IPU1 overflows at liveness step 37 (layers.1/MatMulGrad)"
    assert mem006["evidence"].startswith(
        "at step 37 of 104 (program stage1/bwd, layer layers.1, operation layers.1/MatMulGrad) IPU1 needs "
        "2,650,000 B (2.5 MiB): 600,000 B (585.9 KiB) always live + 2,050,000 B (2.0 MiB) not always live, "
        "94,096 B (91.9 KiB) over its 2,555,904 B (2.4 MiB); largest live there (on all IPUs): "
        "layers.1/MatMulGrad/tmp 2,000,000 B (1.9 MiB)")
    rec = mem006["recommendation"]
    # (a compile that ran out of memory has no execution to infer the training mode from)
    assert ("poptorch.recomputationCheckpoint(x) on layer outputs inside layers.1 (the layer that peaks)" in rec) == runs
    assert "poptorch.set_available_memory(out, 0.3) on the output of layers.1/MatMulGrad" in rec
    assert "serialise layers.1/MatMulGrad" in rec
    # one value per option: MEM001 proposes the same proportion for IPU1
    assert 'opts.setAvailableMemoryProportion({"IPU1": 0.3})' in rec
    assert 'opts.setAvailableMemoryProportion({"IPU1": 0.3})' in found["MEM001"]["recommendation"]
    row = doc["engines"][0]["metrics"]["memory"]["liveness"][1]
    assert {k: row[k] for k in ("ipu", "peak_step", "program", "layer", "always_live_bytes",
                                "not_always_live_bytes", "peak_bytes")} == {
        "ipu": 1, "peak_step": 37, "program": "stage1/bwd", "layer": "layers.1", "always_live_bytes": 600_000,
        "not_always_live_bytes": 2_050_000, "peak_bytes": 2_650_000}
    text = run_cli("analyse", str(tmp_path), env={**fake_pva_env, "COLUMNS": "80"}).stdout
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "liveness: 104 steps; highest peak IPU1 at step 37 (layers.1/MatMulGrad): 103.7%" in " ".join(text.split())


def test_liveness_figure_bundle_and_html(tmp_path, fake_pva, fake_pva_env):
    import popviz
    from popviz import plot

    _write(tmp_path / "run", fake_pva, fake_pva.liveness_overflow())
    r = popviz.load(tmp_path / "run")[0]
    fig = plot.liveness(r)
    ax = fig.axes[0]
    assert ax.get_title() == "training: memory live over the program steps"
    texts = [t.get_text() for t in ax.texts]
    assert "peak layers.1/MatMulGrad\nstep 37" in texts
    labels = [line.get_label() for line in ax.lines if not line.get_label().startswith("_")]
    assert labels == ["IPU1", "IPU1 always live", "IPU0", "IPU2", "IPU3", "capacity 2.4 MiB"]  # highest peak first
    frame = plot.liveness_frame(r)
    assert frame.loc[(frame["ipu"] == 1) & (frame["step"] == 37), "live_bytes"].tolist() == [2_650_000]
    steps = r.liveness_steps()
    assert len(steps) == 4 * 104 and steps.attrs["estimated"] is False
    reduced = r.liveness_steps(max_points=10)  # each IPU's peak survives the reduction
    assert reduced.groupby("ipu")["not_always_live_bytes"].max().tolist() == [78_000, 2_050_000, 76_000, 18_000]
    proc = run_cli("export", str(tmp_path / "run"), "-o", str(tmp_path / "bundle"), env=fake_pva_env)
    assert proc.returncode == 0, proc.stderr
    back = popviz.load(tmp_path / "bundle")[0]
    assert back.liveness == r.liveness and back.layers == r.layers
    html = tmp_path / "page.html"
    proc = run_cli("analyse", str(tmp_path / "bundle"), "--html", str(html))
    assert proc.returncode in (0, 1), proc.stderr
    page = html.read_text()
    assert "<figcaption>liveness</figcaption>" in page and "MEM006" in page


def test_plan_on_a_measured_report_uses_its_per_layer_memory(tmp_path, fake_pva, fake_pva_env):
    """No --calibrate: the split follows the profile's own cycles and bytes per layer."""
    plans = {}
    for act5 in (10_000, 300_000):
        activation = [10_000] * 8
        activation[4], activation[5] = 30_000, act5
        root = _write(tmp_path / str(act5), fake_pva, fake_pva.layered_pipeline(activation=activation))
        proc = run_cli("plan", str(root), "--json", env=fake_pva_env)
        assert proc.returncode == 0, proc.stderr
        plans[act5] = json.loads(proc.stdout)
    small, big = plans[10_000], plans[300_000]
    assert small["layer_source"] == "debug_context" and not small["estimated"]
    assert small["proposed"]["layers_per_ipu"] == [2, 2, 1, 3]
    assert [s["memory_bytes"] for s in small["proposed"]["stages"]] == [548_000, 508_000, 603_200, 548_800]
    # layers.5 stashing 300,000 bytes per micro-batch: the split moves it where fewer are in flight
    assert big["proposed"]["layers_per_ipu"] == [1, 3, 1, 3]
    assert [s["memory_bytes"] for s in big["proposed"]["stages"]] == [367_200, 668_800, 603_200, 838_800]


def test_the_emulator_estimates_liveness_from_its_schedule():
    from types import SimpleNamespace as NS

    import pandas as pd

    from popviz.emulator.liveness_estimate import estimate
    from popviz.model import MemoryTable
    from popviz.schedule import SchedulePlan, StageWork, simulate

    steps = simulate(SchedulePlan(stages=[StageWork(0, 100, 200), StageWork(1, 100, 200)], gradient_accumulation=4))
    stages = [NS(index=0, ipu=0, saved_bytes=1000, stash_depth=3, temporary_bytes=500),
              NS(index=1, ipu=1, saved_bytes=2000, stash_depth=1, temporary_bytes=700)]
    memory = MemoryTable(pd.DataFrame({
        "ipu": [0, 1], "total_bytes_including_gaps": [13_500, 12_700], "total_bytes_excluding_gaps": [13_500, 12_700],
        "always_live_bytes": [10_000, 10_000], "not_always_live_bytes": [3_500, 2_700], "overflow_bytes": [0, 0],
        "cat_temporaries_bytes": [500, 700]}), level="ipu")
    lv = estimate(steps, stages, memory, training=True, optimizer_on_chip=True)
    # the peak is the memory table's not-always-live bytes: 3 micro-batches stashed + temporaries
    assert [lv.peak(k)[1] for k in (0, 1)] == [3_500, 2_700]
    assert [lv.program(lv.peak(k)[0]) for k in (0, 1)] == ["stage0/forward", "stage1/forward"]
    assert lv.always_live_bytes == {0: 10_000, 1: 10_000}
    assert lv.label(lv.peak(0)[0]).contributors == (("stage 0 activation stash (up to 3 micro-batches)", 3000),
                                                   ("stage 0 forward temporaries", 500))


def test_a_damaged_liveness_table_is_a_one_line_error(tmp_path, fake_pva):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import popviz
    from popviz.sources.bundle import write_bundle

    from conftest import assert_one_line_error

    r = popviz.load(_write(tmp_path / "run", fake_pva, fake_pva.liveness_overflow()))[0]
    for name, change in (("negative", lambda t: t.set_column(t.schema.get_field_index("ipu1_bytes"), "ipu1_bytes",
                                                             pa.array([-5] * t.num_rows, pa.int64()))),
                         ("missing", lambda t: t.drop_columns(["ipu3_bytes"]))):
        bundle = write_bundle(r, tmp_path / name / "training")
        path = bundle / "liveness.parquet"
        pq.write_table(change(pq.read_table(path)), path)
        proc = run_cli("analyse", str(tmp_path / name))
        assert_one_line_error(proc, "liveness.parquet", "does not match the bundle format")
    meta = tmp_path / "outside" / "training"
    write_bundle(r, meta)
    doc = json.loads((meta / "popviz-report.json").read_text())
    doc["liveness"]["always_live_bytes"]["7"] = 1
    (meta / "popviz-report.json").write_text(json.dumps(doc))
    assert_one_line_error(run_cli("analyse", str(tmp_path / "outside")), "liveness", "IPU 7 is outside")


def test_a_liveness_file_of_several_row_groups_and_plain_strings_reads_the_same(tmp_path, fake_pva):
    """The bundle reader decodes a few columns at a time into its arrays: a file written by
    another tool (the steps repeated to 208,000 in row groups of 50,000, one IPU's bytes a ramp,
    the program as plain strings) gives its values, in step order."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import popviz
    from popviz.sources.bundle import write_bundle

    r = popviz.load(_write(tmp_path / "run", fake_pva, fake_pva.liveness_overflow()))[0]
    bundle = write_bundle(r, tmp_path / "copy" / "training")
    path = bundle / "liveness.parquet"
    table = pq.read_table(path)
    metadata = table.schema.metadata
    at = table.schema.get_field_index("program")
    table = table.set_column(at, "program", pa.array([str(v) for v in table.column("program").to_pylist()]))
    n = table.num_rows
    big = pa.concat_tables([table] * 2000)
    # every step its own bytes, so a chunk copied to the wrong place shows
    ramp = np.arange(len(big), dtype="int64")
    big = big.set_column(big.schema.get_field_index("ipu1_bytes"), "ipu1_bytes", pa.array(ramp))
    pq.write_table(big.replace_schema_metadata(metadata), path, row_group_size=50_000)
    assert pq.ParquetFile(path).metadata.num_row_groups == 5
    doc = json.loads((bundle / "popviz-report.json").read_text())
    doc["liveness"]["rows"] = len(big)
    (bundle / "popviz-report.json").write_text(json.dumps(doc))
    again = popviz.load(tmp_path / "copy")[0].liveness
    assert again.ipu_bytes.flags.f_contiguous and again.ipu_bytes.shape == (208_000, len(r.liveness.ipus))
    j = again.ipus.index(1)
    assert np.array_equal(again.ipu_bytes[:, j], ramp)
    others = [k for k in range(len(again.ipus)) if k != j]
    assert np.array_equal(again.ipu_bytes[:, others], np.tile(r.liveness.ipu_bytes[:, others], (2000, 1)))
    assert np.array_equal(again.total_bytes, np.tile(r.liveness.total_bytes, 2000))
    assert list(again.programs[:n]) == list(r.liveness.programs) and list(again.programs[-n:]) == list(r.liveness.programs)
