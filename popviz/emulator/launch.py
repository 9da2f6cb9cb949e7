"""Make the emulator importable as ``poptorch`` for one child process.

The emulator never shadows a real PopTorch by itself: only a process started with the
environment from :func:`emulated_env` (``popviz emulate``, ``popviz capture --emulate``) finds the
shim package ``poptorch`` that re-exports :mod:`popviz.emulator`.

This module is light: it imports neither torch nor the emulator itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SHIM_DIR = Path(__file__).resolve().parent / "_shim"
"""Directory holding the ``poptorch`` shim package; prepended to the child's PYTHONPATH."""


def emulated_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` in which ``import poptorch`` imports popviz's emulator.

    The shim directory goes first on ``PYTHONPATH``; the user's own ``PYTHONPATH`` entries
    follow unchanged. Calling it on an already emulated environment changes nothing.
    """
    out = dict(env)
    shim = str(SHIM_DIR)
    current = out.get("PYTHONPATH", "")
    if current == shim or current.startswith(shim + os.pathsep):
        return out
    out["PYTHONPATH"] = shim + (os.pathsep + current if current else "")
    return out


__all__ = ["SHIM_DIR", "emulated_env"]
