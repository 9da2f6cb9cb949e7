"""Write every figure a report supports, per engine, as PNG or SVG files.

PATH is a report directory, one engine's directory or a bundle. Files are named
ENGINE-FIGURE.FORMAT (with the instance first for PopRun runs) in DIR, which is created if
needed; popviz never writes over a file that exists (--force replaces figures of the same
names, and removes one whose figure is now skipped). Figures the data cannot support (no
execution in an out-of-memory compile, per-IPU memory only) are skipped with the reason.
"""

from __future__ import annotations

import argparse
import re
import sys

from popviz.fileio import path_arg
from popviz.ui import wrap_line

NAME = "plot"
HELP = "write the figures of a report (timeline, stages, memory, tiles, breakdown, host_io, liveness)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="report directory, engine directory or bundle")
    p.add_argument("-o", "--output", metavar="DIR", type=path_arg, required=True, help="directory for the figure files")
    p.add_argument("--format", choices=("png", "svg"), default="png", help="file format (default png)")
    p.add_argument("--force", action="store_true",
                   help="replace figure files of the same names in DIR (other files are left alone)")
    p.add_argument("--jobs", metavar="N", type=_jobs, default=None,
                   help="draw on N processes (default: one per usable core, at most 4; 1: in this process)")
    p.add_argument("--only", metavar="A,B", help="only these figures, comma-separated: timeline, stages, "
                   "memory, tiles, breakdown, host_io, liveness")


def _jobs(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number of processes, 1 or more, not {value!r}")
    return n


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "engine"


def _check_output_dir(out) -> None:  # (Path) -> None
    """-o must be a writable directory, or one that can be created: checked before any drawing."""
    import os

    from popviz.errors import UsageError, shown

    if out.is_symlink() and not out.exists():
        raise UsageError(f"{shown(out)} is a dangling symbolic link; pass -o with a directory")
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"{shown(out)} exists and is not a directory; pass -o with a directory")
        if not os.access(out, os.W_OK | os.X_OK):
            raise UsageError(f"{shown(out)} is not writable; pass -o with a directory you can write to")
        return
    parent = next((p for p in out.absolute().parents if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{shown(out)} cannot be created ({shown(parent or out.parent)} is not a writable "
                         "directory); pass -o with a directory you can write to")


def early_line(args: argparse.Namespace) -> str:
    """What stderr says when the command is still reading and drawing after a second."""
    return "popviz plot: reading the report and drawing its figures ..."


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from popviz import escape, plot
    from popviz.errors import UsageError, shown
    from popviz.fileio import check_replaceable
    from popviz.sources.discover import load
    from popviz.ui import status

    only = [a.strip() for a in args.only.split(",") if a.strip()] if args.only else list(plot.FIGURE_NAMES)
    unknown = [n for n in only if n not in plot.FIGURE_NAMES]
    if unknown:
        raise UsageError(f"unknown figure {', '.join(map(repr, unknown))}; choose from "
                         f"{', '.join(plot.FIGURE_NAMES)}")
    out = Path(args.output)
    _check_output_dir(out)
    with status(f"reading {args.path}"):
        reports = load(args.path)
    planned = {}
    stems: set[str] = set()
    for report in reports:
        base = _safe(f"{report.instance}-{report.name}" if report.instance else report.name)
        stem, k = base, 2
        while stem in stems:  # two engine names that sanitise alike get distinct files
            stem, k = f"{base}-{k}", k + 1
        stems.add(stem)
        for name in only:
            planned[(report.label, name)] = out / f"{stem}-{name}.{args.format}"
    clashes = [p for p in planned.values() if p.exists() or p.is_symlink()]
    if clashes and not args.force:
        raise UsageError(f"{shown(clashes[0])} exists; popviz never writes over files: choose an empty -o "
                         "directory, or pass --force to replace the figures")
    for clash in clashes:
        check_replaceable(clash)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{shown(out)}: cannot be created ({exc.strerror})") from None
    written = 0
    from popviz.plot.files import write_figures

    for report in reports:
        def done(name, result, report=report) -> None:
            nonlocal written
            target = planned[(report.label, name)]
            if isinstance(result, plot.PlotDataError):
                for part in wrap_line(f"skipped {escape.term(result.message)}"):
                    print(part, file=sys.stderr)
                if args.force and target in clashes:  # an old figure would outlive the data it showed
                    target.unlink(missing_ok=True)
                    print(f"removed the old {escape.term(shown(target))}", file=sys.stderr)
                return
            print(escape.term(shown(target)), flush=True)
            written += 1

        # each drawn into a temporary file, then linked into place: a figure that fails to draw
        # leaves no partial file, and a file that appeared since the check is not replaced
        with status(f"drawing {report.label}"):
            write_figures(report, {name: planned[(report.label, name)] for name in only}, fmt=args.format,
                          dpi=110, force=args.force, jobs=args.jobs, on_done=done)
    print(f"{written} figure(s) written to {shown(out)}", file=sys.stderr)
    return 0
