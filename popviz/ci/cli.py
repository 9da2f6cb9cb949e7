"""What the compare, check and baseline commands share: output options and writing them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

from popviz.errors import UsageError
from popviz.fileio import path_arg

if TYPE_CHECKING:  # the comparison machinery is not needed to build the command line parser
    from popviz.ci.compare import Comparison


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the result as JSON")
    fmt.add_argument("--markdown", action="store_true", help="print the result as Markdown")
    p.add_argument("--junit", metavar="FILE", type=path_arg, help="also write a JUnit XML file (one testcase per metric and "
                   "budget); FILE must not exist unless --force")
    p.add_argument("--force", action="store_true", help="replace the --junit FILE if it exists")
    p.add_argument("--summary", action="store_true",
                   help="also append the Markdown to $GITHUB_STEP_SUMMARY (GitHub Actions' job summary)")
    p.add_argument("--github", action="store_true",
                   help="GitHub Actions: --summary, plus an ::error:: annotation per regression, broken budget, "
                   "lost engine and failing finding "
                   "(on stderr with --json or --markdown, which keep stdout to themselves)")
    p.add_argument("--all", action="store_true", help="list unchanged metrics too")
    p.add_argument("--config", metavar="FILE", type=path_arg,
                   help="TOML with [tool.popviz] fail / ignore / budgets (default: ./pyproject.toml)")


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, outputs that cannot be written."""
    from popviz.fileio import check_output

    if args.junit:
        check_output(args.junit, args.force)
    if (args.summary or args.github) and not os.environ.get("GITHUB_STEP_SUMMARY"):
        raise UsageError("--summary/--github append to $GITHUB_STEP_SUMMARY, which is not set (GitHub Actions "
                         "sets it); use --markdown to print the Markdown instead")
    if args.summary or args.github:
        from popviz.fileio import check_appendable

        check_appendable(os.environ["GITHUB_STEP_SUMMARY"], "$GITHUB_STEP_SUMMARY")


def emit(c: Comparison, args: argparse.Namespace) -> int:
    from popviz.ci import render

    if args.json:
        sys.stdout.write(render.as_json(c) + "\n")
    elif args.markdown:
        from popviz.ui import markdown_fitted

        sys.stdout.write(markdown_fitted(render.markdown(c, all_rows=args.all)))
    else:
        render.console(c, all_rows=args.all)
    if (args.json or args.markdown) and c.failed:  # stdout may go to a file: the job's log says why
        from popviz.escape import term
        from popviz.ui import wrap_line

        print("\n".join(wrap_line(term(c.headline()))), file=sys.stderr)
    if args.summary or args.github:
        from popviz.fileio import append_text

        append_text(os.environ["GITHUB_STEP_SUMMARY"], render.markdown(c, all_rows=args.all) + "\n")
    if args.github:
        from popviz.ci.compare import budget_value, fmt
        from popviz.escape import gh_command

        # GitHub reads workflow commands on stdout and stderr: when stdout is JSON or Markdown for a
        # file or a script, the annotations go to stderr and leave it whole
        to = sys.stderr if args.json or args.markdown else sys.stdout
        for r in c.regressions:
            command(gh_command("error", f"{r.engine} {r.metric}: {fmt(r.base, r.unit)} → {fmt(r.new, r.unit)} "
                                        f"({r.change})", title="popviz regression"), to)
        for b in c.broken_budgets:
            command(gh_command("error", f"{b['engine']} {b['metric']} = {budget_value(b)} "
                                        f"({b['budget']})", title="popviz budget"), to)
        for lost in c.lost:
            command(gh_command("error", lost, title="popviz engine"), to)
        for f in c.failing_findings:  # --fail-on: a finding fails the job as a regression does
            command(gh_command("error", f"{f['engine']} {f['code']}: {f['title']}", title="popviz finding"), to)
    if args.junit:
        from popviz.fileio import write_output

        write_output(args.junit, render.junit(c), args.force)
    return 1 if c.failed else 0


def command(line: str, stream: TextIO | None = None) -> None:
    """Print a GitHub Actions workflow command popviz means to give to ``stream`` (stdout by
    default; the CLI's stdout and stderr defuse any other line that looks like one)."""
    stream = stream or sys.stdout
    write = getattr(stream, "write_command", None)
    if write is not None:
        write(line)
    else:
        print(line, file=stream)

