#!/usr/bin/env python3
"""Write docs/cli.md, the CLI reference, from popviz's own argument parser.

    python tools/cli_reference.py          # rewrite docs/cli.md
    python tools/cli_reference.py --check  # exit 1 if docs/cli.md is out of date

tests/test_docs.py runs the check, so the reference cannot drift from the parser.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "cli.md"
WIDTH = "100"

HEADER = """# Command-line reference

Generated from popviz's argument parser by `python tools/cli_reference.py`; a test keeps it in
sync. Exit codes for every command: 0 done, 1 the command's verdict (a finding at `--fail-on`
severity, a regression, a broken budget), 2 bad input or usage (one line on stderr; `--debug`
shows the traceback), also a path the system refuses (a name too long) or a standard output that
cannot be written (`> /dev/full`: the output is incomplete), 3 an internal error (a popviz bug).
`popviz capture` and `popviz emulate` exit with the command's own exit code. A reader that goes
away (`| head`) or a closed standard output drops the rest of the output and keeps the exit code.
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:  # argparse keeps subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            found.extend(action.choices.items())
    # aliases map to the same parser object: keep each parser once, under its first name
    seen: set[int] = set()
    unique = []
    for name, sub in found:
        if id(sub) not in seen:
            seen.add(id(sub))
            unique.append((name, sub))
    return unique


def _sections(parser: argparse.ArgumentParser, path: str, level: int) -> list[str]:
    out = [f"{'#' * level} `{path}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for name, sub in _subcommands(parser):
        out.extend(_sections(sub, f"{path} {name}", min(level + 1, 4)))
    return out


def render() -> str:
    os.environ["COLUMNS"] = WIDTH  # argparse wraps help text to the terminal width
    sys.path.insert(0, str(ROOT))
    from popviz.cli import build_parser

    parser = build_parser()
    lines = [HEADER, *_sections(parser, "popviz", 2)]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/cli.md is out of date")
    args = ap.parse_args()
    text = render()
    if args.check:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run python tools/cli_reference.py",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
