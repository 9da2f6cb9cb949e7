"""The run directory of ``popviz capture`` and its run manifest: choosing and claiming the
directory (new or empty, or a timestamped run inside it), and writing ``popviz-run.json``
atomically."""


from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from popviz.errors import UsageError, shown

RUN_FILE = "popviz-run.json"
LOG_FILE = "capture.log"
RUN_FORMAT = "popviz-run"
RUN_FORMAT_VERSION = 1
DEFAULT_PARENT = "popviz-reports"


def timestamp(now: _dt.datetime | None = None) -> str:
    """Directory name of a run: local time, ``YYYYmmdd-HHMMSS``."""
    return (now or _dt.datetime.now()).strftime("%Y%m%d-%H%M%S")


def iso_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds")


# ------------------------------------------------------------------------------ directories

def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def failed_without_engines(path: Path) -> bool:
    """``path`` holds only the record of a capture that failed and captured no engine (its
    ``popviz-run.json`` and ``capture.log``): a retry may replace it, as nothing else is there."""
    try:
        names = {p.name for p in path.iterdir()}
        if RUN_FILE not in names or not names <= {RUN_FILE, LOG_FILE}:
            return False
        doc = json.loads((path / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(doc, dict) and doc.get("format") == "popviz-run"
            and doc.get("status") in ("failed", "launch_failed") and doc.get("engines") == [])


def _check_target(path: Path, new_run: bool) -> None:
    """Refuse, before touching anything, a DIR that is a file or not empty (but for the record of
    a failed capture that captured nothing, see :func:`failed_without_engines`), a dangling link,
    or one that cannot be created."""
    if path.is_symlink() and not path.exists():
        raise UsageError(f"{shown(path)} is a dangling symbolic link; pass -o with a directory")
    if not path.exists():
        parent = next((p for p in path.absolute().parents if p.exists()), None)
        if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise UsageError(f"{shown(path)} cannot be created ({shown(parent or path.parent)} is not a "
                             "writable directory); pass -o with a directory you can write to")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{shown(path)} exists and is not a directory; pass -o with a directory")
    if not new_run and path.is_dir() and not _is_empty_dir(path) and not failed_without_engines(path):
        raise UsageError(f"{shown(path)} is not empty; popviz never writes over reports: pass "
                         "--new-run to make a new timestamped run inside it, or -o a new directory")


JOIN_SECONDS = 30
"""A rank of a multi-instance run given a new run directory joins one another rank of the same
launch made this recently (the ranks start within seconds of each other)."""


def _joinable(candidate: Path, instance: str) -> bool:
    """``candidate`` is a run directory another rank of this launch just made: it holds only
    ``instance-<rank>`` directories, not this one, and was touched in the last ``JOIN_SECONDS``."""
    import time

    from popviz.model.names import INSTANCE_DIR

    try:
        names = [c.name for c in candidate.iterdir()]
        fresh = time.time() - candidate.stat().st_mtime < JOIN_SECONDS
    except OSError:
        return False
    return fresh and instance not in names and all(INSTANCE_DIR.fullmatch(n) for n in names)


def _unique_child(parent: Path, instance: str | None = None) -> Path:
    """Create and return ``parent/<timestamp>`` (``-2``, ``-3``... when taken): mkdir is atomic,
    so two captures started at once never get the same directory. A rank of a multi-instance run
    (``instance``) joins the directory another rank of the same launch has just made instead, so
    that the ranks' instances form one run."""
    parent.mkdir(parents=True, exist_ok=True)
    if instance:
        recent = [c for c in parent.iterdir() if c.is_dir() and _joinable(c, instance)]
        if recent:
            return max(recent, key=lambda c: c.stat().st_mtime)
    stamp = timestamp()
    for n in range(1, 1000):
        candidate = parent / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            if instance and _joinable(candidate, instance):
                return candidate
            continue
    raise UsageError(f"{shown(parent)}: cannot create a new run directory (1000 runs this second?)")


def plan_dir(output: str | None, new_run: bool, instance: str | None) -> Path:
    """Check the requested directory (nothing is created yet); return what ``claim_dir`` gets."""
    if output is None:
        return Path(DEFAULT_PARENT)
    path = Path(output)
    if instance and not new_run:
        # One capture per rank of a multi-instance run: the ranks share DIR, each takes its
        # own DIR/<instance>; DIR must not hold a single-instance run.
        _check_target(path, new_run=True)
        if (path / RUN_FILE).exists():
            raise UsageError(f"{shown(path)} holds a single-process run ({RUN_FILE}); pass --new-run or "
                             "-o a new directory for this multi-instance run")
        _check_target(path / instance, False)
        return path
    _check_target(path, new_run)
    return path


def claim_dir(planned: Path, output: str | None, new_run: bool, instance: str | None,
              manifest: dict[str, Any]) -> Path:
    """Create the run directory and publish ``popviz-run.json`` in it exclusively.

    Returns the directory; raises UsageError when another capture took it meanwhile."""
    if output is None or new_run:
        root = _unique_child(planned, instance)
    else:
        root = planned
        root.mkdir(parents=True, exist_ok=True)
        if failed_without_engines(root):
            for name in (RUN_FILE, LOG_FILE):
                (root / name).unlink(missing_ok=True)
            manifest.setdefault("notes", []).append(
                "replaced the record of an earlier capture here that failed and captured no engine")
    if instance:
        root = root / instance
        root.mkdir(parents=True, exist_ok=True)
    if not _publish_exclusive(root / RUN_FILE, manifest):
        raise UsageError(f"{shown(root)} was just taken by another capture; popviz never writes over "
                         "reports: pass --new-run or -o a new directory")
    return root


def _encode(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, allow_nan=False, default=str) + "\n").encode()


