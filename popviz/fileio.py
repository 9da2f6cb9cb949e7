"""Small file helpers shared by the bundle writer, the capture manifests and the launcher.

Imports only the standard library: capture hooks use it inside the user's process.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from popviz.errors import CorruptReportError, UnsupportedFormatError, UsageError, shown

RUN_ID_ENV = "POPVIZ_RUN_ID"
"""The run identity ``popviz capture`` records (``run_id`` in popviz-run.json) and gives its child:
bundles written in that run (emulated engines) carry it, so files of two runs are never read as
one."""


def new_id() -> str:
    """A fresh identity for a run, an export or one write of a bundle."""
    return secrets.token_hex(8)


class WriteError(UsageError):
    """A file or directory popviz writes cannot be written: no space left, over quota, a read-only
    file system, an I/O error, no permission. One line naming the path and the cause."""


_WRITE_HINTS = {
    errno.ENOSPC: "free some space and run again, or choose a path on another disk",
    errno.EDQUOT: "free some space within your quota and run again, or choose another path",
    errno.EROFS: "the file system is read-only: choose a path on a writable one",
    errno.EACCES: "choose a path you can write to",
    errno.EPERM: "choose a path you can write to (is the file immutable?)",
    errno.EIO: "the disk reported an I/O error: check it, or choose a path on another disk",
    errno.EFBIG: "the file is larger than this file system allows: choose a path on another disk",
}


def write_error(path: str | os.PathLike[str], exc: OSError, what: str = "cannot be written") -> WriteError:
    """The one-line error for ``exc`` raised while writing ``path``: the path, the system's words
    for the cause (``No space left on device``) and what to do."""
    cause = exc.strerror or str(exc) or type(exc).__name__
    hint = _WRITE_HINTS.get(exc.errno or 0, "choose another path")
    return WriteError(f"{shown(real_name(path))}: {what} ({cause}); {hint}")


_TEMP_NAME = re.compile(r"\.(.+)\.\d+\.[0-9a-f]{8}\.(?:tmp|old)")


def real_name(path: str | os.PathLike[str]) -> Path:
    """``path`` with each temporary name of :func:`temp_file` / :func:`temp_dir` in it replaced by
    the name it stands for: what a message names (``out/training/memory.parquet``, not
    ``out/.training.123.abcd1234.tmp/memory.parquet``)."""
    parts = []
    for part in Path(path).parts:
        m = _TEMP_NAME.fullmatch(part)
        parts.append(m.group(1) if m else part)
    return Path(*parts) if parts else Path(path)


def temp_file(path: Path) -> tuple[int, str]:
    """A new file beside ``path`` for an atomic replace: (fd, name). Unlike mkstemp's 0600 it
    gets the permissions the umask gives any new file, so reports stay readable by others."""
    while True:
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def temp_dir(path: Path) -> Path:
    """A new, empty directory beside ``path`` (same file system, so it can be renamed onto it)."""
    while True:
        tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue


# ------------------------------------------------------------------ renames that cannot lose data

_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _renameat2(src: str | os.PathLike[str], dst: str | os.PathLike[str], flags: int) -> bool:
    """Linux's renameat2(2) with ``flags``; False when this system or file system lacks it (the
    caller falls back), OSError (with ``dst`` as its filename) when it refused."""
    if not hasattr(os, "fsencode") or os.name != "posix":
        return False
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(dst))


def rename_noreplace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename ``src`` (a file or a directory) to ``dst`` only if ``dst`` does not exist, decided
    at the moment of the rename (FileExistsError otherwise): of two writers, exactly one wins.
    renameat2(RENAME_NOREPLACE) on Linux; a hard link for files elsewhere; for directories
    without renameat2 a check just before the rename (best effort)."""
    if _renameat2(src, dst, _RENAME_NOREPLACE):
        return
    if not os.path.isdir(src):
        try:
            os.link(src, dst)  # never made over an existing file
        except FileExistsError:
            raise
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV, errno.EMLINK):
                raise
        else:
            os.unlink(src)
            return
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
    os.rename(src, dst)


