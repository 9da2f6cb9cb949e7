"""The issue-14 check at full size: plan a BERT-Large-sized pipeline from its emulated layers, then
re-run it with the plan through --split and compare.

    python benchmarks/plan_bert_large.py [--keep DIR]

Runs ``popviz capture --emulate --calls 1`` on ``examples/bert_pipeline.py --mlm --half
--offload-optimizer --layers 24 --hidden 1024 --heads 16`` (seq 128, micro-batch 4, G=16; the
embeddings and the tied MLM projection on IPU 0; the even split 6/6/6/6), plans 4 IPUs with
``popviz.analysis.layer_plan.make_plan`` (what ``popviz plan`` runs: 90% headroom, the code bytes
measured on the IPUs, one extra forward stage for the tied projection's return to IPU 0, the
time of G micro-batches through the pipeline), writes the plan file, captures again with
``--split plan.json``, and prints per-IPU cycles and memory: current, predicted, re-run. Takes
about a minute here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ["--mlm", "--half", "--offload-optimizer", "--layers", "24", "--hidden", "1024", "--heads", "16"]


def capture(out: Path, *extra: str) -> float:
    started = time.perf_counter()
    cmd = [sys.executable, "-m", "popviz", "capture", "-o", str(out), "--emulate", "--calls", "1", *extra, "--",
           sys.executable, str(ROOT / "examples" / "bert_pipeline.py"), *MODEL]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
    # A split that does not fit fails its compile like PopTorch's (exit 1) and leaves a memory-only
    # report with the layers (the even split fits since recomputation is modelled).
    if proc.returncode not in (0, 1) or not (out / "popviz-run.json").exists():
        raise SystemExit(f"capture into {out} failed with exit code {proc.returncode}")
    return time.perf_counter() - started


def per_ipu(report) -> dict[int, int]:
    out: dict[int, int] = {}
    for x in report.layers:
        out[x.ipu] = out.get(x.ipu, 0) + x.fwd_cycles + x.bwd_cycles
    return out


def mib(values) -> str:
    return " / ".join(f"{v / 2**20:,.0f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", help="write the runs here (default: a temporary directory)")
    args = parser.parse_args()
    import popviz
    from popviz.analysis.layer_plan import make_plan
    from popviz.plan_file import write_plan

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.keep or tmp)
        base.mkdir(parents=True, exist_ok=True)
        seconds = capture(base / "even")
        even = popviz.load(base / "even")[0]
        capacity = even.target.bytes_per_tile * even.target.tiles_per_ipu
        started = time.perf_counter()
        layer_plan = make_plan(even, ipus=4)  # what `popviz plan` prints
        seconds_plan = time.perf_counter() - started
        if layer_plan.proposed is None:
            raise SystemExit("no split fits")
        best = layer_plan.proposed
        plan = layer_plan.plan_file()
        path = write_plan(plan, base / "plan.json")
        seconds_planned = capture(base / "planned", "--split", str(path))
        planned = popviz.load(base / "planned")[0]

    print(f"BERT-Large-sized encoder, {len(even.layers)} layers in the table ({even.layers.notes[0]})")
    print(f"capture --emulate --calls 1: {seconds:.0f} s even, {seconds_planned:.0f} s planned")
    print(f"make_plan (popviz plan): {seconds_plan:.2f} s; predicted throughput "
          f"{100 * (layer_plan.throughput_change_frac or 0):+.1f}% ({layer_plan.settings.budget_bytes / 2**20:,.0f} "
          f"MiB budget of {capacity / 2**20:,.0f} MiB)")
    cur = per_ipu(even)
    print(f"even split     cycles/micro-batch {[cur[i] for i in sorted(cur)]}, memory (MiB) "
          f"{mib(even.memory.frame['total_bytes_including_gaps'])}")
    print(f"plan {plan.describe()}: predicted cycles {[s.cycles for s in best.stages]}, memory (MiB) "
          f"{mib(s.memory_bytes for s in best.stages)}")
    new = per_ipu(planned)
    worst = max(abs(new[i] - s.cycles) / s.cycles for i, s in enumerate(best.stages))
    print(f"re-run --split cycles/micro-batch {[new[i] for i in sorted(new)]} (largest difference "
          f"{worst:.4%}), memory (MiB) {mib(planned.memory.frame['total_bytes_including_gaps'])}")


if __name__ == "__main__":
    main()
