"""How fast and how lean is loading a big report? Prints medians over repeated loads.

    python benchmarks/bench_load.py [--steps 2000000] [--repeat 5]

Builds a bundle shaped like a large real profile (4 Mk2 IPUs x 1472 tiles of memory with 11
categories, and an execution table of --steps rows), then times ``popviz.load`` (which reads
and validates every table) and, once analyses exist, ``popviz.analysis.analyse``. Peak RSS is
measured in a fresh subprocess per phase, so earlier phases do not hide later ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
ti = time.perf_counter()
import popviz
import pandas, pyarrow.parquet  # imported lazily by load(); timed apart
from popviz.analysis import analyse
t0 = time.perf_counter()
reports = popviz.load(sys.argv[1])
t1 = time.perf_counter()
result = analyse(reports)
t2 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"import_seconds": t0 - ti, "load_seconds": t1 - t0, "analyse_seconds": t2 - t1, "peak_rss_bytes": rss,
                  "analyses": result.analyses}))
"""


def build(directory: Path, steps: int) -> int:
    import numpy as np
    import pandas as pd

    from popviz import testing
    from popviz.model import ExecutionTable
    from popviz.sources.bundle import write_bundle

    report = testing.pipeline_report([400_000, 380_000, 380_000, 610_000], execution=False,
                                     gradient_accumulation=64, device_iterations=16)
    n_ipus = 4
    per_ipu = steps // n_ipus
    step_index = np.repeat(np.arange(per_ipu, dtype="int32"), n_ipus)
    kinds = np.array(["OnTileExecute", "DoExchange", "GlobalExchange", "StreamCopyBegin",
                      "StreamCopyMid", "StreamCopyEnd", "Sync"])
    programs = np.array([f"stage{i}/forward" for i in range(4)] + ["interIpuCopy", "input/mid", "sync"])
    cycles = (np.arange(per_ipu * n_ipus, dtype="int64") % 5000) + 100
    frame = pd.DataFrame({
        "run": np.zeros(per_ipu * n_ipus, dtype="int32"),
        "step": step_index,
        "program": pd.Categorical.from_codes(step_index % len(programs), categories=programs),
        "program_type": pd.Categorical.from_codes(step_index % len(kinds), categories=kinds),
        "ipu": np.tile(np.arange(n_ipus, dtype="int32"), per_ipu),
        "cycles": cycles,
        "start_cycle": pd.array(np.cumsum(cycles), dtype="Int64"),
    })
    write_bundle(report.replace(execution=ExecutionTable(frame)), directory / "training")
    return sum(p.stat().st_size for p in (directory / "training").iterdir())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        size = build(Path(tmp), args.steps)
        runs = []
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, "-c", CHILD, tmp], capture_output=True, text=True,
                                 check=True)
            runs.append(json.loads(out.stdout))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "popviz", "analyse", tmp, "--json"], check=True,
                       capture_output=True)
        cli = time.perf_counter() - t0
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("import_seconds", "load_seconds", "analyse_seconds", "peak_rss_bytes")}
    print(f"bundle: {args.steps:,} execution rows + 5,888 tile rows, {size / 2**20:.1f} MiB on disk")
    print(f"analyses run: {', '.join(runs[0]['analyses']) or '(none registered)'}")
    print(f"imports  median {med['import_seconds']:.3f} s (pandas, pyarrow) over {args.repeat} runs")
    print(f"load     median {med['load_seconds']:.3f} s")
    print(f"analyse  median {med['analyse_seconds']:.3f} s")
    print(f"peak RSS median {med['peak_rss_bytes'] / 2**20:.0f} MiB "
          f"({med['peak_rss_bytes'] / args.steps:.0f} bytes per execution row, interpreter included)")
    print(f"`popviz analyse --json` end to end: {cli:.2f} s (one run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
