"""Small file helpers shared by the bundle writer, the capture manifests and the launcher: reading
regular files only, checking output paths, the writes of :mod:`popviz.atomic` (re-exported here).

Imports only the standard library: capture hooks use it inside the user's process.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from popviz.atomic import (  # noqa: F401 (re-exported: fileio is where writers look)
    RUN_ID_ENV,
    StagedFiles,
    WriteError,
    atomic_write_bytes,
    exchange,
    exists_error,
    new_id,
    publish_dir,
    publish_file,
    real_name,
    remove_tree,
    rename_noreplace,
    staged_dir,
    temp_dir,
    temp_file,
    write_error,
    write_file,
)
from popviz.errors import CorruptReportError, UnsupportedFormatError, UsageError, shown

MAX_JSON_BYTES = 64 * 2**20
"""The largest popviz JSON file read (bundle metadata, popviz-model.json, baselines, plan files):
far above any real one, far below what would exhaust memory."""


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")


def check_regular(path: str | os.PathLike[str], what: str = "") -> None:
    """CorruptReportError unless ``path`` (links followed) is a regular file: popviz never opens
    a FIFO, a device or a socket (it would wait forever or read without end). For files that a
    library opens (profile.pop, Parquet tables, SQLite)."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except OSError as exc:
        raise CorruptReportError(f"{shown(p)}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise CorruptReportError(f"{shown(p)} is {_kind(mode)}, not a file{what}; popviz reads only regular "
                                 "files: replace it with the file itself")


