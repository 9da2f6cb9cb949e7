"""Save the metrics of a run as a baseline file to commit (popviz baseline save REPORT -o FILE).

The baseline is a small, versioned JSON of every engine's metrics (docs/ci.md) and the
configuration that produced them (D, G, R, output mode, stages, target, estimated or measured).
`popviz compare BASELINE NEW` compares a later run with it. An existing FILE is replaced only
with --force.
"""

from __future__ import annotations

import argparse
import sys

from popviz.fileio import path_arg

NAME = "baseline"
HELP = "save a run's metrics as a baseline file for popviz compare"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    save = sub.add_parser("save", help="write the baseline of REPORT to FILE", description=__doc__)
    save.add_argument("report", metavar="REPORT", help="report directory, engine directory or bundle")
    save.add_argument("-o", "--output", metavar="FILE", type=path_arg, required=True, help="the baseline file to write")
    save.add_argument("--force", action="store_true", help="replace FILE if it exists")


def run(args: argparse.Namespace) -> int:
    from popviz.ci.baseline import no_metrics_reason, save
    from popviz.errors import UsageError, shown
    from popviz.ui import status

    if args.action != "save":
        raise UsageError("popviz baseline needs an action: popviz baseline save REPORT -o FILE")
    with status(f"reading {args.report}"):
        engines = save(args.report, args.output, force=args.force)
    for e in engines:
        if not e.metrics:
            print(f"popviz: {no_metrics_reason(e)}: left out of the baseline", file=sys.stderr)
    kept = [e for e in engines if e.metrics]
    count = sum(len(e.metrics) for e in kept)
    print(f"popviz: wrote {shown(args.output)}: {len(kept)} engine(s), {count} metric(s)", file=sys.stderr)
    return 0
