"""The libpva adapter against a test double of ``pva`` exposing libpva's documented names."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from conftest import FAKE_PVA, assert_one_line_error, run_cli


@pytest.fixture
def fake_pva(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE_PVA))
    monkeypatch.delitem(sys.modules, "pva", raising=False)
    import pva

    return pva


def test_reads_target_memory_and_execution(tmp_path, fake_pva):
    from popviz.sources.pva import read_profile

    (tmp_path / "training").mkdir()
    fake_pva.write_profile(tmp_path / "training" / "profile.pop")
    r = read_profile(tmp_path / "training" / "profile.pop")
    assert r.name == "training"
    assert r.provenance.source == "pva" and not r.provenance.estimated
    assert r.provenance.tool == "Poplar SDK 3.3.0 (d8d3d63b1b)"
    assert (r.target.architecture, r.target.num_ipus, r.target.tiles_per_ipu) == ("Mk2", 2, 3)
    m = r.memory.frame
    assert m["total_bytes_including_gaps"].tolist() == [1000, 1001, 1002, 2000, 2001, 2002]
    assert m["overflow_bytes"].tolist() == [0, 0, 0, 50, 0, 0]
    assert r.memory.categories == ["variable", "vertexCode"]
    assert m["cat_vertexCode_bytes"].tolist() == [300, 301, 302, 600, 601, 602]
    s = r.execution.steps
    # zero-cycle IPU entries are dropped; start cycles are relative to the run's first step
    assert s[["step", "ipu", "cycles"]].values.tolist() == [[0, 0, 1200], [1, 0, 300], [1, 1, 300],
                                                           [2, 1, 2400], [3, 1, 700]]
    assert s["start_cycle"].tolist() == [0, 1200, 1200, 1500, 3900]
    assert s["program_type"].tolist() == ["OnTileExecute", "GlobalExchange", "GlobalExchange",
                                          "OnTileExecute", "StreamCopyMid"]
    assert r.execution.runs.to_dict("records") == [{"run": 0, "name": "Run 1",
                                                    "duration_seconds": pytest.approx(250.5e-6)}]


def test_out_of_memory_profile_has_no_execution(tmp_path, fake_pva):
    from popviz.sources.pva import read_profile

    fake_pva.write_profile(tmp_path / "profile.pop", runs=False)
    r = read_profile(tmp_path / "profile.pop")
    assert r.execution is None and r.memory is not None
    assert "execution" in r.missing
    assert "no execution profile" in r.provenance.notes[0]


def test_cli_reads_profile_and_exports_bundle(tmp_path, fake_pva_env):
    sys.path.insert(0, str(FAKE_PVA))
    try:
        import pva
    finally:
        sys.path.remove(str(FAKE_PVA))
    for name in ("training", "inference"):
        (tmp_path / "run" / name).mkdir(parents=True)
        pva.write_profile(tmp_path / "run" / name / "profile.pop")
    proc = run_cli("analyse", str(tmp_path / "run"), "--json", env=fake_pva_env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [e["name"] for e in doc["engines"]] == ["inference", "training"]
    assert doc["engines"][0]["provenance"]["source"] == "pva"

    proc = run_cli("export", str(tmp_path / "run"), "-o", str(tmp_path / "out"), env=fake_pva_env)
    assert proc.returncode == 0, proc.stderr
    assert "popviz analyse" in proc.stdout
    # analysed without libpva: the bundle is enough, and says where the figures came from
    proc = run_cli("analyse", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [e["provenance"]["source"] for e in doc["engines"]] == ["pva", "pva"]
    assert doc["engines"][1]["target"]["tiles_per_ipu"] == 3

    # export never overwrites, unless --force, and then never mixes in other engines' bundles
    proc = run_cli("export", str(tmp_path / "run"), "-o", str(tmp_path / "out"), env=fake_pva_env)
    assert_one_line_error(proc, "already exists and is not empty", "--force")
    (tmp_path / "out" / "notes.txt").write_text("mine")
    proc = run_cli("export", str(tmp_path / "run"), "-o", str(tmp_path / "out"), "--force", env=fake_pva_env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"
    assert len(json.loads(run_cli("analyse", str(tmp_path / "out"), "--json").stdout)["engines"]) == 2
    shutil.copytree(tmp_path / "out" / "training", tmp_path / "out" / "old")
    proc = run_cli("export", str(tmp_path / "run"), "-o", str(tmp_path / "out"), "--force", env=fake_pva_env)
    assert_one_line_error(proc, "holds bundles this export would not replace", "old")
    proc = run_cli("export", str(tmp_path / "out"), "-o", str(tmp_path / "out"), "--force")
    assert_one_line_error(proc, "is the report directory itself")


def test_broken_profile_is_one_line(tmp_path, fake_pva_env):
    sys.path.insert(0, str(FAKE_PVA))
    try:
        import pva
    finally:
        sys.path.remove(str(FAKE_PVA))
    (tmp_path / "training").mkdir()
    pva.write_profile(tmp_path / "training" / "profile.pop", broken=True)
    proc = run_cli("analyse", str(tmp_path), env=fake_pva_env)
    assert_one_line_error(proc, "profile.pop", "libpva cannot open it")



def test_flat_shape_without_ipus_and_runs_reads_the_same(tmp_path, fake_pva):
    """SDKs without ``compilation.ipus`` / ``execution.runs``: tiles split by tilesPerIpu, and
    ``execution.steps`` read as one run."""
    from popviz.sources.pva import read_profile

    for name, flat in (("nested", False), ("flat", True)):
        (tmp_path / name).mkdir()
        fake_pva.write_profile(tmp_path / name / "profile.pop", flat=flat)
    a = read_profile(tmp_path / "nested" / "profile.pop")
    b = read_profile(tmp_path / "flat" / "profile.pop")
    assert b.memory.frame[["ipu", "tile"]].values.tolist() == [[0, 0], [0, 1], [0, 2],
                                                               [1, 0], [1, 1], [1, 2]]
    assert b.memory.frame.equals(a.memory.frame)
    assert b.execution.steps[["step", "ipu", "cycles"]].values.tolist() == [
        [0, 0, 1200], [1, 0, 300], [1, 1, 300], [2, 1, 2400], [3, 1, 700]]
    assert b.execution.steps["start_cycle"].tolist() == [0, 1200, 1200, 1500, 3900]
    assert b.execution.runs["name"].tolist() == ["all steps"]