def read_regular_bytes(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of ``path``, which must be a regular file (links followed) of at most
    ``max_bytes``: a FIFO is refused without waiting for a writer, a device (``/dev/zero``)
    without reading it. CorruptReportError with one line otherwise."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise CorruptReportError(f"{shown(p)}: cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptReportError(f"{shown(p)} is {_kind(st.st_mode)}, not a file; popviz reads only "
                                     "regular files: replace it with the file itself")
        if st.st_size > max_bytes:
            raise CorruptReportError(f"{shown(p)} is {st.st_size:,} bytes, more than the {max_bytes:,} popviz "
                                     "reads from such a file; is it the right file?")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise CorruptReportError(f"{shown(p)}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise CorruptReportError(f"{shown(p)} grew past the {max_bytes:,} bytes popviz reads from such a file")
    return data


def read_regular_text(path: str | os.PathLike[str], max_bytes: int = MAX_JSON_BYTES) -> str:
    """:func:`read_regular_bytes` decoded as UTF-8 (UnicodeDecodeError when it is not)."""
    return read_regular_bytes(path, max_bytes).decode("utf-8")


def read_versioned_json(path: Path, *, format_name: str, format_version: int, kind: str,
                        fail: Callable[[str], CorruptReportError]) -> dict[str, Any]:
    """The JSON object in ``path`` whose ``format`` is ``format_name`` and whose
    ``format_version`` this popviz reads (``format_version`` or older).

    ``fail(what)`` makes the error for a damaged file; a newer version raises
    UnsupportedFormatError telling the user to upgrade. ``kind`` names the format in messages
    (e.g. "bundle").
    """
    from popviz._version import __version__

    try:
        text = read_regular_text(path)
    except UnicodeDecodeError:
        raise fail("is not UTF-8 text") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise fail("nests JSON too deeply to be a popviz file") from None
    except ValueError as exc:  # e.g. an integer longer than Python's digit limit
        raise fail(f"holds a value popviz cannot read ({str(exc).split(';')[0]})") from None
    if not isinstance(doc, dict):
        raise fail("is not a JSON object")
    if "\\u" in text:
        try:  # a \ud800 escape decodes to a lone surrogate: not text, and no output can hold it
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise fail("holds a string that is not valid Unicode (a lone surrogate such as \\ud800)") from None
    if doc.get("format") != format_name:
        raise fail(f"is not a popviz {kind} (\"format\" is {doc.get('format')!r}, expected {format_name!r})")
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise fail(f"has an invalid format_version {version!r}")
    if version > format_version:
        raise UnsupportedFormatError(
            f"{shown(path)} is {kind} format {version}, written by "
            f"{doc.get('written_by', 'a newer popviz')}; this popviz {__version__} reads format "
            f"{format_version} and older: upgrade popviz (pip install -U popviz)")
    return doc


def refuse_existing(path: str | os.PathLike[str]) -> None:
    """UsageError when ``path`` exists (or is a link, even a dangling one), or cannot be created
    (no such directory, no permission): checked before any work, so a long analysis never ends
    in an output that cannot be written."""
    from popviz.errors import UsageError

    p = Path(path)
    try:
        if p.exists() or p.is_symlink():
            raise UsageError(f"{shown(p)} exists; popviz never writes over files: choose a new file name, or "
                             "pass --force to replace it")
    except OSError as exc:  # e.g. a name too long for the file system
        raise UsageError(f"{shown(p)} cannot be created ({exc.strerror}); choose another path") from None
    _check_parent(p)


def check_output(path: str | os.PathLike[str], force: bool) -> None:
    """Before any work: :func:`check_replaceable` with ``--force``, else :func:`refuse_existing`."""
    if force:
        check_replaceable(path)
    else:
        refuse_existing(path)


def write_output(path: str | os.PathLike[str], data: bytes | str | Callable[[Any], None], force: bool) -> None:
    """Write an output file all or nothing: over an existing regular file only with ``force``
    (an atomic replace: readers see the old file or the new one), else only as a new file (an
    existing one refused at the moment of the rename, so of two writers one wins)."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    if force:
        check_replaceable(path)  # checked again: a link or a directory may have appeared meanwhile
    write_file(path, data, replace=force)


def check_replaceable(path: str | os.PathLike[str]) -> None:
    """UsageError unless ``path`` can be written by an atomic replace (``--force``): its
    directory exists and is writable, and ``path`` is absent or a regular file (never a link, a
    directory, a FIFO or a device)."""
    from popviz.errors import UsageError

    p = Path(path)
    try:
        if p.is_symlink():
            raise UsageError(f"{shown(p)} is a symbolic link; popviz does not write through links: pass the "
                             "file itself")
        if p.exists() and not p.is_file():
            raise UsageError(f"{shown(p)} exists and is not a regular file; choose a file name")
    except OSError as exc:  # e.g. a name too long for the file system
        raise UsageError(f"{shown(p)} cannot be created ({exc.strerror}); choose another path") from None
    _check_parent(p)


def check_appendable(path: str | os.PathLike[str], what: str) -> None:
    """UsageError unless text can be appended to ``path`` (``what`` names it in the message): a
    writable regular file, or a new file in a writable directory."""
    from popviz.errors import UsageError

    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        if p.is_symlink():
            raise UsageError(f"{what} ({shown(p)}) is a dangling symbolic link; point it at a file") from None
        if not p.parent.is_dir() or not os.access(p.parent, os.W_OK | os.X_OK):
            raise UsageError(f"{what} ({shown(p)}) cannot be created: {shown(p.parent)} is not a writable "
                             "directory") from None
        return
    except OSError as exc:
        raise UsageError(f"{what} ({shown(p)}) cannot be written ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"{what} ({shown(p)}) is {_kind(mode)}; popviz appends only to regular files")
    if not os.access(p, os.W_OK):
        raise UsageError(f"{what} ({shown(p)}) is not writable")


APPEND_LOCK_SECONDS = 10.0
"""How long an append waits for another popviz appending to the same file (a job summary)."""


def append_text(path: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` to the regular file ``path`` (created when absent) all or nothing: under an
    exclusive lock, and when the write fails part way (a full disk) the file is cut back to its
    length before, so a reader never sees half an append. Never opens a FIFO."""
    p = Path(path)
    data = text.encode("utf-8", "surrogateescape")
    existed = os.path.lexists(p)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o666)
    except OSError as exc:
        raise write_error(p, exc) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(f"{shown(p)} is not a regular file; popviz appends only to regular files")
        _lock(fd)
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
                if not existed and start == 0:
                    os.unlink(p)
            raise write_error(p, exc, "cannot be appended to") from None
    finally:
        os.close(fd)


def _lock(fd: int) -> None:
    """An exclusive advisory lock on ``fd`` (released when it is closed), waited for a while."""
    try:
        import fcntl
    except ImportError:  # not POSIX: appends are not serialised
        return
    import time

    deadline = time.monotonic() + APPEND_LOCK_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                return  # a stuck holder: append anyway (O_APPEND keeps whole writes apart)
            time.sleep(0.02)
        except OSError:
            return  # a file system without locks


def write_new_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a file that must not exist yet. The text goes to a temporary file beside
    it first, which is then linked into place (a link is never made over an existing file): a
    failed write leaves no partial file, and a file that appears in the meantime is not
    overwritten either."""
    write_new_bytes(path, text.encode("utf-8", "surrogateescape"))


def write_new_bytes(path: str | os.PathLike[str], data: bytes | Callable[[Any], None]) -> None:
    """:func:`write_new_text` for bytes, or for a ``writer(fh)`` that writes into a binary file
    (a figure's ``savefig``): all or nothing, never over an existing file."""
    write_file(path, data, replace=False, force_hint=False)


def path_arg(text: str) -> str:
    """An argparse ``type`` for a FILE or DIR option: an empty or blank path (``--html ""``, an
    unset shell variable) is a usage error, not the current directory or nothing at all."""
    if not text.strip():
        import argparse

        raise argparse.ArgumentTypeError("needs a path, not an empty string")
    return text


def missing_directory(directory: Path) -> str:
    """``<dir> does not exist`` or ``<dir> is not a directory``: what a path's directory is not."""
    return f"{shown(directory)} " + ("is not a directory" if directory.exists() else "does not exist")


def _check_parent(p: Path) -> None:
    """UsageError unless ``p``'s directory exists and can be written (shared by the two checks)."""
    from popviz.errors import UsageError

    try:
        if not p.parent.is_dir():
            raise UsageError(f"{missing_directory(p.parent)}; create it first or choose another path")
    except OSError as exc:  # e.g. a name too long for the file system
        raise UsageError(f"{shown(p)} cannot be created ({exc.strerror}); choose another path") from None
    if not os.access(p.parent, os.W_OK | os.X_OK):
        cause = " (Read-only file system)" if _read_only(p.parent) else ""
        raise UsageError(f"{shown(p.parent)} is not writable{cause}; choose a directory you can write to")
    try:  # what access() cannot tell (root in /proc, a read-only mount): a file made and removed
        fd, tmp = temp_file(p)
    except OSError as exc:
        raise UsageError(f"{shown(p)} cannot be created ({exc.strerror}); choose another path") from None
    os.close(fd)
    os.unlink(tmp)



def _read_only(directory: Path) -> bool:
    """``directory`` is on a file system mounted read-only."""
    try:
        return bool(os.statvfs(directory).f_flag & getattr(os, "ST_RDONLY", 1))
    except (OSError, AttributeError):
        return False
