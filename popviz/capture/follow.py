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

from popviz.errors import shown

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
    if src.is_dir():
        shutil.copytree(src, dest, copy_function=_link_or_copy_file)
    else:
        _link_or_copy_file(src, dest)


def _link_or_copy_file(src: str | Path, dest: str | Path) -> None:
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


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
            taken, kept = [], []
            for item in sorted(source.iterdir()):
                if item.name == MANIFEST or item.name.startswith("."):
                    continue
                dest = engine_dir / item.name
                if dest.exists():
                    kept.append(item.name)
                    continue
                _link_or_copy(item, dest)
                taken.append(item.name)
            what = f"linked {', '.join(taken)} into {where}" if taken else "nothing new to gather"
            if kept:
                what += f" (kept {where}'s own {', '.join(kept)})"
            lines.append(f"{engine}: profile written to {shown(source)} (the program's "
                         f"autoReport.directory); {what}")
    return lines
