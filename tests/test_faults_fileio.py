"""Fault injection on popviz's one write mechanism (popviz.fileio): a full file system (a 2 MiB
tmpfs), a read-only one, concurrent writers, a failure in the middle of a write. Each case checks
the error (one line naming the path and the cause) and that what was there is byte-identical."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from faults_util import fill, leftovers, remount_readonly, snapshot, tmpfs

from popviz.errors import UsageError
from popviz.fileio import (
    WriteError,
    append_text,
    publish_file,
    real_name,
    rename_noreplace,
    staged_dir,
    write_file,
    write_output,
)

NO_SPACE = "No space left on device"


@pytest.fixture
def full(tmp_path):
    with tmpfs(tmp_path / "fs") as mount:
        yield mount


def test_a_full_disk_leaves_the_previous_file_and_no_temporary_file(full):
    target = full / "b.json"
    target.write_bytes(b"old baseline\n")
    fill(full)
    with pytest.raises(WriteError) as err:
        write_output(target, b"x" * 100_000, force=True)
    assert NO_SPACE in err.value.message and "b.json: cannot be written" in err.value.message
    assert "\n" not in err.value.message
    assert target.read_bytes() == b"old baseline\n"
    assert leftovers(full) == []


def test_a_full_disk_leaves_no_new_file(full):
    fill(full)
    with pytest.raises(WriteError, match=NO_SPACE):
        write_output(full / "new.html", "<html>" + "x" * 100_000, force=False)
    assert not (full / "new.html").exists() and leftovers(full) == []


def test_a_writer_that_fails_part_way_leaves_nothing_under_the_name(tmp_path):
    def writer(fh):
        fh.write(b"half a figure")
        raise RuntimeError("matplotlib failed")

    (tmp_path / "plot.png").write_bytes(b"previous figure")
    with pytest.raises(RuntimeError):
        write_file(tmp_path / "plot.png", writer, replace=True)
    assert (tmp_path / "plot.png").read_bytes() == b"previous figure"
    with pytest.raises(RuntimeError):
        write_file(tmp_path / "new.png", writer, replace=False)
    assert not (tmp_path / "new.png").exists() and leftovers(tmp_path) == []


def test_a_read_only_file_system_is_named(tmp_path):
    with tmpfs(tmp_path / "fs") as mount:
        (mount / "summary.md").write_text("before\n")
        remount_readonly(mount)
        with pytest.raises(WriteError) as err:
            write_output(mount / "report.html", "<html/>", force=False)
        assert "Read-only file system" in err.value.message and "report.html" in err.value.message
        with pytest.raises(WriteError, match="summary.md: cannot be written .Read-only file system"):
            append_text(mount / "summary.md", "more\n")
        assert (mount / "summary.md").read_text() == "before\n"


def test_an_append_on_a_full_disk_is_all_or_nothing(full):
    summary = full / "step_summary.md"
    summary.write_text("## earlier step\n")
    fill(full, leave_kib=4)  # room for part of the append, not all of it
    with pytest.raises(WriteError) as err:
        append_text(summary, "| metric | base | new |\n" * 20_000)
    assert f"step_summary.md: cannot be appended to ({NO_SPACE})" in err.value.message
    assert summary.read_text() == "## earlier step\n"


def test_an_append_that_cannot_start_leaves_no_new_file(full):
    fill(full)
    with pytest.raises(WriteError, match=NO_SPACE):
        append_text(full / "new_summary.md", "x" * 100_000)
    assert not (full / "new_summary.md").exists()


def test_of_two_writers_of_a_new_file_exactly_one_wins(tmp_path):
    """Refusal at the moment of the rename: with both past every check, one rename fails."""
    for round_ in range(30):
        target = tmp_path / f"b{round_}.json"
        barrier = threading.Barrier(2)
        results: list[str] = []

        def save(text: str, target: Path = target, barrier: threading.Barrier = barrier,
                 results: list[str] = results) -> None:
            def writer(fh):
                fh.write(text.encode())
                barrier.wait()  # both temporary files complete before either rename
            try:
                write_file(target, writer, replace=False)
                results.append(text)
            except UsageError as exc:
                results.append("refused: " + exc.message)

        threads = [threading.Thread(target=save, args=(t,)) for t in ("first", "second")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [r for r in results if not r.startswith("refused")]
        assert len(winners) == 1, results
        assert target.read_text() == winners[0]
        assert any("exists; popviz never writes over files" in r for r in results)
    assert leftovers(tmp_path) == []


def test_rename_noreplace_refuses_an_existing_directory_and_file(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "y").write_text("b")
    with pytest.raises(FileExistsError):
        rename_noreplace(tmp_path / "a", tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["y"]
    (tmp_path / "f").write_text("f")
    (tmp_path / "g").write_text("g")
    with pytest.raises(FileExistsError):
        rename_noreplace(tmp_path / "f", tmp_path / "g")
    assert (tmp_path / "g").read_text() == "g"


def test_a_staged_directory_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), staged_dir(out) as tmp:
        (tmp / "training").mkdir()
        (tmp / "training" / "memory.parquet").write_bytes(b"t")
        raise RuntimeError("killed half way")
    assert not out.exists() and leftovers(tmp_path) == []


def test_a_second_staged_directory_is_refused_and_the_first_kept(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="out was written by another popviz meanwhile"):
        with staged_dir(out) as tmp:
            (tmp / "a").write_text("first")
            with staged_dir(out) as other:  # another writer, finished first
                (other / "b").write_text("second")
    assert snapshot(out) == {"b": snapshot(out)["b"]} and (out / "b").read_text() == "second"
    assert leftovers(tmp_path) == []


def test_a_full_disk_in_a_staged_directory_names_the_real_path(full):
    fill(full, leave_kib=8)
    with pytest.raises(WriteError) as err, staged_dir(full / "out") as tmp:
        publish_file(tmp / "memory.parquet", b"x" * 200_000, replace=False)
    assert f"{full}/out/memory.parquet: cannot be written ({NO_SPACE})" in err.value.message
    assert not (full / "out").exists() and leftovers(full) == []


def test_real_name_strips_temporary_names():
    assert real_name(Path("d/.out.123.0a1b2c3d.tmp/.training.45.ffffffff.tmp/x.parquet")) == \
        Path("d/out/training/x.parquet")
    assert real_name(Path("plain/.hidden")) == Path("plain/.hidden")
