"""The SQLite history when things go wrong (issue 42): a full file system (a 1 MiB tmpfs, where
root can mount one), a read-only mount, a lock held by another process, a UNIQUE clash, a reader
holding the file open during an add, and an older schema. Each case: the exit code or exception,
its one line, and the history byte-identical to what it was, with nothing left beside it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from popviz.ci import history, history_sqlite
from popviz.ci.baseline import EngineMetrics
from popviz.errors import UsageError

from conftest import ROOT, assert_one_line_error, run_cli

SAMPLE = ROOT / "sample_reports" / "mnist_pipeline"


def engines(n: int = 3, name: str = "training", **env: str) -> list[EngineMetrics]:
    return [EngineMetrics(name, None, "pva", False, {"device_iterations": 4},
                          {f"memory.ipu{k}.used_bytes": float(1000 + k) for k in range(n)}, environment=dict(env))]


def files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


@pytest.fixture
def mount_point(tmp_path):
    """A directory root can mount a tmpfs on (skipped, with the reason, where it cannot)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (run as root, as CI does)")
    point = tmp_path / "mnt"
    point.mkdir()
    yield point
    subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def mount(point: Path, *options: str) -> None:
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(["size=1m", *options]), "tmpfs", str(point)],
                          capture_output=True, text=True, check=False)
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


def fill(d: Path, leave: int = 0) -> None:
    """Fill the file system of ``d`` up to ``leave`` bytes."""
    fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    if leave:
        os.truncate(d / "filler", max(0, (d / "filler").stat().st_size - leave))


def test_full_disk_add_says_so_and_leaves_the_history_as_it_was(mount_point):
    """Was: "cannot rollback - no transaction is active" (exit 2 with SQLite's words), and -wal
    and -shm files left behind after which history show failed too."""
    mount(mount_point)
    db = mount_point / "h.db"
    history.add(db, engines(), label="a")
    fill(mount_point)
    before = db.read_bytes()
    for n in (3, 2000):  # a run that needs a page, and one that needs many
        with pytest.raises(UsageError, match=r"^.*h\.db: no space left on device.*the history is as it was"):
            history.add(db, engines(n), label="b")
        assert db.read_bytes() == before
        assert files(mount_point) == ["filler", "h.db"]
    proc = run_cli("history", "add", str(SAMPLE), "--db", str(db))
    line = assert_one_line_error(proc, "h.db: no space left on device", "the history is as it was")
    assert "rollback" not in line and "cannot be read" not in line
    assert db.read_bytes() == before and files(mount_point) == ["filler", "h.db"]
    shown = run_cli("history", "show", "--db", str(db), "--all")  # still reads on the full disk
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("popviz history: 1 run(s), #1 (a) to #1 (a)")
    assert files(mount_point) == ["filler", "h.db"]
    new = mount_point / "new.db"  # a first add on a full disk leaves no file
    with pytest.raises(UsageError, match="no space left on device"):
        history.add(new, engines(), label="first")
    assert files(mount_point) == ["filler", "h.db"]
    (mount_point / "filler").unlink()
    assert history.add(db, engines(200), label="b").id == 2  # with room again, it appends


def test_a_disk_that_fills_mid_write_is_refused_before_anything_is_written(mount_point):
    """Room for the -wal but not for the checkpoint would leave a run only in h.db-wal: refused
    up front, naming what is free and what the run needs."""
    mount(mount_point)
    db = mount_point / "h.db"
    history.add(db, engines(), label="a")
    fill(mount_point, leave=150_000)
    before = db.read_bytes()
    with pytest.raises(UsageError, match=r"no space left on device \(\d+ KiB free, the run needs about [\d,]+ KiB\)"):
        history.add(db, engines(20_000), label="big")
    assert db.read_bytes() == before and files(mount_point) == ["filler", "h.db"]
    assert history.add(db, engines(100), label="small").id == 2
    assert files(mount_point) == ["filler", "h.db"]  # checkpointed: the file alone holds both runs


