"""Command-line options more than one subcommand takes (``popviz capture``, ``emulate`` and
``plan``), so that no subcommand imports another."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    """An argparse type: a whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_layer_arguments(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """``--layer-depth`` and ``--split`` (also used by ``popviz capture --emulate``)."""
    p.add_argument("--layer-depth", metavar="N", type=positive,
                   help=f"{prefix}module depth of the report's per-layer table (1 = the model's children; "
                        "default: the shallowest depth at which the model repeats)")
    p.add_argument("--split", metavar="SPEC",
                   help=f"{prefix}re-place the script's blocks without editing it: layers_per_ipu=3,7,7,7 "
                        "(movable layers per IPU, in order) or a plan file from popviz plan --write")


def layer_env(args: argparse.Namespace) -> dict[str, str]:
    """The emulator's environment variables for ``--layer-depth`` and ``--split`` (the split is
    checked here, and a plan file's path made absolute)."""
    from pathlib import Path

    from popviz.emulator.structure import DEPTH_ENV, SPLIT_ENV
    from popviz.plan_file import is_counts, parse_split

    env = {}
    if getattr(args, "layer_depth", None) is not None:
        env[DEPTH_ENV] = str(args.layer_depth)
    spec = getattr(args, "split", None)
    if spec is not None:
        plan = parse_split(spec)  # a bad value or file fails here, before the script starts
        env[SPLIT_ENV] = plan.source if is_counts(spec) else str(Path(spec.strip()).resolve())
    return env
