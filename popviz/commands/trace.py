"""Write a report's execution as a trace that Perfetto (ui.perfetto.dev) and chrome://tracing open.

PATH is a report directory, an engine directory or a bundle (one run). Per engine, a track per
IPU with its program steps and one with its pipeline stages, and host tracks with the compile,
the executor calls and the host transfers the capture hooks recorded. FILE ending in .json is
Chrome's JSON trace event format (chrome://tracing and Perfetto); any other name (.pftrace) is
Perfetto's protobuf format, smaller. Past --max-events slices, consecutive steps of an IPU are
merged into one slice each (said on stderr and in the trace). popviz never writes over FILE
(--force replaces it). Formats and limits: docs/trace.md.
"""

from __future__ import annotations

import argparse
import sys

from popviz.fileio import path_arg
from popviz.ui import wrap_line

NAME = "trace"
HELP = "write the execution as a trace for Perfetto / chrome://tracing"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from popviz.render.trace import DEFAULT_MAX_EVENTS, FORMATS

    p.add_argument("path", metavar="PATH", help="report directory, engine directory or bundle")
    p.add_argument("-o", "--output", metavar="FILE", type=path_arg, required=True,
                   help="the trace file (.pftrace: Perfetto's protobuf; .json: Chrome JSON)")
    p.add_argument("--format", choices=FORMATS, help="perfetto or json (default: by FILE's name)")
    p.add_argument("--max-events", metavar="N", type=int, default=DEFAULT_MAX_EVENTS,
                   help=f"slices before consecutive steps are merged (default {DEFAULT_MAX_EVENTS:,})")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists")


def run(args: argparse.Namespace) -> int:
    from popviz import escape
    from popviz.errors import UsageError, shown
    from popviz.fileio import check_output, write_output
    from popviz.model.frames import MissingDataError
    from popviz.render import trace
    from popviz.sources.discover import load
    from popviz.ui import status

    if args.max_events < 100:
        raise UsageError(f"--max-events {args.max_events} is too few for a readable trace; pass 100 or more")
    check_output(args.output, args.force)
    with status(f"reading {args.path}"):
        reports = load(args.path, single_run=True)
    usable = [r for r in reports if r.execution is not None]
    for r in reports if usable else ():
        if r.execution is None:
            for line in wrap_line(f"popviz: {escape.term(r.label)} has no execution profile (an out-of-memory "
                                  "compile, or a memory-only report): not in the trace"):
                print(line, file=sys.stderr)
    if not usable:
        raise MissingDataError(f"{shown(args.path)} has no execution profile to trace (no engine ran); "
                               "capture a run that executes")
    fmt = trace.format_for(str(args.output), args.format)
    with status("building the trace"):
        built = trace.build(usable, max_events=args.max_events)
        data = trace.to_chrome_json(built) if fmt == "json" else trace.to_perfetto(built)
    write_output(args.output, data, args.force)
    for note in built.notes:
        for line in wrap_line(f"popviz: {escape.term(note)}"):
            print(line, file=sys.stderr)
    kind = "Chrome JSON" if fmt == "json" else "Perfetto protobuf"
    for line in wrap_line(f"{escape.term(shown(args.output))}: {kind}, {len(data):,} bytes, {len(built.slices):,} "
                          f"slices on {built.ipus} IPU track(s) of {len(built.processes)} engine(s); open it at "
                          "ui.perfetto.dev"):
        print(line)
    return 0