def test_read_only_mount_is_named_and_never_called_a_bad_database(mount_point):
    """Was: the file "cannot be read as a database", inviting a new one."""
    mount(mount_point, "size=4m")
    db = mount_point / "h.db"
    history.add(db, engines(), label="a")
    history.add(db, engines(), label="b")
    proc = subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        pytest.skip(f"cannot remount read-only: {proc.stderr.strip()}")
    before = db.read_bytes()
    line = assert_one_line_error(run_cli("history", "add", str(SAMPLE), "--db", str(db)),
                                 "h.db is on a read-only file system", "copy it somewhere writable")
    assert "database" not in line and "new file" not in line
    shown = run_cli("history", "show", "--db", str(db), "--all")
    assert shown.returncode == 0 and shown.stdout.startswith("popviz history: 2 run(s)"), shown.stderr
    assert [r.label for r in history.median_side(db).runs["training"]] == ["a", "b"]
    assert db.read_bytes() == before and files(mount_point) == ["h.db"]


def test_a_lock_held_too_long_says_locked_and_adds_nothing(tmp_path, monkeypatch):
    db = tmp_path / "h.db"
    history.add(db, engines(), label="a")
    monkeypatch.setattr(history_sqlite, "BUSY_TIMEOUT_SECONDS", 0.5)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another writer in the middle of its add
    start = time.monotonic()
    with pytest.raises(UsageError, match=r"h\.db stayed locked by another process for 0 s; the history is as it was"):
        history.add(db, engines(), label="b")
    assert time.monotonic() - start < 30
    other.execute("ROLLBACK")
    other.close()
    assert [r.label for r in history.read(db).runs] == ["a"]


def test_two_engines_of_one_name_are_refused_not_called_a_damaged_database(tmp_path):
    """Was: a UNIQUE clash reported as a damaged database."""
    db = tmp_path / "h.db"
    history.add(db, engines(), label="a")
    before = db.read_bytes()
    with pytest.raises(UsageError, match="runs/x has two engines named 'training'; give them distinct names"):
        history.add(db, engines() + engines(), label="b", source="runs/x")
    assert db.read_bytes() == before
    # a clash the check cannot see (a row planted by hand with the next run's id) is no damage either
    con = sqlite3.connect(db)
    con.execute("PRAGMA foreign_keys = OFF")
    con.execute("INSERT INTO runs (id, label, added_at, source, written_by) VALUES (5, 'x', 't', 's', 'w')")
    con.execute("DELETE FROM runs WHERE id = 5")
    con.execute("INSERT INTO engines (run_id, engine, name, instance, source, estimated, config) "
                "VALUES (6, 'training', 'training', NULL, 'pva', 0, '{}')")
    con.commit()
    con.close()
    with pytest.raises(UsageError, match="the run clashes with rows already there .*UNIQUE.*the history is as it was"):
        history.add(db, engines(), label="c")
    assert [r.label for r in history.read(db).runs] == ["a"]


def test_every_add_ends_with_a_checkpoint_so_the_file_alone_is_complete(tmp_path):
    """Was: a run appended while a reader held the file open lived only in h.db-wal, and a CI
    cache of h.db alone lost it."""
    db = tmp_path / "h.db"
    history.add(db, engines(), label="a")
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)  # another process's idle connection
    reader.execute("SELECT count(*) FROM runs").fetchone()
    for label in ("b", "c"):
        history.add(db, engines(), label=label)
    copy = tmp_path / "cache"
    copy.mkdir()
    (copy / "h.db").write_bytes(db.read_bytes())  # what actions/cache saves: h.db alone
    assert [r.label for r in history.read(copy / "h.db").runs] == ["a", "b", "c"]
    assert files(copy) == ["h.db"]
    reader.close()


def test_a_copy_with_its_wal_is_read_with_the_runs_in_the_wal(tmp_path, monkeypatch):
    """A copy of h.db with its -wal where popviz may not write (a downloaded artifact): SQLite
    reads the -wal too (read as immutable, the file alone would drop its runs without a word)."""
    db = tmp_path / "h.db"
    history.add(db, engines(), label="a")
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA wal_autocheckpoint = 0")
    con.execute("INSERT INTO runs (label, added_at, source, written_by) VALUES ('only-in-wal', 't', 's', 'w')")
    ro = tmp_path / "ro"
    ro.mkdir()
    for suffix in ("", "-wal", "-shm"):
        (ro / f"h.db{suffix}").write_bytes(Path(f"{db}{suffix}").read_bytes())
    con.close()
    monkeypatch.setattr(history_sqlite.os, "access", lambda *a, **k: False)
    assert [r.label for r in history.read(ro / "h.db").runs] == ["a", "only-in-wal"]


