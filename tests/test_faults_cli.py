"""Fault injection through the real CLI: a full disk (a 2 MiB tmpfs) under export, baseline save,
compare --summary and analyse --html; two exports and two baseline saves at once; bundles of two
runs in one directory; an engine directory left without its metadata; engines that share a name.
Each case asserts the exit code, the one-line message and the byte-identical previous state."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from faults_util import HANG_GUARD_SECONDS, fill, leftovers, make_bundle, remount_readonly, snapshot, tmpfs

from conftest import assert_one_line_error, run_cli, unwrapped

NO_SPACE = "No space left on device"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env=env, timeout=HANG_GUARD_SECONDS)


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    """A report directory of two engines (bundles), made once."""
    root = tmp_path_factory.mktemp("src")
    make_bundle(root / "run" / "training", "training")
    make_bundle(root / "run" / "inference", "inference", (1500, 1500))
    return root / "run"


@pytest.fixture
def full(tmp_path):
    with tmpfs(tmp_path / "fs") as mount:
        yield mount


def test_export_to_a_full_disk_is_one_line_and_leaves_nothing(src, full):
    fill(full)
    proc = cli("export", str(src), "-o", "out", cwd=full)
    line = assert_one_line_error(proc, NO_SPACE)
    assert line.startswith("popviz: error: out/") and ".tmp" not in line
    assert not (full / "out").exists() and leftovers(full) == []


def test_export_force_that_fails_midway_keeps_the_previous_bundles(src, full, tmp_path):
    other = tmp_path / "other"
    make_bundle(other / "training", "training", (3000, 1000))
    make_bundle(other / "inference", "inference", (2000, 2000))
    first = cli("export", str(src), "-o", "out", cwd=full)
    assert first.returncode == 0, first.stderr
    before = snapshot(full / "out")
    fill(full, leave_kib=30)  # room for one engine's bundle, not for two
    proc = cli("export", str(other), "-o", "out", "--force", cwd=full)
    assert_one_line_error(proc, NO_SPACE, "out/")
    assert snapshot(full / "out") == before and leftovers(full) == []
    (full / "filler").unlink()
    again = cli("export", str(other), "-o", "out", "--force", cwd=full)
    assert again.returncode == 0, again.stderr
    ids = {json.loads((full / "out" / e / "popviz-report.json").read_text())["run_id"] for e in ("training", "inference")}
    assert len(ids) == 1 and snapshot(full / "out") != before


def test_two_exports_at_once_one_wins_and_the_bundle_is_one_run(src, tmp_path):
    cmd = [sys.executable, "-m", "popviz", "export", str(src), "-o", "out"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=HANG_GUARD_SECONDS), p.communicate()[1]) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert len(unwrapped(loser.strip()).splitlines()) == 1
    assert ("out was written by another popviz meanwhile" in loser
            or "out already exists and is not empty" in loser), loser
    ids = {json.loads((tmp_path / "out" / e / "popviz-report.json").read_text())["run_id"]
           for e in ("training", "inference")}
    assert len(ids) == 1 and leftovers(tmp_path) == []
    assert cli("analyse", "out", cwd=tmp_path).returncode == 0


def test_bundles_of_two_exports_in_one_directory_are_refused(src, tmp_path):
    assert cli("export", str(src), "-o", "a", cwd=tmp_path).returncode == 0
    assert cli("export", str(src), "-o", "b", cwd=tmp_path).returncode == 0
    shutil.rmtree(tmp_path / "a" / "training")
    shutil.copytree(tmp_path / "b" / "training", tmp_path / "a" / "training")
    proc = cli("analyse", "a", cwd=tmp_path)
    assert_one_line_error(proc, "a/inference and a/training are bundles of two different runs")


def test_two_baseline_saves_at_once_exactly_one_wins(src, tmp_path):
    cmd = [sys.executable, "-m", "popviz", "baseline", "save", str(src), "-o", "b.json"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=HANG_GUARD_SECONDS), p.communicate()[1]) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    one = unwrapped(loser.strip())  # the error wraps at the terminal's width
    assert "b.json exists; popviz never writes over files" in one and len(one.splitlines()) == 1
    winner = next(err for code, err in results if code == 0)
    assert "wrote b.json: 2 engine(s)" in winner
    assert json.loads((tmp_path / "b.json").read_text())["format"] == "popviz-baseline"
    assert leftovers(tmp_path) == []


def test_baseline_save_force_on_a_full_disk_keeps_the_old_baseline(src, full):
    first = cli("baseline", "save", str(src), "-o", "b.json", cwd=full)
    assert first.returncode == 0, first.stderr
    before = (full / "b.json").read_bytes()
    fill(full)
    proc = cli("baseline", "save", str(src), "-o", "b.json", "--force", cwd=full)
    assert_one_line_error(proc, f"b.json: cannot be written ({NO_SPACE})")
    assert (full / "b.json").read_bytes() == before and leftovers(full) == []


def test_compare_summary_on_a_full_disk_leaves_the_job_summary_whole(src, full):
    summary = full / "step_summary.md"
    earlier = "## build\n\n" + "all green\n" * 408 + "done\n\n"  # 4,096 bytes: an append needs a new page
    summary.write_text(earlier)
    fill(full)
    proc = cli("compare", str(src), str(src), "--summary", cwd=full, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert_one_line_error(proc, f"step_summary.md: cannot be appended to ({NO_SPACE})")
    assert summary.read_text() == earlier


def test_analyse_html_on_a_read_only_file_system(src, tmp_path):
    with tmpfs(tmp_path / "fs") as mount:
        (mount / "old.html").write_text("<p>old</p>")
        remount_readonly(mount)
        proc = cli("analyse", str(src), "--html", str(mount / "report.html"), cwd=tmp_path)
        # one line besides the progress line a loaded machine shows after 0.5 s
        assert_one_line_error(proc, "fs is not writable (Read-only file system)")
        assert (mount / "old.html").read_text() == "<p>old</p>"


def test_an_engine_directory_without_its_metadata_is_reported(src, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(src, run)
    (run / "inference" / "popviz-report.json").unlink()  # a write killed before its last file
    proc = cli("analyse", "--json", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads(proc.stdout)["warnings"]
    assert warnings == ["run/inference holds execution.parquet, memory.parquet, runs.parquet but no "
                        "popviz-report.json (a bundle whose write was interrupted: killed, or out of space): left "
                        "out of this analysis; write it again"]
    gate = cli("baseline", "save", "run", "-o", "b.json", cwd=tmp_path)
    assert_one_line_error(gate, "run/inference holds execution.parquet", "write it again")
    assert not (tmp_path / "b.json").exists()


def test_engines_sharing_a_name_give_a_baseline_compare_accepts(tmp_path):
    make_bundle(tmp_path / "run" / "a", "training")
    make_bundle(tmp_path / "run" / "b", "training", (3000, 3000))
    saved = cli("baseline", "save", "run", "-o", "b.json", cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    names = [e["name"] for e in json.loads((tmp_path / "b.json").read_text())["engines"]]
    assert names == ["a", "b"]
    proc = cli("compare", "b.json", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_export_into_an_empty_mount_point_and_an_empty_private_directory(src, tmp_path):
    with tmpfs(tmp_path / "mnt") as mount:  # cannot be replaced by a rename: filled in place
        proc = cli("export", str(src), "-o", str(mount), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert sorted(p.name for p in mount.iterdir()) == ["inference", "training"]
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert cli("export", str(src), "-o", "private", cwd=tmp_path).returncode == 0
    assert private.stat().st_mode & 0o777 == 0o700 and leftovers(tmp_path) == []
