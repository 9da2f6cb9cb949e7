"""How long does reading a POD-scale profile.pop through the libpva adapter take?

    python benchmarks/bench_pva_read.py [--ipus 64] [--steps 100000] [--repeat 3]

Writes a profile for the libpva test double (tests/fake_pva: libpva's documented names, objects
built on access as libpva does) of a Mk2 POD64: --ipus × 1472 tiles with nine memory categories,
and --steps execution steps in 10 runs, each step busy on about half the IPUs (start cycles on
each). Then, in a fresh subprocess per repeat, times ``pva.openReport`` plus reading every value the adapter
reads, the way it reads them (the part spent in ``pva`` itself: every tile's fields and
categories, every step's program and per-IPU cycles, the start of every busy IPU), and ``popviz.sources.pva.read_profile`` (the adapter: the same
walk plus building the tables), then the read plus every analysis and the timeline's table
(``analyse``). Stream-copy steps carry their bytes (``dataIn``/``dataOut``), which the walk reads
too. Prints medians, the adapter's own share and the analysed run against the bare walk. Target: reading under
30 s, most of it in ``pva``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKE_PVA = ROOT / "tests" / "fake_pva"
TILES_PER_IPU = 1472

CHILD = r"""
import json, resource, sys, time
from operator import attrgetter
sys.path.insert(0, sys.argv[2])
import pva
mode, path = sys.argv[1], sys.argv[3]
t0 = time.perf_counter()
if mode == "walk":  # what any reader must pay inside pva: every value the adapter reads, once
    r = pva.openReport(path)
    get = attrgetter("total.includingGaps", "total.excludingGaps", "alwaysLiveBytes",
                     "notAlwaysLiveBytes", "overflowed.includingGaps")
    names = sorted(n for n in dir(r.compilation.ipus[0].tiles[0].memory.category) if not n.startswith("_"))
    for ipu in r.compilation.ipus:
        for tile in ipu.tiles:
            m = tile.memory
            get(m)
            c = m.category
            for n in names:
                getattr(c, n).total
    from itertools import compress
    cyc, start = attrgetter("cycles"), attrgetter("activeCycles.cyclesFrom.max")
    data = attrgetter("dataIn", "dataOut")
    for run in r.execution.runs:
        for step in run.steps:
            kind = step.program.type
            step.program.name
            ipus = step.ipus
            cycles = list(map(cyc, ipus))
            list(map(start, compress(ipus, cycles)))
            if kind.name.startswith("StreamCopy"):  # the bytes each stream copy moved
                list(map(data, compress(ipus, cycles)))
    rows = None
elif mode == "analyse":  # read, then every analysis and the timeline plot's table
    import popviz
    from popviz.model import ReportSet
    from popviz.sources.pva import read_profile
    report = read_profile(path)
    result = popviz.analyse(ReportSet([report]))
    report.steps()
    rows = [len(report.memory.frame), report.execution.num_rows]
else:
    from popviz.sources.pva import read_profile
    report = read_profile(path)
    rows = [len(report.memory.frame), report.execution.num_rows]
t1 = time.perf_counter()
# VmHWM: this process's own peak (ru_maxrss keeps the forking parent's across exec)
rss = [int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmHWM:")][0]
print(json.dumps({"seconds": t1 - t0, "peak_rss_bytes": rss, "rows": rows}))
"""


def build(path: Path, ipus: int, steps: int, runs: int = 10) -> None:
    import numpy as np

    sys.path.insert(0, str(FAKE_PVA))
    import pva

    rng = np.random.default_rng(0)
    tiles = ipus * TILES_PER_IPU
    inc = rng.integers(100_000, 600_000, tiles)
    columns = {"inc": inc, "exc": inc - 64, "over": np.zeros(tiles, dtype="int64"), "al": inc // 3,
               "nal": inc - inc // 3}
    categories = {n: inc // 9 for n in pva.CATEGORY_NAMES}
    kinds = ["OnTileExecute", "DoExchange", "GlobalExchange", "StreamCopyMid", "Sync"]
    programs = [[f"layer{k}/{kind}", kind] for k in range(40) for kind in kinds]
    per_run = steps // runs
    run_data = []
    for r in range(runs):
        codes = rng.integers(0, len(programs), per_run)
        cycles = rng.integers(1, 5000, (per_run, ipus)) * (rng.random((per_run, ipus)) < 0.5)
        start = np.cumsum(cycles.max(axis=1))[:, None] + np.zeros((1, ipus), dtype="int64")
        data_in = rng.integers(0, 65_536, (per_run, ipus)) * (cycles > 0)
        run_data.append((f"Run {r + 1}", 1000.0, codes, cycles, start, data_in, data_in // 2))
    pva.write_columns(path, target={"numIPUs": ipus, "tilesPerIpu": TILES_PER_IPU,
                                    "bytesPerTile": 638976, "clockFrequency": 1.33e9,
                                    "architecture": "Ipu2"},
                      tiles=columns, categories=categories, programs=programs, runs=run_data)


def measure(mode: str, profile: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(FAKE_PVA), str(profile)],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"{mode} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ipus", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "profile.pop"
        build(profile, args.ipus, args.steps)
        print(f"profile: {args.ipus} IPUs x {TILES_PER_IPU} tiles = {args.ipus * TILES_PER_IPU:,} tiles, "
              f"{args.steps:,} steps ({profile.stat().st_size / 2**20:,.0f} MiB for the double)")
        results: dict[str, list[dict]] = {"walk": [], "read": [], "analyse": []}
        for _ in range(args.repeat):
            for mode in results:
                results[mode].append(measure(mode, profile))
    walk = statistics.median(r["seconds"] for r in results["walk"])
    read = statistics.median(r["seconds"] for r in results["read"])
    rss = max(r["peak_rss_bytes"] for r in results["read"])
    rows = results["read"][0]["rows"]
    print(f"pva itself (open + walk every value read): median {walk:.1f} s over {args.repeat}")
    print(f"read_profile (adapter, end to end):         median {read:.1f} s over {args.repeat} "
          f"(target 30 s); peak RSS {rss / 2**30:.2f} GiB")
    print(f"  adapter's own share: {read - walk:.1f} s ({100 * (read - walk) / read:.0f}%); "
          f"tables: {rows[0]:,} memory rows, {rows[1]:,} execution rows")
    full = statistics.median(r["seconds"] for r in results["analyse"])
    full_rss = max(r["peak_rss_bytes"] for r in results["analyse"])
    print(f"read + analyse + timeline table:            median {full:.1f} s ({full / walk:.2f}x the bare "
          f"walk; target 1.5x); peak RSS {full_rss / 2**30:.2f} GiB (target 2 GiB)")


if __name__ == "__main__":
    main()
