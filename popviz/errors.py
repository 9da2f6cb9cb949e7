"""Errors meant for people.

Every expected failure raises a :class:`PopvizError` subclass whose message is one line
naming the file or value at fault and what to do about it. The CLI prints the message and
exits with :attr:`PopvizError.exit_code` (2 for bad input); ``--debug`` adds the traceback.
"""

from __future__ import annotations

from pathlib import Path


class PopvizError(Exception):
    """Base class of every error popviz raises on purpose."""

    exit_code: int = 2

    def __init__(self, message: str) -> None:
        # One line, always: a message that spans lines is a bug in the caller.
        super().__init__(" ".join(str(message).split()))

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class UsageError(PopvizError):
    """A command-line argument or API parameter has a value popviz cannot use."""


class ReportNotFoundError(PopvizError):
    """A path does not exist, is empty, or holds nothing popviz can read."""


class CorruptReportError(PopvizError):
    """A report file exists but cannot be parsed (truncated, not JSON/Parquet, wrong fields)."""


class UnsupportedFormatError(PopvizError):
    """A bundle was written in a format version this popviz does not know."""


class MissingDependencyError(PopvizError):
    """An optional dependency (libpva, torch, ...) is needed and not installed."""


def shown(path: str | Path) -> str:
    """A path as the user should see it in a message: relative to the cwd when shorter."""
    p = Path(path)
    try:
        rel = p.resolve().relative_to(Path.cwd().resolve())
        text = str(rel) if str(rel) != "." else "."
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        text = str(p)
    return text if len(text) <= len(str(p)) else str(p)


def brief(value: object, limit: int = 40) -> str:
    """A value read from a file, for a message: its ``repr`` cut to ``limit`` characters (a
    message stays one short line whatever the file holds; repr shows control characters as
    escapes)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int too long for repr, a structure too deep
        text = "(a value too large to show)"
    return text if len(text) <= limit else text[:limit - 3] + "..."
