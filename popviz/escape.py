"""Text from files becomes output here, and only here: one function per output channel.

Names of engines, instances, layers and blocks, finding codes and titles read from a baseline,
run labels in a history, paths: all of it is data someone else may have written. Every renderer
passes such text through the function of its channel before printing it:

- :func:`term` — a terminal (or a pipe to one): control and format characters (C0 and C1
  controls, ESC, DEL, line breaks, bidirectional overrides, lone surrogates) become U+FFFD, so
  no escape sequence (OSC 52 clipboard writes, clear-screen, window titles) reaches the screen
  and a value stays on one line; ``##[`` (GitHub's older command form) becomes ``# #[`` before
  a renderer measures the line;
- :func:`markup` — a rich markup string: :func:`term`, then rich's markup escaped, so that
  ``[link=...]`` or an unbalanced ``[/x]`` is shown, not interpreted;
- :func:`md` — inline Markdown: :func:`term`, then HTML (``& < >``) and the Markdown that makes
  structure (``\\ ` * _ [ ] |``, and ``# - + >`` at the start) escaped: one line, shown as written;
  :func:`md_code` for a value inside backticks;
- :func:`xml` — XML text and attributes (JUnit): characters XML 1.0 forbids are dropped
  (ElementTree escapes ``& < > "`` itself);
- :func:`gh_data` / :func:`gh_property` — GitHub Actions workflow commands: ``%``, CR and LF
  (and in properties ``:`` and ``,``) percent-encoded as GitHub documents, so a value cannot end
  the command or start another one; :func:`gh_command` builds the whole line.

Imports only the standard library (rich lazily): ``popviz plan`` and the CLI's error printing use it.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
"""What a character that must not be printed becomes (visible, and not a control)."""


def _unprintable(c: str) -> bool:
    return not c.isprintable()


def term(value: object) -> str:
    """``value`` as one line of plain text safe on a terminal: every character that is not
    printable (C0/C1 controls incl. ESC and DEL, line and paragraph separators, format characters
    such as bidirectional overrides, lone surrogates, unassigned code points) becomes U+FFFD."""
    text = str(value)
    if _LEGACY_COMMAND in text:  # defused here, before a renderer measures the line (not after)
        text = text.replace(_LEGACY_COMMAND, "# #[")
    if text.isprintable():
        return text
    return "".join(REPLACEMENT if _unprintable(c) else c for c in text)


def status_line(value: object) -> str:
    """A message popviz writes on stderr from inside a script's process (the emulator's progress,
    the capture hooks' and launcher's lines) around names the script chose (``modelName``, block
    names, its command line): each line :func:`term`, and no line a GitHub Actions workflow command
    (those outputs go to a CI log as they are, without the CLI's guarded streams)."""
    return defuse_commands(term_lines(value))


def term_lines(value: object) -> str:
    """Like :func:`term`, but line breaks (``\\n``) are kept: for multi-line text popviz wrote
    itself around names (captions), each line safe."""
    return "\n".join(term(line) for line in str(value).split("\n"))


def markup(value: object) -> str:
    """``value`` inside a rich markup string: :func:`term`, then rich's markup escaped."""
    from rich.markup import escape

    return escape(term(value))


def text(value: object, style: str | None = None):  # -> rich.text.Text
    """A rich ``Text`` of ``value`` (never markup) made safe by :func:`term`."""
    from rich.text import Text

    return Text(term(value), style=style or "")


_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MD_SPECIAL = set("\\`*_[]|~")
"""Markdown characters escaped with a backslash wherever they appear in a value: code spans,
emphasis, links and images, table cells, headings, strike-through."""


def md(value: object, *, starts_line: bool = False) -> str:
    """``value`` as inline Markdown text (GitHub-flavoured): one line (:func:`term`), HTML
    characters as entities (no tag from a file is ever rendered; ``&`` only where a character
    reference could start), and the characters that make
    Markdown structure backslash-escaped, so a name cannot open a link, a code span, a table cell
    or a heading. ``starts_line``: the value begins a line, so a leading ``-``, ``+``, ``>``, ``#``,
    ``1.`` cannot make a list, a quote or a heading either."""
    out = []
    text = term(value)
    for i, c in enumerate(text):
        if c == "&" and not (i + 1 < len(text) and (text[i + 1].isalnum() or text[i + 1] == "#")):
            out.append(c)  # "sync & copies": no character reference can start here ("&amp;" shows raw)
        elif c in _HTML:
            out.append(_HTML[c])
        elif c == "_" and 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum():
            out.append(c)  # inside a word (qa_outputs, used_pct) "_" never makes emphasis
        elif c in _MD_SPECIAL:
            out.append("\\" + c)
        else:
            out.append(c)
    line = "".join(out)
    # a value that starts a line must not start a list item, a quote or a numbered list
    if not starts_line:  # within a line (after "- " or "| "): nothing else can make structure
        return line
    return _LINE_START.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", line, count=1)


_LINE_START = re.compile(r"^(\s*\d*)([.)](?=\s|$)|[-+](?=\s|$)|>|#|=+\s*$)")
"""What makes a list item, a quote or a heading underline at the start of a line."""


def md_code(value: object) -> str:
    """``value`` as a Markdown code span (backticks included): one line, and a fence longer than
    any run of backticks inside it, so the span cannot be closed early."""
    body = term(value)
    if any(c in body for c in "<>&"):  # GitHub shows such spans oddly: plain escaped text instead
        return md(value)
    runs = [len(r) for r in re.findall(r"`+", body)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def md_fenced(lines: list[str]) -> list[str]:
    """Lines as a fenced Markdown code block whose fence no line can close (each line :func:`term`)."""
    body = [term(line) for line in lines]
    longest = max((len(r) for line in body for r in re.findall(r"`{3,}|~{3,}", line)), default=2)
    fence = "`" * max(3, longest + 1)
    return [fence, *body, fence]


_XML_FORBIDDEN = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml(value: object) -> str:
    """``value`` for XML 1.0 text or an attribute: the characters XML forbids (C0 controls but
    tab, LF and CR; lone surrogates; U+FFFE and U+FFFF) become U+FFFD, and C1 controls and ESC too
    (a JUnit report is shown on terminals and web pages). ElementTree escapes the rest."""
    return _XML_FORBIDDEN.sub(REPLACEMENT, term_lines(value))


def gh_data(value: object) -> str:
    """The message of a GitHub Actions workflow command: ``%``, CR and LF percent-encoded
    (GitHub's escaping of command data), other controls made safe by :func:`term`, and the older
    command form ``##[`` broken (``# #[``) as on every other line."""
    text = str(value).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return term(text).replace("##[", "# #[")


def gh_property(value: object) -> str:
    """A property value of a workflow command (``title=...``): as :func:`gh_data`, and ``:`` and
    ``,`` percent-encoded too (they end a property)."""
    return gh_data(value).replace(":", "%3A").replace(",", "%2C")


def gh_command(command: str, message: object, **properties: object) -> str:
    """One workflow command line, e.g. ``::error title=popviz regression::MESSAGE``."""
    props = ",".join(f"{k}={gh_property(v)}" for k, v in properties.items())
    return f"::{command}{' ' + props if props else ''}::{gh_data(message)}"


_COMMAND_START = re.compile(r"^(\s*):(?=:)")
"""A line GitHub Actions reads as a workflow command (the runner trims leading blanks)."""


_LEGACY_COMMAND = "##["
"""GitHub's runner also reads the older form of a workflow command, ``##[error]data`` or
``##[stop-commands]token``, and it finds that one anywhere in a line, not only at its start
(actions/runner, src/Runner.Common/ActionCommand.cs: ``TryParse`` takes ``IndexOf("##[")``)."""


def is_command_line(line: str) -> bool:
    """Whether a line of output would be read by GitHub Actions as a workflow command."""
    return line.lstrip().startswith("::") or _LEGACY_COMMAND in line


def defuse_commands(text: str, *, at_line_start: bool = True) -> str:
    """Lines of ``text`` that GitHub Actions would read as workflow commands get a space between
    their leading colons (``: :warning``), so text from a file never becomes a command (a long
    name wrapped by the terminal renderer can start a line anywhere in it), and the older form
    ``##[command]`` gets one between its hashes (``# #[error]``) wherever it is. ``at_line_start``:
    whether ``text`` continues a line written before (False) or starts one."""
    if _LEGACY_COMMAND in text:
        text = text.replace(_LEGACY_COMMAND, "# #[")
    if "::" not in text:
        return text
    return "\n".join(_COMMAND_START.sub(r"\1: ", line, count=1) if (i or at_line_start) else line
                     for i, line in enumerate(text.split("\n")))


class CommandSafeFile:
    """A text file (``rich.console.Console(file=...)``) through which no line can become a
    GitHub Actions workflow command: :func:`defuse_commands` on everything written."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self._line_start = True

    def write(self, text: str) -> int:
        n = len(text)
        text = defuse_commands(text, at_line_start=self._line_start)
        if text:
            self._line_start = text.endswith("\n")
        self._file.write(text)
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)
