"""Propose the pipeline split that balances the stages and fits in memory, from per-layer costs.

    popviz plan REPORT [--engine NAME] [--ipus N | --max-ipus N] [--headroom F]

REPORT is a report directory, engine directory or bundle whose engine has per-layer costs
(`popviz capture --emulate` records them). Prints the current split beside the proposed one, the
predicted throughput change, the change as PopTorch and optimum-graphcore code, and the command
that checks it under the emulator; when no split fits, by how much and what would close the gap.

For a real (profiled) report without per-layer costs, --calibrate EMULATED spreads its measured
per-stage cycles and memory over the layers of an emulated report of the same model and split.
Exit codes: 0 a plan; 1 no split fits; 2 bad input. See docs/plan.md.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from popviz.fileio import path_arg

if TYPE_CHECKING:
    from popviz.analysis.layer_plan import LayerPlan
    from popviz.model import Report, ReportSet

NAME = "plan"
HELP = "propose the pipeline split that balances the stages and fits (from per-layer costs)"


def _headroom(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.9, got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1 (a fraction of each IPU's "
                                         f"memory), got {text}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    from popviz.commands._options import positive

    p.add_argument("path", metavar="REPORT", help="report directory, engine directory or bundle")
    p.add_argument("--engine", metavar="NAME", help="the engine to plan (when REPORT holds several)")
    n = p.add_mutually_exclusive_group()
    n.add_argument("--ipus", metavar="N", type=positive,
                   help="split over exactly N IPUs (default: as many as the current split)")
    n.add_argument("--max-ipus", metavar="N", type=positive,
                   help="try every number of IPUs from 1 to N and propose the fastest (throughput "
                        "of each shown)")
    p.add_argument("--headroom", metavar="FRAC", type=_headroom, default=0.9,
                   help="fraction of each IPU's memory a split may fill (default 0.9, the fill above "
                        "which popviz analyse warns: MEM003)")
    p.add_argument("--calibrate", metavar="EMULATED",
                   help="REPORT is a real profile without per-layer costs: spread its measured "
                        "per-stage cycles and memory over the layers of EMULATED (an emulated report "
                        "of the same model and split) in the proportions the emulator gives")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the plan as JSON (docs/plan.md)")
    fmt.add_argument("--markdown", action="store_true", help="print the plan as Markdown")
    p.add_argument("--write", metavar="FILE", type=path_arg,
                   help="also write the proposed split as a plan file (for --split FILE); never "
                        "over an existing file unless --force")
    p.add_argument("--force", action="store_true", help="replace the --write FILE if it exists")


def _pick(reports: ReportSet, engine: str | None, what: str, need_layers: bool) -> Report:
    from popviz.analysis.layer_plan import NO_LAYERS
    from popviz.errors import UsageError

    if engine is not None:
        found = [r for r in reports if engine in (r.name, r.label)]
        if not found:
            raise UsageError(f"{what} has no engine {engine!r}; it has "
                             + ", ".join(r.label for r in reports))
        if len(found) > 1:
            raise UsageError(f"{what} has several engines named {engine!r} (instances "
                             + ", ".join(r.label for r in found) + "): pass --engine INSTANCE/NAME")
        return found[0]
    if len(reports) == 1:
        return reports[0]
    candidates = [r for r in reports if r.layers is not None] if need_layers else list(reports)
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise UsageError(f"{what}: none of its engines ({', '.join(r.label for r in reports)}) has "
                         + NO_LAYERS.removeprefix("has no "))
    training = [r for r in candidates if r.config is not None and r.config.mode == "training"]
    if len(training) == 1:  # a run with validation: the split is the training model's, which PopTorch shares
        import sys

        from popviz.escape import term

        others = ", ".join(r.label for r in candidates if r is not training[0])
        from popviz.ui import wrap_line

        print("\n".join(wrap_line(term(f"popviz plan: planning {training[0].label}, the run's training engine "
                                        f"({others} too: --engine NAME)"))), file=sys.stderr)
        return training[0]
    raise UsageError(f"{what} has several engines ({', '.join(r.label for r in candidates)}): "
                     "choose one with --engine NAME")


def _run_record(report: Report) -> dict | None:
    """The popviz-run.json of the capture that holds ``report`` (:func:`record_of`)."""
    from popviz.sources.runrecord import record_of

    return record_of(report.path) if report.path is not None else None


def recorded_in(report: Report) -> str | None:
    """The run record the re-run command comes from (shown beside the command), if any."""
    from popviz.errors import shown

    doc = _run_record(report)
    cmd = doc.get("command") if doc else None
    if doc and isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd):
        return shown(doc["_file"])
    return None


def rerun_command(report: Report, split_arg: str, plan_path: str | None = None) -> str:
    """The command that re-runs the model under the emulator with the proposed split (from the
    capture's run record: the command, in its working directory)."""
    from popviz.errors import shown

    doc = _run_record(report)
    cmd = doc.get("command") if doc else None
    if not (isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd)):
        return (f"popviz capture --emulate --calls 1 --split {shlex.quote(split_arg)} -o DIR -- "
                "python YOUR_SCRIPT.py  # the command that made this report is not recorded")
    if doc.get("started_by") == "popviz.capture()":  # sys.argv of a script
        cmd = [Path(sys.executable).name if cmd[0].endswith(".py") else "python", *cmd]
    root = Path(doc["_root"])
    # beside the capture (runs/bert -> runs/bert-split), except beside popviz's own samples, which
    # the tests and `popviz analyse sample_reports` read: those go to the current directory
    here_instead = root.parent.name == "sample_reports" and (root.parent / "regenerate.py").is_file()
    out = (Path(root.name + "-split") if here_instead else root.with_name(root.name + "-split"))
    k = 2
    while out.exists():
        out = out.with_name(f"{root.name}-split{k}")
        k += 1
    cwd = doc.get("cwd")
    here = Path.cwd().resolve()
    scripts = [a for a in cmd[1:] if a.endswith(".py") and not Path(a).is_absolute()]
    # Run it from here when the script is found from here (a sample or a report from another
    # checkout of the same project); else from the recorded directory, when it exists.
    found_here = bool(scripts) and (here / scripts[0]).is_file()
    elsewhere = (isinstance(cwd, str) and bool(cwd) and not found_here and Path(cwd).is_dir()
                 and Path(cwd).resolve() != here)
    if plan_path is not None:  # a file: as the command's working directory finds it
        split_arg = str(Path(plan_path).resolve()) if elsewhere else shown(plan_path)
    out_text = str(out.resolve()) if elsewhere else shown(out)
    env = doc.get("environment")
    calls = env.get("POPVIZ_EMULATOR_CALLS") if isinstance(env, dict) else None
    # the split's estimate needs one call; a capture that ran N keeps N (its loop figures then compare)
    calls_arg = f" --calls {int(calls)}" if isinstance(calls, str) and calls.strip().isdigit() else " --calls 1"
    line = (f"popviz capture --emulate{calls_arg} --split {shlex.quote(split_arg)} -o {shlex.quote(out_text)} -- "
            + shlex.join(cmd))
    if elsewhere:
        return f"cd {shlex.quote(cwd)} && {line}"
    if scripts and not found_here:
        return f"{line}  # from the directory holding {scripts[0]} (recorded: {cwd})"
    return line


