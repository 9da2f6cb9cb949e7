"""What an emulated run is doing, on stderr: tracing and estimating, running call k (of N).

``popviz emulate`` and ``popviz capture --emulate`` set ``POPVIZ_PROGRESS`` in the script's
environment: ``rich`` (a live line with a spinner, a bar over the call's micro-batches and the
time elapsed; used when the emulated script's stderr is a terminal), ``plain`` (one line per
step, and a line at least every :data:`HEARTBEAT_SECONDS` while a step goes on, so a log or a CI
job is never silent for long) or ``off``. Unset, progress is plain in estimate-only runs
(``POPVIZ_EMULATOR_CALLS``) and off otherwise (a script run by hand with the emulator
in-process stays as quiet as with PopTorch).

This module is light: rich is imported only in ``rich`` mode.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Any

from popviz.escape import status_line

ENV = "POPVIZ_PROGRESS"
MODES = ("rich", "plain", "off")
HEARTBEAT_SECONDS = 4.0
"""In plain mode, a step that goes on prints a line at least this often (the promise: no
emulated run silent for more than 5 s)."""
SLOW_CALL_SECONDS = 1.0
"""In plain mode without ``--calls``, a finished call gets a line only when it took this long
(a loop of thousands of quick calls prints nothing per call)."""


def mode() -> str:
    raw = os.environ.get(ENV, "").strip().lower()
    if raw in MODES:
        return raw
    return "plain" if os.environ.get("POPVIZ_EMULATOR_CALLS", "").strip() else "off"


def line(message: str, one_line: bool = False) -> None:
    """``popviz emulator: message`` on stderr, broken between words to the terminal's width (80
    when unknown); ``one_line``: a heartbeat, kept on one line (shortened before its elapsed
    time), so that capture's status line can draw it in place."""
    from popviz.ui import wrap_line

    text = status_line(f"popviz emulator: {message}")
    lines = [_one_line(text)] if one_line else [part for row in text.split("\n") for part in wrap_line(row)]
    print("\n".join(lines), file=sys.stderr, flush=True)


def _one_line(text: str) -> str:
    """A heartbeat (``... (12 s)``) shortened at a word to the terminal's width, its time kept."""
    import shutil

    width = max(40, shutil.get_terminal_size((80, 24)).columns)
    if len(text) <= width:
        return text
    head, sep, tail = text.rpartition(" (")
    suffix = f"… ({tail}" if sep else "…"
    cut = head[:width - len(suffix)]
    if " " in cut:
        cut = cut[:cut.rindex(" ")]
    return cut + suffix


class Activity:
    """One step (a compile or a call) with a detail that changes (the micro-batch)."""

    def __init__(self, reporter: Reporter, text: str, total: int | None) -> None:
        self.reporter, self.text, self.total = reporter, text, total
        self.done = 0
        self.started = time.monotonic()

    def advance(self, done: int) -> None:
        self.done = done
        self.reporter._advanced(self)

    def describe(self) -> str:
        part = f", micro-batch {min(self.done + 1, self.total)} of {self.total}" if self.total else ""
        return status_line(f"{self.text}{part} ({time.monotonic() - self.started:.0f} s)")

    def __enter__(self) -> Activity:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.reporter._finish(self)


class Reporter:
    """Progress of one process (see the module's docstring for the modes)."""

    def __init__(self, how: str | None = None) -> None:
        self.mode = how or mode()
        self.current: Activity | None = None
        self.idle: Activity | None = None
        """Between steps, in plain mode: what the heartbeat says (the script's own work)."""
        self.last_line = time.monotonic()
        self.lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._progress: Any = None
        self._task: Any = None
        self._stop = threading.Event()

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def say(self, message: str) -> None:
        """A line that stays (a step done), in every mode but off."""
        if not self.on:
            return
        with self.lock:
            if self._progress is not None:
                self._progress.console.print(status_line(f"popviz emulator: {message}"), markup=False,
                                             highlight=False)
            else:
                line(message)
            self.last_line = time.monotonic()

    def script_started(self) -> None:
        """The script imported ``poptorch``: from now on a plain run is never silent for long."""
        if self.mode == "plain" and self.idle is None:
            self.idle = Activity(self, "the script runs (no PopTorch call yet)", None)
            self._ensure_heartbeat()

    def activity(self, text: str, total: int | None = None, announce: bool = True) -> Activity:
        """Start a step: ``with reporter.activity("tracing ...") as a: ... a.advance(k)``. In
        plain mode, ``announce=False`` prints nothing for a step shorter than the heartbeat (a
        loop of quick calls stays quiet); a longer one gets the heartbeat's lines."""
        act = Activity(self, text, total)
        if not self.on:
            return act
        with self.lock:
            self.current = act
            if not (self.mode == "rich" and self._start_rich(act)):
                if announce:
                    line(text)
                    self.last_line = time.monotonic()
                self._ensure_heartbeat()
        return act

    # -- internals
    def _advanced(self, act: Activity) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=act.done)

    def _finish(self, act: Activity) -> None:
        with self.lock:
            if self.current is act:
                self.current = None
                if self.idle is not None:
                    self.idle = Activity(self, "the script runs between PopTorch calls", None)
            if self._progress is not None:
                self._progress.stop()
                self._progress = self._task = None

    def _start_rich(self, act: Activity) -> bool:
        """A live line; False when one cannot be shown (the script shows its own live display:
        rich allows one at a time), and the step gets plain lines instead."""
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if act.total:
            columns += [BarColumn(bar_width=20), MofNCompleteColumn(), TextColumn("micro-batches")]
        columns.append(TimeElapsedColumn())
        # sys.stdout and sys.stderr stay the script's own (no redirection through rich's proxy)
        progress = Progress(*columns, console=Console(file=sys.stderr), transient=True,
                            redirect_stdout=False, redirect_stderr=False)
        task = progress.add_task(act.text, total=act.total)
        try:
            progress.start()
        except Exception:
            return False
        self._progress, self._task = progress, task
        return True

    def _ensure_heartbeat(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._beat, name="popviz-progress", daemon=True)
        self._thread.start()
        # stopped before the interpreter finalises: a daemon thread writing to stderr then can
        # abort it (exit handlers registered later, such as the reports' writing, run before this)
        atexit.register(self.close)

    def close(self) -> None:
        """Stop the heartbeat (the process's reporter lives as long as the process)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)

    def _beat(self) -> None:
        while not self._stop.wait(min(0.5, HEARTBEAT_SECONDS / 4)):
            with self.lock:
                act = self.current or self.idle
                since = max(self.last_line, act.started) if act is not None else 0.0
                if act is None or time.monotonic() - since < HEARTBEAT_SECONDS:
                    continue
                try:
                    line(act.describe(), one_line=True)
                except (OSError, ValueError):  # stderr went away: stop beating
                    return
                self.last_line = time.monotonic()


_reporter: Reporter | None = None


def reporter() -> Reporter:
    """The process's reporter (made on first use, from the environment)."""
    global _reporter
    if _reporter is None:
        _reporter = Reporter()
    return _reporter


def _forget_in_child() -> None:
    global _reporter  # a forked child (a DataLoader worker) starts without the parent's thread
    _reporter = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)

__all__ = ["ENV", "HEARTBEAT_SECONDS", "Activity", "Reporter", "reporter"]
