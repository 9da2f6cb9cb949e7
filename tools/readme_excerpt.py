#!/usr/bin/env python3
"""Keep the README's excerpts of popviz output equal to what popviz prints.

An excerpt in README.md is a fenced block right after a marker line

    <!-- excerpt: popviz analyse sample_reports/mnist_pipeline | head -n 12 -->

The block holds the command's first lines of output at 100 columns, piped (no colour).

    python tools/readme_excerpt.py          # rewrite the excerpts from fresh runs
    python tools/readme_excerpt.py --check  # exit 1 if one is out of date (tests/test_docs.py)
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = re.compile(r"^<!-- excerpt: (?P<command>popviz [^|]+?)(?: \| head -n (?P<lines>\d+))? -->$")


def output_of(command: str, lines: int | None) -> list[str]:
    """The command's stdout as a user sees it piped at 100 columns, first ``lines`` lines."""
    argv = shlex.split(command)
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-m", "popviz", *argv[1:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"`{command}` exited {proc.returncode}: {proc.stderr.strip()}")
    out = [line.rstrip() for line in proc.stdout.splitlines()]
    return out[:lines] if lines else out


def refresh(text: str) -> str:
    """The README with every excerpt block replaced by fresh output."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        match = MARKER.match(lines[i])
        if match and i + 1 < len(lines) and lines[i + 1].startswith("```"):
            fence = lines[i + 1]
            end = i + 2
            while end < len(lines) and lines[end] != "```":
                end += 1
            fresh = output_of(match["command"], int(match["lines"]) if match["lines"] else None)
            out.extend([fence, *fresh, "```"])
            i = end + 1
            continue
        i += 1
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when an excerpt is out of date")
    args = ap.parse_args()
    current = README.read_text(encoding="utf-8")
    fresh = refresh(current)
    if args.check:
        if fresh != current:
            print("README.md excerpts are out of date: run python tools/readme_excerpt.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(fresh, encoding="utf-8")
    print("README.md excerpts refreshed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
