"""How popviz writes: every file beside its target, renamed into place only when complete, and
"refuse to overwrite" decided at the moment of the rename (renameat2 RENAME_NOREPLACE, or a hard
link), so two writers cannot both win and a failure (a full disk, a kill) leaves what was there.
Directories too (:func:`staged_dir`). The one-line errors for write failures (:class:`WriteError`).

Standard library only: capture hooks use it inside the user's process. :mod:`popviz.fileio`
re-exports every name.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from popviz.errors import UsageError, shown

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


class StagedFiles:
    """Files written in place in an existing directory as one change: :meth:`stage` writes each
    complete (synced) under a temporary name beside its target, and only when all are written
    :meth:`commit` renames them into place in the order staged (the one that names the others
    last). A failure while staging (a full disk) removes what was staged: every target is as it
    was, byte for byte, and no part of the change is under a real name.
    ``with StagedFiles() as files: files.stage(path, data); ...`` commits when the block ends
    without an error."""

    def __init__(self) -> None:
        self._staged: list[tuple[str, Path]] = []

    def stage(self, path: str | os.PathLike[str], data: bytes | Callable[[Any], None]) -> None:
        """Write ``data`` for ``path`` under a temporary name (WriteError naming ``path``)."""
        p = Path(path)
        try:
            fd, tmp = temp_file(p)
        except OSError as exc:
            raise write_error(p, exc) from None
        self._staged.append((tmp, p))
        try:
            _fill(fd, data)
        except OSError as exc:
            raise write_error(p, exc) from None

    def commit(self) -> None:
        """Rename every staged file onto its target (an atomic replace each), in order."""
        while self._staged:
            tmp, p = self._staged[0]
            try:
                os.replace(tmp, p)
            except OSError as exc:
                raise write_error(p, exc) from None
            self._staged.pop(0)

    def discard(self) -> None:
        """Remove what is staged and not committed."""
        for tmp, _ in self._staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        self._staged.clear()

    def __enter__(self) -> StagedFiles:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.discard()


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
