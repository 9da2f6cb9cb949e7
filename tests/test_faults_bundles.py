"""Fault injection on bundles, in process: a table of another write under the metadata, two
writers of one new bundle, a full disk under a write in place (an update, and a first write beside
the capture hooks' record), the engine limit at exactly 1,000 and 1,001, a directory of tables
without metadata among complete engines."""

from __future__ import annotations

import shutil
import threading

import pytest
from faults_util import fill, leftovers, make_bundle, snapshot, tmpfs

import popviz
from popviz.errors import CorruptReportError, PopvizError, ReportNotFoundError
from popviz.fileio import WriteError
from popviz.sources import bundle, discover
from popviz.sources.discover import MAX_ENGINES, find_engines


def test_a_table_of_another_write_is_refused_not_mixed_in(tmp_path):
    d = tmp_path / "training"
    make_bundle(d)
    (d / "notes.txt").write_text("keep")  # a directory with other files is updated in place
    old_steps = (d / bundle.STEPS_FILE).read_bytes()
    bundle.write_bundle(popviz.testing.pipeline_report([5000, 1000], tiles_per_ipu=8), d, overwrite=True)
    (d / bundle.STEPS_FILE).write_bytes(old_steps)  # what a write interrupted after one table leaves
    with pytest.raises(CorruptReportError, match="execution.parquet: belongs to another write of this bundle"):
        bundle.read_bundle(d)


def test_a_rewrite_in_place_keeps_other_files_and_reads_whole(tmp_path):
    d = tmp_path / "training"
    make_bundle(d)
    (d / "popviz-model.json").write_text("{}")
    bundle.write_bundle(popviz.testing.pipeline_report([5000, 1000], tiles_per_ipu=8), d, overwrite=True)
    report = bundle.read_bundle(d)
    assert report.execution is not None and (d / "popviz-model.json").read_text() == "{}"
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("leave_kib", [0, 16, 24])  # none of it; room for one table; all but the last two files
def test_a_write_in_place_on_a_full_disk_changes_nothing(tmp_path, leave_kib):
    """An update of a bundle beside other files (the emulator's at exit, the hooks' record there)
    that runs out of space leaves every file byte for byte as it was and the old bundle readable;
    a first write there leaves only what was there before."""
    from popviz import testing

    bigger = testing.pipeline_report([5000, 1000, 3000, 2000], tiles_per_ipu=64)
    with tmpfs(tmp_path / "fs") as mount:
        d = mount / "training"
        make_bundle(d)
        (d / "popviz-model.json").write_text("{}")
        first = mount / "inference"
        first.mkdir()
        (first / "popviz-model.json").write_text("{}")
        before = snapshot(mount)
        fill(mount, leave_kib)
        filled = snapshot(mount)
        for target in (d, first):
            with pytest.raises(WriteError, match="No space left on device") as err:
                bundle.write_bundle(bigger, target, overwrite=True)
            assert f"{target.name}/" in err.value.message and ".tmp" not in err.value.message
        assert snapshot(mount) == filled and leftovers(mount) == []
        (mount / "filler").unlink()
        assert snapshot(mount) == before
        assert bundle.read_bundle(d).execution is not None  # the previous bundle, whole
        assert sorted(p.name for p in first.iterdir()) == ["popviz-model.json"]


def test_of_two_writers_of_a_new_bundle_exactly_one_wins(tmp_path):
    report = popviz.testing.pipeline_report([1000, 2000], tiles_per_ipu=8)
    for round_ in range(5):
        target = tmp_path / f"b{round_}"
        barrier = threading.Barrier(2)
        outcome: list[str] = []
        real = bundle.write_files

        def synced(report, directory, *, run_id=None, barrier=barrier, real=real):
            real(report, directory, run_id=run_id)
            barrier.wait()  # both complete beside the target before either is renamed in

        def write(run_id: str, target=target, outcome=outcome) -> None:
            try:
                bundle.write_bundle(report, target, run_id=run_id)
                outcome.append(run_id)
            except PopvizError as exc:
                outcome.append("refused: " + exc.message)

        bundle.write_files = synced
        try:
            threads = [threading.Thread(target=write, args=(r,)) for r in ("run-a", "run-b")]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            bundle.write_files = real
        winners = [o for o in outcome if not o.startswith("refused")]
        assert len(winners) == 1, outcome
        assert bundle.run_id_of(target) == winners[0]
        assert any("was written by another popviz meanwhile" in o for o in outcome)
    assert leftovers(tmp_path) == []


def _engines(root, n):
    for k in range(n):
        (root / f"e{k:04d}").mkdir(parents=True)
        (root / f"e{k:04d}" / "popviz-model.json").write_text("{}")


def test_the_engine_limit_is_exactly_1000(tmp_path):
    _engines(tmp_path / "ok", MAX_ENGINES)
    assert len(find_engines(tmp_path / "ok")) == 1000
    _engines(tmp_path / "over", MAX_ENGINES + 1)
    with pytest.raises(ReportNotFoundError, match="holds more than 1,000 engines"):
        find_engines(tmp_path / "over")


def test_tables_without_metadata_beside_a_complete_engine_are_a_warning(tmp_path):
    make_bundle(tmp_path / "run" / "training")
    make_bundle(tmp_path / "run" / "inference", "inference")
    (tmp_path / "run" / "inference" / bundle.METADATA_FILE).unlink()
    reports = popviz.load(tmp_path / "run")
    assert reports.labels == ["training"]
    assert reports.warnings == [f"{tmp_path}/run/inference holds execution.parquet, memory.parquet, runs.parquet but "
                                "no popviz-report.json (a bundle whose write was interrupted: killed, or out of "
                                "space): left out of this analysis; write it again"]
    with pytest.raises(CorruptReportError, match="inference holds execution.parquet"):
        discover.load(tmp_path / "run", single_run=True)
    shutil.rmtree(tmp_path / "run" / "training")
    with pytest.raises(CorruptReportError, match="inference holds execution.parquet"):
        popviz.load(tmp_path / "run")
