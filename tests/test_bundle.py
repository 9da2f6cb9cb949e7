from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from popviz import testing
from popviz.errors import CorruptReportError, PopvizError, UnsupportedFormatError
from popviz.model import CallStats, ExecutionTable, HostIO, Provenance, Report
from popviz.sources.bundle import METADATA_FILE, read_bundle, write_bundle


@st.composite
def reports(draw):
    n = draw(st.integers(1, 4))
    mode = draw(st.sampled_from(["training", "inference"]))
    out = draw(st.sampled_from(["All", "EveryN", "Final", "Sum", "Default"]))
    level = draw(st.sampled_from(["tile", "ipu", None]))
    report = testing.pipeline_report(
        [1000 * (i + 1) for i in range(n)], mode=mode,
        strategy=draw(st.sampled_from(["PipelinedExecution", "ShardedExecution"])) if n > 1 else None,
        output_mode=out, output_return_period=2 if out == "EveryN" else None,
        device_iterations=4 if out == "EveryN" or mode == "inference" else None,
        memory_level=level, execution=draw(st.booleans()), with_config=draw(st.booleans()),
        with_host_io=draw(st.booleans()), tiles_per_ipu=8,
        source=draw(st.sampled_from(["pva", "emulator", "bundle"])), estimated=draw(st.booleans()),
        hot_tiles={0: [(2, 1.2)]} if level == "tile" else None)
    if draw(st.booleans()):
        stats = (CallStats("wall_seconds", 7, 0.7, 0.08, 0.12, 0.1, 0.11, None),)
        report = report.replace(host_io=HostIO(tensors=(), calls=7, compile_seconds=12.5, call_stats=stats))
    return report


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(report=reports())
def test_round_trip_gives_an_equal_report(tmp_path, report):
    directory = tmp_path / uuid.uuid4().hex
    write_bundle(report, directory)
    back = read_bundle(directory)
    assert back == report
    assert back.path == str(directory)
    if report.memory is not None:
        assert back.memory.frame.dtypes.equals(report.memory.frame.dtypes)
    if report.execution is not None:
        assert str(back.execution.steps["program_type"].dtype) == "category"


def test_round_trip_of_a_bare_report(tmp_path):
    bare = Report("inference", Provenance("pva", notes=("no execution",)))
    write_bundle(bare, tmp_path / "b")
    assert read_bundle(tmp_path / "b") == bare
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [METADATA_FILE]


def test_write_refuses_to_overwrite_and_keeps_other_files(tmp_path):
    r = testing.pipeline_report([10, 20], tiles_per_ipu=4)
    (tmp_path / "profile.pop").write_bytes(b"\0" * 16)
    write_bundle(r, tmp_path)
    with pytest.raises(PopvizError, match="already exists"):
        write_bundle(r, tmp_path)
    # overwrite replaces only popviz's files, and drops tables the new version no longer has
    write_bundle(r.replace(execution=None), tmp_path, overwrite=True)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["memory.parquet", "popviz-report.json", "profile.pop"]
    assert (tmp_path / "profile.pop").read_bytes() == b"\0" * 16
    assert read_bundle(tmp_path).execution is None


def test_metadata_is_documented_json(tmp_path):
    r = testing.pipeline_report([10, 20], tiles_per_ipu=4)
    write_bundle(r, tmp_path)
    meta = json.loads((tmp_path / METADATA_FILE).read_text())
    assert meta["format"] == "popviz-bundle" and meta["format_version"] == 2
    assert meta["memory"] == {"level": "tile", "file": "memory.parquet", "rows": 8}
    assert meta["execution"]["rows"] == len(r.execution.steps)
    assert meta["config"]["stages"][1] == {"index": 1, "ipu": 1, "blocks": ["B2"]}


@pytest.fixture
def bundle_dir(tmp_path):
    write_bundle(testing.pipeline_report([10, 20], tiles_per_ipu=4), tmp_path / "training")
    return tmp_path / "training"


def test_truncated_json(bundle_dir):
    path = bundle_dir / METADATA_FILE
    path.write_text(path.read_text()[:200])
    with pytest.raises(CorruptReportError, match=r"popviz-report.json: is not valid JSON \(line"):
        read_bundle(bundle_dir)


def test_newer_format_version(bundle_dir):
    path = bundle_dir / METADATA_FILE
    meta = json.loads(path.read_text())
    meta["format_version"] = 3
    path.write_text(json.dumps(meta))
    with pytest.raises(UnsupportedFormatError, match="format 3.*upgrade popviz"):
        read_bundle(bundle_dir)


