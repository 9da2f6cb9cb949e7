"""Check a run against absolute budgets and its findings (for CI).

--budget FILE is TOML of METRIC = "OP LIMIT" lines (OP one of <=, <, >=, >, ==; METRIC a name or a
glob, e.g. "memory.*.used_pct" = "<= 85", "pipeline.imbalance_ratio" = "<= 1.2"), at the top
level or under [budgets]; [tool.popviz] budgets in pyproject.toml are checked too. --fail-on
SEVERITY also fails on findings, except the codes --ignore (or [tool.popviz] ignore) lists,
which are shown as ignored. Exit codes: 0 all hold, 1 a broken budget or a finding (the first line
names it), 2 bad input.
"""

from __future__ import annotations

import argparse

from popviz.fileio import path_arg

NAME = "check"
HELP = "check a run against budgets and findings; exit 1 when one is broken"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from popviz.ci.cli import add_output_arguments

    p.add_argument("path", metavar="REPORT", help="report directory, engine directory, bundle or baseline file")
    p.add_argument("--budget", metavar="FILE", type=path_arg, help="TOML file of METRIC = \"<= LIMIT\" budgets")
    p.add_argument("--fail-on", choices=("info", "warning", "error"),
                   help="also fail on findings at or above this severity")
    p.add_argument("--ignore", metavar="CODES", help="finding codes the team has accepted, e.g. PIPE003,HIO002")
    add_output_arguments(p)


def run(args: argparse.Namespace) -> int:
    from popviz.analysis.findings import severity_rank
    from popviz.ci.baseline import load_side
    from popviz.ci.cli import check_outputs, emit
    from popviz.ci.compare import Comparison, check_budgets
    from popviz.ci.thresholds import ignored_codes, load_budgets, load_config
    from popviz.errors import UsageError
    from popviz.ui import status

    config = load_config(args.config)
    budgets = [*config.budgets, *(load_budgets(args.budget) if args.budget else [])]
    if not budgets and not args.fail_on:
        raise UsageError("nothing to check: pass --budget FILE, --fail-on SEVERITY, or set [tool.popviz] budgets")
    check_outputs(args)
    ignore = ignored_codes(args, config.ignore)
    with status(f"reading {args.path}"):
        engines = load_side(args.path)
    c = Comparison(budgets=check_budgets(engines, budgets),
                   estimated=[{"engine": e.label, "base": None, "new": True} for e in engines if e.estimated])
    if args.fail_on:
        c.findings = [{"engine": e.label, "code": f["code"], "severity": f["severity"], "title": f["title"],
                       "ignored": f["code"] in ignore}
                      for e in engines for f in e.findings
                      if severity_rank(f["severity"]) >= severity_rank(args.fail_on)]
    return emit(c, args)
