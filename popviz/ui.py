"""Progress feedback on stderr, shown only to a person at a terminal."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

_active: list[Any] = []
"""The spinners being shown (rich ``Status`` objects), innermost last."""


@contextlib.contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner with ``message`` on stderr while the block runs (nothing when not a TTY, so
    piped or redirected output gets no progress text). Code running inside the block may change
    the message with :func:`progress`."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    from popviz.escape import markup

    message = markup(message)  # paths and names are data, never markup
    with Console(stderr=True).status(message) as spinner:
        _active.append((spinner, message))
        try:
            yield
        finally:
            _active.pop()


def progress(detail: str) -> None:
    """Show ``detail`` after the innermost spinner's message (e.g. ``step 20,000 of 100,000``
    while a long profile is read); does nothing when no spinner is shown."""
    if _active:
        spinner, message = _active[-1]
        from popviz.escape import markup

        spinner.update(f"{message}: {markup(detail)}")


def wrap_line(line: str, width: int | None = None) -> list[str]:
    """``line`` fitted to ``width`` columns (the terminal's, 80 when not a terminal, by default)
    for a terminal or a log: broken between words, each continuation indented four columns under
    the line's own indent; a word longer than the width (a path) is kept whole."""
    import shutil
    import textwrap

    width = width or shutil.get_terminal_size((80, 24)).columns
    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip(" ")))
    return textwrap.wrap(line.lstrip(" "), width=max(width, 40), initial_indent=indent,
                         subsequent_indent=indent + "    ", break_long_words=False, break_on_hyphens=False) or [line]
