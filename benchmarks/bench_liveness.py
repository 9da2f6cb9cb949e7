"""How long, and in how much memory, does a POD64-sized liveness report read and analyse?

    python benchmarks/bench_liveness.py [--ipus 64] [--steps 1000000]

Writes a profile for the libpva test double (tests/fake_pva) with --steps liveness steps (each
with a program and --ipus per-IPU not-always-live byte counts, ``notAlwaysLiveMemoryForIpu``) and
a small memory table. Then, each in a fresh subprocess: a *bare read* (``pva.openReport`` and every
value the adapter reads, once, the way it reads them: each step's program name and per-IPU bytes
in C-level loops) and *popviz* (``popviz.sources.liveness.read_liveness`` into its NumPy table,
then every IPU's peak as the memory analysis finds it, one layer's activation and temporary bytes,
and the liveness figure's frame). Prints seconds, peak RSS (the double's own arrays included in
both) and popviz's time over the bare read. The issue's target: within 1.5× the bare read and
under 2 GiB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKE_PVA = ROOT / "tests" / "fake_pva"

CHILD = r"""
import json, resource, sys, time
from operator import attrgetter
sys.path.insert(0, sys.argv[2])
import pva
mode, path = sys.argv[1], sys.argv[3]
t0 = time.perf_counter()
r = pva.openReport(path)
n = r.compilation.target.numIPUs
if mode == "bare":  # every value the adapter reads, once, the way it reads them
    get, ipus = attrgetter("bytes"), range(n)
    for step in r.compilation.livenessProgramSteps:
        step.program.name
        list(map(get, map(step.notAlwaysLiveMemoryForIpu, ipus)))
    out = None
else:
    from popviz.model import Target
    from popviz.sources.liveness import read_liveness
    from popviz.sources.layer_memory import layer_bytes
    t = r.compilation.target
    table = read_liveness(r, None, Target("Mk2", n, t.tilesPerIpu, t.bytesPerTile, t.clockFrequency, 1, n))
    t_read = time.perf_counter() - t0
    peaks = [table.peak(k) for k in table.ipus]
    act_temp = layer_bytes(table, 5, ["layer5/fwd"], ["layer5/bwd"], True)
    frames = [table.frame(k, max_points=1500) for k in table.ipus]
    out = {"read_seconds": t_read, "steps": len(table), "peak_ipu5": peaks[5], "layer5": act_temp,
           "frame_rows": sum(len(f) for f in frames)}
t1 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": t1 - t0, "peak_rss_bytes": rss, "out": out}))
"""


def build(path: Path, ipus: int, steps: int) -> None:
    import numpy as np

    sys.path.insert(0, str(FAKE_PVA))
    import pva

    rng = np.random.default_rng(0)
    layers = 64
    programs = [[f"layer{k}/{d}", "OnTileExecute"] for k in range(layers) for d in ("fwd", "bwd")]
    programs.append(["exchange", "DoExchange"])
    # a schedule of forwards then backwards, each followed by an exchange step
    codes = np.full(steps, len(programs) - 1, dtype="int32")
    half = steps // 2
    idx = np.arange(0, steps - 1, 2)
    layer = (idx * layers // max(1, steps)) % layers
    codes[idx] = np.where(idx < half, 2 * layer, 2 * (layers - 1 - layer) + 1)
    ramp = np.minimum(np.arange(steps), steps - np.arange(steps)).astype("int64") * 40
    live = ramp[:, None] + rng.integers(0, 50_000, (steps, ipus))
    tiles = ipus * 4
    cols = {k: np.full(tiles, 100_000, dtype="int64") for k in ("inc", "exc", "al", "nal")}
    cols["over"] = np.zeros(tiles, dtype="int64")
    pva.write_columns(path, target={**pva.MK2, "numIPUs": ipus}, tiles=cols, categories={}, programs=programs,
                      runs=[], liveness=(codes, live))


def child(mode: str, path: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(FAKE_PVA), str(path)], capture_output=True,
                          text=True, check=True, timeout=3600)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ipus", type=int, default=64)
    ap.add_argument("--steps", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.pop"
        build(path, args.ipus, args.steps)
        bare = child("bare", path)
        ours = child("popviz", path)
    gib = 2**30
    print(f"liveness: {args.steps:,} steps × {args.ipus} IPUs")
    print(f"bare read (pva only):  {bare['seconds']:.1f} s, peak RSS {bare['peak_rss_bytes'] / gib:.2f} GiB")
    print(f"popviz read+analyse:   {ours['seconds']:.1f} s (read {ours['out']['read_seconds']:.1f} s), "
          f"peak RSS {ours['peak_rss_bytes'] / gib:.2f} GiB")
    print(f"popviz / bare read:    {ours['seconds'] / bare['seconds']:.2f}×")
    print(f"(IPU5 peak {ours['out']['peak_ipu5']}, layer5 activation/temporary {ours['out']['layer5']}, "
          f"figure frame rows {ours['out']['frame_rows']:,})")


if __name__ == "__main__":
    main()
