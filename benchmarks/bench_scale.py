"""Scale benchmark: load, analyse and end-to-end time and peak RSS against a bare pyarrow read.

    python benchmarks/bench_scale.py                 # the standard grid (the 1e7-row case included)
    python benchmarks/bench_scale.py --quick         # without the 1e7-row case
    python benchmarks/bench_scale.py --repeat 3

For each shape (IPUs, execution rows, runs) it writes a bundle with full per-tile memory (every
tile of every IPU, 11 categories) and an execution table of that many rows spread over that many
runs, then measures, each in a fresh process and as the median of ``--repeat`` runs:

* **bare**: ``pyarrow.parquet.ParquetFile(...).read()`` of the bundle's three tables plus
  ``to_pandas()`` (the least any reader must do), its time and peak RSS;
* **load** and **analyse**: ``popviz.load(dir)`` then ``popviz.analysis.analyse``;
* **e2e**: ``python -m popviz analyse --json DIR`` from process start to the JSON written.

Ratios are load+analyse over bare time, and popviz's peak RSS over the bare read's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = [  # (IPUs, execution rows, runs)
    (1, 10_000, 10),
    (16, 100_000, 1_000),
    (16, 1_000_000, 1_000),
    (64, 1_000_000, 10_000),
    (64, 1_000_000, 100_000),
    (64, 3_000_000, 100_000),
    (64, 10_000_000, 100_000),
]

BARE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import pyarrow.parquet as pq
for name in ("memory.parquet", "execution.parquet", "runs.parquet"):
    pq.ParquetFile(sys.argv[1] + "/" + name).read().to_pandas()
t1 = time.perf_counter()
print(json.dumps({"seconds": t1 - t0, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

POPVIZ = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import popviz
from popviz.analysis import analyse
reports = popviz.load(sys.argv[1])
t1 = time.perf_counter()
result = analyse(reports)
t2 = time.perf_counter()
print(json.dumps({"load": t1 - t0, "analyse": t2 - t1,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def build(directory: Path, n_ipus: int, rows: int, n_runs: int) -> None:
    """A bundle of a pipelined model over ``n_ipus`` IPUs: per-tile memory for every tile, and
    ``rows`` execution steps (interleaved over the IPUs, program types in turn) over ``n_runs``."""
    import numpy as np
    import pandas as pd

    from popviz import testing
    from popviz.model import PROGRAM_TYPES, ExecutionTable
    from popviz.sources.bundle import write_bundle

    report = testing.pipeline_report([100_000 + 1_000 * i for i in range(n_ipus)], execution=False,
                                     gradient_accumulation=max(2 * n_ipus, 16), device_iterations=4)
    i = np.arange(rows, dtype="int64")
    run = (i * n_runs // rows).astype("int32")
    first = np.searchsorted(run, run)  # index of each run's first row
    types = np.array(PROGRAM_TYPES)
    programs = np.array([f"stage{k}/forward" for k in range(8)] + ["sync", "input/mid"])
    steps = pd.DataFrame({
        "run": run,
        "step": ((i - first) // n_ipus).astype("int32"),
        "program": pd.Categorical.from_codes((i // n_ipus) % len(programs), categories=programs),
        "program_type": pd.Categorical.from_codes((i // n_ipus) % len(types), categories=types),
        "ipu": (i % n_ipus).astype("int32"),
        "cycles": (i % 5000 + 100).astype("int64"),
    })
    runs = pd.DataFrame({"run": np.arange(n_runs, dtype="int32"),
                         "name": [f"run{r}" for r in range(n_runs)],
                         "duration_seconds": np.full(n_runs, np.nan)})
    write_bundle(report.replace(execution=ExecutionTable(steps, runs)), directory)


def child(code: str, directory: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True,
                         text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout)


def e2e(directory: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "popviz", "analyse", "--json", str(directory)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median quoted)")
    parser.add_argument("--quick", action="store_true", help="leave out shapes above 3M rows")
    args = parser.parse_args()
    shapes = [s for s in SHAPES if not (args.quick and s[1] > 3_000_000)]
    print("| IPUs | rows | runs | bare read s | load s | analyse s | e2e s | (load+analyse)/bare "
          "| bare RSS MiB | popviz RSS MiB | RSS ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n_ipus, rows, n_runs in shapes:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / "training"
            build(d, n_ipus, rows, n_runs)
            bare = [child(BARE, d) for _ in range(args.repeat)]
            pv = [child(POPVIZ, d) for _ in range(args.repeat)]
            ends = [e2e(d) for _ in range(args.repeat)]
        med = statistics.median
        b_s, b_rss = med(r["seconds"] for r in bare), med(r["rss"] for r in bare)
        load, ana = med(r["load"] for r in pv), med(r["analyse"] for r in pv)
        rss = med(r["rss"] for r in pv)
        print(f"| {n_ipus} | {rows:,} | {n_runs:,} | {b_s:.2f} | {load:.2f} | {ana:.2f} | "
              f"{med(ends):.2f} | {(load + ana) / b_s:.2f} | {b_rss / 2**20:.0f} | {rss / 2**20:.0f} | "
              f"{rss / b_rss:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
