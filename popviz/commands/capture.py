"""Run a PopTorch program with profiling on and record what the profile does not say.

  popviz capture -o DIR -- python train.py --epochs 1

The command runs unmodified. Its POPLAR_ENGINE_OPTIONS get autoReport (into DIR) merged in, and
popviz's hooks record each executor's options, stages, host tensors and call timings into
DIR/<engine>/popviz-model.json. DIR gets popviz-run.json (command, times, exit status, versions)
and capture.log (the command's output, which is also shown live). With --emulate the command
runs on popviz's IPU emulator (estimated reports, no IPU needed).

DIR defaults to popviz-reports/<timestamp>; an existing non-empty DIR is refused unless
--new-run, which makes DIR/<timestamp>. popviz exits with the command's exit code (128+N when
signal N killed it); SIGINT and SIGTERM sent to popviz are forwarded to the command.
"""

from __future__ import annotations

import argparse

from popviz.commands._options import add_layer_arguments, layer_env, positive
from popviz.fileio import path_arg

NAME = "capture"
HELP = "run a PopTorch program with profiling and popviz's hooks on"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", metavar="DIR", type=path_arg,
                   help="report directory (default: popviz-reports/<timestamp>); must be new or empty")
    p.add_argument("--new-run", action="store_true",
                   help="make a new timestamped run directory inside DIR (which may hold others)")
    p.add_argument("--emulate", action="store_true",
                   help="run on popviz's IPU emulator: estimated reports, no IPU or Poplar SDK needed")
    p.add_argument("--pvti", action="store_true",
                   help="also write PopVision System Analyser traces (PVTI_OPTIONS) into DIR")
    p.add_argument("--lwp", metavar="REGEX", nargs="?", const=".*",
                   help="also turn on Lightweight Profiling: measured start/end cycles of each "
                        "program whose name matches REGEX (default: every program); popviz analyse "
                        "then takes stage cycles from them")
    p.add_argument("--run-count", metavar="N", type=positive,
                   help="executions of each program to profile "
                        "(autoReport.executionProfileProgramRunCount)")
    p.add_argument("--calls", metavar="N", type=positive,
                   help="with --emulate: estimate only, stopping the command at the N-th call of an "
                        "executor (that call is estimated, not run); 1 = stop right after compiling")
    add_layer_arguments(p, prefix="with --emulate: ")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the command to run, after --")


def run(args: argparse.Namespace) -> int:
    from popviz.capture.launcher import run_capture
    from popviz.errors import UsageError

    if args.calls is not None and not args.emulate:
        raise UsageError(f"--calls {args.calls} stops an emulated run: add --emulate (a real IPU run "
                         "is not stopped by popviz)")
    for flag, value in (("--layer-depth", args.layer_depth), ("--split", args.split)):
        if value is not None and not args.emulate:
            raise UsageError(f"{flag} {value} applies to an emulated run: add --emulate (on an IPU, edit the "
                             "script's BeginBlock placements instead)")
    return run_capture(args.command, output=args.output, new_run=args.new_run, emulate=args.emulate,
                       pvti=args.pvti, run_count=args.run_count, calls=args.calls,
                       emulator_env=layer_env(args), lwp=args.lwp)
