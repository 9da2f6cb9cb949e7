#!/usr/bin/env python3
"""Time popviz.plot.timeline on a 64-IPU report with 10^6 execution rows (target: under 10 s).

    MPLBACKEND=Agg python benchmarks/bench_plot_timeline.py [--rows 1000000] [--ipus 64] [--repeat 3]

The report is one executor call built directly with the model classes: every IPU runs the same
cycle of forward, exchange, sync and host-copy steps. Prints the median draw time (figure built
and rendered to PNG in memory) and the steps per IPU.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import numpy as np
import pandas as pd

from popviz import plot, testing
from popviz.model import ExecutionTable, ModelConfig, Provenance, Report

PATTERN = [("stage/forward", "OnTileExecute", 4000), ("stage/backward", "OnTileExecute", 8000),
           ("interIpuCopy", "GlobalExchange", 600), ("sync", "Sync", 300), ("input/mid", "StreamCopyMid", 900)]


def build(rows: int, ipus: int) -> Report:
    per_ipu = rows // ipus
    names, types, cycles = zip(*PATTERN, strict=True)
    reps = -(-per_ipu // len(PATTERN))
    c = np.tile(np.array(cycles, dtype="int64"), reps)[:per_ipu]
    start = np.concatenate([[0], np.cumsum(c)[:-1]])
    steps = pd.DataFrame({
        "run": np.zeros(per_ipu * ipus, dtype="int32"),
        "step": np.tile(np.arange(per_ipu, dtype="int32"), ipus),
        "program": pd.Categorical(np.tile(np.tile(np.array(names), reps)[:per_ipu], ipus)),
        "program_type": pd.Categorical(np.tile(np.tile(np.array(types), reps)[:per_ipu], ipus)),
        "ipu": np.repeat(np.arange(ipus, dtype="int32"), per_ipu),
        "cycles": np.tile(c, ipus),
        "start_cycle": np.tile(start, ipus),
    })
    return Report(name="training", provenance=Provenance(source="bundle", estimated=False),
                  target=testing.make_target(num_ipus=ipus), execution=ExecutionTable(steps),
                  config=ModelConfig(mode="training"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--ipus", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    report = build(args.rows, args.ipus)
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        fig = plot.timeline(report)
        fig.savefig(io.BytesIO(), format="png", dpi=80)
        times.append(time.perf_counter() - started)
    print(f"timeline of {len(report.execution.steps):,} steps on {args.ipus} IPUs "
          f"({len(report.execution.steps) // args.ipus:,} per IPU): median {statistics.median(times):.2f} s "
          f"over {args.repeat} runs (target < 10 s)")


if __name__ == "__main__":
    main()
