"""Scale benchmark: load, analyse and end-to-end time and peak RSS against a bare pyarrow read.

    python benchmarks/bench_scale.py                 # the standard grid (the 1e7-row case included)
    python benchmarks/bench_scale.py --quick         # without the 1e7-row case
    python benchmarks/bench_scale.py --repeat 3
    python benchmarks/bench_scale.py --pod64 100000000 --liveness-steps 1000000 --dir /tmp/scale

``--pod64 ROWS`` measures one POD64 report instead of the grid: 64 IPUs x 1,472 tiles of memory,
``ROWS`` execution rows over ``--runs`` runs (run 0 copies the weights from the host, the others
are calls) written in row groups without ever holding the table, and ``--liveness-steps`` liveness
steps for every IPU. Its bare read is what any reader must do with the same tables: the memory,
runs and liveness tables read whole, and ``execution.parquet`` through
``ParquetFile.iter_batches`` over the columns popviz's analysis reads (run, ipu, program,
program_type, cycles), every batch's columns turned into NumPy arrays (the categorical ones as
their dictionary indices). popviz is timed and its peak RSS taken for ``popviz.load`` +
``analyse`` and for that plus every figure ``popviz plot`` draws (PNG files), each in a fresh
process; the bundle is kept in ``--dir`` for reuse (``--keep``). Peak RSS is the child's own
``VmHWM`` (``ru_maxrss`` keeps the high-water mark of the process that forked it across
``exec``, here the one that built the bundle).

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


POD_PROGRAMS = ([f"stage{k}/forward" for k in range(64)] + [f"stage{k}/backward" for k in range(64)]
                + ["optimizer/weight_update", "sync", "global_exchange", "inter_ipu_copy",
                   "input/fromHost", "output/toHost", "RB_3/remote_load", "weightsFromHost"])
POD_TYPES = ("OnTileExecute",) * 128 + ("OnTileExecute", "Sync", "GlobalExchange", "DoExchange",
                                         "StreamCopyMid", "StreamCopyMid", "StreamCopyMid", "StreamCopyMid")
POD_CYCLE = [k for k in range(128)] + [128, 129, 130, 131, 132, 133, 134, 129, 130, 129]
"""One IPU's program sequence in a call (indices into POD_PROGRAMS), repeated."""


