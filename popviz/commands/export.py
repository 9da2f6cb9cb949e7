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
    from popviz.fileio import staged_dir
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
    # decided now, before the (long) read: another export finishing meanwhile does not make this one replace
    replacing = bool(args.force and out.is_dir() and any(out.iterdir()))
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
    run_id = bundle.new_id()  # one identity for the export: bundles of two exports never read as one
    if replacing:
        _replace_engines(reports, dests, run_id)
    else:  # the whole of OUT built beside it and renamed into place: all of it, or nothing
        with staged_dir(out) as tmp:
            for report, dest in zip(reports, dests, strict=True):
                with status(f"writing {dest}"):
                    write_bundle(report, tmp / dest.relative_to(out), run_id=run_id)
    for report, dest in zip(reports, dests, strict=True):
        print(f"{report.label}: {', '.join(report.present)} -> {shown(dest)}")
    print(f"analyse anywhere with: popviz analyse {shown(out)}")
    return 0


def _replace_engines(reports: list, dests: list[Path], run_id: str) -> None:
    """``--force`` into a directory holding bundles: every engine's new bundle is written beside its
    destination first (what a full disk or a kill can interrupt: nothing is replaced then), and
    only once all are complete swapped in, one rename each. Other files in a replaced engine
    directory are kept."""
    import os

    from popviz.fileio import exchange, remove_tree, rename_noreplace, temp_dir, write_error
    from popviz.sources import bundle
    from popviz.ui import status

    staged: list[tuple[Path, Path]] = []
    try:
        for report, dest in zip(reports, dests, strict=True):
            with status(f"writing {dest}"):
                try:
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    tmp = temp_dir(dest)
                except OSError as exc:
                    raise write_error(dest, exc) from None
                staged.append((tmp, dest))
                bundle.write_files(report, tmp, run_id=run_id)
                _keep_other_files(dest, tmp)
        for tmp, dest in staged:
            try:
                if dest.is_dir() and not dest.is_symlink():
                    exchange(tmp, dest)  # tmp now holds the old bundle, removed below
                else:
                    rename_noreplace(tmp, dest)
            except OSError as exc:
                raise write_error(dest, exc) from None
    finally:
        for tmp, _dest in staged:
            if os.path.lexists(tmp):
                remove_tree(tmp)


def _keep_other_files(old: Path, new: Path) -> None:
    """Hard-link (or copy) into ``new`` the files of the engine directory ``old`` that are not
    the bundle's own (a user's notes, the hooks' popviz-model.json)."""
    import os
    import shutil

    from popviz.fileio import write_error
    from popviz.sources import bundle

    if not old.is_dir() or old.is_symlink():
        return
    own = {bundle.METADATA_FILE, *bundle.TABLE_FILES}
    for item in old.iterdir():
        if item.name in own or item.name.startswith(".") or os.path.lexists(new / item.name):
            continue
        try:
            if item.is_dir() and not item.is_symlink():
                shutil.copytree(item, new / item.name, symlinks=True)
            else:
                try:
                    os.link(item, new / item.name, follow_symlinks=False)
                except OSError:
                    shutil.copy2(item, new / item.name, follow_symlinks=False)
        except OSError as exc:
            raise write_error(new / item.name, exc) from None