V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, label TEXT, added_at TEXT NOT NULL, source TEXT NOT NULL,
                   written_by TEXT NOT NULL);
CREATE TABLE engines (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, engine TEXT NOT NULL,
                      name TEXT NOT NULL, instance TEXT, source TEXT NOT NULL, estimated INTEGER NOT NULL,
                      config TEXT NOT NULL, PRIMARY KEY (run_id, engine));
CREATE TABLE metrics (run_id INTEGER NOT NULL, engine TEXT NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL,
                      PRIMARY KEY (run_id, engine, metric),
                      FOREIGN KEY (run_id, engine) REFERENCES engines(run_id, engine) ON DELETE CASCADE);
CREATE INDEX metrics_by_name ON metrics (engine, metric, run_id);
INSERT INTO meta VALUES ('format', 'popviz-history'), ('created_by', 'popviz 0.0.9');
INSERT INTO runs VALUES (1, 'old', '2026-01-01T00:00:00+00:00', 'runs/old', 'popviz 0.0.9');
INSERT INTO engines VALUES (1, 'training', 'training', NULL, 'pva', 0, '{"device_iterations": 4}');
INSERT INTO metrics VALUES (1, 'training', 'memory.ipu0.used_bytes', 1000.0);
PRAGMA user_version = 1;
"""


def test_a_schema_1_history_is_read_as_it_is_and_migrated_by_the_next_add(tmp_path):
    db = tmp_path / "h.db"
    con = sqlite3.connect(db)
    con.executescript(V1)
    con.close()
    before = db.read_bytes()
    h = history.read(db)
    assert [(r.id, r.label) for r in h.runs] == [(1, "old")] and h.engines[(1, "training")].environment == {}
    assert db.read_bytes() == before  # reading never migrates
    history.add(db, engines(1, popviz="0.1.0"), label="new")
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 2
    assert dict(con.execute("SELECT key, value FROM meta"))["migrated_by"].startswith("popviz ")
    assert con.execute("SELECT run_id, environment FROM engines ORDER BY run_id").fetchall() == [
        (1, "{}"), (2, '{"popviz": "0.1.0"}')]
    con.close()
    h = history.read(db)
    assert [r.label for r in h.runs] == ["old", "new"]
    assert h.engines[(1, "training")].metrics == {"memory.ipu0.used_bytes": 1000.0}


def test_add_reads_a_large_history_in_constant_memory(tmp_path):
    """add's check of what is there is one aggregate query per metric, not every row in Python
    (was 1.5 GiB at 100,000 runs): a bad value among many runs is still named with its run."""
    db = tmp_path / "h.db"
    history.add(db, engines(4), label="seed")
    con = sqlite3.connect(db)
    con.executemany("INSERT INTO runs (id, label, added_at, source, written_by) VALUES (?, ?, 't', 's', 'w')",
                    [(i, f"c{i}") for i in range(2, 3001)])
    con.executemany("INSERT INTO engines VALUES (?, 'training', 'training', NULL, 'pva', 0, "
                    "'{\"device_iterations\": 4}', '{}')", [(i,) for i in range(2, 3001)])
    con.executemany("INSERT INTO metrics VALUES (?, 'training', ?, ?)",
                    [(i, f"memory.ipu{k}.used_bytes", 1000.0 + k) for i in range(2, 3001) for k in range(4)])
    con.execute("UPDATE metrics SET value = -1 WHERE run_id = 2345 AND metric = 'memory.ipu2.used_bytes'")
    con.commit()
    con.close()
    with pytest.raises(Exception, match="impossible value for metric 'memory.ipu2.used_bytes' of engine 'training' "
                                        "of run #2345: -1 bytes"):
        history.add(db, engines(4), label="next")
