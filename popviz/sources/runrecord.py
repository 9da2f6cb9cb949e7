"""What a capture's run records say about how the run ended, as warnings for the analysis.

``popviz-run.json`` (written by ``popviz capture``) and each engine's ``popviz-model.json``
(written by the capture hooks) say ``"status": "running"`` until their writer finishes. When the
writer was killed (SIGKILL, power loss) they keep saying so; the next ``popviz analyse`` then
reports the run as *interrupted* rather than running, so nobody trusts incomplete figures.
"""

from __future__ import annotations

import json
import os
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
    path = root / RUN_FILE
    doc = _read(path)
    if doc is None and (path.is_file() or path.is_symlink()):
        return [f"{RUN_FILE}: unreadable (not a JSON object, or over {MAX_RECORD_BYTES // 2**20} MiB); the "
                "capture's command, status and timings are unknown and `popviz plan` cannot give its re-run "
                "command (the reports themselves were read)"]
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