def exchange(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Swap ``src`` and ``dst`` (both exist) atomically where the system can (renameat2's
    RENAME_EXCHANGE): readers see the old ``dst`` or the new one, never neither. Elsewhere the old
    one is moved aside first (for an instant ``dst`` is missing, never mixed)."""
    if _renameat2(src, dst, _RENAME_EXCHANGE):
        return
    aside = Path(dst).parent / f".{Path(dst).name}.{os.getpid()}.{secrets.token_hex(4)}.old"
    os.rename(dst, aside)
    try:
        os.rename(src, dst)
    except OSError:
        os.rename(aside, dst)
        raise
    os.rename(aside, src)


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove a file or directory popviz made (a staged or replaced copy), ignoring what is gone."""
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            p.unlink()


def _fill(fd: int, data: bytes | Callable[[Any], None]) -> None:
    """Write ``data`` (or have ``data(fh)`` write) into the new file ``fd``, closed and synced."""
    with os.fdopen(fd, "wb") as fh:
        if callable(data):
            data(fh)
        else:
            fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def publish_file(path: str | os.PathLike[str], data: bytes | Callable[[Any], None], *,
                 replace: bool) -> None:
    """The one way popviz writes a file: into a temporary file beside ``path``, synced, then
    renamed into place only when complete. ``replace``: an atomic replace of what is there
    (readers see the old file or the new one); else the rename refuses an existing ``path`` at
    that moment (FileExistsError), so of two writers exactly one wins. Any failure (a full disk,
    an exception in ``data``) removes the temporary file and leaves ``path`` as it was.
    OSError as raised; :func:`write_file` gives the messages."""
    p = Path(path)
    try:
        fd, tmp = temp_file(p)
    except OSError as exc:
        exc.filename = exc.filename and str(real_name(exc.filename))
        raise
    try:
        _fill(fd, data)
        if replace:
            os.replace(tmp, p)
        else:
            rename_noreplace(tmp, p)
    except OSError as exc:
        if exc.filename is None or not isinstance(exc, FileExistsError):
            exc.filename = str(p)  # the file it was for, not its temporary name
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def exists_error(path: str | os.PathLike[str], force_hint: bool = True) -> UsageError:
    hint = ", or pass --force to replace it" if force_hint else ""
    return UsageError(f"{shown(path)} exists; popviz never writes over files: choose a new file name{hint}")


def write_file(path: str | os.PathLike[str], data: bytes | Callable[[Any], None], *, replace: bool,
               force_hint: bool = True) -> None:
    """:func:`publish_file` with popviz's messages: UsageError when ``path`` exists (and not
    ``replace``), WriteError naming the path and the cause for any other failure."""
    try:
        publish_file(path, data, replace=replace)
    except FileExistsError:
        raise exists_error(path, force_hint) from None
    except OSError as exc:
        raise write_error(path, exc) from None


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half
    (WriteError, with the previous file intact, when it cannot be written)."""
    write_file(path, data, replace=True)


@contextlib.contextmanager
def staged_dir(path: str | os.PathLike[str], *, replace: bool = False) -> Iterator[Path]:
    """Build a directory in a temporary directory beside ``path`` and put it in place only when the
    block ends without an error: as a new ``path`` (an empty directory there is taken, anything
    else refused at the moment of the rename: UsageError) or, with ``replace``, swapped with the
    existing one. On any failure the temporary directory is removed and ``path`` is untouched."""
    p = Path(path)
    inside = not replace and p.is_dir() and os.path.ismount(p)  # an empty mount point: staged in it
    try:
        tmp = temp_dir(p / p.name) if inside else temp_dir(p)
    except OSError as exc:
        raise write_error(p, exc) from None
    try:
        try:
            yield tmp
        except OSError as exc:
            raise write_error(exc.filename or p, exc) from None
        if inside:
            try:
                _move_entries(tmp, p)
            except FileExistsError:
                raise UsageError(f"{shown(p)} was written by another popviz meanwhile; popviz never writes "
                                 "over reports: choose a new directory") from None
            except OSError as exc:
                raise write_error(p, exc) from None
        else:
            publish_dir(tmp, p, replace=replace)
    finally:
        remove_tree(tmp)


def _move_entries(tmp: Path, path: Path) -> None:
    """Move each entry of the complete ``tmp`` into the empty directory ``path`` (refusing any
    name that appeared there meanwhile)."""
    for entry in sorted(tmp.iterdir()):
        rename_noreplace(entry, path / entry.name)


def publish_dir(tmp: Path, path: Path, *, replace: bool) -> None:
    """Put the complete directory ``tmp`` at ``path`` (see :func:`staged_dir`)."""
    try:
        if replace and path.is_dir() and not path.is_symlink():
            exchange(tmp, path)  # tmp now holds the old directory, removed by the caller
            return
        if path.is_dir() and not path.is_symlink():
            # an empty directory the user made: taken by the rename below, with its permissions
            with contextlib.suppress(OSError):
                os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
            try:
                path.rmdir()  # only ever removes an empty directory
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                _move_entries(tmp, path)  # a mount point, a directory we may not remove: filled in place
                return
        rename_noreplace(tmp, path)
    except FileExistsError:
        raise UsageError(f"{shown(path)} was written by another popviz meanwhile; popviz never writes over "
                         "reports: choose a new directory") from None
    except OSError as exc:
        if exc.errno == errno.ENOTEMPTY:
            raise UsageError(f"{shown(path)} was written by another popviz meanwhile; popviz never writes "
                             "over reports: choose a new directory") from None
        raise write_error(path, exc) from None


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
