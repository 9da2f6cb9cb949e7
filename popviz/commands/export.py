"""Export every engine of a report directory to popviz bundles, readable without the SDK.

Run this on the IPU host, where libpva (the Poplar SDK's pva module) can read profile.pop;
copy the output directory anywhere and run `popviz analyse` on it. The layout is kept:
OUT/<engine>/ (and OUT/<instance>/<engine>/ for multi-instance runs).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from popviz.fileio import path_arg

NAME = "export"
HELP = "convert profile.pop reports into portable popviz bundles"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", metavar="PATH", help="report directory (or one engine's directory)")
    p.add_argument("-o", "--output", metavar="OUT", type=path_arg,
                   help="directory to write the bundles to (default: PATH-bundle); must not "
                        "exist or be empty, unless --force")
    p.add_argument("--force", action="store_true",
                   help="write into a non-empty OUT, replacing the bundles of the engines exported (refused "
                        "when OUT holds bundles of other engines, which would mix with them)")


def _name_source(engine_dir: Path) -> Path:
    """The file an engine's name was read from, for messages."""
    from popviz.sources import bundle, manifest, pva

    for name in (bundle.METADATA_FILE, manifest.MODEL_FILE, pva.PROFILE_FILE):
        if (engine_dir / name).is_file():
            return engine_dir / name
    return engine_dir


def run(args: argparse.Namespace) -> int:
    from popviz.errors import UsageError, shown
    from popviz.paths import safe_join
    from popviz.sources import bundle
    from popviz.sources.bundle import write_bundle
    from popviz.sources.discover import load
    from popviz.ui import status

    src = Path(args.path)
    out = Path(args.output) if args.output else src.with_name(src.resolve().name + "-bundle")
    if out.exists() and src.exists() and out.resolve() == src.resolve():
        raise UsageError(f"{shown(out)} is the report directory itself; pass -o with another directory")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{shown(out)} exists and is not a directory; pass -o with a new directory")
    if out.exists() and any(out.iterdir()) and not args.force:
        raise UsageError(f"{shown(out)} already exists and is not empty; pass -o with a new "
                         "directory, or --force to replace its bundles (popviz never overwrites otherwise)")
    with status(f"reading {src}"):
        reports = load(src)
    # Names come from the report files: check every destination before writing anything.
    dests = []
    for report in reports:
        parts = [*(report.instance.split("/") if report.instance else []), report.name]
        dest = safe_join(out, parts, "engine", _name_source(Path(report.path or src)))
        if dest in dests:
            raise UsageError(f"two engines would both be exported to {shown(dest)}; export "
                             "their directories one at a time")
        dests.append(dest)
    if args.force and out.is_dir():
        others = sorted(m.parent for m in out.rglob(bundle.METADATA_FILE) if m.parent not in dests)
        if others:
            raise UsageError(f"{shown(out)} holds bundles this export would not replace ({shown(others[0])}"
                             f"{f' and {len(others) - 1} more' if len(others) > 1 else ''}), and they would be "
                             "analysed with the new ones; remove them or pass -o with a new directory")
    for report, dest in zip(reports, dests, strict=True):
        with status(f"writing {dest}"):
            write_bundle(report, dest, overwrite=args.force)
        print(f"{report.label}: {', '.join(report.present)} -> {shown(dest)}")
    print(f"analyse anywhere with: popviz analyse {shown(out)}")
    return 0