def build_pod64(directory: Path, rows: int, n_runs: int, liveness_steps: int) -> None:
    """A POD64 bundle written piecewise: memory (every tile) and liveness via write_bundle, then
    execution.parquet in row groups of 2**20 rows from generated blocks (never the whole table)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from popviz import testing
    from popviz.model import LivenessTable
    from popviz.sources.bundle import BUNDLE_ID_KEY, METADATA_FILE, RUNS_FILE, STEPS_FILE, write_bundle

    n_ipus = 64
    report = testing.pipeline_report([100_000 + 1_000 * i for i in range(n_ipus)], execution=False,
                                     gradient_accumulation=128, device_iterations=4)
    rng = np.random.default_rng(0)
    live = (rng.integers(0, 2**24, size=(liveness_steps, n_ipus), dtype="int64")  # up to ~400 MiB live
            + np.linspace(0, 3 * 2**27, liveness_steps, dtype="int64")[:, None])
    progs = pd.Categorical.from_codes(np.arange(liveness_steps) % len(POD_PROGRAMS), categories=POD_PROGRAMS)
    report = report.replace(liveness=LivenessTable(programs=progs, total_bytes=live.sum(axis=1), ipu_bytes=live,
                                                   ipus=tuple(range(n_ipus)),
                                                   always_live_bytes={k: 3 * 2**26 for k in range(n_ipus)}))
    del live
    write_bundle(report, directory)
    meta = json.loads((directory / METADATA_FILE).read_text())
    bundle_id = meta["bundle_id"].encode()
    cycle = np.asarray(POD_CYCLE, dtype="int64")
    programs = pa.array(POD_PROGRAMS)
    types = sorted(set(POD_TYPES))
    type_of = np.array([types.index(t) for t in POD_TYPES], dtype="int8")
    schema = pa.schema([("run", pa.int32()), ("step", pa.int32()),
                        ("program", pa.dictionary(pa.int16(), pa.string())),
                        ("program_type", pa.dictionary(pa.int8(), pa.string())),
                        ("ipu", pa.int32()), ("cycles", pa.int64())],
                       metadata={BUNDLE_ID_KEY: bundle_id})
    per_run = rows // n_runs
    block = 2**20
    weights = 64 * 8  # run 0: weights from the host on every IPU, then the calls
    with pq.ParquetWriter(directory / STEPS_FILE, schema, compression="zstd") as writer:
        for lo in range(0, rows, block):
            i = np.arange(lo, min(lo + block, rows), dtype="int64")
            run = np.minimum(i // per_run, n_runs - 1)
            local = i - run * per_run
            step = local // n_ipus
            seq = cycle[step % len(cycle)]
            prog = np.where((run == 0) & (local < weights), len(POD_PROGRAMS) - 1, seq)
            prog = np.where((run == 0) & (local >= weights), 132, prog)  # run 0: copies only
            ptype = type_of[prog]
            ipu = local % n_ipus
            cycles = 100 + (i * 2654435761 % 4000) + 50 * (prog < 64)
            writer.write_table(pa.table({
                "run": pa.array(run.astype("int32")), "step": pa.array(step.astype("int32")),
                "program": pa.DictionaryArray.from_arrays(pa.array(prog.astype("int16")), programs),
                "program_type": pa.DictionaryArray.from_arrays(pa.array(ptype), pa.array(types)),
                "ipu": pa.array(ipu.astype("int32")), "cycles": pa.array(cycles)}, schema=schema))
    runs = pa.table({"run": pa.array(np.arange(n_runs, dtype="int32")),
                     "name": pa.array([f"run{r}" for r in range(n_runs)]),
                     "duration_seconds": pa.array(np.full(n_runs, np.nan))})
    pq.write_table(runs.replace_schema_metadata({BUNDLE_ID_KEY: bundle_id}), directory / RUNS_FILE)
    meta["execution"] = {"steps_file": STEPS_FILE, "runs_file": RUNS_FILE, "rows": rows}
    (directory / METADATA_FILE).write_text(json.dumps(meta, indent=1) + "\n")


POD_BARE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import pyarrow.parquet as pq
d = sys.argv[1]
for name in ("memory.parquet", "runs.parquet", "liveness.parquet"):
    t = pq.ParquetFile(d + "/" + name).read()
    arrays = [c.to_numpy() for c in t.columns]
    del t, arrays
rows = 0
for batch in pq.ParquetFile(d + "/execution.parquet").iter_batches(
        batch_size=2**20, columns=["run", "ipu", "program", "program_type", "cycles"]):
    for name in batch.schema.names:
        col = batch.column(name)
        (col.indices if hasattr(col, "indices") else col).to_numpy()
    rows += batch.num_rows
t1 = time.perf_counter()
hwm = [int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmHWM:")][0]
print(json.dumps({"seconds": t1 - t0, "rows": rows, "rss": hwm}))
"""

