"""The history database at size: appending runs, reading it back, the trends of `history show`
and the median of `compare --against-history`, up to 10⁵ runs.

    python benchmarks/bench_history.py [--runs 1000 10000 100000] [--metrics 60] [--repeat 3]
        [--postgres URL [--no-sqlite]]

Each run has two engines with METRICS metrics each (a 4-IPU pipeline has about 20); the level
steps every 100 runs. The history is filled in bulk (one transaction of plain INSERTs, the rows
`history add` writes), then each operation is timed in a fresh process, median of REPEAT, with its
peak RSS: `history add` of one more run (its content check, the insert, the checkpoint), the
trends and steps of `history show --last N` for N = 100 and all runs, and the median of
`compare --against-history`. With --postgres (a superuser URL), the same on a PostgreSQL
database created for it (dropped after). Run it under `flock /tmp/popviz-heavy.lock`.
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
sys.path.insert(0, str(ROOT))

NAMES = ["pipeline.cycles_per_micro_batch", "pipeline.imbalance_ratio", "pipeline.utilisation_pct"]

CHILD = r"""
import json, resource, sys, time
from popviz.ci import history
from popviz.ci.baseline import EngineMetrics
from popviz.ci.trend import trends
sys.path.insert(0, "benchmarks")
from bench_history import value
db, what, arg, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
start = time.perf_counter()
if what == "add":
    engines = [EngineMetrics(e, None, "pva", False, {"device_iterations": 4}, {m: value(m, 0, j) for j, m in enumerate(names)},
                             environment={"popviz": "0.1.0"}) for e in ("training", "inference")]
    history.add(db, engines, label="bench")
elif what == "show":
    h = history.read(db, last=arg)
    found = trends(h)
    assert sum(len(t.values) for t in found) == 2 * len(names) * min(arg, len(h.runs))
else:
    history.median_side(db, arg)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def metric_names(n: int) -> list[str]:
    names = list(NAMES)
    k = 0
    while len(names) < n:
        names += [f"memory.ipu{k}.used_bytes", f"memory.ipu{k}.used_pct", f"pipeline.stage{k}.cycles_per_micro_batch"]
        k += 1
    return names[:n]


def value(metric: str, i: int, j: int) -> float:
    level = 1.0 + (i // 100) * 0.05
    if metric == "pipeline.imbalance_ratio":
        return 1.0 + 0.1 * level
    if metric.endswith("_pct"):
        return min(100.0, 10.0 * level)
    return (1000.0 + j) * level


def fill(db: str, runs: int, names: list[str]) -> None:
    """``runs`` runs as history add writes them, in one transaction (an empty history first gets
    its schema from a real history add, which is then run #1)."""
    from popviz.ci import history
    from popviz.ci.baseline import EngineMetrics
    from popviz.ci.history_store import writing

    history.add(db, [EngineMetrics(e, None, "pva", False, {"device_iterations": 4},
                                   {m: value(m, 0, j) for j, m in enumerate(names)}) for e in ("training", "inference")],
                label="c0")
    with writing(db) as con:
        batch = 2000
        for first in range(2, runs + 1, batch):
            ids = range(first, min(runs, first + batch - 1) + 1)
            con.executemany("INSERT INTO runs (id, label, added_at, source, written_by) VALUES (?, ?, ?, ?, ?)",
                            [(i, f"c{i}", "2026-12-01T00:00:00+00:00", "runs/x", "popviz bench") for i in ids])
            con.executemany("INSERT INTO engines (run_id, engine, name, instance, source, estimated, config, "
                            "environment) VALUES (?, ?, ?, NULL, 'pva', 0, ?, ?)",
                            [(i, e, e, '{"device_iterations": 4}', '{"popviz": "0.1.0"}') for i in ids
                             for e in ("training", "inference")])
            con.executemany("INSERT INTO metrics (run_id, engine, metric, value) VALUES (?, ?, ?, ?)",
                            [(i, e, m, value(m, i, j)) for i in ids for e in ("training", "inference")
                             for j, m in enumerate(names)])
        if con.kind == "postgresql":  # the identity goes on after the ids given by hand
            con.execute("SELECT setval(pg_get_serial_sequence('runs', 'id'), ?)", (runs,))


def child(db: str, what: str, arg: int, names: list[str]) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", CHILD, db, what, str(arg), json.dumps(names)], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600, check=False)
    if proc.returncode:
        raise SystemExit(f"{what} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def measure(db: str, runs: int, names: list[str], repeat: int) -> dict[str, tuple[float, float]]:
    out = {}
    for key, what, arg in (("add", "add", 0), ("show --last 100", "show", 100), (f"show --last {runs}", "show", runs),
                           ("compare median of 5", "median", 5)):
        samples = [child(db, what, arg, names) for _ in range(repeat)]
        out[key] = (statistics.median(s["seconds"] for s in samples), max(s["rss_mib"] for s in samples))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--metrics", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--postgres", metavar="URL", help="also measure a PostgreSQL history (a superuser URL)")
    parser.add_argument("--no-sqlite", action="store_true",
                        help="with --postgres: PostgreSQL only (to split a long run under the heavy-job lock)")
    args = parser.parse_args()
    names = metric_names(args.metrics)
    rows = []
    if args.no_sqlite and not args.postgres:
        parser.error("--no-sqlite needs --postgres URL")
    for runs in args.runs:
        if not args.no_sqlite:
            with tempfile.TemporaryDirectory() as tmp:
                db = str(Path(tmp) / "history.db")
                fill(db, runs, names)
                size = sum(p.stat().st_size for p in Path(tmp).glob("history.db*"))
                rows.append(("sqlite", runs, size, measure(db, runs, names, args.repeat)))
                print(f"measured: {rows[-1]}", flush=True)
        if args.postgres:
            sys.path.insert(0, str(ROOT / "tests"))
            import pg_server

            name = f"popviz_bench_{runs}"
            db = pg_server.create_database(args.postgres, name)
            fill(db, runs, names)
            rows.append(("postgresql", runs, 0, measure(db, runs, names, args.repeat)))
            print(f"measured: {rows[-1]}", flush=True)
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as con:
                con.execute(f'DROP DATABASE "{name}"')
    print(f"2 engines x {args.metrics} metrics per run; median of {args.repeat} fresh processes (seconds, peak RSS MiB)")
    print("| backend | runs | file MiB | add s | add MiB | show --last 100 s | show --last all s | show all MiB "
          "| median s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for backend, runs, size, m in rows:
        every = m[f"show --last {runs}"]
        print(f"| {backend} | {runs:,} | {size / 2**20:,.0f} | {m['add'][0]:.2f} | {m['add'][1]:.0f} | "
              f"{m['show --last 100'][0]:.2f} | {every[0]:.2f} | {every[1]:.0f} | {m['compare median of 5'][0]:.2f} |")


if __name__ == "__main__":
    main()
