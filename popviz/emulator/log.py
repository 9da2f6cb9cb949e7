"""The emulator's messages on stderr, in the spirit of PopTorch's logger.

``POPTORCH_LOG_LEVEL`` (OFF, ERR, WARN, INFO, DEBUG, TRACE, TRACE_ALL) or ``setLogLevel`` choose
what is shown; the default shows warnings and the emulator's one-line notes about reports.
"""

from __future__ import annotations

import os

STATUS_FD_ENV = "POPVIZ_EMULATE_STATUS_FD"
"""The pipe ``popviz emulate`` reads once the script has exited: a report the emulator could not
write, which then makes a script that exited 0 end with exit code 2 (the disk is full when no
file can tell)."""
LEVELS = {"TRACE_ALL": 0, "TRACE": 0, "DEBUG": 1, "INFO": 2, "WARN": 3, "ERR": 4, "OFF": 5}
_state = {"level": LEVELS.get(os.environ.get("POPTORCH_LOG_LEVEL", "WARN").upper(), 3)}


def set_level(level: str | int) -> None:
    if isinstance(level, int):
        _state["level"] = max(0, min(5, level))
        return
    name = str(level).upper()
    if name not in LEVELS:
        raise ValueError(f"Unknown log level: {level}; choose one of {', '.join(LEVELS)}")
    _state["level"] = LEVELS[name]


def _emit(level: int, message: str) -> None:
    if level >= _state["level"]:
        from popviz.emulator.progress import line

        line(message)  # broken between words to the terminal's width (80 when unknown)


def warn(message: str) -> None:
    _emit(3, f"warning: {message}")


def note(message: str) -> None:
    """Something the user should see once (where a report went); shown unless WARN is raised
    above its default by ERR/OFF."""
    _emit(3, message)


def info(message: str) -> None:
    _emit(2, message)


def write_failed(message: str, path: object = None) -> None:
    """A warning that the report at ``path`` could not be written (the script runs on), told to
    ``popviz emulate`` and ``popviz capture`` too (a JSON line on :data:`STATUS_FD_ENV`), so the
    run still ends with exit code 2."""
    warn(message)
    fd = os.environ.get(STATUS_FD_ENV, "")
    if fd.isdigit():
        import json

        line = json.dumps({"path": None if path is None else str(path), "message": " ".join(message.split())})
        try:
            os.write(int(fd), (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass


def read_status(fd: int) -> list[dict[str, str | None]]:
    """What :func:`write_failed` wrote to the pipe ``fd`` (non-blocking; read once the script
    has exited): ``path`` and ``message`` of each report that could not be written."""
    import json

    data = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    out = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("message"), str):
            out.append({"path": doc.get("path") if isinstance(doc.get("path"), str) else None,
                        "message": doc["message"]})
    return out