def _publish_exclusive(path: Path, doc: Mapping[str, Any]) -> bool:
    """Write ``path`` whole, only if it does not exist (decided at the rename: of two captures
    claiming one directory, exactly one wins)."""
    from popviz.fileio import publish_file, write_error

    try:
        publish_file(path, _encode(doc), replace=False)
    except FileExistsError:
        return False
    except OSError as exc:
        raise write_error(path, exc) from None
    return True


def write_run_manifest(path: Path, doc: Mapping[str, Any]) -> None:
    from popviz.fileio import atomic_write_bytes

    atomic_write_bytes(path, _encode(doc))


RESERVE_FILE = ".popviz-run.reserve"
RESERVE_BYTES = 256 * 1024
"""Space set aside when the run starts, given back if the disk is full when the run ends, so the
run record can always say how the run ended (the record of a large run is a few tens of KiB)."""


def make_reserve(root: Path) -> Path:
    """Set ``RESERVE_BYTES`` aside in ``root``; a one-line :class:`~popviz.errors.WriteError`
    when even that does not fit (a run started then could not say how it ended: the disk is
    full before the capture writes anything that matters)."""
    from popviz.atomic import write_error

    path = root / RESERVE_FILE
    try:
        with open(path, "wb") as fh:
            fh.write(b"\0" * RESERVE_BYTES)  # written, not sparse: the blocks are really taken
            fh.flush()
            os.fsync(fh.fileno())
        return path
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()
        raise write_error(root, exc, f"cannot set {RESERVE_BYTES // 1024} KiB aside for the run record to say "
                          "how the run ended") from None


def finish_record(path: Path, doc: Mapping[str, Any], reserve: Path | None) -> str | None:
    """Write the run record at the end of the run, giving the reserve back first if the disk is
    full; the reserve is removed in any case. The error (one line) when even then it cannot be
    written, else None."""
    from popviz.errors import PopvizError

    error = None
    try:
        write_run_manifest(path, doc)
    except PopvizError as exc:
        error = exc.message
        if reserve is not None:
            with contextlib.suppress(OSError):
                reserve.unlink()
            try:
                write_run_manifest(path, doc)
                error = None
            except PopvizError as again:
                error = again.message
    if reserve is not None:
        with contextlib.suppress(OSError):
            reserve.unlink()
    return error


def unsaved_engine_files(run: Mapping[str, Any], child_disk_full: bool) -> list[dict[str, Any]]:
    """Engine records the child's popviz code could not save: a ``popviz-model.json`` still
    ``running`` after the script exited by itself (its exit handlers finalise it), and an emulated
    engine that was called but has no bundle. The cause is ``No space left on device`` when the
    child said so."""
    if run.get("status") not in ("succeeded", "failed"):
        return []  # killed: an unfinished record is the kill's doing, said as such
    full = child_disk_full
    out = []
    for e in run.get("engines") or []:
        m = e.get("model") or {}
        if m.get("record") == "running":
            out.append({"path": f"{e['path']}/popviz-model.json", "bytes_written": None,
                        "error": (f"not finalised ({os.strerror(errno.ENOSPC)})" if full else
                                  "not finalised by the script's exit handlers (see the log)")})
        elif run.get("emulated") and "popviz-report.json" not in e.get("files", []) and full:  # at compile too
            out.append({"path": f"{e['path']}/popviz-report.json", "bytes_written": None,
                        "error": f"the estimated report was not written ({os.strerror(errno.ENOSPC)})"})
    return out


def unupdated_reports(told: list[dict[str, str | None]], root: Path,
                      already: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Estimated reports the emulator in the child said it could not update (after its compile's
    write: at the engine's destroy or the script's exit), as ``write_errors``; the cause is the
    system's words when the message has them (``No space left on device``)."""
    out: list[dict[str, Any]] = []
    seen = {w.get("path") for w in already}
    words = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT), os.strerror(errno.EIO),
             os.strerror(errno.EROFS))
    for t in told:
        where = t.get("path")
        rel = os.path.relpath(where, root.resolve()) if where else None
        path = f"{rel}/popviz-report.json" if rel and not rel.startswith("..") else "popviz-report.json"
        if path in seen:
            continue
        seen.add(path)
        message = str(t.get("message") or "")
        cause = next((w for w in words if w in message), message)
        out.append({"path": path, "bytes_written": None,
                    "error": f"the estimated report was not updated ({cause}): the one written at compile is kept"})
    return out


def how_ended(run: Mapping[str, Any]) -> str:
    """How the run ended, in the words of ``ended`` in popviz-run.json: ``completed``, ``failed``,
    ``killed``, ``interrupted`` (SIGINT), ``disk full`` or ``write error`` (popviz could not save
    all of the capture), ``launch failed`` or ``error`` (popviz's own)."""
    errors = run.get("write_errors") or []
    if any(word in str(w.get("error")) for w in errors for word in (os.strerror(errno.ENOSPC),
                                                                     os.strerror(errno.EDQUOT))):
        return "disk full"
    if errors:
        return "write error"
    status = run.get("status")
    if status == "killed":
        return "interrupted" if run.get("signal") == "SIGINT" else "killed"
    return {"succeeded": "completed", "failed": "failed", "launch_failed": "launch failed"}.get(str(status), "error")
