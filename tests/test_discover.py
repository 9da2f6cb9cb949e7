from __future__ import annotations

import json
import sys

import pytest

import popviz
from popviz import testing
from popviz.errors import MissingDependencyError, ReportNotFoundError
from popviz.sources.bundle import write_bundle
from popviz.sources.discover import find_engines


def _bundle(path, name="training", **kw):
    kw.setdefault("tiles_per_ipu", 4)
    mode = "inference" if name == "inference" else "training"
    write_bundle(testing.pipeline_report([10, 20], name=name, mode=mode, **kw), path)


def test_report_dir_with_engines(tmp_path):
    _bundle(tmp_path / "training")
    _bundle(tmp_path / "inference", name="inference")
    (tmp_path / "debug.cbor").write_bytes(b"\xa0")  # PopTorch may leave it at the top
    reports = popviz.load(tmp_path)
    assert reports.labels == ["inference", "training"]
    assert reports["training"].path == str(tmp_path / "training")
    assert reports.root == str(tmp_path)


def test_engine_dir_and_metadata_file(tmp_path):
    _bundle(tmp_path / "training")
    assert popviz.load(tmp_path / "training").labels == ["training"]
    assert popviz.load(tmp_path / "training" / "popviz-report.json").labels == ["training"]


def test_multi_instance_layout(tmp_path):
    for i in range(2):
        _bundle(tmp_path / f"instance-{i}" / "training")
        _bundle(tmp_path / f"instance-{i}" / "inference", name="inference")
    reports = popviz.load(tmp_path)
    assert reports.labels == ["instance-0/inference", "instance-0/training",
                              "instance-1/inference", "instance-1/training"]
    assert reports.instances == ["instance-0", "instance-1"]


def test_hidden_and_nested_dirs_are_skipped(tmp_path):
    _bundle(tmp_path / "training")
    _bundle(tmp_path / ".trash" / "training")
    _bundle(tmp_path / "training" / "old")  # inside an engine: not an engine of its own
    assert popviz.load(tmp_path).labels == ["training"]


def test_bundle_preferred_over_profile(tmp_path):
    _bundle(tmp_path / "training")
    (tmp_path / "training" / "profile.pop").write_bytes(b"\0" * 4096)
    [engine] = find_engines(tmp_path)
    assert engine.kind == "bundle"
    assert popviz.load(tmp_path)["training"].provenance.source == "bundle"


def test_missing_empty_and_reportless(tmp_path):
    with pytest.raises(ReportNotFoundError, match="no such file or directory"):
        popviz.load(tmp_path / "nope")
    with pytest.raises(ReportNotFoundError, match="is empty"):
        popviz.load(tmp_path)
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "sub").mkdir()
    with pytest.raises(ReportNotFoundError, match="no report found"):
        popviz.load(tmp_path)
    with pytest.raises(ReportNotFoundError, match="is not a report"):
        popviz.load(tmp_path / "notes.txt")


def test_profile_without_pva(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pva", None)  # make `import pva` fail even if installed
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "profile.pop").write_bytes(b"\0" * 4096)
    with pytest.raises(MissingDependencyError, match="needs libpva.*popviz export"):
        popviz.load(tmp_path)


def test_a_file_of_an_engine_directory_stands_for_the_directory():
    """popviz analyse ENGINE/popviz-model.json read the hooks' record alone (no memory, no
    execution, and a different ramp finding) while the bundle beside it was ignored."""
    from conftest import SAMPLES

    engine = SAMPLES / "mnist_pipeline" / "training"
    whole = popviz.load(engine)["training"]
    for name in ("popviz-model.json", "popviz-report.json"):
        one = popviz.load(engine / name)["training"]
        assert one.present == whole.present and one.provenance.estimated


@pytest.mark.parametrize("field, value, needle", [
    ("output_mode", "Everything", "field 'output_mode' must be one of PopTorch's output modes (All, EveryN, Final, "
     "Sum, Default), got 'Everything'"),
    ("mode", "train", "field 'mode' must be \"training\" or \"inference\", got 'train'"),
])
def test_a_capture_record_naming_no_output_mode_or_mode_is_refused(tmp_path, field, value, needle):
    """A value PopTorch has no name for was read as 'not recorded' (analyse showed "output mode
    Final" for "Everything"); it is refused as every other damaged field is."""
    import shutil

    from conftest import SAMPLES, assert_one_line_error, run_cli

    shutil.copytree(SAMPLES / "mnist_pipeline", tmp_path / "run")
    path = tmp_path / "run" / "training" / "popviz-model.json"
    doc = json.loads(path.read_text())
    (doc["options"] if field == "output_mode" else doc["executor"])[field] = value
    path.write_text(json.dumps(doc))
    assert_one_line_error(run_cli("analyse", str(tmp_path / "run")), "popviz-model.json", needle)
