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
import subprocess

from popviz.commands._options import add_layer_arguments, layer_env, positive

NAME = "emulate"
HELP = "run a PopTorch script on the CPU with the emulator as poptorch"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calls", metavar="N", type=positive,
                   help="estimate only: stop the command at the N-th call of an executor (that call is "
                        "estimated, not run; 1 = stop right after compiling); progress on stderr")
    add_layer_arguments(p)
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
    return cmd


def run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run ``cmd`` with ``env``, output live, SIGINT/SIGTERM forwarded once; its exit code
    (128 + N when signal N ended it)."""
    from popviz.childproc import SignalForwarder, exit_status
    from popviz.emulator.launch import check_command
    from popviz.emulator.log import STATUS_FD_ENV, read_status
    from popviz.errors import UsageError

    exe = check_command(cmd, env)
    _starting(cmd)
    status_r, status_w = os.pipe()  # the emulator says here which report it could not write
    os.set_blocking(status_r, False)
    os.set_blocking(status_w, False)  # a full pipe drops a message, never blocks the script
    forwarder = SignalForwarder()
    forwarder.before_spawn()
    try:
        try:
            child = subprocess.Popen([exe, *cmd[1:]], env={**env, STATUS_FD_ENV: str(status_w)},
                                     preexec_fn=forwarder.child_setup, pass_fds=(status_w,))
        except OSError as exc:
            forwarder.restore()
            raise UsageError(f"{cmd[0]}: cannot be run ({exc.strerror})") from None
        finally:
            os.close(status_w)
        forwarder.after_spawn(child)
        try:
            code = child.wait()
        finally:
            forwarder.restore()
        failed = read_status(status_r)
    finally:
        os.close(status_r)
    exit_code = exit_status(code)[1]
    if failed and exit_code == 0:  # the script ran; a report it was to leave is not (all) there
        from popviz.atomic import WriteError

        raise WriteError(failed[0]["message"])
    return exit_code


def _starting(cmd: list[str]) -> None:
    """The first line, at once (the script's own imports, torch's among them, take seconds)."""
    import shlex
    import sys

    from popviz.escape import status_line
    from popviz.ui import wrap_line

    shown = shlex.join(cmd)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    print("\n".join(wrap_line(status_line(f"popviz emulate: running {shown} with popviz's emulator as "
                                          "poptorch"))), file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from popviz.emulator.launch import emulated_env

    cmd = command_from(args)
    env = emulated_env(os.environ)
    if args.calls is not None:
        from popviz.emulator.calls import ENV

        env[ENV] = str(args.calls)
    env.update(layer_env(args))
    from popviz.emulator.progress import ENV as PROGRESS_ENV

    # what the emulator is doing, on stderr: a live line on a terminal, plain lines otherwise
    env.setdefault(PROGRESS_ENV, "rich" if _stderr_is_terminal() else "plain")
    return run_child(cmd, env)


def _stderr_is_terminal() -> bool:
    import sys

    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
