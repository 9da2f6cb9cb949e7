"""Helpers of the fault-injection tests (tests/test_faults_*.py): a small full file system, the
state of a directory to compare byte for byte, bundles to export."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PY = sys.executable
HANG_GUARD_SECONDS = 600
"""Timeouts in these tests only stop a hang (the bug they guard against); they are not a limit
a loaded machine must meet."""


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones too) with the SHA-256 of its bytes: the state a
    failed write must leave exactly as it was."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def leftovers(root: Path) -> list[str]:
    """Temporary files or directories popviz left under ``root`` (``.name.<pid>.<hex>.tmp``)."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.name.endswith((".tmp", ".old")))


@contextlib.contextmanager
def tmpfs(where: Path, size: str = "2m", options: str = "") -> Iterator[Path]:
    """A fresh tmpfs of ``size`` mounted at ``where`` (root only; skipped with the reason
    otherwise), unmounted afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("a small full file system needs root to mount a tmpfs (mount -t tmpfs)")
    opts = f"size={size}" + (f",{options}" if options else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(mount: Path, leave_kib: int = 0) -> Path:
    """Fill the file system at ``mount`` until ``leave_kib`` KiB are free (0: none at all)."""
    filler = mount / "filler"
    st = os.statvfs(mount)
    assert st.f_blocks * st.f_frsize <= 8 * 2**20, f"{mount} is not a small test file system: not filling it"
    free = st.f_bavail * st.f_frsize
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        chunk = b"\0" * 4096
        left = max(0, free - leave_kib * 1024)
        while left > 0 or leave_kib == 0:
            left -= os.write(fd, chunk[:left] if left > 0 else chunk)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def remount_readonly(mount: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True, capture_output=True)


def make_bundle(directory: Path, name: str = "training", splits: tuple[int, ...] = (1000, 2000)) -> Path:
    from popviz import testing
    from popviz.sources.bundle import write_bundle

    return write_bundle(testing.pipeline_report(list(splits), tiles_per_ipu=8).replace(name=name), directory)
