"""Names read from report files (engine, instance, table) used as path components, safely.

A name in a file is data: before it becomes part of a path it must be one plain component
(no separator, no ``.``/``..``, no NUL, not hidden), and the resulting path must stay under the
directory it was joined to. Otherwise the reader or writer refuses with a one-line error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from popviz.errors import CorruptReportError, PopvizError, shown

MAX_COMPONENT_CHARS = 255


def is_safe_component(name: object) -> bool:
    """True when ``name`` can be used as one path component without escaping its directory."""
    return (isinstance(name, str) and 0 < len(name) <= MAX_COMPONENT_CHARS
            and name not in (".", "..") and not name.startswith(".")
            and not any(c in name for c in ("/", "\\", "\0", ":"))
            and name.isprintable())


def as_component(name: str) -> str:
    """``name`` itself when it is a plain path component, else a plain component made from it
    (separators and other unsafe characters become ``_``, leading dots are dropped), so a
    ``modelName`` such as ``../x`` or ``/abs`` names a directory under the report root."""
    if is_safe_component(name):
        return name
    cleaned = "".join(c if c.isprintable() and c not in "/\\\0:" else "_" for c in str(name))
    cleaned = cleaned.lstrip(".")[:MAX_COMPONENT_CHARS]
    return cleaned if is_safe_component(cleaned) else "engine"


def safe_join(base: Path, parts: list[str], what: str, source: Path | str) -> Path:
    """``base / parts...`` after checking each part is a plain component and the result stays
    under ``base``; a CorruptReportError naming ``source`` (the file the names came from) if not."""
    for part in parts:
        if not is_safe_component(part):
            raise CorruptReportError(
                f"{shown(source)}: {what} name {part!r} cannot be used as a directory name "
                "(it is empty, hidden, contains a path separator or control character, or "
                "would leave the output directory); rename it in that file")
    dest = base.joinpath(*parts)
    try:
        inside = os.path.commonpath([os.path.abspath(dest), os.path.abspath(base)]) == os.path.abspath(base)
    except ValueError:
        inside = False
    if not inside:
        raise CorruptReportError(f"{shown(source)}: {what} name {'/'.join(parts)!r} would leave "
                                 f"{shown(base)}; rename it in that file")
    return dest


def regular_file_inside(path: Path, directory: Path) -> None:
    """Raise unless ``path`` is a regular file (not a symlink, device or FIFO) in ``directory``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise CorruptReportError(f"{shown(path)} is missing; the report is incomplete: write it "
                                 "again (popviz export / capture)") from None
    except OSError as exc:
        raise CorruptReportError(f"{shown(path)}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise CorruptReportError(f"{shown(path)} is {kind}; popviz reads only regular files inside "
                                 f"the report directory {shown(directory)}")
    if os.path.dirname(os.path.abspath(path)) != os.path.abspath(directory):
        raise PopvizError(f"{shown(path)} is outside {shown(directory)}")