POD_POPVIZ = r"""
import json, resource, sys, time, warnings
t0 = time.perf_counter()
import popviz
from popviz.analysis import analyse
from popviz.model import ExecutionTable
reports = popviz.load(sys.argv[1])
t1 = time.perf_counter()
result = analyse(reports)
t2 = time.perf_counter()
out = {"load": t1 - t0, "analyse": t2 - t1}
if len(sys.argv) > 2:
    from popviz import plot
    from popviz.plot.files import write_figures
    jobs = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] != "0" else None
    done = write_figures(reports[0], {n: sys.argv[2] + "/" + n + ".png" for n in plot.FIGURE_NAMES}, force=True,
                         jobs=jobs)  # as popviz plot draws and writes them
    out["plot"] = time.perf_counter() - t2
    out["figures"] = sorted(n for n, f in done if f is None)
    out["skipped"] = {n: str(f) for n, f in done if f is not None}
    out["children_cpu"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime + resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime
    out["children_rss"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
e = reports[0].execution
out.update(on_disk=e.on_disk, materialised=ExecutionTable.materialisations,
           findings=sorted(f.code for eng in result.engines for f in eng.findings),
           rss=[int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmHWM:")][0])
print(json.dumps(out))
"""


def pod64(args: argparse.Namespace) -> int:
    directory = Path(args.dir) / f"pod64-{args.pod64}-{args.runs}-{args.liveness_steps}"
    if not (directory / "popviz-report.json").is_file():
        t0 = time.perf_counter()
        if not args.build_only:  # built in a child, so the measuring process stays small
            subprocess.run([sys.executable, __file__, "--pod64", str(args.pod64), "--runs", str(args.runs),
                            "--liveness-steps", str(args.liveness_steps), "--dir", args.dir, "--build-only"],
                           check=True)
        else:
            build_pod64(directory, args.pod64, args.runs, args.liveness_steps)
        print(f"built {directory} in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.build_only:
        return 0
    figs = Path(args.dir) / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    bare = [child(POD_BARE, directory) for _ in range(args.repeat)]
    print("bare", bare, flush=True)
    pv = [child(POD_POPVIZ, directory) for _ in range(args.repeat)]
    print("popviz", pv, flush=True)
    plotted = [child(POD_POPVIZ, directory, str(figs), str(args.plot_jobs)) for _ in range(args.repeat)]
    print("popviz+plot", plotted, flush=True)
    med = statistics.median
    b = med(r["seconds"] for r in bare)
    la = med(r["load"] + r["analyse"] for r in pv)
    lap = med(r["load"] + r["analyse"] + r["plot"] for r in plotted)
    print(f"| rows | runs | liveness steps | bare s | load s | analyse s | load+analyse s | +plot s "
          f"| ratio | ratio with plot | bare RSS MiB | popviz RSS MiB | with plot MiB |\n|---:|---:|---:|---:|---:"
          f"|---:|---:|---:|---:|---:|---:|---:|---:|\n| {args.pod64:,} | {args.runs:,} | {args.liveness_steps:,} "
          f"| {b:.2f} | {med(r['load'] for r in pv):.2f} | {med(r['analyse'] for r in pv):.2f} | {la:.2f} "
          f"| {lap:.2f} | {la / b:.2f} | {lap / b:.2f} | {med(r['rss'] for r in bare) / 2**20:.0f} "
          f"| {med(r['rss'] for r in pv) / 2**20:.0f} | {med(r['rss'] for r in plotted) / 2**20:.0f} |")
    if not args.keep:
        import shutil

        shutil.rmtree(directory)
    return 0


def child(code: str, directory: Path, *extra: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, str(directory), *extra], capture_output=True,
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
    parser.add_argument("--pod64", type=int, metavar="ROWS", help="one POD64 report of ROWS execution rows")
    parser.add_argument("--runs", type=int, default=1000, help="runs of the POD64 report (default 1000)")
    parser.add_argument("--liveness-steps", type=int, default=1_000_000, help="liveness steps (default 10⁶)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the POD64 bundle is written")
    parser.add_argument("--keep", action="store_true", help="keep the POD64 bundle afterwards")
    parser.add_argument("--plot-jobs", type=int, default=0,
                        help="processes drawing the figures (default 0: as popviz plot, one per usable core)")
    parser.add_argument("--build-only", action="store_true", help="write the POD64 bundle and stop")
    args = parser.parse_args()
    if args.pod64:
        return pod64(args)
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
