"""Bring the profiles a program wrote outside the capture directory next to their manifests.

A program may set its own ``autoReport.directory`` inside the process (PyTorch Lightning's
``IPUStrategy(autoreport=True, autoreport_dir=...)`` rewrites ``POPLAR_ENGINE_OPTIONS``), so Poplar
(or the emulator) writes the profiles there while popviz's hooks write ``popviz-model.json``
into the capture directory. Each manifest records the directory the process actually used
(``executor.report_directory``); when the run ends, the report files of ``<that
directory>/<engine>/`` are hard-linked (copied across file systems) into the manifest's engine
directory, so ``popviz analyse CAPTURE_DIR`` reads one run as a whole. Files already in the
capture directory are never replaced, and the originals stay where the program put them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from popviz.errors import PopvizError, shown

MANIFEST = "popviz-model.json"
MAX_DEPTH = 3
"""Engine directories are ``root/engine`` or ``root/instance/engine``: manifests deeper than this
are not looked for."""


def _manifests(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        if depth >= MAX_DEPTH:
            dirnames[:] = []
        if MANIFEST in filenames:
            found.append(Path(dirpath) / MANIFEST)
    return sorted(found)


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def _link_or_copy(src: Path, dest: Path) -> None:
    """``src`` at ``dest``, whole or not at all (a full disk leaves no half copy under its name):
    a hard link, else a copy made beside ``dest`` and renamed into place; never over a file."""
    from popviz.fileio import publish_dir, remove_tree, temp_dir

    if src.is_dir():
        tmp = temp_dir(dest)
        try:
            shutil.copytree(src, tmp, copy_function=_link_or_copy_file, dirs_exist_ok=True)
            publish_dir(tmp, dest, replace=False)
        finally:
            remove_tree(tmp)
    else:
        _link_or_copy_file(src, dest)


def _link_or_copy_file(src: str | Path, dest: str | Path) -> None:
    from popviz.fileio import publish_file

    try:
        os.link(src, dest)
    except FileExistsError:
        raise
    except OSError:
        with open(src, "rb") as fh:
            publish_file(dest, lambda out: shutil.copyfileobj(fh, out), replace=False)
        shutil.copystat(src, dest)


def follow_reports(root: Path) -> list[str]:
    """Gather profiles written outside ``root`` into the engine directories of ``root``; return one
    line per engine affected, saying where the profile was written and what was done."""
    root = root.resolve()
    lines = []
    for manifest in _manifests(root):
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(manifest.read_text(encoding="utf-8"))
            used = (doc.get("executor") or {}).get("report_directory")
            engine = doc.get("engine")
            if not isinstance(used, str) or not isinstance(engine, str) or not used:
                continue
            source = Path(used).resolve() / engine
            engine_dir = manifest.parent
            if _inside(source, root) or source == engine_dir:
                continue
            where = shown(engine_dir)
            if not source.is_dir():
                lines.append(f"{engine}: the program set autoReport.directory={used}, but "
                             f"{shown(source)} holds no profile")
                continue
            taken, kept, failed = [], [], []
            for item in sorted(source.iterdir()):
                if item.name == MANIFEST or item.name.startswith("."):
                    continue
                dest = engine_dir / item.name
                if dest.exists():
                    kept.append(item.name)
                    continue
                try:
                    _link_or_copy(item, dest)
                except (OSError, PopvizError) as exc:  # a full disk: that file is not gathered, said so
                    failed.append(f"{item.name} ({getattr(exc, 'strerror', None) or exc})")
                    continue
                taken.append(item.name)
            what = f"linked {', '.join(taken)} into {where}" if taken else "nothing new to gather"
            if failed:
                what += f"; could not gather {', '.join(failed)}"
            if kept:
                what += f" (kept {where}'s own {', '.join(kept)})"
            lines.append(f"{engine}: profile written to {shown(source)} (the program's "
                         f"autoReport.directory); {what}")
    return lines