def run(args: argparse.Namespace) -> int:
    from popviz import plan_file
    from popviz.analysis.calibrate import calibrate
    from popviz.analysis.layer_plan import code_dict, make_plan
    from popviz.errors import UsageError, shown
    from popviz.render import plan as render
    from popviz.sources.discover import load
    from popviz.ui import status

    if args.write:
        from popviz.fileio import check_output

        check_output(args.write, args.force)
    with status(f"reading {args.path}"):
        reports = load(args.path, single_run=True)  # one run: its engines, not an older one's
    if args.calibrate:
        report = _pick(reports, args.engine, shown(args.path), need_layers=False)
        if report.layers is not None:
            raise UsageError(f"{report.label} already has per-layer costs ({report.layers.source}); "
                             "--calibrate is for a real profile without them")
        with status(f"reading {args.calibrate}"):
            estimates = load(args.calibrate)
        same = [r for r in estimates if r.name == report.name and r.layers is not None]
        estimate = same[0] if len(same) == 1 else _pick(estimates, None, shown(args.calibrate), True)
        report = calibrate(report, estimate)
    else:
        report = _pick(reports, args.engine, shown(args.path), need_layers=True)
    if report.layers is not None and not any(x.fwd_cycles or x.bwd_cycles for x in report.layers):
        raise UsageError(f"{report.label}: every layer of its layer table costs 0 cycles, so there is nothing "
                         "to balance; is the report from a run that executed? capture it again")
    with status("planning"):
        plan: LayerPlan = make_plan(report, ipus=args.ipus, max_ipus=args.max_ipus,
                                    headroom_frac=args.headroom)
    rerun = written = source = None
    if plan.proposed is not None:
        split_arg = code_dict(plan)["split_argument"]
        if args.write:
            plan_file.write_plan(plan.plan_file(), args.write, force=args.force)
            written = shown(args.write)
            split_arg = written
        rerun = rerun_command(report, split_arg, args.write)
        source = recorded_in(report)
    if args.json:
        sys.stdout.write(render.to_json(plan, rerun, written, rerun_from=source) + "\n")
    elif args.markdown:
        import shutil

        from popviz.ui import markdown_fitted

        width = min(shutil.get_terminal_size().columns, 120)  # as the console view
        sys.stdout.write(markdown_fitted(render.markdown(plan, rerun, written, rerun_from=source, width=width), width))
    else:
        import shutil

        width = min(shutil.get_terminal_size().columns, 120)
        sys.stdout.write("\n".join(render.text_lines(plan, rerun, written, width, rerun_from=source)) + "\n")
    if plan.proposed is None:
        if args.write:
            print(f"popviz: no split fits: {shown(args.write)} not written", file=sys.stderr)
        return 1
    return 0


