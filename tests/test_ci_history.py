"""popviz history add / show and compare --against-history: the SQLite history (schema, WAL,
concurrent writers, refusals), step detection, and the CLI on real bundles."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from popviz import testing
from popviz.ci import history
from popviz.ci.baseline import EngineMetrics
from popviz.ci.thresholds import parse_rule, parse_threshold
from popviz.ci.trend import find_steps, sparkline, trends
from popviz.errors import CorruptReportError, UnsupportedFormatError, UsageError
from popviz.sources.bundle import write_bundle

from conftest import ROOT, assert_one_line_error, run_cli, unwrapped


def engine(cycles: float, used: float = 1000.0, name: str = "training", estimated: bool = False,
           wall: float | None = None, **config) -> EngineMetrics:
    metrics = {"pipeline.cycles_per_micro_batch": cycles, "memory.ipu0.used_bytes": used}
    if wall is not None:
        metrics["time.call_wall_seconds"] = wall
    return EngineMetrics(name=name, instance=None, source="pva", estimated=estimated,
                         config={"device_iterations": 4, **config}, metrics=metrics)


# --------------------------------------------------------------------------- the database

def test_a_run_deleted_by_hand_leaves_rows_that_are_ignored(tmp_path):
    """The sqlite3 shell has foreign keys off, so DELETE FROM runs leaves that run's engines and
    metrics behind: they belong to no run and are not read (they made show exit 3)."""
    import sqlite3

    db = tmp_path / "h.db"
    for cycles in (1000.0, 5000.0, 1010.0):
        history.add(db, [engine(cycles)])
    con = sqlite3.connect(db)
    with con:
        con.execute("DELETE FROM runs WHERE id = 2")
    con.close()
    h = history.read(db)
    assert [r.id for r in h.runs] == [1, 3]
    assert [(r.id, v) for r, v in h.series()[("training", "pipeline.cycles_per_micro_batch")]] == [
        (1, 1000.0), (3, 1010.0)]
    assert history.add(db, [engine(1020.0)]).id == 4
    proc = run_cli("history", "show", "--db", str(db))
    assert proc.returncode == 0, proc.stderr


def test_add_and_read_back_exact_values(tmp_path):
    db = tmp_path / "h.db"
    first = history.add(db, [engine(1000.0)], label="abc123", source="runs/a")
    second = history.add(db, [engine(1010.5, used=2048.0), engine(7.0, name="inference")])
    assert (first.id, first.label, second.id, second.label) == (1, "abc123", 2, None)
    assert (first.title, second.title) == ("#1 (abc123)", "#2")
    h = history.read(db)
    assert [r.id for r in h.runs] == [1, 2]
    assert h.engines[(2, "training")].metrics == {"pipeline.cycles_per_micro_batch": 1010.5,
                                                  "memory.ipu0.used_bytes": 2048.0}
    assert h.engines[(2, "training")].config == {"device_iterations": 4}
    assert h.engines[(2, "inference")].metrics["pipeline.cycles_per_micro_batch"] == 7.0
    series = h.series()
    assert [(r.id, v) for r, v in series[("training", "pipeline.cycles_per_micro_batch")]] == [(1, 1000.0), (2, 1010.5)]
    assert [r.id for r in history.read(db, last=1).runs] == [2]


def test_schema_is_versioned_and_in_wal_mode(tmp_path):
    db = tmp_path / "h.db"
    history.add(db, [engine(1.0)])
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == history.SCHEMA_VERSION == 2
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert dict(con.execute("SELECT key, value FROM meta"))["format"] == "popviz-history"
    assert sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")) == [
        "engines", "meta", "metrics", "runs", "sqlite_sequence"]
    assert [r[1] for r in con.execute("PRAGMA table_info(engines)")][-1] == "environment"
    con.execute("PRAGMA user_version = 3")
    con.close()
    with pytest.raises(UnsupportedFormatError, match="schema 3; this popviz 0.1.0 reads schema 2 and older: upgrade"):
        history.read(db)


def test_refusals_leave_the_file_alone(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("not a database\n")
    with pytest.raises(CorruptReportError, match="notes.db is not a SQLite database"):
        history.add(text, [engine(1.0)])
    assert text.read_text() == "not a database\n"
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(CorruptReportError, match=r"is a SQLite database but not a popviz history \(it has table"):
        history.add(other, [engine(1.0)])
    assert sqlite3.connect(other).execute("SELECT name FROM sqlite_master").fetchall() == [("users",)]
    with pytest.raises(UsageError, match="does not exist; start a history with popviz history add"):
        history.read(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(UsageError, match="is a directory"):
        history.add(tmp_path, [engine(1.0)])


def test_a_planted_trigger_or_view_is_refused_before_any_write(tmp_path):
    """A downloaded history with a trigger popviz never creates: refused, not run (was: history
    add ran it, deleting every earlier run's metrics) and the file left byte-identical."""
    db = tmp_path / "h.db"
    history.add(db, [engine(1000.0)], label="a")
    con = sqlite3.connect(db)
    con.execute("CREATE TRIGGER wipe AFTER INSERT ON runs BEGIN DELETE FROM metrics; END")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    before = db.read_bytes()
    for action in (lambda: history.add(db, [engine(2000.0)], label="b"), lambda: history.read(db)):
        with pytest.raises(CorruptReportError, match="h.db has trigger 'wipe', which popviz never creates"):
            action()
    assert db.read_bytes() == before
    con = sqlite3.connect(db)
    con.execute("DROP TRIGGER wipe")
    con.execute("CREATE VIEW v AS SELECT * FROM runs")
    con.close()
    with pytest.raises(CorruptReportError, match="has view 'v', which popviz never creates"):
        history.read(db)


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from popviz.ci import history
    from popviz.ci.baseline import EngineMetrics

    db, who, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    while not go.exists():
        time.sleep(0.005)
    for i in range(40):
        metrics = {f"memory.ipu{k}.used_bytes": float(1000 * k + i) for k in range(16)}
        history.add(db, [EngineMetrics("training", None, "pva", False, {"writer": who}, metrics)], label=f"{who}-{i}")
    print("done")
""")


def test_two_processes_appending_at_once(tmp_path):
    db, go = tmp_path / "h.db", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), who, str(go)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for who in ("a", "b")]
    go.touch()  # both start together on a database that does not exist yet
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    h = history.read(db)
    assert len(h.runs) == 80 and [r.id for r in h.runs] == list(range(1, 81))
    labels = {r.label for r in h.runs}
    assert labels == {f"{w}-{i}" for w in "ab" for i in range(40)}
    for run in h.runs:  # every run is whole: its engine and all 16 metrics
        e = h.engines[(run.id, "training")]
        i = int(run.label.split("-")[1])
        assert e.config == {"writer": run.label[0]}
        assert e.metrics == {f"memory.ipu{k}.used_bytes": float(1000 * k + i) for k in range(16)}


# ------------------------------------------------------------------------------- steps

def test_deterministic_steps_at_any_run_including_the_newest():
    differs = parse_threshold("1%").exceeded
    steps = find_steps([100, 100, 100.5, 120, 120, 100], differs)
    assert [(s.index, s.before, s.after) for s in steps] == [(3, 100, 120), (5, 120, 100)]
    assert find_steps([100, 100.9, 100.2, 99.5], differs) == []  # all within 1%


def test_noisy_metrics_need_three_runs_beyond_the_threshold():
    differs = parse_threshold("25%").exceeded
    assert find_steps([1.0, 1.1, 2.5, 1.0, 0.9, 1.05], differs, min_size=3) == []  # one slow run
    [step] = find_steps([1.0, 1.1, 0.9, 1.0, 2.0, 2.1, 1.9, 2.0], differs, min_size=3)
    assert (step.index, step.before, step.after) == (4, 1.0, 2.0)
    assert find_steps([1.0, 1.0, 2.0, 2.0], differs, min_size=3) == []  # not yet confirmed


def test_sparkline():
    assert sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5]) == "▁▁▁"
    assert sparkline([1, 1, 1, 4]) == "▁▁▁█"
    assert sparkline(range(100), width=4) == "▁▁▂▃"  # 96..99: 3%, a third of the 10% full scale
    assert sparkline([100.0, 100.49, 100.0]) == "▁▁▁"  # a wobble is not a step


def test_trends_use_compare_thresholds_and_directions(tmp_path):
    db = tmp_path / "h.db"
    for cycles, used, d in ((1000, 1000, 4), (1000, 1000, 4), (1200, 1000, 8), (1200, 900, 8)):
        history.add(db, [engine(cycles, used, wall=1.0, device_iterations=d)])
    h = history.read(db)
    by = {t.metric: t for t in trends(h)}
    cyc = by["pipeline.cycles_per_micro_batch"]
    assert ([(cyc.runs[s.index].id, s.before, s.after) for s in cyc.steps], cyc.verdicts) == ([(3, 1000, 1200)],
                                                                                             ["regressed"])
    mem = by["memory.ipu0.used_bytes"]
    assert ([mem.runs[s.index].id for s in mem.steps], mem.verdicts) == ([4], ["improved"])
    # the configuration change at run 3 is named with the step it explains; none at run 4
    assert (cyc.config_changes, mem.config_changes) == ([["device_iterations: 4 → 8"]], [[]])
    assert cyc.to_dict()["steps"][0]["config_changes"] == ["device_iterations: 4 → 8"]
    from popviz.ci.history_view import config_changes

    assert config_changes(list(by.values())) == ["training at #3: device_iterations: 4 → 8"]
    assert by["time.call_wall_seconds"].steps == []
    # a looser threshold (as --fail gives) removes the memory step; patterns select metrics
    loose = trends(h, [parse_rule("memory.*:20%", "--fail")], ["memory.*"])
    assert [(t.metric, t.steps) for t in loose] == [("memory.ipu0.used_bytes", [])]


# ------------------------------------------------------------------------------- the CLI

TIMING = dict(name="training", mode="training", gradient_accumulation=16, device_iterations=2)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("hist")
    out = {}
    for name, stages in (("base", [1000, 1000]), ("slow", [1000, 1400]), ("fast", [900, 900])):
        report = testing.pipeline_report(stages, **TIMING)
        write_bundle(report, root / name / report.name)
        out[name] = root / name
    return out


def test_cli_add_show_and_compare_against_history(bundles, tmp_path):
    from popviz.ci.baseline import from_reports

    db = tmp_path / "perf.db"
    base = from_reports(bundles["base"])
    for label in ("c1", "c2", "c3"):
        history.add(db, base, label=label)
    proc = run_cli("history", "add", str(bundles["slow"]), "--db", "perf.db", "--label", "c4", cwd=tmp_path)
    assert "same label" not in proc.stderr
    again = run_cli("history", "add", str(bundles["slow"]), "--db", str(tmp_path / "copy.db"), "--label", "c3")
    assert "same label" not in again.stderr  # a new file
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "popviz: added run #4 (c4) to perf.db: 1 engine(s), 19 metric(s)\n"
    show = run_cli("history", "show", "--db", str(db), "pipeline.*")
    assert show.returncode == 0, show.stderr
    first = unwrapped(show.stdout).splitlines()[0]  # the headline, broken between words at 100 columns
    assert first == ("popviz history: 4 run(s), #1 (c1) to #4 (c4); step regression at #4 (c4) in 3 metric(s): "
                     "training pipeline.cycles_per_micro_batch, training pipeline.stage1.cycles_per_micro_batch "
                     "and 1 more"), first
    assert [line.rstrip() for line in unwrapped(show.stdout).splitlines()[1:3]] == ["training", "metric                                  runs     last  "
                                             "trend  steps"]
    # testing.pipeline_report: forward 1000 cycles -> 3031.25 per micro-batch (backward, exchange)
    assert "training pipeline.cycles_per_micro_batch at #4 (c4): 3,031 → 4,244 (+40.00%) regressed" in show.stdout
    doc = json.loads(run_cli("history", "show", "--db", str(db), "pipeline.cycles_per_micro_batch", "--json").stdout)
    [metric] = doc["metrics"]
    assert [v["value"] for v in metric["values"]] == [3031.25, 3031.25, 3031.25, 4243.75]
    assert metric["steps"] == [{"run": 4, "label": "c4", "before": 3031.25, "after": 4243.75, "change": "+40.00%",
                                "verdict": "regressed", "config_changes": []}]
    md = run_cli("history", "show", "--db", str(db), "pipeline.cycles_per_micro_batch", "--markdown").stdout
    assert "| training | `pipeline.cycles_per_micro_batch` | 4 | 4,244 | ▁▁▁█ | #4 (c4): 3,031 → 4,244 (+40.00%) " \
           "regressed |" in md
    # the median of the last 5 runs is the base level: the slow run regresses, the fast one improves
    slow = run_cli("compare", "--against-history", "perf.db", str(bundles["slow"]), cwd=tmp_path)
    assert slow.returncode == 1
    assert slow.stdout.startswith("popviz: FAIL: regression in training pipeline.cycles_per_micro_batch "
                                  "(3,031 → 4,244, +40.00%)")
    # (less compute: the stream copies' share grows, 73.99% -> 75.67%, utilisation falls 21.64% -> 19.92%)
    assert unwrapped(slow.stdout).splitlines()[1] == "base: the median of the last 4 run(s) in perf.db (#1 (c1) to #4 (c4))"
    fast = run_cli("compare", "--against-history", str(db), str(bundles["fast"]),
                   "--fail", "host_io.stream_copy_pct:+5pp", "--fail", "pipeline.utilisation_pct:+5pp")
    assert fast.returncode == 0 and "improved" in fast.stdout
    # the last run alone is the slow one
    assert run_cli("compare", "--against-history", str(db), "--last", "1", str(bundles["slow"])).returncode == 0


def test_cli_bad_input_is_one_line(bundles, tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("hello\n")
    assert_one_line_error(run_cli("history", "add", str(bundles["base"]), "--db", str(text)),
                          "notes.db is not a SQLite database")
    assert text.read_text() == "hello\n"
    assert_one_line_error(run_cli("history", "show", "--db", str(tmp_path / "none.db")),
                          "none.db does not exist; start a history with popviz history add")
    db = tmp_path / "h.db"
    history.add(db, [engine(1.0)])
    assert_one_line_error(run_cli("history", "show", "--db", str(db), "nosuch.*"), "no metric in", "nosuch.*")
    assert_one_line_error(run_cli("compare", "--against-history", str(db), str(bundles["base"]), str(bundles["slow"])),
                          "with --against-history, pass only the run to check")
    assert_one_line_error(run_cli("compare", str(bundles["base"]), str(bundles["slow"]), "--last", "3"),
                          "--last goes with --against-history")
    assert_one_line_error(run_cli("history", "--db", str(db)), "error")


def test_against_history_refuses_mixed_provenance(tmp_path):
    db = tmp_path / "h.db"
    history.add(db, [engine(1000.0, estimated=True)])
    history.add(db, [engine(1000.0)])
    with pytest.raises(UsageError, match="engine training is estimated in some of the last 5 runs and measured in "
                                         "others: their numbers are not comparable; pass --allow-mixed"):
        history.median_side(db)
    median = history.median_side(db, allow_mixed=True)
    [side] = median.engines
    assert (side.estimated, [r.id for r in median.runs["training"]]) == (False, [1, 2])
    [side] = history.median_side(db, last=1).engines
    assert side.metrics == {"pipeline.cycles_per_micro_batch": 1000.0, "memory.ipu0.used_bytes": 1000.0}


def test_median_of_the_last_runs(tmp_path):
    db = tmp_path / "h.db"
    for cycles in (5000, 1000, 1010, 990, 2000, 1005):
        history.add(db, [engine(float(cycles), wall=cycles / 1000)])
    median = history.median_side(db, last=5)
    [side] = median.engines
    assert [r.id for r in median.runs["training"]] == [2, 3, 4, 5, 6]
    assert median.label() == f"the median of the last 5 run(s) in {db} (#2 to #6)"
    assert side.metrics["pipeline.cycles_per_micro_batch"] == 1005.0
    assert side.metrics["time.call_wall_seconds"] == 1.005


def test_metrics_from_a_newer_popviz_are_named_in_show_and_against_history(bundles, tmp_path):
    from popviz.ci.baseline import from_reports

    db = tmp_path / "perf.db"
    for label in ("c1", "c2"):
        history.add(db, from_reports(bundles["base"]), label=label)
    con = sqlite3.connect(db)  # as a newer popviz would have written it: a well-formed name not defined here
    con.execute("INSERT INTO metrics (run_id, engine, metric, value) VALUES (2, 'training', 'pipeline.future_pct', 1.5)")
    con.commit()
    con.close()
    h = history.read(db)
    assert h.unknown_metrics() == ["training pipeline.future_pct"]
    assert "pipeline.future_pct" not in h.engines[(2, "training")].metrics
    note = "not compared, unknown to this popviz (from a newer one, or misspelt): training pipeline.future_pct"
    show = run_cli("history", "show", "--db", str(db))
    assert show.returncode == 0, show.stderr
    assert note in " ".join(show.stdout.split())
    assert json.loads(run_cli("history", "show", "--db", str(db), "--json").stdout)["unknown_metrics"] == [
        "training pipeline.future_pct"]
    assert "Not compared" in run_cli("history", "show", "--db", str(db), "--markdown").stdout
    against = run_cli("compare", "--against-history", str(db), str(bundles["base"]))
    assert against.returncode == 0, against.stderr
    assert note in " ".join(against.stdout.split())
    # an unknown metric's value is still checked: a finite number
    con = sqlite3.connect(db)
    con.execute("UPDATE metrics SET value = 'abc' WHERE metric = 'pipeline.future_pct'")
    con.commit()
    con.close()
    assert_one_line_error(run_cli("history", "show", "--db", str(db)), "perf.db",
                          "not a finite number for metric 'pipeline.future_pct'")


def test_per_stage_steps_across_a_resplit_are_moved_as_compare_says(tmp_path):
    from popviz.ci.baseline import from_reports

    from conftest import SAMPLES

    db = tmp_path / "perf.db"
    even, planned = from_reports(SAMPLES / "bert_even_split"), from_reports(SAMPLES / "bert_planned")
    for label, side in (("c1", even), ("c2", even), ("c3", planned)):
        history.add(db, side, label=label)
    found = {t.metric: t for t in trends(history.read(db))}
    assert found["pipeline.stage1.cycles_per_micro_batch"].verdicts == ["moved"]
    assert found["memory.ipu0.used_bytes"].verdicts == ["moved"]
    assert found["pipeline.cycles_per_micro_batch"].verdicts == ["improved"]  # the call's figures still count
    show = run_cli("history", "show", "--db", str(db))
    assert "step regression" not in show.stdout.splitlines()[0]


def test_the_median_is_over_the_runs_with_the_newest_configuration(tmp_path):
    """Runs before the newest run's configuration changed are left out of the base: their
    figures came from another configuration (was: their values, with the newest configuration,
    so a changed split was never seen and its per-stage rows regressed)."""
    db = tmp_path / "h.db"
    for label, cycles, d in (("a", 1000.0, 4), ("b", 1000.0, 4), ("c", 1000.0, 4), ("d", 1500.0, 8), ("e", 1490.0, 8)):
        history.add(db, [engine(cycles, device_iterations=d)], label=label)
    median = history.median_side(db)
    [side] = median.engines
    assert [r.id for r in median.runs["training"]] == [4, 5]
    assert side.metrics["pipeline.cycles_per_micro_batch"] == 1495.0
    assert side.config == {"device_iterations": 8}
    assert median.label() == (f"the median of the last 2 run(s) with the newest run's configuration in {db} (#4 (d) to #5 (e)); "
                              "the configuration changed at #4 (d)")
    history.add(db, [engine(1000.0, device_iterations=4)], label="f")  # back to the first: one run
    assert history.median_side(db).label() == (f"run #6 (f) with the newest run's configuration in {db}; the configuration "
                                               "changed at #6 (f)")
    assert [r.id for r in history.median_side(db, last=3).runs["training"]] == [6]
    # each engine its own runs
    history.add(db, [engine(1000.0, device_iterations=4), engine(7.0, name="inference")], label="g")
    assert history.median_side(db).label() == (
        f"per engine, the median of its last runs with its newest configuration in {db}: training #6 (f) to "
        "#7 (g) (configuration changed at #6 (f)), inference #7 (g)")


def test_against_history_after_main_changed_its_split(tmp_path):
    """Main re-split (the even split three times, then the planned one twice): a PR identical to
    main passes, and one that goes back to the even split shows the split change, its per-stage
    rows as moved and the pipeline-wide regression."""
    from popviz.ci.baseline import document, from_reports

    from conftest import SAMPLES

    sides = {}
    for name in ("bert_even_split", "bert_planned"):
        sides[name] = tmp_path / f"{name}.json"
        sides[name].write_text(json.dumps(document(from_reports(SAMPLES / name), name)))
    for name, label in (("bert_even_split", "c1"), ("bert_even_split", "c2"), ("bert_even_split", "c3"),
                        ("bert_planned", "c4"), ("bert_planned", "c5")):
        assert run_cli("history", "add", str(sides[name]), "--db", "h.db", "--label", label, cwd=tmp_path).returncode == 0
    same = run_cli("compare", "--against-history", "h.db", str(sides["bert_planned"]), cwd=tmp_path)
    assert same.returncode == 0, same.stdout
    assert unwrapped(same.stdout).splitlines()[:2] == [
        "popviz: OK: no regression (21 metric(s) compared)",
        "base: the median of the last 2 run(s) with the newest run's configuration in h.db (#4 (c4) to #5 (c5)); the "
        "configuration changed at #4 (c4)"]
    back = run_cli("compare", "--against-history", "h.db", str(sides["bert_even_split"]), "--json", cwd=tmp_path)
    assert back.returncode == 1
    doc = json.loads(back.stdout)
    assert doc["resplit"] == ["training"]
    assert [c["field"] for c in doc["config_changes"]] == ["stages", "layers moved"]
    verdicts = {r["metric"]: r["verdict"] for r in doc["metrics"]}
    assert verdicts["pipeline.stage1.cycles_per_micro_batch"] == verdicts["memory.ipu0.used_bytes"] == "moved"
    assert sorted(m for m, v in verdicts.items() if v == "regressed") == [
        "memory.max_used_pct", "pipeline.call_cycles_per_micro_batch", "pipeline.cycles_per_micro_batch",
        "pipeline.imbalance_ratio", "pipeline.utilisation_pct", "throughput.samples_per_second"]


def test_counts_are_whole_in_a_history_and_in_its_median(tmp_path):
    db = tmp_path / "h.db"
    for tiles in (1.0, 2.0):
        history.add(db, [EngineMetrics(name="training", instance=None, source="pva", estimated=False, config={},
                                       metrics={"memory.tiles_overflowing": tiles})])
    # the median of two runs is the lower one: a run's own count, never 1.5 tiles shown as 2
    assert history.median_side(db).engines[0].metrics == {"memory.tiles_overflowing": 1.0}
    con = sqlite3.connect(db)
    con.execute("UPDATE metrics SET value = 1.5 WHERE run_id = 2")
    con.commit()
    con.close()
    assert_one_line_error(run_cli("history", "show", "--db", str(db)), "h.db has an impossible value for metric "
                          "'memory.tiles_overflowing' of engine 'training' of run #2: 1.5 (a count is a whole number)")


def test_reading_a_history_creates_nothing_beside_it(tmp_path, bundles):
    """history show and compare --against-history left h.db-wal and h.db-shm beside the user's
    file (a read-only connection to a WAL file creates them and cannot remove them); a file no
    connection has open is now read as immutable, byte-identical and alone."""
    db = tmp_path / "h.db"
    assert run_cli("history", "add", str(bundles["base"]), "--db", str(db)).returncode == 0
    assert run_cli("history", "add", str(bundles["base"]), "--db", str(db)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.db"]  # the write path cleans up after itself
    before = db.read_bytes()
    assert run_cli("history", "show", "--db", str(db)).returncode == 0
    assert run_cli("compare", "--against-history", str(db), str(bundles["base"])).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.db"]
    assert db.read_bytes() == before


def test_a_history_being_written_is_read_with_what_the_writer_committed(tmp_path, monkeypatch):
    db = tmp_path / "h.db"
    history.add(db, [engine(1000.0)], label="a")
    held = sqlite3.connect(db)  # another process's open connection: runs committed to the -wal
    held.execute("SELECT 1 FROM runs").fetchall()
    history.add(db, [engine(2000.0)], label="b")
    assert (tmp_path / "h.db-wal").exists()
    assert [r.label for r in history.read(db).runs] == ["a", "b"]
    held.close()
    # a writer that checkpoints into the file while it is read as immutable: read again
    real = history._read

    def racing(p, last, *, at_rest):
        h = real(p, last, at_rest=at_rest)
        if at_rest:
            history.add(db, [engine(3000.0)], label="c")
        return h

    monkeypatch.setattr(history, "_read", racing)
    assert [r.label for r in history.read(db).runs] == ["a", "b", "c"]


@pytest.mark.parametrize("damage, message", [
    ("UPDATE metrics SET value = -5 WHERE metric = 'memory.ipu0.used_bytes'",
     "h.db has an impossible value for metric 'memory.ipu0.used_bytes' of engine 'training' of run #1: -5 bytes"),
    ("UPDATE metrics SET value = 'fast' WHERE metric = 'memory.ipu0.used_bytes'",
     "h.db has a non-numeric value for metric 'memory.ipu0.used_bytes' of engine 'training' of run #1"),
    ("UPDATE engines SET config = '{\"device_iter' ", "h.db has a damaged configuration for engine 'training' of run #1"),
    ("UPDATE engines SET name = ''", "h.db has an invalid name of engine 'training' of run #1 ('';"),
])
def test_add_refuses_a_history_that_show_and_compare_refuse(damage, message, tmp_path, bundles):
    """history add appended to a file that show and compare then refused: it is now checked the
    same way first, and left byte-identical."""
    db = tmp_path / "h.db"
    history.add(db, [engine(1000.0)], label="a")
    con = sqlite3.connect(db)
    con.execute(damage)
    con.commit()
    con.close()
    before = db.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.db"]
    show = assert_one_line_error(run_cli("history", "show", "--db", str(db)), message)
    add = assert_one_line_error(run_cli("history", "add", str(bundles["base"]), "--db", str(db)), message)
    assert add == show
    with pytest.raises(CorruptReportError, match="it was not changed"):  # never: start a new file
        history.add(db, [engine(2000.0)], label="b")
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.db"]


def test_add_names_the_metrics_of_a_baseline_it_leaves_out(tmp_path, bundles):
    """A baseline from a newer popviz: its unknown metrics were dropped without a word."""
    baseline = tmp_path / "baseline.json"
    assert run_cli("baseline", "save", str(bundles["base"]), "-o", str(baseline)).returncode == 0
    doc = json.loads(baseline.read_text())
    doc["engines"][0]["metrics"]["pipeline.future_pct"] = 1.5
    baseline.write_text(json.dumps(doc))
    proc = run_cli("history", "add", "baseline.json", "--db", "h.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert unwrapped(proc.stderr).splitlines() == [  # the second line broken between words at 100 columns
        "popviz: added run #1 to h.db: 1 engine(s), 19 metric(s)",
        "popviz: not added, unknown to this popviz (from a newer one, or misspelt): training pipeline.future_pct"]
    assert "pipeline.future_pct" not in history.read(tmp_path / "h.db").engines[(1, "training")].metrics


def test_compare_says_how_to_use_a_history(tmp_path, bundles):
    db = tmp_path / "h.db"
    history.add(db, [engine(1000.0)])
    # the run is what is missing (was: "the following arguments are required: BASE")
    assert assert_one_line_error(run_cli("compare", "--against-history", str(db))) == (
        f"popviz: error: compare --against-history needs the run to check: popviz compare --against-history {db} NEW")
    # a history passed as BASE (was: "is not a report")
    assert assert_one_line_error(run_cli("compare", str(db), str(bundles["base"]))) == (
        f"popviz: error: {db} is a SQLite file, not a report or a baseline; to compare a run with a history, pass "
        f"popviz compare --against-history {db} NEW")
    assert_one_line_error(run_cli("compare"), "compare needs BASE and NEW")


def test_a_label_added_again_is_noted(bundles, tmp_path):
    db = tmp_path / "h.db"
    first = run_cli("history", "add", str(bundles["slow"]), "--db", str(db), "--label", "c7")
    second = run_cli("history", "add", str(bundles["slow"]), "--db", str(db), "--label", "c7")
    assert first.returncode == second.returncode == 0
    assert "same label" not in first.stderr
    assert "popviz: note: run #1 (c7) has the same label 'c7'; both are kept" in second.stderr


def test_show_says_which_engines_are_estimated(tmp_path):
    # every output of history show says which figures the emulator estimated, as compare and check do
    db = tmp_path / "h.db"
    history.add(db, [engine(1000.0, estimated=True), engine(10.0, name="inference", estimated=True)], label="a")
    history.add(db, [engine(1100.0, estimated=True), engine(10.0, name="inference")], label="b")
    line = "estimated by the emulator's cost model, not measured: inference (1 of 2 runs), training (all 2 runs)"
    console = run_cli("history", "show", "--db", str(db), env={"COLUMNS": "200"})
    assert console.returncode == 0, console.stderr
    assert console.stdout.splitlines()[1] == line
    assert f"*{line}*" in " ".join(run_cli("history", "show", "--db", str(db), "--markdown").stdout.split())
    doc = json.loads(run_cli("history", "show", "--db", str(db), "--json").stdout)
    assert doc["estimated"] == [{"engine": "inference", "runs_estimated": 1, "runs": 2},
                                {"engine": "training", "runs_estimated": 2, "runs": 2}]
    measured = tmp_path / "m.db"
    history.add(measured, [engine(1000.0)])
    history.add(measured, [engine(1100.0)])
    assert "estimated" not in run_cli("history", "show", "--db", str(measured)).stdout
    assert json.loads(run_cli("history", "show", "--db", str(measured), "--json").stdout)["estimated"] == []


def test_show_fits_80_columns_headline_too(tmp_path):
    # the headline, the configuration-change and step lines break between words under their indent
    db = tmp_path / "h.db"
    for i, (cycles, d) in enumerate([(1000.0, 4), (1000.0, 4), (2000.0, 16), (2000.0, 16)]):
        history.add(db, [engine(cycles, used=1000.0 * (1 + i // 2), device_iterations=d,
                                gradient_accumulation=8 * (1 + i // 2), replication_factor=1 + i // 2,
                                output_mode="All" if i < 2 else "Final")], label=f"commit-{i:02d}-abcdef")
    proc = run_cli("history", "show", "--db", str(db), env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    head = unwrapped(proc.stdout).splitlines()[0]
    assert head.startswith("popviz history: 4 run(s), #1 (commit-00-abcdef) to #4 (commit-03-abcdef); step "
                           "regression at #3 (commit-02-abcdef) in ") and len(head) > 80
    assert lines[0] == head[:len(lines[0])] and lines[1].startswith("    ")  # its continuation
    changed = lines.index("configuration changed where metrics stepped (explains most steps):")
    assert lines[changed + 1].startswith("  training at #3 (commit-02-abcdef): ")
    assert lines[changed + 2].startswith("      ")  # its continuation, under its indent
