"""The history database at size: appending runs, reading it back, the trends of `history show`
and the median of `compare --against-history`.

    python benchmarks/bench_history.py [--runs 1000] [--metrics 60] [--repeat 3]

Each run has two engines with METRICS metrics each (a 4-IPU pipeline has about 20); one in ten
runs steps. Prints the median of REPEAT timings of each operation and the file's size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from popviz.ci import history
from popviz.ci.baseline import EngineMetrics
from popviz.ci.trend import trends

NAMES = ["pipeline.cycles_per_micro_batch", "pipeline.imbalance_ratio", "pipeline.utilisation_pct"]


def metric_names(n: int) -> list[str]:
    names = list(NAMES)
    k = 0
    while len(names) < n:
        names += [f"memory.ipu{k}.used_bytes", f"memory.ipu{k}.used_pct", f"pipeline.stage{k}.cycles_per_micro_batch"]
        k += 1
    return names[:n]


def engines(i: int, names: list[str]) -> list[EngineMetrics]:
    level = 1000.0 * (1 + (i // 100) * 0.05)  # a step every 100 runs
    return [EngineMetrics(e, None, "pva", False, {"device_iterations": 4},
                          {m: level + j for j, m in enumerate(names)}) for e in ("training", "inference")]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--metrics", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    names = metric_names(args.metrics)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "history.db"
        start = time.perf_counter()
        for i in range(args.runs):
            history.add(db, engines(i, names), label=f"c{i}")
        fill = time.perf_counter() - start
        add = statistics.median(timed(lambda: history.add(db, engines(0, names))) for _ in range(args.repeat))
        read = statistics.median(timed(lambda: history.read(db, last=100)) for _ in range(args.repeat))
        h = history.read(db, last=100)
        show = statistics.median(timed(lambda: trends(h)) for _ in range(args.repeat))
        median = statistics.median(timed(lambda: history.median_side(db, 5)) for _ in range(args.repeat))
        size = db.stat().st_size + sum(p.stat().st_size for p in Path(tmp).glob("history.db-*"))
    print(f"{args.runs} runs x 2 engines x {args.metrics} metrics")
    print(f"  filling (one transaction per run): {fill:.2f} s, {fill / args.runs * 1e3:.1f} ms per run")
    print(f"  history add of one more run:        {add * 1e3:.1f} ms (median of {args.repeat})")
    print(f"  read the last 100 runs:             {read * 1e3:.1f} ms")
    print(f"  trends + steps of those 100 runs:   {show * 1e3:.1f} ms ({2 * args.metrics} series)")
    print(f"  median of the last 5 runs:          {median * 1e3:.1f} ms")
    print(f"  file size: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
