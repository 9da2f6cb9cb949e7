"""Running a user's command as a child process: finding it, forwarding signals to it once.

Shared by ``popviz capture`` and ``popviz emulate``. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from popviz.errors import UsageError

GRACE_ENV = "POPVIZ_SIGNAL_GRACE_SECONDS"
DEFAULT_GRACE_SECONDS = 10.0
"""After forwarding SIGINT or SIGTERM, how long the child has to exit before popviz escalates
(SIGINT -> SIGTERM -> SIGKILL, one step per grace period). ``POPVIZ_SIGNAL_GRACE_SECONDS``
overrides it."""

SI_KERNEL = 0x80
"""``si_code`` of a signal the kernel sent (e.g. the terminal's Ctrl-C, which the child, in the
same process group, receives too): such signals are not forwarded a second time."""


def find_command(command: Sequence[str], env: Mapping[str, str]) -> str:
    """The executable ``command[0]`` names, as the child would find it on ``env``'s PATH."""
    exe = command[0]
    if os.sep in exe or (os.altsep and os.altsep in exe):
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            raise UsageError(f"{exe}: no such executable file; check the command after --")
        return exe
    found = shutil.which(exe, path=env.get("PATH"))
    if found is None:
        raise UsageError(f"{exe}: command not found on PATH; check the command after --")
    return found



class SignalForwarder:
    """Forward SIGINT and SIGTERM sent to popviz to the child, once.

    On Linux the signals are blocked and read with ``sigwaitinfo`` by a thread, which tells a
    signal from the terminal (``SI_KERNEL``: the child, in the same process group, got it
    already) from one sent to popviz alone (forwarded). Elsewhere a handler forwards every one.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.received: list[str] = []
        self.forwarded: list[str] = []
        self.blocking = hasattr(signal, "sigwaitinfo") and hasattr(signal, "pthread_sigmask")
        self._old_handlers: dict[int, Any] = {}
        self._old_mask: set[int] | None = None
        self.escalated: list[str] = []
        self._escalating = False
        try:
            self.grace_seconds = max(0.0, float(os.environ.get(GRACE_ENV, DEFAULT_GRACE_SECONDS)))
        except ValueError:
            self.grace_seconds = DEFAULT_GRACE_SECONDS

    def before_spawn(self) -> None:
        if self.blocking:
            self._old_mask = set(signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS))

    def child_setup(self) -> None:
        """Runs in the child between fork and exec: give it the normal signal mask back."""
        if self.blocking:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)

    def after_spawn(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        if self.blocking:
            threading.Thread(target=self._wait_loop, daemon=True).start()
        else:
            for sig in self.SIGNALS:
                self._old_handlers[sig] = signal.signal(sig, self._handler)

    def _forward(self, signo: int, from_terminal: bool) -> None:
        name = signal.Signals(signo).name
        self.received.append(name)
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        if not from_terminal:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signo)
                self.forwarded.append(name)
        if not self._escalating:  # a child that ignores the signal is not waited for forever
            self._escalating = True
            threading.Thread(target=self._escalate, args=(proc, signo), daemon=True).start()

    def _escalate(self, proc: subprocess.Popen[bytes], signo: int) -> None:
        steps = [signal.SIGTERM, signal.SIGKILL] if signo == signal.SIGINT else [signal.SIGKILL]
        for step in steps:
            try:
                proc.wait(timeout=self.grace_seconds)
                return
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, step)
                self.escalated.append(signal.Signals(step).name)

    def _wait_loop(self) -> None:
        while True:
            try:
                info = signal.sigwaitinfo(set(self.SIGNALS))
            except Exception:
                return
            self._forward(info.si_signo, info.si_code == SI_KERNEL)

    def _handler(self, signo: int, _frame: Any) -> None:
        self._forward(signo, False)

    def restore(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        if self._old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old_mask)
            self._old_mask = None


def exit_status(returncode: int) -> tuple[str, int, str | None]:
    """(status, popviz exit code, signal name) from a child's return code."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return "killed", 128 - returncode, name
    return ("succeeded" if returncode == 0 else "failed"), returncode, None
