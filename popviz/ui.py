"""Progress feedback on stderr, shown only to a person at a terminal."""

from __future__ import annotations

import contextlib
import re
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


def fitted(text: str, width: int | None = None) -> str:
    """``text`` with each of its lines broken by :func:`wrap_line` (one message of any number of
    lines, every line within the width)."""
    return "\n".join(part for row in text.split("\n") for part in wrap_line(row, width))


_MD_LIST = re.compile(r"^(\s*(?:[-*+]|\d{1,9}[.)])\s+)")
# a word that would start a block (a list, heading, quote, table, rule or setext underline) if a
# break put it at the start of a line
_MD_OPENS_BLOCK = re.compile(r"^(?:[-*+]$|[>|#]|\d{1,9}[.)]$|=+$|-+$)")


def markdown_fitted(text: str, width: int | None = None) -> str:
    """Markdown ``text`` with its long paragraph and list lines soft-wrapped at ``width`` (the
    terminal's, 80 when not a terminal): a soft line break renders as the space it replaces
    (CommonMark), so the rendered page is unchanged. List items continue under their content;
    table rows, headings, HTML and fenced code are kept whole (a table row cannot be broken), and
    no break puts a word that would open a block (``-``, ``#``, ``|``, ``1.`` ...) at a line's start."""
    import shutil

    width = max(40, width or shutil.get_terminal_size((80, 24)).columns)
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        stripped = line.lstrip(" ")
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        if (fenced or len(line) <= width or stripped.startswith(("|", "#", "<", "```", "~~~"))
                or (len(line) - len(stripped) >= 4 and not _MD_LIST.match(line))):
            out.append(line)
            continue
        m = _MD_LIST.match(line)
        head = m.group(1) if m else line[:len(line) - len(stripped)]
        words: list[str] = []
        for word in line[len(head):].split(" "):
            if words and words[-1] and word and _MD_OPENS_BLOCK.match(word):
                words[-1] += " " + word  # kept with the word before it, off a line's start
            else:
                words.append(word)
        indent = " " * len(head)
        cur = head + words[0]
        for word in words[1:]:
            if len(cur) + 1 + len(word) > width and word and cur.strip() and not cur.endswith(" "):
                out.append(cur)
                cur = indent + word
            else:
                cur += " " + word
        out.append(cur)
    return "\n".join(out)


def say(text: str, file: Any = None) -> None:
    """``text`` on stderr (or ``file``), each line fitted to the terminal's width (80 when not a
    terminal) by :func:`wrap_line`."""
    print(fitted(text), file=file if file is not None else sys.stderr, flush=True)


def _shell_words(command: str) -> list[str]:
    """``command`` split at the spaces outside quotes (each word as written, quotes kept)."""
    words, cur, quote = [], "", None
    for i, ch in enumerate(command):
        if quote:
            cur += ch
            if ch == quote and (quote == "'" or command[i - 1] != "\\"):
                quote = None
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch == " ":
            if cur:
                words.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        words.append(cur)
    return words


def wrap_command(command: str, width: int | None = None, indent: str = "") -> list[str]:
    """A shell ``command`` fitted to ``width`` columns (the terminal's, 80 when not a terminal, by
    default) as copy-pasteable continuation lines: broken at spaces outside quotes, each line but
    the last ending in `` \\``, continuations indented four columns under ``indent``; a word longer
    than the width is kept whole."""
    import shutil

    width = max(width or shutil.get_terminal_size((80, 24)).columns, 40)
    if len(indent) + len(command) <= width:
        return [indent + command]
    body, sep, comment = command.partition("  # ")
    if sep and body.count("'") % 2 == 0 and body.count('"') % 2 == 0:  # a comment: kept whole, last
        lines = wrap_command(body, width, indent)
        if len(lines[-1]) + len(sep) + len(comment) <= width:
            return [*lines[:-1], lines[-1] + sep + comment]
        import textwrap  # the comment on lines of its own, each a comment (a long path stays whole)

        parts = textwrap.wrap(comment, max(20, width - len(indent) - 6), break_long_words=False,
                              break_on_hyphens=False) or [comment]
        return [*lines[:-1], lines[-1] + " \\", *(indent + "    # " + part for part in parts)]
    lines: list[str] = []
    cur = indent
    words = _shell_words(command)
    for k, word in enumerate(words):
        lead = indent if not lines and cur == indent else indent + "    "
        room = width if k == len(words) - 1 else width - 2  # a line that goes on ends in " \"
        if cur.strip() and len(cur) + 1 + len(word) > room:
            lines.append(cur + " \\")
            cur = indent + "    " + word
        else:
            cur = (cur + " " + word) if cur.strip() else lead + word
    lines.append(cur)
    return lines


def wrap_code(line: str, width: int | None = None, indent: str = "") -> list[str]:
    """A line of Python fitted to ``width`` columns where it can be broken: after the commas of
    its outermost brackets (Python's implicit continuation; the next level in when that is not
    enough), continuations indented four columns under ``indent``; a line without such a comma is
    kept whole."""
    import shutil

    width = max(width or shutil.get_terminal_size((80, 24)).columns, 40)
    if len(indent) + len(line) <= width:
        return [indent + line]
    out = [indent + line]
    for level in (1, 2, 3):
        out = _code_at(line, width, indent, level)
        if all(len(x) <= width for x in out):
            break
    return out


def _code_at(line: str, width: int, indent: str, level: int) -> list[str]:
    parts, depth, start, quote = [], 0, 0, None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and 0 < depth <= level and line[i + 1:i + 2] == " ":
            parts.append(line[start:i + 1])
            start = i + 2
    parts.append(line[start:])
    out: list[str] = []
    cur = ""
    for part in parts:
        lead = indent if not out else indent + "    "
        if cur and len(lead) + len(cur) + 1 + len(part) > width:
            out.append(lead + cur)
            cur = part
        else:
            cur = f"{cur} {part}" if cur else part
    out.append((indent if not out else indent + "    ") + cur)
    return out


EARLY_LINE_SECONDS = 0.5
"""A command still working after this long says what it is doing (:func:`early_line`)."""


@contextlib.contextmanager
def early_line(message: str, after: float = EARLY_LINE_SECONDS) -> Iterator[None]:
    """While the block runs, ``message`` on stderr (wrapped to the width) once it has run for
    ``after`` seconds, when stderr is not a terminal (a terminal gets :func:`status`'s spinner):
    a log or a pipe is never silent through a command's first seconds of imports and reading."""
    import threading

    if sys.stderr.isatty():
        yield
        return
    done = threading.Event()

    def say() -> None:
        if not done.wait(after):
            with contextlib.suppress(OSError, ValueError):
                print("\n".join(wrap_line(message)), file=sys.stderr, flush=True)

    thread = threading.Thread(target=say, name="popviz-early-line", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=1)
