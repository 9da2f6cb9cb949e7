"""Command-line entry point: argument parsing and error handling only.

Each subcommand lives in ``popviz/commands/<name>.py`` with ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``.

Exit codes: 0 success; 1 the command's own verdict (a finding at ``--fail-on`` severity, a
regression); 2 bad input or usage (one line on stderr); 3 an internal error (a popviz bug);
130 interrupted. ``popviz capture`` and ``popviz emulate`` exit with the child's code.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from popviz import escape
from popviz._version import __version__
from popviz.errors import PopvizError

COMMANDS = ("analyse", "export", "emulate", "capture", "plot", "plan", "compare", "check", "baseline",
            "history", "trace")
"""Subcommand modules under popviz.commands, in the order ``--help`` lists them."""

EXIT_OK, EXIT_VERDICT, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, _fitted(f"{self.prog}: error: {message} (see {self.prog} --help)") + "\n")


def _fitted(message: str) -> str:
    """``message`` broken between words to the terminal's width (80 when unknown), continuation
    lines indented: one message, every line of it within the width."""
    from popviz.ui import wrap_line

    return "\n".join(wrap_line(message))


def _error(message: str) -> None:
    print(_fitted(message), file=sys.stderr)


class DescriptionFormatter(argparse.RawDescriptionHelpFormatter):
    """A command's description (its module docstring) re-wrapped to the terminal's width: prose
    paragraphs are filled again, indented lines (command lines, examples) kept as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        out = []
        for para in textwrap.dedent(text).strip("\n").split("\n\n"):
            lines = para.splitlines()
            if lines and all(line and not line[0].isspace() for line in lines):
                out.append(textwrap.fill(" ".join(line.strip() for line in lines), width,
                                         initial_indent=indent, subsequent_indent=indent,
                                         break_long_words=False, break_on_hyphens=False))
            else:
                out.append("\n".join(indent + line for line in lines))
        return "\n\n".join(out)


def build_parser() -> Parser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback when something fails")
    parser = Parser(prog="popviz", parents=[common],
                    description="Profile and analyse PopTorch models on Graphcore IPUs.")
    parser.add_argument("--version", action="version", version=f"popviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in COMMANDS:
        module = importlib.import_module(f"popviz.commands.{name}")
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__,
                           aliases=getattr(module, "ALIASES", ()),
                           parents=[common], formatter_class=DescriptionFormatter)
        module.add_arguments(p)
        p.set_defaults(run=module.run, early_line=getattr(module, "early_line", None))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    real_stdout, real_stderr = sys.stdout, sys.stderr
    sys.stdout = out = _PipeSafeStdout(real_stdout)
    sys.stderr = err = _PipeSafeStdout(real_stderr, strip_padding=False)
    try:
        code = _main(argv)
    finally:
        for stream in (out, err):
            stream.close_lines()
        sys.stdout, sys.stderr = real_stdout, real_stderr
    if out.failure is not None and code != EXIT_USAGE:  # e.g. `popviz analyse DIR > /dev/full`
        err = _PipeSafeStdout(real_stderr, strip_padding=False)
        err.write(_fitted(f"popviz: error: the standard output cannot be written ({escape.term(out.failure)}); "
                          "the output is incomplete: redirect it to a file or pipe that can take it") + "\n")
        err.close_lines()
        return EXIT_USAGE
    return code


_ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})
"""Errors of the machine (no space left, over quota, read-only, I/O), never a popviz bug."""


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = getattr(args, "debug", False)
    if not getattr(args, "run", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        early = getattr(args, "early_line", None)
        message = early(args) if early is not None else None
        if message is None:
            return int(args.run(args) or 0)
        from popviz.ui import early_line

        with early_line(escape.term(message)):  # a command that reads and draws: never silent long
            return int(args.run(args) or 0)
    except PopvizError as exc:
        if debug:
            raise
        _error(f"popviz: error: {escape.term(exc.message)}")
        return exc.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print("popviz: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `popviz analyse --json dir | head`
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:  # a bug: say so in one line, traceback with --debug
        if debug:
            raise
        if isinstance(exc, OSError) and exc.filename is not None:
            # a path the system refuses (a name too long, no permission, no space): the user's input
            from popviz.errors import shown

            _error(f"popviz: error: {escape.term(shown(exc.filename))}: {escape.term(exc.strerror or exc)}; "
                   "choose another path")
            return EXIT_USAGE
        if isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS:
            # the system's fault, not popviz's (a full disk met where no path is known): exit 2
            print(f"popviz: error: {escape.term(exc.strerror or exc)} (errno {exc.errno}); free space or fix the "
                  "file system and run again", file=sys.stderr)
            return EXIT_USAGE
        first = str(exc).splitlines()[0] if str(exc) else ""
        _error(f"popviz: internal error: {type(exc).__name__}: {escape.term(first)} (this is a popviz bug; "
               "rerun with --debug for the traceback and report it)")
        return EXIT_INTERNAL


_LINE_END_PADDING = re.compile(r" +\n")
_C1_SEQUENCES = r"\x9b[0-?]*[ -/]*[@-~]|[\x90\x98\x9d-\x9f].*?(?:\x07|\x9c|\x1b\\|(?=\n)|$)"
"""CSI, OSC and string sequences started by their 8-bit C1 controls (some terminals obey them)."""
_PIPED_CONTROLS = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[\]PX^_].*?(?:\x07|\x1b\\|(?=\n)|$)|.?)|"
                             + _C1_SEQUENCES + r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]", re.S)
