"""The emulator's messages on stderr, in the spirit of PopTorch's logger.

``POPTORCH_LOG_LEVEL`` (OFF, ERR, WARN, INFO, DEBUG, TRACE, TRACE_ALL) or ``setLogLevel`` choose
what is shown; the default shows warnings and the emulator's one-line notes about reports.
"""

from __future__ import annotations

import os

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
