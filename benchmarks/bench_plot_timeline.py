#!/usr/bin/env python3
"""Time popviz.plot.timeline on a 64-IPU report with 10^6 execution rows (target: under 10 s).

    MPLBACKEND=Agg python benchmarks/bench_plot_timeline.py [--rows 1000000] [--ipus 64] [--repeat 3]
                                                            [--png timeline.png]

The report is made by ``popviz.testing.pipeline_report``: pipelined inference over ``--ipus``
stages (one per IPU, stage cycles varying by up to 6%, a small int32 input), with enough device
iterations that one
call has at least ``--rows`` execution steps (forward steps, syncs, inter-IPU copies, host
copies). Prints the steps, the time to build the report (not counted) and the median time to
draw the timeline and render it to PNG in memory.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

from popviz import plot, testing
from popviz.model import Report


def build(rows: int, ipus: int) -> Report:
    def make(d: int) -> Report:
        return testing.pipeline_report([1000 + 10 * (i % 7) for i in range(ipus)], name="inference",
                                       mode="inference", device_iterations=d, memory_level=None,
                                       tiles_per_ipu=16, inputs={"tokens": ((16, 128), "int32")},
                                       host_wait_cycles=200)

    # steps grow linearly with D: measure two small calls, then size the real one
    a, b = (len(make(d).execution.steps) for d in (20, 40))
    per_d = (b - a) / 20
    d = max(1, int((rows - (a - 20 * per_d)) / per_d) + 1)
    report = make(d)
    while len(report.execution.steps) < rows:
        d += max(1, int((rows - len(report.execution.steps)) / per_d) + 1)
        report = make(d)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--ipus", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--png", help="also write the figure to this file (to look at it)")
    args = ap.parse_args()
    started = time.perf_counter()
    report = build(args.rows, args.ipus)
    built = time.perf_counter() - started
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        fig = plot.timeline(report)
        fig.savefig(io.BytesIO(), format="png", dpi=80)
        times.append(time.perf_counter() - started)
    if args.png:
        fig.savefig(args.png, format="png", dpi=110)
    steps = len(report.execution.steps)
    print(f"timeline of {steps:,} steps on {args.ipus} IPUs (D = {report.cfg.device_iterations:,}; report built "
          f"in {built:.1f} s): median {statistics.median(times):.2f} s over {args.repeat} runs "
          f"(min {min(times):.2f} s, max {max(times):.2f} s; target < 10 s)")


if __name__ == "__main__":
    main()
