"""The embedded history: one SQLite file (stdlib ``sqlite3``, no server).

Safe for concurrent writers on one machine: WAL mode, every write one ``BEGIN IMMEDIATE``
transaction, a writer waits up to :data:`BUSY_TIMEOUT_SECONDS` for another. Every write ends with
a checkpoint, so the file alone holds every run (a CI cache of the file alone is complete). An
existing file is checked read-only before it is opened for writing; errors name what happened
(no space left, read-only, locked) and leave the file as it was. docs/ci-history.md.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from popviz.ci.baseline import SQLITE_MAGIC
from popviz.ci.history_db import Db
from popviz.errors import CorruptReportError, PopvizError, UsageError, shown

BUSY_TIMEOUT_SECONDS = 60.0
"""How long a writer waits for another one before giving up."""
T = TypeVar("T")

# SQLite's primary result codes (https://www.sqlite.org/rescode.html)
SQLITE_PERM, SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY, SQLITE_IOERR = 3, 5, 6, 8, 10
SQLITE_CORRUPT, SQLITE_FULL, SQLITE_CANTOPEN, SQLITE_CONSTRAINT, SQLITE_NOTADB = 11, 13, 14, 19, 26


def _no_space(p: Path) -> bool:
    try:
        st = os.statvfs(p.resolve().parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


BYTES_PER_METRIC = 400
"""Room a metric row takes, with its two index entries, once in the -wal and once in the file
(a checkpoint grows the file by what the -wal holds): a bound, not a measurement."""


def check_space(p: Path, metrics: int, text_bytes: int) -> None:
    """Refuse before writing anything when the file system cannot hold the run twice over (the
    -wal, then the checkpoint into the file): a disk that fills mid-write would leave the run
    committed in the -wal alone."""
    try:
        st = os.statvfs(p.resolve().parent)
    except OSError:
        return
    need = 2 * (metrics * BYTES_PER_METRIC + 2 * text_bytes) + 64 * 1024
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise UsageError(f"{shown(p)}: no space left on device ({free / 1024:,.0f} KiB free, the run needs about "
                         f"{need / 1024:,.0f} KiB); the history is as it was (no run added): free some space and "
                         "run it again")


def _read_only_fs(p: Path) -> bool:
    try:
        return bool(os.statvfs(p.resolve().parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def error(exc: sqlite3.Error, p: Path, *, writing: bool) -> PopvizError:
    """What happened, in one line naming the file; never an invitation to replace a good file."""
    code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
    text = str(exc)
    unchanged = "; the history is as it was (no run added)" if writing else ""
    if code == SQLITE_FULL or (code == SQLITE_IOERR and _no_space(p)) or "disk is full" in text:
        return UsageError(f"{shown(p)}: no space left on device{unchanged}: free some space and run it again")
    if code == SQLITE_READONLY or (code in (SQLITE_CANTOPEN, SQLITE_IOERR, SQLITE_PERM) and _read_only_fs(p)):
        where = "is on a read-only file system" if _read_only_fs(p) else "is read-only"
        return UsageError(f"{shown(p)} {where}{unchanged}: history add must write it and {p.name}-wal beside "
                          "it; copy it somewhere writable")
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        return UsageError(f"{shown(p)} stayed locked by another process for {BUSY_TIMEOUT_SECONDS:.0f} s"
                          f"{unchanged}; try again")
    if code in (SQLITE_PERM, SQLITE_CANTOPEN):
        return UsageError(f"{shown(p)}: cannot be opened ({text}); check its permissions and its directory's")
    if code == SQLITE_IOERR:
        return UsageError(f"{shown(p)}: input/output error ({text}){unchanged}; check the disk and run it again")
    if code == SQLITE_CONSTRAINT:
        return UsageError(f"{shown(p)}: the run clashes with rows already there ({text}){unchanged}")
    if code in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return CorruptReportError(f"{shown(p)} is damaged ({text}); restore it from a copy (a CI cache or "
                                  "artifact), or pass a new file name to start a history")
    return CorruptReportError(f"{shown(p)}: SQLite could not {'write' if writing else 'read'} it ({text}); "
                              "it was not changed")


def _retry_locked(fn: Callable[[], T], p: Path) -> T:
    """Run ``fn`` again while SQLite says the database is locked (setting WAL mode takes an
    exclusive lock that the busy handler does not always wait for)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
            if code not in (SQLITE_BUSY, SQLITE_LOCKED) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _check_path(p: Path, *, create: bool) -> bool:
    """One-line errors for what is no history file; whether the file exists (and holds bytes)."""
    if p.is_dir():
        raise UsageError(f"{shown(p)} is a directory; --db takes a file (e.g. perf/history.db)")
    if not p.exists():
        if p.is_symlink():
            raise UsageError(f"{shown(p)} is a dangling symbolic link; --db takes a file")
        if not create:
            raise UsageError(f"{shown(p)} does not exist; start a history with popviz history add REPORT "
                             f"--db {shown(p)}")
        if not p.parent.is_dir():
            from popviz.fileio import missing_directory

            raise UsageError(f"{missing_directory(p.parent)}; create it first")
        return False
    from popviz.fileio import check_regular

    try:
        check_regular(p)
        with open(p, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except CorruptReportError as exc:
        raise UsageError(exc.message) from None
    except OSError as exc:
        raise UsageError(f"{shown(p)}: cannot be read ({exc.strerror})") from None
    if head and head != SQLITE_MAGIC:
        raise CorruptReportError(f"{shown(p)} is not a SQLite database; pass a history written by popviz "
                                 "history add (or a new file name to start one)")
    return bool(head)


def holds_bytes(p: Path) -> bool:
    """Whether ``p`` is an existing SQLite file with something in it (one-line errors for what
    is no history file, as :func:`_check_path`)."""
    return _check_path(p, create=True)


def check_writable(p: Path) -> None:
    """A one-line error, before anything is read, when ``p`` (or its directory, where SQLite
    creates the -wal and -shm files) cannot be written."""
    target = p if p.exists() else p.parent
    ok = os.access(target, os.W_OK) and os.access(p.resolve().parent, os.W_OK | os.X_OK)
    if not ok or _read_only_fs(p):
        where = "is on a read-only file system" if _read_only_fs(p) else \
            ("is read-only" if p.exists() else "is in a directory popviz cannot write")
        raise UsageError(f"{shown(p)} {where}: history add must write it and {p.name}-wal beside it; copy it "
                         "somewhere writable (history show and compare read it where it is)")


def _uri(p: Path, params: str) -> str:
    import urllib.parse

    return f"file:{urllib.parse.quote(str(p.resolve()))}?{params}"


@contextmanager
def _connection(p: Path, params: str, *, writing: bool) -> Iterator[sqlite3.Connection]:
    try:
        con = sqlite3.connect(_uri(p, params), uri=True, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
    except sqlite3.Error as exc:
        raise error(exc, p, writing=writing) from None
    try:
        con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        yield con
    except sqlite3.Error as exc:
        raise error(exc, p, writing=writing) from None
    finally:
        con.close()


@contextmanager
def _transaction(con: sqlite3.Connection, p: Path, *, write: bool) -> Iterator[None]:
    _retry_locked(lambda: con.execute("BEGIN IMMEDIATE" if write else "BEGIN"), p)
    try:
        yield
    except BaseException:
        if con.in_transaction:  # SQLite itself rolls back on a full disk: nothing to undo then
            try:
                con.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        raise
    _retry_locked(lambda: con.execute("COMMIT"), p)


SHM_DMS_BYTE = 128
"""The byte of the -shm file every open WAL connection holds a shared lock on (SQLite's
"dead-man switch", UNIX_SHM_DMS in os_unix.c): when it can be locked exclusively, no process has
the database open."""


def _nobody_has_it_open(p: Path) -> bool:
    import fcntl

    try:
        fd = os.open(f"{p}-shm", os.O_RDWR)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS_BYTE)
    except OSError:
        return False
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, SHM_DMS_BYTE)
        return True
    finally:
        os.close(fd)


