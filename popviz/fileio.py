"""Small file helpers shared by the bundle writer, the capture manifests and the launcher.

Imports only the standard library: capture hooks use it inside the user's process.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from popviz.errors import CorruptReportError, UnsupportedFormatError, shown


def temp_file(path: Path) -> tuple[int, str]:
    """A new file beside ``path`` for an atomic replace: (fd, name). Unlike mkstemp's 0600 it
    gets the permissions the umask gives any new file, so reports stay readable by others."""
    while True:
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    fd, tmp = temp_file(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_versioned_json(path: Path, *, format_name: str, format_version: int, kind: str,
                        fail: Callable[[str], CorruptReportError]) -> dict[str, Any]:
    """The JSON object in ``path`` whose ``format`` is ``format_name`` and whose
    ``format_version`` this popviz reads (``format_version`` or older).

    ``fail(what)`` makes the error for a damaged file; a newer version raises
    UnsupportedFormatError telling the user to upgrade. ``kind`` names the format in messages
    (e.g. "bundle").
    """
    from popviz import __version__

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise fail("is not UTF-8 text") from None
    except OSError as exc:
        raise CorruptReportError(f"{shown(path)}: cannot be read ({exc.strerror})") from None
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
    """UsageError when ``path`` exists: popviz never writes over a file the user already has."""
    from popviz.errors import UsageError

    p = Path(path)
    if p.exists() or p.is_symlink():
        raise UsageError(f"{shown(p)} exists; popviz never writes over files: choose a new file name")
    if not p.parent.is_dir():
        raise UsageError(f"{shown(p.parent)} is not a directory; create it first or choose another path")


def write_new_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to a file that must not exist yet (created exclusively, so a file that
    appears in the meantime is not overwritten either)."""
    from popviz.errors import UsageError

    p = Path(path)
    try:
        with open(p, "x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        raise UsageError(f"{shown(p)} exists; popviz never writes over files: choose a new file name") from None
    except OSError as exc:
        raise UsageError(f"{shown(p)}: cannot be written ({exc.strerror})") from None