def test_corrupt_and_missing_parquet(bundle_dir):
    data = (bundle_dir / "execution.parquet").read_bytes()
    (bundle_dir / "execution.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptReportError, match="execution.parquet: is not a readable Parquet file"):
        read_bundle(bundle_dir)
    (bundle_dir / "execution.parquet").unlink()
    with pytest.raises(CorruptReportError, match="refers to execution.parquet, which is missing"):
        read_bundle(bundle_dir)


def test_rows_mismatch_and_bad_fields(bundle_dir):
    path = bundle_dir / METADATA_FILE
    meta = json.loads(path.read_text())
    meta["memory"]["rows"] = 3
    path.write_text(json.dumps(meta))
    with pytest.raises(CorruptReportError, match="has 8 rows, the metadata says 3"):
        read_bundle(bundle_dir)
    meta["memory"]["rows"] = 8
    meta["config"]["output_mode"] = "Sometimes"
    path.write_text(json.dumps(meta))
    with pytest.raises(CorruptReportError, match="does not match the bundle format.*output_mode"):
        read_bundle(bundle_dir)
    meta["config"]["output_mode"] = "All"
    meta["memory"]["file"] = "../../etc/passwd"
    path.write_text(json.dumps(meta))
    with pytest.raises(CorruptReportError, match="invalid memory file"):
        read_bundle(bundle_dir)


def test_wrong_table_columns(bundle_dir):
    steps = read_bundle(bundle_dir).execution.steps.drop(columns="cycles")
    steps.to_parquet(bundle_dir / "execution.parquet")
    with pytest.raises(CorruptReportError, match="lacks column.*cycles"):
        read_bundle(bundle_dir)


def test_execution_table_round_trip_keeps_unknown_start_cycles(tmp_path):
    steps = pd.DataFrame({"run": [0], "step": [0], "program": ["p"], "program_type": ["Repeat"],
                          "ipu": [0], "cycles": [5]})
    r = Report("x", Provenance("pva"), execution=ExecutionTable(steps))
    write_bundle(r, tmp_path)
    back = read_bundle(tmp_path)
    assert back == r and back.execution.steps["start_cycle"].isna().all()


EXIT_AFTER_LOADS = """
import sys, time
import popviz
popviz.load(sys.argv[1])
time.sleep(0.5)  # the decode pool's threads park holding their last task
popviz.load(sys.argv[1])
"""


@pytest.mark.slow  # eight interpreters, ~10 s
def test_process_exits_cleanly_after_loading_bundles():
    """Loading must not leave Python objects in Arrow's decode threads: with a Python file object
    handed to Parquet, about half of these interpreters aborted at exit with "terminate called
    without an active exception" (exit 134) after their work was done, failing CI steps."""
    sample = Path(__file__).resolve().parents[1] / "sample_reports" / "bert_even_split"
    codes = [subprocess.run([sys.executable, "-c", EXIT_AFTER_LOADS, str(sample)], capture_output=True,
                            text=True, timeout=600) for _ in range(8)]
    assert [(c.returncode, c.stderr[-200:]) for c in codes] == [(0, "")] * 8


def test_an_engine_name_of_the_wrong_type_and_an_empty_path_are_named_as_such(tmp_path):
    import popviz
    from popviz.errors import UsageError

    d = write_bundle(testing.pipeline_report([1000, 1000]), tmp_path / "b")
    meta = json.loads((d / METADATA_FILE).read_text())
    meta["name"] = 5
    (d / METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(CorruptReportError, match=r'has an engine "name" that is not a string \(int\); write the '
                                                 r"engine's name as a string"):
        read_bundle(d)
    with pytest.raises(UsageError, match=r'^the report path is empty; pass a report directory or bundle'):
        popviz.load("")


def test_negative_total_bytes_are_refused_like_every_other_byte_column(bundle_dir):
    """The totals end in ``_gaps``, not ``_bytes``: a negative one passed validation and was shown
    as "-0.5%" used (a reviewer's hostile copy)."""
    import popviz

    path = bundle_dir / "memory.parquet"
    frame = pd.read_parquet(path)
    frame.loc[0, ["total_bytes_including_gaps", "total_bytes_excluding_gaps"]] = -5_000_000
    frame.to_parquet(path)
    with pytest.raises(CorruptReportError, match=r"memory.parquet: \w+ memory table column "
                       r"'total_bytes_including_gaps': bytes must not be negative \(row 0: -5000000"):
        popviz.load(bundle_dir)


def test_a_table_the_model_refuses_is_named_by_its_parquet_file(bundle_dir):
    """NaN cycles in execution.parquet were blamed on popviz-report.json (a reviewer)."""
    path = bundle_dir / "execution.parquet"
    frame = pd.read_parquet(path)
    frame["cycles"] = frame["cycles"].astype("float64")
    frame.loc[0, "cycles"] = float("nan")
    frame.to_parquet(path)
    with pytest.raises(CorruptReportError, match=r"execution.parquet: does not match the bundle format "
                       r"\(execution steps table column cycles has missing values\)"):
        read_bundle(bundle_dir)


def test_an_emulator_report_that_does_not_say_estimated_is_refused(tmp_path):
    """Deleting ``provenance.estimated`` from an emulator's bundle showed its figures as measured."""
    import popviz

    report = testing.pipeline_report([1000, 2000], estimated=True)
    report = report.replace(provenance=Provenance(source="emulator", tool="popviz", estimated=False))
    write_bundle(report, tmp_path / "training")
    with pytest.raises(CorruptReportError, match=r"popviz-report.json: provenance.estimated: must be true for a "
                       r"report the emulator wrote"):
        popviz.load(tmp_path / "training")