def _stray(p: Path) -> bool:
    """An empty -wal (and its -shm) that no process has open: what a write that failed before
    its first page (a full disk cannot grow the -shm) leaves. The file alone holds every run."""
    wal = Path(f"{p}-wal")
    try:
        empty = wal.stat().st_size == 0
    except OSError:
        return False
    return empty and not os.path.lexists(f"{p}-journal") and _nobody_has_it_open(p)


def remove_stray(p: Path) -> None:
    """Remove what :func:`_stray` describes, so the history is as it was before the write."""
    import fcntl

    if not _stray(p):
        return
    try:
        fd = os.open(f"{p}-shm", os.O_RDWR)
    except FileNotFoundError:
        fd = -1
    except OSError:
        return
    try:
        if fd >= 0:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS_BYTE)  # keeps a new reader out meanwhile
        if Path(f"{p}-wal").stat().st_size == 0:
            for suffix in ("-wal", "-shm"):
                Path(f"{p}{suffix}").unlink(missing_ok=True)
    except OSError:
        pass
    finally:
        if fd >= 0:
            os.close(fd)


def at_rest(p: Path) -> tuple[int, int, int] | None:
    """The file's (inode, size, modification time) when no connection has it open — no -wal,
    -shm or -journal beside it (SQLite removes them when the last writer closes, and the file
    then holds every committed run), or only an empty -wal no process has open — else None."""
    if any(os.path.lexists(f"{p}{suffix}") for suffix in ("-wal", "-shm", "-journal")) and not _stray(p):
        return None
    try:
        st = p.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@contextmanager
