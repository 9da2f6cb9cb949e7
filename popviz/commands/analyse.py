"""Analyse the engines in a report directory: pipeline balance, memory pressure and host I/O.

PATH is a report directory (autoReport.directory, popviz capture -o), one engine's directory,
or a popviz bundle. Exit codes: 0 done (findings or not), 1 a finding at or above --fail-on,
2 unreadable input.
"""

from __future__ import annotations

import argparse
import sys

from popviz.fileio import path_arg

NAME = "analyse"
ALIASES = ("analyze",)
HELP = "analyse a report directory and print findings"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="report directory, engine directory or bundle")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the result as JSON (docs/json.md)")
    fmt.add_argument("--markdown", action="store_true", help="print the result as Markdown")
    p.add_argument("--html", metavar="FILE", type=path_arg,
                   help="also write a self-contained HTML page (tables, findings, figures) to FILE")
    p.add_argument("--force", action="store_true", help="replace the --html FILE if it exists")
    p.add_argument("--only", metavar="A,B",
                   help="run only these analyses, comma-separated: pipeline, memory, host_io, "
                   "throughput, instances")
    p.add_argument("--fail-on", choices=("info", "warning", "error"),
                   help="exit 1 when a finding reaches this severity (for CI); 0 otherwise")
    p.add_argument("--ignore", metavar="CODES",
                   help="finding codes the team has accepted (e.g. PIPE003,HIO002): shown, marked ignored, and "
                   "never fail --fail-on; also [tool.popviz] ignore in pyproject.toml")


def early_line(args: argparse.Namespace) -> str | None:
    """With --html, what stderr says when the command is still at work after a second."""
    return "popviz analyse: reading the report and writing the page ..." if args.html else None


def run(args: argparse.Namespace) -> int:
    from popviz.analysis import analyse
    from popviz.analysis.findings import severity_rank
    from popviz.escape import term
    from popviz.sources.discover import load
    from popviz.ui import say, status

    only = [a.strip() for a in args.only.split(",") if a.strip()] if args.only else None
    if args.html:
        from popviz.fileio import check_output

        check_output(args.html, args.force)
    with status(f"reading {args.path}"):
        reports = load(args.path)
    with status("analysing"):
        result = analyse(reports, only=only)
    from popviz.ci.thresholds import ignored_codes, load_config

    ignore = ignored_codes(args, load_config().ignore)
    result.ignored = frozenset(ignore)
    if args.json:
        from popviz.render.json import render

        sys.stdout.write(render(result) + "\n")
    elif args.markdown:
        from popviz.render.markdown import render as render_md
        from popviz.ui import markdown_fitted

        sys.stdout.write(markdown_fitted(render_md(result)))
    else:
        from popviz.render.console import render as render_console

        render_console(result)
    if args.html:
        from popviz.fileio import write_output
        from popviz.render.html import render as render_html

        with status(f"writing {args.html}"):
            write_output(args.html, render_html(result), args.force)
        say(term(f"popviz: wrote {args.html}"))
    accepted = [f"{e.report.label} {f.code}" for e in result.engines for f in e.findings if f.code in ignore]
    if accepted:
        say(term(f"popviz: ignored (accepted by --ignore / [tool.popviz] ignore): {', '.join(accepted)}"))
    if args.fail_on:
        triggered = [(e.report.label, f) for e in result.engines for f in e.findings
                     if f.code not in ignore and severity_rank(f.severity) >= severity_rank(args.fail_on)]
        if triggered:
            listed = ", ".join(f"{label}: {f.code} ({f.severity})" for label, f in triggered)
            say(term(f"popviz: --fail-on {args.fail_on}: {len(triggered)} finding"
                     f"{'s' if len(triggered) != 1 else ''} at or above {args.fail_on}: {listed}"))
            return 1
    return 0
