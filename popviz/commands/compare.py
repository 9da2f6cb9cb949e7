"""Compare two runs metric by metric and fail on a regression (for CI).

BASE and NEW are each a report directory, an engine directory, a bundle or a baseline file
(popviz baseline save). Engines are matched by instance and name. Configuration changes are
shown first. With --against-history DB the one argument is NEW, compared with the median of the
last --last K runs (5) of that history (popviz history add) that have its newest run's
configuration. Thresholds: --fail METRIC:SPEC with SPEC 5% (relative), +2pp (percentage
points), 10MiB / 1000cycles / 0.5s / 0 (absolute); METRIC may be a glob (memory.*). Defaults are
tight for cycles and memory (deterministic on IPUs) and tolerant for host wall times; only the
worse direction fails. The budgets of [tool.popviz.budgets] are checked on NEW, as popviz check
checks them. Exit codes: 0 no regression, 1 a regression or a broken budget (the first line
names it), 2 bad input. Metrics and defaults: docs/ci.md.
"""

from __future__ import annotations

import argparse

NAME = "compare"
HELP = "compare two runs (or a run with a baseline) and fail on a regression"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from popviz.ci.cli import add_output_arguments

    p.add_argument("base", metavar="BASE", nargs="?",
                   help="report directory, engine directory, bundle or baseline file")
    p.add_argument("new", metavar="NEW", nargs="?", help="the run to check (omit with --against-history)")
    p.add_argument("--fail", metavar="METRIC:SPEC", action="append", default=[],
                   help="threshold for matching metrics, e.g. pipeline.imbalance_ratio:5%% or memory.*:+2pp "
                   "(repeatable; later rules win)")
    p.add_argument("--against-history", metavar="DB",
                   help="compare the run (given as the only argument) with the median of the last runs in this "
                   "history (popviz history add): a SQLite file or a postgresql:// URL")
    p.add_argument("--last", metavar="K", type=int,
                   help="with --against-history: the median of the K most recent runs (default 5; only those with the "
                   "newest run's configuration)")
    p.add_argument("--allow-mixed", action="store_true",
                   help="compare an estimated report with a measured one (their numbers are not comparable)")
    add_output_arguments(p)


def run(args: argparse.Namespace) -> int:
    from popviz.ci.baseline import load_side
    from popviz.ci.cli import check_outputs, emit
    from popviz.ci.compare import check_budgets, check_gate, compare
    from popviz.ci.thresholds import load_config, parse_rule
    from popviz.errors import UsageError
    from popviz.ui import status

    if args.against_history and args.base is None:
        raise UsageError("compare --against-history needs the run to check: popviz compare --against-history "
                         f"{args.against_history} NEW")
    if args.base is None:
        raise UsageError("compare needs BASE and NEW (two runs, or a baseline file and a run), or "
                         "--against-history DB and NEW")
    if args.against_history:
        if args.new is not None:
            raise UsageError("with --against-history, pass only the run to check: popviz compare "
                             f"--against-history {args.against_history} NEW")
        args.base, args.new = None, args.base
    elif args.new is None:
        raise UsageError("compare needs BASE and NEW (two runs, or a baseline file and a run), or "
                         "--against-history DB and NEW")
    elif args.last is not None:
        raise UsageError("--last goes with --against-history DB")
    config = load_config(args.config)
    rules = [*config.fail, *(parse_rule(r, "--fail") for r in args.fail)]
    check_outputs(args)
    if args.against_history:
        from popviz.ci.history import DEFAULT_LAST, median_side

        last = args.last if args.last is not None else DEFAULT_LAST
        median = median_side(args.against_history, last, allow_mixed=args.allow_mixed)
        base, base_label = median.engines, median.label()
    else:
        base_label = None
        with status(f"reading {args.base}"):
            base = load_side(args.base)
    with status(f"reading {args.new}"):
        new = load_side(args.new)
    result = compare(base, new, rules, allow_mixed=args.allow_mixed)
    result.budgets = check_budgets(new, config.budgets)  # [tool.popviz.budgets]: on NEW, as popviz check does
    check_gate(result, rules)
    result.base_label = base_label
    return emit(result, args)