def reading(db: str | os.PathLike[str], *, at_rest: bool = False) -> Iterator[Db]:
    """A read-only connection inside one transaction. ``at_rest``: no connection has the file
    open (see :func:`at_rest`), so it is read as immutable and nothing is created beside it; so is
    a file in a directory popviz cannot write. A file whose -wal holds runs in a directory that
    cannot be written is refused: read immutable, those runs would be silently missing."""
    p = Path(db)
    if not _check_path(p, create=False):
        raise UsageError(f"{shown(p)} holds no runs yet; add one with popviz history add REPORT --db {shown(p)}")
    writable = os.access(p, os.W_OK) and os.access(p.resolve().parent, os.W_OK | os.X_OK) and not _read_only_fs(p)
    wal = Path(f"{p}-wal")
    if not writable and wal.exists() and wal.stat().st_size > 0:
        # SQLite can read a WAL file it cannot write only when its -shm is there and readable
        params = "mode=ro"
    else:
        params = "mode=ro" if writable and not at_rest else "mode=ro&immutable=1"
    with _connection(p, params, writing=False) as raw:
        try:
            with _transaction(raw, p, write=False):
                yield Db(raw, shown(p), "sqlite")
        except sqlite3.OperationalError as exc:
            if params == "mode=ro" and not writable:
                raise UsageError(f"{shown(p)}: its runs since the last checkpoint are in {wal.name}, which SQLite "
                                 f"cannot read in a directory popviz cannot write ({exc}); copy {p.name}, "
                                 f"{wal.name} and {p.name}-shm to a writable directory") from None
            raise


@contextmanager
def writing(db: str | os.PathLike[str]) -> Iterator[Db]:
    """A connection inside one ``BEGIN IMMEDIATE`` transaction, committed and then checkpointed
    (``wal_checkpoint(TRUNCATE)``: the file alone holds every run) when the block ends. An
    existing file is checked read-only first, so a file popviz refuses is never modified."""
    p = Path(db)
    _check_path(p, create=True)
    check_writable(p)
    created = not p.exists()
    try:
        with _connection(p, "mode=rwc", writing=True) as raw:
            mode = _retry_locked(lambda: raw.execute("PRAGMA journal_mode = WAL").fetchone()[0], p)
            if str(mode).lower() != "wal":
                raise UsageError(f"{shown(p)}: SQLite could not switch it to WAL mode (got {mode!r}); "
                                 "put the history on a local file system")
            raw.execute("PRAGMA foreign_keys = ON")
            with _transaction(raw, p, write=True):
                yield Db(raw, shown(p), "sqlite")
            _checkpoint(raw, p)
    except BaseException:
        if created:
            _remove_new(p)
        else:
            remove_stray(p)
        raise


def _checkpoint(raw: sqlite3.Connection, p: Path) -> None:
    """Copy the WAL into the file and empty it, waiting (busy timeout) for readers that hold
    older snapshots, and trying again while another writer holds the checkpoint (its own
    checkpoint then moves this run in too); a file left with runs only in its -wal is said."""
    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    while True:
        try:
            busy = _retry_locked(lambda: raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone(), p)[0]
        except sqlite3.Error as exc:
            raise UsageError(f"{shown(p)}: the run was added, but only to {p.name}-wal: the checkpoint into the "
                             f"file failed ({exc}); keep {p.name}-wal beside it (the next history add with room to "
                             "spare moves it in)") from None
        if not busy:
            return
        if time.monotonic() > deadline:
            raise UsageError(f"{shown(p)}: the run was added, but other processes kept the file open for "
                             f"{BUSY_TIMEOUT_SECONDS:.0f} s and it is in {p.name}-wal until the next history add: "
                             "keep both files")
        time.sleep(0.05)


def _remove_new(p: Path) -> None:
    """After a failed first add: remove the file it created when no run is in it (an empty
    database, or one another writer has not committed to), so nothing is left behind."""
    try:
        con = sqlite3.connect(_uri(p, "mode=ro"), uri=True, timeout=1)
        try:
            runs = con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        runs = 0 if p.exists() and p.stat().st_size == 0 else 1
    if runs == 0:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(f"{p}{suffix}")
            except OSError:
                pass
