"""Estimate-only runs: ``popviz emulate --calls N`` (and ``capture --emulate --calls N``).

The launcher sets ``POPVIZ_EMULATOR_CALLS=N`` in the script's environment. Each executor then
runs its first N−1 calls as usual; its N-th call is compiled if needed, counted and estimated,
but not computed, and the script stops there: :class:`CallLimitReached` (a ``SystemExit`` with
code 0) unwinds it, so ``finally`` blocks and context managers run and the reports are written
as the process exits. With N = 1 the script stops at its first executor call, right after the
compilation, which is all an estimate needs (one traced micro-batch), so a large model is
estimated in the time one forward pass takes. Progress goes to stderr
(:mod:`popviz.emulator.progress`): compiling, the estimate, and each call done.

This module is light: no torch import.
"""

from __future__ import annotations

import os

ENV = "POPVIZ_EMULATOR_CALLS"


class CallLimitReached(SystemExit):
    """Stops the script after the last call ``--calls`` allows (exit code 0)."""

    popviz_call_completed = True
    """Read by popviz's capture hooks: the call is counted as done, not as a failure."""

    def __init__(self, engine: str, calls: int) -> None:
        super().__init__(0)
        self.engine, self.calls = engine, calls


def limit() -> int | None:
    """N from the environment, or None (no limit). A bad value is a one-line error."""
    from popviz.emulator.errors import Error

    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise Error(f"{ENV}={raw!r}: expected a whole number of calls, at least 1 (unset it to run "
                    "every call)")
    return value


__all__ = ["ENV", "CallLimitReached", "limit"]
