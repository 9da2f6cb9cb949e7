"""Run a command with popviz's PopTorch emulator importable as `poptorch`.

    popviz emulate -- python train.py --epochs 1

The command runs unchanged on the CPU: `import poptorch` in it (and only in it) imports
popviz's emulator. With profiling switched on the way PopTorch users do it
(POPLAR_ENGINE_OPTIONS='{"autoReport.all":"true","autoReport.directory":"DIR"}' or
Options.enableProfiling(DIR)), each engine writes an estimated report to DIR/<engine>/, which
popviz analyse reads. See docs/emulator.md.

Output is shown live; SIGINT and SIGTERM are passed on to the command; popviz exits with the
command's exit code (128 + N when a signal N ended it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys

NAME = "emulate"
HELP = "run a PopTorch script on the CPU with the emulator as poptorch"

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS ...]",
                   help="the command to run, after --")


def command_from(args: argparse.Namespace) -> list[str]:
    """The child's argv from the REMAINDER argument (with or without a leading ``--``)."""
    from popviz.errors import UsageError

    cmd = list(args.command or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("no command given; usage: popviz emulate -- python train.py [ARGS ...]")
    if shutil.which(cmd[0]) is None:
        raise UsageError(f"{cmd[0]}: command not found (not an executable file or on PATH); "
                         "usage: popviz emulate -- python train.py [ARGS ...]")
    return cmd


def _terminal_signalled_group() -> bool:
    """Whether a terminal key (Ctrl-C) just signalled our whole foreground process group, the
    child included; then the signal must not be sent to the child a second time."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            if stream is not None and stream.isatty():
                return os.tcgetpgrp(stream.fileno()) == os.getpgrp()
        except (OSError, ValueError):
            continue
    return False


def run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run ``cmd`` with ``env``, forwarding SIGINT/SIGTERM; return its exit code."""
    from popviz.errors import UsageError

    try:
        child = subprocess.Popen(cmd, env=env)
    except OSError as exc:
        raise UsageError(f"{cmd[0]}: cannot be run ({exc.strerror})") from None

    def forward(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT and _terminal_signalled_group():
            return
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in FORWARDED_SIGNALS}
    try:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:  # pragma: no cover - the handler above replaces SIGINT
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - code if code < 0 else code


def run(args: argparse.Namespace) -> int:
    from popviz.emulator.launch import emulated_env

    cmd = command_from(args)
    return run_child(cmd, emulated_env(os.environ))
