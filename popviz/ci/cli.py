"""What the compare, check and baseline commands share: output options and writing them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from popviz.errors import UsageError

if TYPE_CHECKING:  # the comparison machinery is not needed to build the command line parser
    from popviz.ci.compare import Comparison


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the result as JSON")
    fmt.add_argument("--markdown", action="store_true", help="print the result as Markdown")
    p.add_argument("--junit", metavar="FILE", help="also write a JUnit XML file (one testcase per metric and "
                   "budget); FILE must not exist")
    p.add_argument("--summary", action="store_true",
                   help="also append the Markdown to $GITHUB_STEP_SUMMARY (GitHub Actions' job summary)")
    p.add_argument("--github", action="store_true",
                   help="GitHub Actions: --summary, plus an ::error:: annotation per regression")
    p.add_argument("--all", action="store_true", help="list unchanged metrics too")
    p.add_argument("--config", metavar="FILE",
                   help="TOML with [tool.popviz] fail / ignore / budgets (default: ./pyproject.toml)")


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, outputs that cannot be written."""
    from popviz.fileio import refuse_existing

    if args.junit:
        refuse_existing(args.junit)
    if (args.summary or args.github) and not os.environ.get("GITHUB_STEP_SUMMARY"):
        raise UsageError("--summary/--github append to $GITHUB_STEP_SUMMARY, which is not set (GitHub Actions "
                         "sets it); use --markdown to print the Markdown instead")


def emit(c: Comparison, args: argparse.Namespace) -> int:
    from popviz.ci import render

    if args.json:
        sys.stdout.write(render.as_json(c) + "\n")
    elif args.markdown:
        sys.stdout.write(render.markdown(c, all_rows=args.all))
    else:
        render.console(c, all_rows=args.all)
    if args.summary or args.github:
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as fh:
            fh.write(render.markdown(c, all_rows=args.all) + "\n")
    if args.github:
        for r in c.regressions:
            print(f"::error title=popviz regression::{r.engine} {r.metric}: {r.base} → {r.new} ({r.change})")
        for b in c.broken_budgets:
            print(f"::error title=popviz budget::{b['engine']} {b['metric']} = {b['value']} ({b['budget']})")
    if args.junit:
        from popviz.fileio import write_new_text

        write_new_text(args.junit, render.junit(c))
    return 1 if c.failed else 0

