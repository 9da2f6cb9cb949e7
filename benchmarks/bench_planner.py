"""Time popviz.analysis.planner.plan for 100 layers x 16 IPUs (every N in 1..16); prints the median.

    python benchmarks/bench_planner.py
"""

from __future__ import annotations

import statistics
import time

from popviz.analysis.planner import LayerCost, PlanSettings, explain_no_fit, plan


def main() -> None:
    layers = [LayerCost(f"layer{i}", 1000 + 37 * (i % 11), 2000, weight_bytes=5_000_000,
                        optimizer_bytes=10_000_000, activation_bytes=1_000_000,
                        temporary_bytes=2_000_000) for i in range(100)]
    layers[0] = LayerCost("embeddings", 500, 500, weight_bytes=60_000_000, pin="first")
    settings = PlanSettings(capacity_bytes=900 * 2**20)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        res = plan(layers, 16, settings)
        times.append(time.perf_counter() - t0)
    assert res.best is not None
    print(f"plan 100 layers x 16 IPUs (all N): median {statistics.median(times):.3f} s "
          f"over 5 runs; best N={len(res.best.stages)}, "
          f"bottleneck {res.best.bottleneck_cycles} cycles")
    # No split fits (IPUs of 100 MiB): the explanation searches the least-memory split and tries
    # every lever (more IPUs up to 64 included).
    tight = PlanSettings(capacity_bytes=100 * 2**20)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        why = explain_no_fit(layers, 16, tight)
        times.append(time.perf_counter() - t0)
    print(f"explain_no_fit 100 layers x 16 IPUs: median {statistics.median(times):.3f} s over 3 runs; "
          f"over by {why.overflow_bytes} bytes")


if __name__ == "__main__":
    main()
