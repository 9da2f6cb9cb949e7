"""Keep a history of runs (a SQLite file, or a PostgreSQL server CI runners share) and show each
metric's trend (for CI).

  popviz history add REPORT --db DB [--label COMMIT]
      append a run's metrics (a SQLite DB is created when absent)
  popviz history show --db DB [METRIC ...] [--html FILE]
      the trend per metric, the runs where it stepped or the environment changed

DB is a file (SQLite: versioned schema, WAL mode) or postgresql://USER@HOST/DATABASE (psycopg 3:
pip install 'popviz[postgres]'; credentials from PGPASSWORD, ~/.pgpass or PGSERVICE, never
printed); both are safe for CI jobs appending at once. REPORT is a report directory, an engine
directory, a bundle or a baseline file. `history show` flags the run where a metric's level
stepped by more than its compare threshold (--fail and [tool.popviz] fail change them); --html
writes a self-contained dashboard. `popviz compare --against-history DB NEW` compares a run with
the median of the last runs. Exit codes: 0 done, 2 bad input. docs/ci-history.md.
"""

from __future__ import annotations

import argparse
import sys

from popviz.fileio import path_arg

NAME = "history"
HELP = "record runs in a history (SQLite or PostgreSQL) and show each metric's trend"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    add = sub.add_parser("add", help="append REPORT's metrics to the history in --db DB",
                         description="Append a run's metrics (every engine) to a history database; a "
                         "SQLite file is created when absent.")
    add.add_argument("report", metavar="REPORT", help="report directory, engine directory, bundle or baseline file")
    add.add_argument("--db", metavar="DB", type=path_arg, required=True,
                     help="the history: a SQLite file, or a postgresql://USER@HOST/DATABASE URL")
    add.add_argument("--label", metavar="TEXT", help="what the run is, e.g. the commit (git rev-parse --short HEAD)")
    show = sub.add_parser("show", help="print each metric's trend and the runs where it stepped",
                          description="Print each metric's trend over the runs in --db FILE and flag the run "
                          "where its level changed by more than its compare threshold.")
    show.add_argument("metrics", metavar="METRIC", nargs="*",
                      help="metric names or globs (memory.*); all by default")
    show.add_argument("--db", metavar="DB", type=path_arg, required=True,
                      help="the history: a SQLite file, or a postgresql://USER@HOST/DATABASE URL")
    show.add_argument("--last", metavar="N", type=int, default=100, help="look at the N most recent runs (100)")
    show.add_argument("--fail", metavar="METRIC:SPEC", action="append", default=[],
                      help="step threshold for matching metrics, as in popviz compare (repeatable)")
    show.add_argument("--config", metavar="FILE", type=path_arg, help="TOML with [tool.popviz] fail (default: ./pyproject.toml)")
    show.add_argument("--all", action="store_true", help="list metrics that never changed too")
    show.add_argument("--html", metavar="FILE", type=path_arg,
                      help="also write a self-contained trend dashboard: a chart per metric (no network requests)")
    show.add_argument("--force", action="store_true", help="replace the --html FILE if it exists")
    fmt = show.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the trends as JSON")
    fmt.add_argument("--markdown", action="store_true", help="print the trends as Markdown")


def run(args: argparse.Namespace) -> int:
    from popviz.errors import UsageError

    if args.action == "add":
        return _add(args)
    if args.action == "show":
        return _show(args)
    raise UsageError("popviz history needs an action: popviz history add REPORT --db FILE, or "
                     "popviz history show --db FILE")


def _add(args: argparse.Namespace) -> int:
    from popviz.ci import history
    from popviz.ci.baseline import load_side
    from popviz.escape import term
    from popviz.ui import say, status

    earlier = _precheck(args.db, args.label)
    with status(f"reading {args.report}"):
        engines = load_side(args.report)
    run = history.add(args.db, engines, label=args.label, source=str(args.report))
    where = history.display(args.db)
    if earlier:  # a CI job run again adds the same commit twice: its medians then count it twice
        say(term(f"popviz: note: run {earlier[-1]} has the same label {args.label!r}; both are kept (a re-run "
                 "job?), and --against-history's median counts both"))
    count = sum(len(e.metrics) for e in engines)

    say(term(f"popviz: added run {run.title} to {where}: {len(engines)} engine(s), {count} metric(s)"))
    unknown = [f"{e.label} {m}" for e in engines for m in e.unknown_metrics]
    if unknown:  # a newer popviz's metrics in a baseline file: left out, as compare leaves them out
        say(term(f"popviz: not added, unknown to this popviz (from a newer one, or misspelt): {', '.join(unknown)}"))
    return 0


def _precheck(db: str, label: str | None = None) -> list[str]:
    """Refuse a --db that is not a history (or holds a figure show and compare would refuse), or
    cannot be written, before the (slow) analysis; return the titles of the runs already
    labelled ``label``."""
    from popviz.ci import history

    return history.precheck(db, label)


def _show(args: argparse.Namespace) -> int:
    from popviz.ci import history, history_view
    from popviz.ci.thresholds import load_config, parse_rule
    from popviz.ci.trend import environment_changes, trends
    from popviz.errors import UsageError

    if args.last < 2:
        raise UsageError(f"--last must be at least 2 (a trend needs two runs), got {args.last}")
    config = load_config(args.config)
    rules = [*config.fail, *(parse_rule(r, "--fail") for r in args.fail)]
    if args.html:
        from popviz.fileio import check_output

        check_output(args.html, args.force)
    h = history.read(args.db, last=args.last)
    found = trends(h, rules, args.metrics)
    if args.metrics and not found:
        raise UsageError(f"no metric in {history.display(args.db)} matches {', '.join(args.metrics)}; "
                         "docs/ci.md lists the names (e.g. pipeline.imbalance_ratio, memory.*)")
    unknown = h.unknown_metrics()
    estimated = h.estimated()
    env = environment_changes(h)
    if args.html:
        from popviz.render.html_history import write_page

        write_page(args.html, h, found, force=args.force, unknown=unknown, estimated=estimated, env=env,
                   db=history.display(args.db))
        from popviz.escape import term
        from popviz.ui import say

        say(term(f"popviz: wrote {args.html}"))
    if args.json:
        sys.stdout.write(history_view.as_json(found, h.runs, history.display(args.db), unknown, estimated, env) + "\n")
    elif args.markdown:
        from popviz.ui import markdown_fitted

        sys.stdout.write(markdown_fitted(history_view.markdown(found, h.runs, all_rows=args.all, unknown=unknown,
                                                               estimated=estimated, env=env)))
    else:
        history_view.console(found, h.runs, all_rows=args.all, unknown=unknown, estimated=estimated, env=env)
    return 0
