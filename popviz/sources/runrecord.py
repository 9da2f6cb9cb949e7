"""What a capture's run records say about how the run ended, as warnings for the analysis.

``popviz-run.json`` (written by ``popviz capture``) and each engine's ``popviz-model.json``
(written by the capture hooks) say ``"status": "running"`` until their writer finishes. When the
writer was killed (SIGKILL, power loss) they keep saying so; the next ``popviz analyse`` then
reports the run as *interrupted* rather than running, so nobody trusts incomplete figures.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Any

RUN_FILE = "popviz-run.json"
MAX_RECORD_BYTES = 16 * 2**20


def _read(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None: absent, not a regular file (a FIFO is never waited
    on), larger than MAX_RECORD_BYTES, or not JSON."""
    from popviz.errors import PopvizError
    from popviz.fileio import read_regular_text

    if not path.is_file():  # is_file follows links and is False for FIFOs and devices
        return None
    try:
        doc = json.loads(read_regular_text(path, MAX_RECORD_BYTES))
    except (PopvizError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def read_run_record(path: Path, *, strict: bool = True) -> dict[str, Any] | None:
    """A capture's popviz-run.json, or None (``strict``: only with ``"format": "popviz-run"``)."""
    doc = _read(path)
    return doc if doc is not None and (not strict or doc.get("format") == "popviz-run") else None


def record_of(report_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The popviz-run.json of the capture that holds the report in ``report_dir``: in that
    directory, or up to three levels up when that record lists the directory among the engines it
    captured (``_root`` and ``_file`` added). A record anywhere else (a file planted above a
    downloaded report) is never used."""
    here = Path(report_dir)
    for parent in [here, *list(here.parents)[:3]]:
        doc = read_run_record(parent / RUN_FILE)
        if doc is None:
            continue
        if parent != here:
            rel = here.relative_to(parent).as_posix()
            engines = doc.get("engines")
            listed = isinstance(engines, list) and any(isinstance(e, dict) and e.get("path") == rel for e in engines)
            # a capture whose popviz was killed never listed its engines: its record says running
            unlisted = doc.get("status") == "running" and engines == [] and len(Path(rel).parts) <= 2
            if not (listed or unlisted):
                return None  # the nearest record is not this report's capture
        doc["_root"] = str(parent)
        doc["_file"] = str(parent / RUN_FILE)
        return doc
    return None


def not_reached_reason(doc: dict[str, Any] | None) -> str | None:
    """Why a capture may have ended before the script called one of its engines: ``--calls N``
    stopped it, or it failed or was killed (None when it ran to the end)."""
    if not isinstance(doc, dict):
        return None
    env = doc.get("environment")
    calls = env.get("POPVIZ_EMULATOR_CALLS") if isinstance(env, dict) else None
    if isinstance(calls, str) and calls.strip().isdigit():
        engines = doc.get("engines") if isinstance(doc.get("engines"), list) else []
        made = [e["model"].get("calls") for e in engines if isinstance(e, dict) and isinstance(e.get("model"), dict)]
        counted = [c for c in made if isinstance(c, int) and not isinstance(c, bool)]
        # the limit is per executor: it stopped the script when one of them reached its N-th call
        if not engines or max(counted, default=0) >= int(calls) or len(counted) < len(made):
            return f"--calls {int(calls)} stopped the script before it called this engine"
    if doc.get("signal"):
        return f"the script was killed by {doc['signal']} before it called this engine"
    if doc.get("status") == "running":  # popviz itself was killed (or still runs): not the script's doing
        alive = pid_alive(doc.get("popviz_pid"), doc.get("hostname"))
        if alive:
            return "the capture is still running: the script may call this engine later"
        return "the capture was interrupted (popviz was killed) before the script called this engine"
    if doc.get("ended") in ("disk full", "write error"):
        return f"the capture ended with a {doc['ended']}, so its records of this engine may be incomplete"
    code = doc.get("exit_code")
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        return f"the script exited with code {code} before it called this engine"
    return None


def pid_alive(pid: Any, hostname: Any) -> bool | None:
    """Whether process ``pid`` on ``hostname`` still runs; None when this host cannot tell."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    if hostname != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def run_warnings(root: Path) -> list[str]:
    """Warnings about the capture run recorded in ``root/popviz-run.json`` (none without it; one
    when it is there but unreadable: its command, status and timings are then unknown)."""
    from popviz.errors import shown

    path = root / RUN_FILE
    doc = _read(path)
    if doc is None and (path.is_file() or path.is_symlink()):
        return [f"{shown(path)}: unreadable (not a JSON object, or over {MAX_RECORD_BYTES // 2**20} MiB); the "
                "capture's command, status and timings are unknown and `popviz plan` cannot give its re-run "
                "command (the reports themselves were read)"]
    out = _write_error_warnings(doc)
    return out + _status_warnings(doc, path)


def _write_error_warnings(doc: dict[str, Any] | None) -> list[str]:
    """A warning when the capture could not save all it captured (``write_errors``: a full disk)."""
    errors = doc.get("write_errors") if isinstance(doc, dict) else None
    if not isinstance(errors, list) or not errors:
        return []
    paths = [str(w.get("path")) for w in errors if isinstance(w, dict)  # data from a file: plain names only
             and re.fullmatch(r"[\w.+-]{1,100}(/[\w.+-]{1,100}){0,3}", str(w.get("path")))][:3] or ["files"]
    ended = doc.get("ended") if doc.get("ended") in ("disk full", "write error") else "write error"
    return [f"{RUN_FILE}: the capture ended with a {ended}: {', '.join(paths)} could not be saved whole; "
            "figures and call counts may be incomplete: free some space and capture again"]


def _status_warnings(doc: dict[str, Any] | None, path: Path) -> list[str]:
    """Warnings from the record's status: failed, killed, still running, interrupted."""
    if doc is not None and doc.get("status") in ("failed", "killed") and doc.get("engines"):
        code, sig = doc.get("exit_code"), doc.get("signal")  # data from a file: shown only when well-formed
        code = f" (exit {code})" if isinstance(code, int) and not isinstance(code, bool) else ""
        sig = f" ({sig})" if isinstance(sig, str) and re.fullmatch(r"[A-Z0-9 ]{1,20}", sig) else ""
        how = f"was killed{sig}" if doc.get("status") == "killed" else f"failed{code}"
        return [f"{RUN_FILE}: the captured command {how}: the figures cover what ran before it stopped "
                "(its own error is in capture.log beside it)"]
    if doc is None or doc.get("status") != "running":
        return []
    alive = pid_alive(doc.get("popviz_pid"), doc.get("hostname"))
    if alive:
        return [f"{RUN_FILE}: the capture is still running (popviz pid {doc['popviz_pid']}); "
                "figures may be incomplete: analyse again when it has finished"]
    why = "popviz was killed before it could record the end" if alive is False else \
        f"it says running, and its popviz process (on {doc.get('hostname')!s}) cannot be checked from here"
    return [f"{RUN_FILE}: the capture was interrupted ({why}); figures and call counts may be "
            "incomplete"]


def failed_instance_warnings(root: Path, instances_with_engines: set[str]) -> list[str]:
    """A warning per ``instance-<rank>`` directory of ``root`` whose capture record says its
    command failed (or never started) and that left no engine: the other instances are analysed
    without it, and nothing else would say it is missing."""
    from popviz.errors import shown
    from popviz.model.names import INSTANCE_DIR

    out = []
    try:
        children = sorted((p for p in root.iterdir() if INSTANCE_DIR.fullmatch(p.name) and p.is_dir()),
                          key=lambda p: int(p.name.split("-")[1]))
    except OSError:
        return []
    for child in children:
        if child.name in instances_with_engines:
            continue
        doc = _read(child / RUN_FILE)
        if doc is None or doc.get("status") in ("running", "succeeded"):
            continue
        code = doc.get("exit_code")
        how = (f"exited with code {code}" if isinstance(code, int) and code else
               f"ended {doc.get('status')!s}" + (f" ({doc['signal']})" if doc.get("signal") else ""))
        out.append(f"{child.name} {how} before any engine was captured, so the run's other instances are "
                   f"analysed without it: see {shown(child / str(doc.get('log') or 'capture.log'))}")
    return out


def unfinished_manifest(engine_dir: Path) -> bool:
    """The engine's ``popviz-model.json`` says ``running`` and its process is gone: it was killed
    (or could no longer write) before its exit handlers finalised the record."""
    doc = _read(engine_dir / "popviz-model.json")
    if doc is None or doc.get("status") != "running":
        return False
    process = doc.get("process") if isinstance(doc.get("process"), dict) else {}
    return not pid_alive(process.get("pid"), process.get("hostname"))


def manifest_warning(engine_dir: Path, label: str) -> str | None:
    """A warning when an engine's ``popviz-model.json`` was left ``running`` by a process that is
    gone (its call counts and timings stop at its last update)."""
    doc = _read(engine_dir / "popviz-model.json")
    if doc is None or doc.get("status") != "running":
        return None
    process = doc.get("process") if isinstance(doc.get("process"), dict) else {}
    if pid_alive(process.get("pid"), process.get("hostname")):
        return None
    return (f"{label}: popviz-model.json was not finalised (the process ended without its exit "
            "handlers, e.g. killed); call counts and timings stop at its last update")