"""Piped or redirected output: every escape sequence and control character but tab and newline
(rich writes none there; anything found is from a file and slipped past escape.term)."""
_TTY_CONTROLS = re.compile(r"\x1b[\]PX^_].*?(?:\x07|\x1b\\|(?=\n)|$)|\x1b(?![\[(])|" + _C1_SEQUENCES
                           + r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f]", re.S)
"""On a terminal rich draws with CSI sequences (colours, the spinner): those stay; operating
system commands (OSC: clipboard, title), device control strings and C1 controls never pass."""


class _PipeSafeStdout:
    """``sys.stdout`` (and ``sys.stderr``) for the CLI.

    Once the reader goes away (``popviz analyse DIR | head``) the rest of the output is dropped,
    and the command still finishes with its own exit code (a CI gate's verdict counts; rich alone
    would exit 1 on the spot, JSON printing would raise).

    It is also the last guard of the terminal channel (renderers escape names with
    ``popviz.escape`` first): control sequences that are not rich's own are removed, and
    a line that GitHub Actions would read as a workflow command (``::warning::``) is defused
    unless popviz wrote it on purpose with :meth:`write_command`.
    """

    def __init__(self, stream: Any, *, strip_padding: bool = True) -> None:
        self._stream = stream
        self._dropped = stream is None  # started with the stream closed (`popviz ... >&-`)
        self.failure: str | None = None
        """Why a write failed (other than a reader that went away), e.g. no space left."""
        try:  # piped or redirected: no padding at line ends (rich pads table and panel lines)
            self._tty = bool(stream.isatty())
        except (AttributeError, ValueError):
            self._tty = False
        self._strip = strip_padding and not self._tty
        self._controls = _TTY_CONTROLS if self._tty else _PIPED_CONTROLS
        self._pending = ""
        self._line_start = True

    def write(self, text: str) -> int:
        n = len(text)
        text = self._controls.sub("", text)
        text = escape.defuse_commands(text, at_line_start=self._line_start)
        if text:
            self._line_start = text.endswith("\n")
        if self._strip:
            text = self._pending + text
            kept = len(text.rstrip(" "))  # spaces at the end wait: a newline may follow them
            text, self._pending = text[:kept], text[kept:]
            text = _LINE_END_PADDING.sub("\n", text)
        self._raw(text)
        return n

    def write_command(self, line: str) -> None:
        """A GitHub Actions workflow command popviz means to give (built by escape.gh_command)."""
        if not self._line_start:
            self._raw("\n")
        self._raw(self._pending + line + "\n")
        self._pending = ""
        self._line_start = True

    def close_lines(self) -> None:
        """The end of the command's output (spaces still waiting for a newline are dropped)."""
        self._pending = ""
        if not getattr(self._stream, "closed", False):  # stderr is closed after a broken pipe
            self.flush()

    def _raw(self, text: str) -> None:
        if not self._dropped and text:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._drop()
            except OSError as exc:  # no space left, an I/O error: the rest is dropped, exit 2
                self.failure = exc.strerror or str(exc)
                self._drop()

    def flush(self) -> None:
        if not self._dropped:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._drop()
            except OSError as exc:
                self.failure = exc.strerror or str(exc)
                self._drop()

    def _drop(self) -> None:
        self._dropped = True
        try:  # what is still buffered goes nowhere, also when Python flushes at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
