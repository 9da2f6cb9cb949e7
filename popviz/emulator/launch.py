"""Make the emulator importable as ``poptorch`` for one child process.

The emulator never shadows a real PopTorch by itself: only a process started with the
environment from :func:`emulated_env` (``popviz emulate``, ``popviz capture --emulate``) finds the
shim package ``poptorch`` that re-exports :mod:`popviz.emulator`.

This module is light: it imports neither torch nor the emulator itself.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from popviz.errors import MissingDependencyError, UsageError

SHIM_DIR = Path(__file__).resolve().parent / "_shim"
"""Directory holding the ``poptorch`` shim package; prepended to the child's PYTHONPATH."""


def emulated_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` in which ``import poptorch`` imports popviz's emulator.

    The shim directory goes first on ``PYTHONPATH``; the user's own ``PYTHONPATH`` entries
    follow unchanged. Calling it on an already emulated environment changes nothing. Poplar
    options in ``env`` that Poplar would reject (``POPLAR_ENGINE_OPTIONS`` /
    ``POPLAR_RUNTIME_OPTIONS`` not JSON objects, unknown stream-callback values) are a
    UsageError.
    """
    from popviz.emulator import runtime_options
    from popviz.emulator.errors import Error

    try:  # options Poplar would reject fail here, in one line, not in the script's traceback
        runtime_options.check_environment(env)
    except Error as exc:
        raise UsageError(exc.message) from None
    out = dict(env)
    # the Python running popviz writes the report's tables when the script's cannot (numpy 1)
    out.setdefault("POPVIZ_PYTHON", sys.executable)  # popviz.emulator.report_writer.PYTHON_ENV
    shim = str(SHIM_DIR)
    current = out.get("PYTHONPATH", "")
    if current == shim or current.startswith(shim + os.pathsep):
        return out
    out["PYTHONPATH"] = shim + (os.pathsep + current if current else "")
    return out


def check_torch_for(executable: str) -> None:
    """Fail early, in one line, when ``executable`` is this very Python and torch (which the
    emulator needs) is not installed in it. Another interpreter is not checked: its own import
    error then says what to install."""
    try:
        same = os.path.samefile(executable, sys.executable)
    except OSError:
        same = False
    if same and importlib.util.find_spec("torch") is None:
        raise MissingDependencyError(
            f"the emulator needs PyTorch, which is not installed in {sys.executable}: "
            "pip install torch==2.13.0 (the CPU build; or pip install 'popviz[emulate]')")


def check_command(command: Sequence[str], env: Mapping[str, str]) -> str:
    """The executable of ``command`` (see :func:`popviz.childproc.find_command`), after
    :func:`check_torch_for` it."""
    from popviz.childproc import find_command

    exe = find_command(command, env)
    check_torch_for(exe)
    return exe


__all__ = ["SHIM_DIR", "check_command", "check_torch_for", "emulated_env"]
