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
