"""popviz compare / check / baseline: metrics, thresholds, budgets and outputs, on reports built
with popviz.testing and written as real bundles, through the real CLI where it matters."""

from __future__ import annotations

import json
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

import popviz
from popviz import testing
from popviz.ci.baseline import EngineMetrics
from popviz.ci.compare import IMPROVED, REGRESSED, SAME, TRADED, WITHIN, check_gate, compare
from popviz.ci.render import junit, markdown, text
from popviz.ci.thresholds import parse_rule, parse_threshold, threshold_for
from popviz.errors import UsageError
from popviz.sources.bundle import write_bundle

from conftest import SAMPLES, assert_one_line_error, run_cli, unwrapped

TIMING = dict(name="training", mode="training", gradient_accumulation=16, device_iterations=2)


def write(tmp_path, name, stage_cycles, **kwargs):
    directory = tmp_path / name
    report = testing.pipeline_report(stage_cycles, **{**TIMING, **kwargs})
    write_bundle(report, directory / report.name)
    return directory


def side(metrics, estimated=False, config=None, name="training", findings=None):
    return [EngineMetrics(name=name, instance=None, source="bundle", estimated=estimated, config=config or {},
                          metrics=metrics, findings=findings or [])]


# ------------------------------------------------------------------ thresholds

@pytest.mark.parametrize(("spec", "base", "new", "exceeded"), [
    ("5%", 100.0, 105.0, False), ("5%", 100.0, 105.01, True), ("5%", 100.0, 94.0, True),
    ("+2pp", 50.0, 52.0, False), ("+2pp", 50.0, 52.5, True),
    ("10MiB", 0.0, 10 * 2**20, False), ("10MiB", 0.0, 10 * 2**20 + 1, True),
    ("1000cycles", 5000.0, 6000.0, False), ("1000cycles", 5000.0, 6001.0, True),
    ("0", 3.0, 3.0, False), ("0", 3.0, 4.0, True), ("0.5s", 1.0, 1.4, False), ("5%", 0.0, 1.0, True),
])
def test_threshold_forms(spec, base, new, exceeded):
    assert parse_threshold(spec).exceeded(base, new) is exceeded


def test_bad_threshold_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown unit 'parsecs'"):
        parse_threshold("5parsecs")
    with pytest.raises(UsageError, match="METRIC:THRESHOLD"):
        parse_rule("5%", "--fail")
    with pytest.raises(UsageError, match=r"is in bytes \(B, KiB, MiB, GiB\) but pipeline.imbalance_ratio is in a ratio"):
        threshold_for("pipeline.imbalance_ratio", [parse_rule("pipeline.imbalance_ratio:10MiB", "--fail")])
    # a wildcard rule gates the metrics in its unit: memory.*:+2pp is the memory percentages, not the bytes
    rules = [parse_rule("memory.*:+2pp", "--fail")]
    assert threshold_for("memory.ipu0.used_pct", rules).spec == "+2pp"
    assert threshold_for("memory.ipu0.used_bytes", rules).spec == "1%"
    c = compare(side({"memory.ipu0.used_bytes": 100.0, "memory.ipu0.used_pct": 50.0}),
                side({"memory.ipu0.used_bytes": 100.0, "memory.ipu0.used_pct": 53.0}), rules)
    assert c.failed
    # ... and one matching no metric in its unit gates nothing: refused
    with pytest.raises(UsageError, match=r"threshold '10MiB' \(--fail\) is in bytes \(B, KiB, MiB, GiB\) but the "
                                         r"metrics pipeline\.\* matches are in a ratio; use a relative"):
        compare(side({"pipeline.imbalance_ratio": 1.1}), side({"pipeline.imbalance_ratio": 1.2}),
                [parse_rule("pipeline.*:10MiB", "--fail")])


def test_defaults_are_tight_for_deterministic_metrics_and_tolerant_for_wall_times():
    assert threshold_for("pipeline.cycles_per_micro_batch", []).spec == "1%"
    assert threshold_for("memory.ipu3.used_pct", []).spec == "+1pp"
    assert threshold_for("memory.tiles_overflowing", []).spec == "0"
    assert threshold_for("host_io.stream_copy_pct", []).spec == "+5pp"
    assert threshold_for("time.call_wall_seconds", []).spec == "25%"
    rules = [parse_rule("memory.*:5%", "cfg"), parse_rule("memory.ipu0.used_pct:+3pp", "cli")]
    assert threshold_for("memory.ipu0.used_pct", rules).spec == "+3pp"  # last match wins
    assert threshold_for("memory.ipu1.used_pct", rules).spec == "5%"


# ------------------------------------------------------------------ verdicts

def test_only_the_worse_direction_fails_and_small_changes_are_marked():
    c = compare(side({"pipeline.imbalance_ratio": 1.10, "pipeline.ramp_efficiency_pct": 80.0,
                      "pipeline.cycles_per_micro_batch": 1000.0, "host_io.output_bytes_per_call": 4096.0}),
                side({"pipeline.imbalance_ratio": 1.30, "pipeline.ramp_efficiency_pct": 90.0,
                      "pipeline.cycles_per_micro_batch": 1005.0, "host_io.output_bytes_per_call": 4096.0}), [])
    verdicts = {r.metric: r.verdict for r in c.rows}
    assert verdicts == {"pipeline.imbalance_ratio": REGRESSED, "pipeline.ramp_efficiency_pct": IMPROVED,
                        "pipeline.cycles_per_micro_batch": WITHIN, "host_io.output_bytes_per_call": SAME}
    row = next(r for r in c.rows if r.metric == "pipeline.imbalance_ratio")
    assert row.change == "+18.18%"
    assert next(r for r in c.rows if r.metric == "pipeline.ramp_efficiency_pct").change == "+10.00pp"
    assert c.failed
    assert c.headline() == ("popviz: FAIL: regression in training pipeline.imbalance_ratio (1.1 → 1.3, +18.18%)")


def test_lower_is_worse_metrics_regress_when_they_fall():
    c = compare(side({"pipeline.utilisation_pct": 80.0}), side({"pipeline.utilisation_pct": 70.0}), [])
    assert [r.verdict for r in c.rows] == [REGRESSED]


def test_time_shares_that_fall_while_the_call_gets_faster_are_traded_not_regressed():
    # P3's case: more stream-callback threads make each call 31% faster, and the ramp a larger share of it
    base = {"pipeline.call_cycles_per_micro_batch": 10_000.0, "pipeline.ramp_efficiency_pct": 97.0,
            "pipeline.utilisation_pct": 60.0, "throughput.samples_per_second": 7_251.0}
    new = {"pipeline.call_cycles_per_micro_batch": 6_900.0, "pipeline.ramp_efficiency_pct": 91.5,
           "pipeline.utilisation_pct": 52.0, "throughput.samples_per_second": 10_455.0}
    c = compare(side(base), side(new), [])
    assert {r.metric: r.verdict for r in c.rows} == {
        "pipeline.call_cycles_per_micro_batch": IMPROVED, "pipeline.ramp_efficiency_pct": TRADED,
        "pipeline.utilisation_pct": TRADED, "throughput.samples_per_second": IMPROVED}
    assert not c.failed
    assert c.headline() == ("popviz: OK: no regression (4 metric(s) compared, 2 improved, 2 time share(s) "
                            "traded for a faster call)")
    assert "⇄ traded" in text(c) and "⇄ traded" in markdown(c)
    suite = ET.fromstring(junit(c))
    assert (suite.get("tests"), suite.get("failures")) == ("4", "0")
    [out] = [e.text for e in suite.iter("system-out") if "ramp" in e.text]
    assert out == ("pipeline.ramp_efficiency_pct traded: 97.00% → 91.50% (-5.50pp; threshold +5pp) while the call "
                   "got faster; a --fail rule naming it makes it a gate")
    # a rule naming the share makes it a gate again, as asked
    named = compare(side(base), side(new), [parse_rule("pipeline.ramp_efficiency_pct:+1pp", "--fail")])
    assert {r.metric: r.verdict for r in named.rows}["pipeline.ramp_efficiency_pct"] == REGRESSED and named.failed
    # without a faster call (or with a speed figure regressing) the share still regresses
    slower = dict(new, **{"pipeline.call_cycles_per_micro_batch": 10_050.0, "throughput.samples_per_second": 7_200.0})
    assert [r.verdict for r in compare(side(base), side(slower), []).rows if r.metric in (
        "pipeline.ramp_efficiency_pct", "pipeline.utilisation_pct")] == [REGRESSED, REGRESSED]
    mixed = dict(new, **{"throughput.samples_per_second": 7_000.0})
    assert compare(side(base), side(mixed), []).failed


def test_a_larger_stream_copy_share_of_a_faster_call_is_traded():
    """A reviewer froze most of a model: its calls got 40% faster and the same host copies became
    a larger share of them, which failed the gate as a host-transfer regression."""
    base = {"throughput.samples_per_second": 1_000.0, "host_io.stream_copy_pct": 4.0}
    faster = {"throughput.samples_per_second": 1_400.0, "host_io.stream_copy_pct": 12.0}
    c = compare(side(base), side(faster), [])
    assert {r.metric: r.verdict for r in c.rows}["host_io.stream_copy_pct"] == TRADED and not c.failed
    same_speed = dict(faster, **{"throughput.samples_per_second": 1_000.0})
    assert compare(side(base), side(same_speed), []).failed  # the copies themselves grew


def test_missing_engines_and_metrics_are_listed_not_crashed_on():
    base = side({"pipeline.imbalance_ratio": 1.1}) + side({}, name="inference")
    new = side({"pipeline.imbalance_ratio": 1.1, "memory.max_used_pct": 50.0}) + side({}, name="eval")
    c = compare(base, new, [])
    assert c.only_base == ["inference"] and c.only_new == ["eval"]
    assert {r.metric: r.verdict for r in c.rows} == {"pipeline.imbalance_ratio": SAME, "memory.max_used_pct": "new"}
    assert not c.failed


def test_an_engine_with_metrics_missing_from_new_fails_the_gate():
    """A validation model that is no longer built (or that --calls 1 stopped before) is a lost
    engine, never a pass; an engine only in NEW is listed."""
    base = side({"pipeline.imbalance_ratio": 1.1}) + side({"throughput.samples_per_second": 100.0}, name="inference")
    new = side({"pipeline.imbalance_ratio": 1.1}) + side({"throughput.samples_per_second": 100.0}, name="eval")
    c = compare(base, new, [])
    assert c.failed and c.lost == ["engine inference ran in BASE and is missing from NEW (renamed eval? the same "
                                   "configuration is there)"]
    assert c.only_base == ["inference"] and c.quiet_only_base == [] and c.only_new == ["eval"]
    assert c.headline().startswith("popviz: FAIL: engine inference ran in BASE and is missing from NEW")
    from popviz.ci import render

    assert "only in base" not in render.markdown(c).lower()
    assert 'message="engine inference ran in BASE and is missing from NEW (renamed eval?' in render.junit(c)
    other = compare(base, side({"pipeline.imbalance_ratio": 1.1}) + side({}, name="eval", config={"x": 1}), [])
    assert other.lost == ["engine inference ran in BASE and is missing from NEW"]  # no look-alike: no guess
    # nothing on both sides: bad input (exit 2), not a failure of every engine
    with pytest.raises(UsageError, match="no engine is on both sides .*: nothing was compared; compare matches "
                                         "engines by name, so pass two captures of the same script"):
        check_gate(compare(base[1:], new[1:], []), [])


def test_configuration_changes_come_first():
    c = compare(side({}, config={"gradient_accumulation": 16, "output_mode": "Final"}),
                side({}, config={"gradient_accumulation": 32, "output_mode": "Final"}), [])
    assert c.config_changes == [{"engine": "training", "field": "gradient_accumulation", "base": 16, "new": 32}]


def test_estimated_against_measured_is_refused_unless_allowed():
    m = {"pipeline.cycles_per_micro_batch": 1000.0}
    with pytest.raises(UsageError, match="estimated on one side and measured on the other"):
        compare(side(m, estimated=True), side(m), [])
    assert compare(side(m, estimated=True), side(m), [], allow_mixed=True).mixed


def test_a_side_without_metrics_compares_nothing_and_says_why():
    # an engine the script never called (RUN001) is neither estimated nor measured: not "mixed"
    never = side({}, findings=[{"code": "RUN001", "severity": "error"}])
    ran = side({"pipeline.cycles_per_micro_batch": 1000.0}, estimated=True)
    c = compare(ran, never, [])  # it stopped running: a failure, not "gone" rows
    assert not c.mixed and c.rows == [] and c.failed
    assert c.headline() == "popviz: FAIL: engine training ran in BASE but has no metrics in NEW: never called (RUN001)"
    check_gate(c, [])
    with pytest.raises(UsageError, match=r"^no metric is on both sides: nothing was compared \(base: engine "
                       r"training has no metrics: never called \(RUN001\)\)$"):
        check_gate(compare(never, ran, []), [])


# ------------------------------------------------------------------ real CLI on real bundles

def test_compare_cli_regression_improvement_and_self(tmp_path):
    base = write(tmp_path, "base", [1000, 1000, 1000, 1000])
    worse = write(tmp_path, "worse", [1000, 1600, 1000, 1000])
    all_outputs = write(tmp_path, "all", [1000, 1000, 1000, 1000], output_mode="All")
    final = write(tmp_path, "final", [1000, 1000, 1000, 1000], output_mode="Final")
    same = run_cli("compare", str(base), str(base))
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines()[0].startswith("popviz: OK: no regression")
    bad = run_cli("compare", str(base), str(worse), env={"COLUMNS": "80"})
    assert bad.returncode == 1, bad.stderr
    assert all(len(line) <= 80 for line in bad.stdout.splitlines()[:3])  # the headline wraps at the width
    first = unwrapped(bad.stdout).splitlines()[0]
    assert first.startswith("popviz: FAIL: regression in training pipeline.cycles_per_micro_batch (3,031 → 4,850, +60.00%)")
    assert "pipeline.stage1.cycles_per_micro_batch" in first and "pipeline.imbalance_ratio" in first
    good = run_cli("compare", str(all_outputs), str(final), "--fail", "host_io.stream_copy_pct:+5pp",
                   "--fail", "pipeline.ramp_efficiency_pct:+10pp",
                   env={"COLUMNS": "200"})
    assert good.returncode == 0, good.stdout
    assert "output_mode: All → Final" in good.stdout
    assert "host_io.output_bytes_per_call" in good.stdout and "improved" in good.stdout


def test_baseline_round_trip_and_never_overwrite(tmp_path):
    base = write(tmp_path, "base", [1000, 1200, 1000, 1000], memory_frac=[0.5, 0.6, 0.5, 0.5])
    target = tmp_path / "baseline.json"
    saved = run_cli("baseline", "save", str(base), "-o", str(target))
    assert saved.returncode == 0, saved.stderr
    doc = json.loads(target.read_text())
    assert doc["format"] == "popviz-baseline" and doc["format_version"] == 1
    engine = doc["engines"][0]
    assert engine["config"]["gradient_accumulation"] == 16 and engine["provenance"]["estimated"] is False
    assert engine["metrics"]["pipeline.stage1.cycles_per_micro_batch"] == 3637.5  # 1200 + 2 x 1200 + exchange
    assert engine["metrics"]["memory.ipu1.used_pct"] == pytest.approx(60.0, abs=0.01)
    assert run_cli("compare", str(target), str(base)).returncode == 0
    again = run_cli("baseline", "save", str(base), "-o", str(target))
    assert_one_line_error(again, "baseline.json exists", "--force")
    assert run_cli("baseline", "save", str(base), "-o", str(target), "--force").returncode == 0


def test_metrics_from_a_newer_popviz_are_named_not_silently_skipped(tmp_path):
    base = write(tmp_path, "base", [1000, 1000])
    target = tmp_path / "baseline.json"
    assert run_cli("baseline", "save", str(base), "-o", str(target)).returncode == 0
    doc = json.loads(target.read_text())
    doc["engines"][0]["metrics"]["pipeline.future_metric_pct"] = 12.5  # well-formed, not one of ours
    target.write_text(json.dumps(doc))
    proc = run_cli("compare", str(target), str(base))
    assert proc.returncode == 0, proc.stderr
    assert "not compared, unknown to this popviz (from a newer one, or misspelt): training " \
        "pipeline.future_metric_pct" in " ".join(proc.stdout.split())
    out = json.loads(run_cli("compare", str(target), str(base), "--json").stdout)
    assert out["unknown_metrics"] == [{"engine": "training", "metric": "pipeline.future_metric_pct"}]
    md = " ".join(run_cli("compare", str(target), str(base), "--markdown").stdout.split())  # soft-wrapped
    assert "Not compared, unknown to this popviz (from a newer one, or misspelt): training " \
        "pipeline.future_metric_pct" in md
    # an unknown metric's value is still checked: a finite number
    for bad in ("abc", None, True, float("nan"), 10**400):
        doc["engines"][0]["metrics"]["pipeline.future_metric_pct"] = bad
        target.write_text(json.dumps(doc))
        assert_one_line_error(run_cli("compare", str(target), str(base)), "baseline.json",
                              "not a finite number for metric 'pipeline.future_metric_pct'")


def test_bad_inputs_are_one_line_errors(tmp_path):
    base = write(tmp_path, "base", [1000, 1000])
    junk = tmp_path / "junk.json"
    junk.write_text('{"format": "popviz-baseline", "format_version": 1, "engines": [{"name": 3}]}')
    assert_one_line_error(run_cli("compare", str(junk), str(base)), "junk.json", "malformed engine")
    other = tmp_path / "other.json"
    other.write_text("{}")
    assert_one_line_error(run_cli("compare", str(other), str(base)), "other.json", "not a popviz baseline")
    assert_one_line_error(run_cli("compare", str(base), str(tmp_path / "nope")), "nope", "does not exist")
    assert_one_line_error(run_cli("compare", str(base), str(base), "--fail", "x:5parsecs"), "parsecs")


def test_thresholds_from_pyproject_and_cli(tmp_path):
    base = write(tmp_path, "base", [1000, 1000, 1000, 1000])
    worse = write(tmp_path, "worse", [1000, 1100, 1000, 1000])
    assert run_cli("compare", str(base), str(worse)).returncode == 1
    loose = ["--fail", "pipeline.*:20%"]
    assert run_cli("compare", str(base), str(worse), *loose).returncode == 0
    (tmp_path / "pyproject.toml").write_text('[tool.popviz.fail]\n"pipeline.*" = "20%"\n')
    assert run_cli("compare", str(base), str(worse), cwd=tmp_path).returncode == 0


def test_markdown_json_junit_and_github_summary(tmp_path):
    base = write(tmp_path, "base", [1000, 1000, 1000, 1000])
    worse = write(tmp_path, "worse", [1000, 1600, 1000, 1000])
    md = run_cli("compare", str(base), str(worse), "--markdown")
    assert md.returncode == 1
    assert md.stdout.startswith("### ❌ popviz: FAIL: regression in training")
    assert "| training | `pipeline.imbalance_ratio` |" in md.stdout
    js = json.loads(run_cli("compare", str(base), str(worse), "--json").stdout)
    assert js["failed"] is True and {"pipeline.imbalance_ratio"} <= {m["metric"] for m in js["metrics"]
                                                                      if m["verdict"] == "regressed"}
    junit = tmp_path / "junit.xml"
    summary = tmp_path / "summary.md"
    proc = run_cli("compare", str(base), str(worse), "--junit", str(junit), "--github",
                   env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert proc.returncode == 1
    assert "::error title=popviz regression::training pipeline.imbalance_ratio" in proc.stdout
    assert summary.read_text().startswith("### ❌ popviz: FAIL")
    suite = ET.parse(junit).getroot()
    failures = suite.findall("./testcase/failure")
    assert int(suite.get("failures")) == len(failures) >= 3
    assert int(suite.get("tests")) == len(suite.findall("./testcase"))
    msg = next(f.get("message") for f in failures if f.get("message").startswith("pipeline.imbalance_ratio"))
    assert "→" in msg and "threshold" in msg
    assert_one_line_error(run_cli("compare", str(base), str(worse), "--junit", str(junit)), "junit.xml", "exists")
    junit.write_text("old")
    proc = run_cli("compare", str(base), str(worse), "--junit", str(junit), "--force")
    assert proc.returncode == 1 and int(ET.parse(junit).getroot().get("failures")) == len(failures)
    link = tmp_path / "link.xml"
    link.symlink_to(junit)
    assert_one_line_error(run_cli("compare", str(base), str(worse), "--junit", str(link), "--force"),
                          "link.xml is a symbolic link")
    assert_one_line_error(run_cli("compare", str(base), str(worse), "--summary", env={"GITHUB_STEP_SUMMARY": ""}),
                          "GITHUB_STEP_SUMMARY")


def test_check_budgets_and_ignored_codes(tmp_path):
    run = write(tmp_path, "run", [1000, 1500, 1000, 1000], memory_frac=[0.5, 0.9, 0.5, 0.5])
    budgets = tmp_path / "budgets.toml"
    budgets.write_text('"memory.*.used_pct" = "<= 85"\n"pipeline.imbalance_ratio" = "<= 1.2"\n')
    proc = run_cli("check", str(run), "--budget", str(budgets), "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    broken = {(b["metric"], b["budget"]) for b in doc["budgets"] if not b["ok"]}
    assert broken == {("memory.ipu1.used_pct", "<= 85"), ("pipeline.imbalance_ratio", "<= 1.2")}
    assert len(doc["budgets"]) == 5
    ok = tmp_path / "ok.toml"
    ok.write_text('[budgets]\n"memory.max_used_pct" = "<= 95"\n')
    assert run_cli("check", str(run), "--budget", str(ok)).returncode == 0
    findings = run_cli("check", str(run), "--budget", str(ok), "--fail-on", "warning")
    assert findings.returncode == 1 and "PIPE001" in findings.stdout.splitlines()[0]
    codes = {f["code"] for f in json.loads(run_cli("check", str(run), "--fail-on", "warning", "--json").stdout)
             ["findings"]}
    ignored = run_cli("check", str(run), "--fail-on", "warning", "--ignore", ",".join(sorted(codes)))
    assert ignored.returncode == 0 and "(ignored)" in ignored.stdout
    analyse = run_cli("analyse", str(run), "--fail-on", "warning", "--ignore", ",".join(sorted(codes)))
    assert analyse.returncode == 0 and "ignored" in analyse.stderr
    (tmp_path / "pyproject.toml").write_text(f"[tool.popviz]\nignore = {json.dumps(sorted(codes))}\n")
    assert run_cli("analyse", str(run), "--fail-on", "warning", cwd=tmp_path).returncode == 0
    bad = tmp_path / "bad.toml"
    bad.write_text('"memory.max_used_pct" = "about 90"\n')
    assert_one_line_error(run_cli("check", str(run), "--budget", str(bad)), "bad.toml", "operator and a number")


def test_a_new_split_marks_per_stage_and_per_ipu_rows_moved_and_the_pipeline_decides(tmp_path):
    """Applying the split `popviz plan` proposes moves work between stages on purpose: a heavier
    stage 2 is not a regression when the slowest stage got faster. The same shift with the same
    split is one."""
    blocks = [["embed"], ["layers1"], ["layers4"], ["layers7"]]
    base = write(tmp_path, "base", [1000, 1600, 1000, 1000], blocks=blocks)
    replanned = write(tmp_path, "replanned", [1000, 1300, 1300, 1000],
                      blocks=[["embed"], ["layers1"], ["layers3"], ["layers7"]])
    proc = run_cli("compare", str(base), str(replanned), "--json")
    assert proc.returncode == 0, proc.stdout
    doc = json.loads(proc.stdout)
    assert doc["resplit"] == ["training"]
    verdicts = {m["metric"]: m["verdict"] for m in doc["metrics"]}
    assert verdicts["pipeline.stage1.cycles_per_micro_batch"] == "moved"  # 1600 -> 1300 (+ exchange)
    assert verdicts["pipeline.stage2.cycles_per_micro_batch"] == "moved"  # 1000 -> 1300
    assert verdicts["pipeline.cycles_per_micro_batch"] == IMPROVED
    assert verdicts["pipeline.imbalance_ratio"] == IMPROVED
    text = run_cli("compare", str(base), str(replanned), env={"COLUMNS": "80"}).stdout
    assert "    stage 2: IPU2: layers4 → IPU2: layers3" in text
    assert "the split changed: per-stage and per-IPU rows are marked moved and do not fail" in text
    # at 80 columns every metric name stays whole on its line
    rows = [line for line in text.splitlines() if line.startswith("pipeline.")]
    assert [r.split()[0] for r in rows] == [m["metric"] for m in doc["metrics"]
                                            if m["verdict"] != SAME and m["metric"].startswith("pipeline.")]
    assert all(len(line) <= 80 for line in text.splitlines())
    # the same heavier stage 2 with the split unchanged is a regression
    heavier = write(tmp_path, "heavier", [1000, 1600, 1300, 1000], blocks=blocks)
    doc = json.loads(run_cli("compare", str(base), str(heavier), "--json").stdout)
    assert doc["resplit"] == [] and doc["failed"]
    assert {m["metric"]: m["verdict"] for m in doc["metrics"]}["pipeline.stage2.cycles_per_micro_batch"] == REGRESSED
    # and a new split that makes the slowest stage slower still fails on the pipeline-wide figures
    worse = write(tmp_path, "worse", [1000, 1000, 1900, 1000], blocks=[["embed"], ["layers1"], ["layers3"], ["layers7"]])
    doc = json.loads(run_cli("compare", str(base), str(worse), "--json").stdout)
    assert doc["failed"] and doc["headline"].startswith("popviz: FAIL: regression in training "
                                                        "pipeline.cycles_per_micro_batch")
    assert {m["verdict"] for m in doc["metrics"] if m["metric"].startswith("pipeline.stage")} <= {"moved", "=", "~"}


def test_the_split_is_compared_by_where_each_layer_runs_whatever_the_blocks_are_called():
    from popviz.ci.metrics import split_change

    stages = ["IPU0: B1", "IPU1: B2"]
    base = {"stages": stages, "layer_ipus": {"emb": 0, "l0": 0, "l1": 1}}
    # the same layers on the same IPUs, blocks renamed (--split names them after modules): same split
    renamed = {"stages": ["IPU0: emb", "IPU1: l1"], "layer_ipus": {"emb": 0, "l0": 0, "l1": 1}}
    assert split_change(base, renamed) == (False, [])
    # a layer moved inside unchanged block names: a new split, and which layer moved
    moved = {"stages": stages, "layer_ipus": {"emb": 0, "l0": 1, "l1": 1}}
    assert split_change(base, moved) == (True, [("l0", 0, 1)])
    # no layer table on one side (an older baseline): by the stages
    assert split_change({"stages": stages}, moved) == (False, [])
    assert split_change({"stages": stages}, renamed) == (True, [])
    metrics = {"pipeline.cycles_per_micro_batch": 1000.0, "pipeline.stage1.cycles_per_micro_batch": 1000.0}
    heavier = {"pipeline.cycles_per_micro_batch": 1000.0, "pipeline.stage1.cycles_per_micro_batch": 1200.0}
    c = compare(side(metrics, config=base), side(heavier, config=moved), [])
    assert c.resplit == ["training"] and not c.failed
    assert c.config_changes == [{"engine": "training", "field": "layers moved", "base": {"l0": 0}, "new": {"l0": 1}}]
    assert {r.metric: r.verdict for r in c.rows}["pipeline.stage1.cycles_per_micro_batch"] == "moved"
    c = compare(side(metrics, config=base), side(heavier, config=renamed), [])
    assert c.resplit == [] and c.failed and [r.metric for r in c.regressions] == [
        "pipeline.stage1.cycles_per_micro_batch"]


def test_blocks_renamed_around_the_same_layers_are_not_a_configuration_change():
    """A --split re-run of a script's own split names its blocks after modules (layers.9 for the
    script's layers9): nothing moved, so no stage change is listed."""
    base = {"stages": ["IPU0: emb", "IPU1: layers9"], "layer_ipus": {"emb": 0, "layers.9": 1}}
    renamed = {"stages": ["IPU0: emb", "IPU1: layers.9"], "layer_ipus": {"emb": 0, "layers.9": 1}}
    metrics = {"pipeline.cycles_per_micro_batch": 1000.0}
    c = compare(side(metrics, config=base), side(metrics, config=renamed), [])
    assert c.config_changes == [] and c.resplit == []
    # without the layer tables the names are all popviz has: listed
    c = compare(side(metrics, config={"stages": base["stages"]}), side(metrics, config={"stages": renamed["stages"]}), [])
    assert [ch["field"] for ch in c.config_changes] == ["stages"]


def test_estimated_sides_are_labelled_and_list_changes_read_as_text_in_markdown():
    import dataclasses

    est = [dataclasses.replace(e, estimated=True) for e in side({"pipeline.imbalance_ratio": 1.1})]
    c = compare(est, est, [])
    assert c.estimated == [{"engine": "training", "base": True, "new": True}]
    assert "estimated by the emulator's cost model, not measured: training on both sides" in text(c)
    assert "Estimated by the emulator's cost model, not measured: training on both sides." in markdown(c)
    mixed = compare(side({"pipeline.imbalance_ratio": 1.1}), est, [], allow_mixed=True)
    assert mixed.estimated_line().endswith("training on the new side only")
    assert compare(side({"pipeline.imbalance_ratio": 1.1}), side({"pipeline.imbalance_ratio": 1.1}), []).estimated == []
    a = side({"pipeline.imbalance_ratio": 1.1})
    b = [dataclasses.replace(e, config={**e.config, "stages": ["IPU0: a", "IPU1: c"]}) for e in a]
    a = [dataclasses.replace(e, config={**e.config, "stages": ["IPU0: a", "IPU1: b"]}) for e in a]
    assert "- `training` stages: stage 1: IPU1: b → IPU1: c" in markdown(compare(a, b, []))


def test_analyse_marks_ignored_findings_where_it_shows_them():
    from conftest import SAMPLES

    args = ("analyse", str(SAMPLES / "mnist_pipeline"), "--ignore", "HIO001,HIO002")
    text_out = " ".join(run_cli(*args).stdout.split())
    assert "INFO HIO002 Training returns every micro-batch's outputs (OutputMode.All) (ignored: accepted by the " \
           "team)" in text_out
    assert "(up to +79% throughput; ignored: accepted by the team)" in text_out
    md = " ".join(run_cli(*args, "--markdown").stdout.split())  # soft-wrapped at 80 columns
    assert "`HIO001` IPU0 waits for the host: 25.4% of its cycles in stream copies *(ignored: accepted by the team)*" in md
    assert "ignored: accepted" not in run_cli("analyse", str(SAMPLES / "mnist_pipeline")).stdout


def test_ignore_refuses_a_code_no_analysis_reports(tmp_path):
    """A typo (PIPE03) used to be accepted and ignore nothing, so --fail-on still failed on PIPE003."""
    from conftest import SAMPLES, assert_one_line_error

    sample = str(SAMPLES / "mnist_pipeline")
    for command in ("analyse", "check"):
        line = assert_one_line_error(run_cli(command, sample, "--fail-on", "error", "--ignore", "PIPE003,PIPE03"), "--ignore: 'PIPE03' ",
                                     "is not a finding code", "PIPE003", "docs/findings.md")
        assert "Traceback" not in line
    (tmp_path / "pyproject.toml").write_text('[tool.popviz]\nignore = ["HIO002", "hio02"]\n')
    assert_one_line_error(run_cli("analyse", sample, cwd=tmp_path), "pyproject.toml [tool.popviz]: ignore: 'hio02' ",
                          "is not a finding code")
    # lower case is still a code
    assert run_cli("analyse", sample, "--ignore", "pipe003").returncode == 0


def test_every_finding_code_is_known_and_documented():
    """popviz.analysis.findings.CODES (what --ignore accepts) is every code the analyses report
    and every code docs/findings.md documents."""
    import re
    from pathlib import Path

    from popviz.analysis.findings import CODES

    root = Path(__file__).resolve().parent.parent
    pattern = re.compile(r"\b(?:PIPE|MEM|HIO|INST|RUN)\d{3}\b")
    in_source = {c for p in (root / "popviz" / "analysis").glob("*.py") for c in pattern.findall(p.read_text())}
    assert in_source == set(CODES)
    assert set(pattern.findall((root / "docs" / "findings.md").read_text())) == set(CODES)


def test_whole_metric_names_at_80_columns_even_with_a_huge_relative_change():
    from conftest import SAMPLES

    out = run_cli("compare", str(SAMPLES / "bert_pipeline"), str(SAMPLES / "bert_even_split"), "--allow-mixed",
                  env={"COLUMNS": "80"}).stdout
    table = out[out.index("\nmetric"):].splitlines()
    assert "pipeline.stage0.cycles_per_micro_batch 1,247,083         —          gone" in table
    assert any(line.startswith("host_io.output_bytes_per_call") and "+31,663% ✗ regressed" in line for line in table)
    assert max(len(line) for line in table) <= 80


def test_a_budget_on_a_metric_the_run_lacks_is_broken_not_bad_input(tmp_path):
    from conftest import SAMPLES

    budgets = tmp_path / "budgets.toml"
    budgets.write_text('[budgets]\n"pipeline.imbalance_ratio" = "<1.2"\n')
    proc = run_cli("check", str(SAMPLES / "oom_model"), "--budget", str(budgets))  # never ran: no cycles
    assert proc.returncode == 1, proc.stderr
    assert unwrapped(proc.stdout).startswith("popviz: FAIL: budget broken: training pipeline.imbalance_ratio = "
                                             "missing from this run (budget < 1.2)")
    budgets.write_text('[budgets]\n"pipeline.imbalanse_ratio" = "<1.2"\n')  # a typo is still bad input
    assert_one_line_error(run_cli("check", str(SAMPLES / "oom_model"), "--budget", str(budgets)),
                          "budget pipeline.imbalanse_ratio matches no metric")


def test_check_says_when_the_run_is_estimated(tmp_path):
    from conftest import SAMPLES

    budgets = tmp_path / "budgets.toml"
    budgets.write_text('[budgets]\n"memory.max_used_pct" = "<=20"\n')
    out = run_cli("check", str(SAMPLES / "mnist_pipeline"), "--budget", str(budgets)).stdout.splitlines()
    assert out[:2] == ["popviz: OK: 2 budget(s) hold",
                       "estimated by the emulator's cost model, not measured: inference, training"]


def test_markdown_shows_a_quoted_command_as_code_not_as_escaped_backticks():
    from conftest import SAMPLES

    md = " ".join(run_cli("analyse", str(SAMPLES / "oom_model"), "--markdown").stdout.split())  # soft-wrapped
    assert "\\`" not in md
    assert "(needed to run; `popviz plan` finds a split within 90% of each IPU's memory" in md


def test_compare_checks_the_configured_budgets_on_the_new_run(tmp_path):
    """[tool.popviz.budgets] gate compare as they gate check (was: compare ignored them, though
    its --config help named budgets): on NEW, with check's rows, verdicts and exit code."""
    base = write(tmp_path, "base", [1000, 1000, 1000, 1000], memory_frac=[0.5, 0.5, 0.5, 0.5])
    new = write(tmp_path, "new", [1000, 1000, 1000, 1000], memory_frac=[0.5, 0.9, 0.5, 0.5])
    (tmp_path / "pyproject.toml").write_text('[tool.popviz.budgets]\n"memory.ipu1.used_pct" = "<= 85"\n'
                                             '[tool.popviz.fail]\n"memory.*" = "100%"\n')
    broken = run_cli("compare", str(base), str(new), cwd=tmp_path)
    assert broken.returncode == 1, broken.stdout
    assert broken.stdout.splitlines()[0] == ("popviz: FAIL: budget broken: training memory.ipu1.used_pct = 90.00% "
                                             "(budget <= 85)")
    assert [line.split() for line in broken.stdout.splitlines()[-2:]] == [
        ["engine", "metric", "value", "budget", "verdict"],
        ["training", "memory.ipu1.used_pct", "90.00%", "<=", "85", "✗", "broken"]]
    doc = json.loads(run_cli("compare", str(base), str(new), "--json", cwd=tmp_path).stdout)
    assert doc["budgets"] == [{"engine": "training", "metric": "memory.ipu1.used_pct", "unit": "pct",
                               "value": pytest.approx(90.0), "budget": "<= 85", "ok": False}]
    held = run_cli("compare", str(new), str(base), cwd=tmp_path)
    assert held.returncode == 0, held.stdout
    assert held.stdout.splitlines()[0] == "popviz: OK: no regression (25 metric(s) compared), 1 budget(s) hold"
    # the same semantics as check: a budget that matches no metric popviz defines is bad input
    (tmp_path / "pyproject.toml").write_text('[tool.popviz.budgets]\n"memory.ipu1.used_pcent" = "<= 85"\n')
    assert_one_line_error(run_cli("compare", str(base), str(new), cwd=tmp_path),
                          "budget memory.ipu1.used_pcent matches no metric of the run")


def test_an_unknown_key_in_tool_popviz_is_refused(tmp_path):
    """A misspelt table (fial) would gate nothing: one line naming the key, the file and the keys
    there are (was: silently ignored)."""
    run = write(tmp_path, "run", [1000, 1000])
    (tmp_path / "pyproject.toml").write_text('[tool.popviz.fial]\n"memory.*" = "2%"\n')
    for args in (("compare", str(run), str(run)), ("check", str(run), "--fail-on", "error"),
                 ("analyse", str(run))):
        line = assert_one_line_error(run_cli(*args, cwd=tmp_path))
        assert line == ("popviz: error: pyproject.toml: unknown key 'fial' in [tool.popviz]; the keys are fail, "
                        "ignore, budgets (docs/ci.md)"), args
    other = tmp_path / "ci.toml"  # --config: [tool.popviz], or else the whole file is the table
    other.write_text('[project]\nname = "x"\n')
    assert assert_one_line_error(run_cli("compare", str(run), str(run), "--config", str(other))) == (
        f"popviz: error: {other}: unknown key 'project' in the file (it has no [tool.popviz] table, so its top "
        "level is read as one); the keys are fail, ignore, budgets (docs/ci.md)")


def test_github_annotations_go_to_stderr_when_stdout_is_json_or_markdown(tmp_path):
    """--json --github printed ::error lines after the JSON, which then did not parse; GitHub
    reads workflow commands on stderr too."""
    base = write(tmp_path, "base", [1000, 1000])
    worse = write(tmp_path, "worse", [1000, 1300])
    env = {"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    annotation = "::error title=popviz regression::training pipeline.imbalance_ratio: 1 → 1.13 (+13.04%25)"
    for fmt_ in ("--json", "--markdown"):
        proc = run_cli("compare", str(base), str(worse), fmt_, "--github", env=env)
        alone = run_cli("compare", str(base), str(worse), fmt_)
        assert proc.returncode == alone.returncode == 1
        assert proc.stdout == alone.stdout  # the JSON or Markdown, whole and alone
        assert annotation in proc.stderr.splitlines()
        # the annotations, and the headline for a log whose stdout went to a file
        assert all(line.startswith(("::error title=popviz regression::", "popviz: FAIL: regression in training"))
                   for line in unwrapped(proc.stderr).splitlines())  # the headline wraps at the width
        assert alone.stderr.startswith("popviz: FAIL: regression in training pipeline.cycles_per_micro_batch")
    json.loads(run_cli("compare", str(base), str(worse), "--json", "--github", env=env).stdout)
    console = run_cli("compare", str(base), str(worse), "--github", env=env)
    assert annotation in console.stdout.splitlines() and console.stderr == ""


def test_a_fractional_count_in_a_baseline_is_refused(tmp_path):
    """1.5 tiles cannot be: refused like negative bytes (was: accepted and shown rounded, as 2)."""
    from popviz.ci.baseline import document

    target = tmp_path / "baseline.json"
    engines = side({"memory.tiles_overflowing": 1.5, "memory.ipu0.used_bytes": 1000.0})
    target.write_text(json.dumps(document(engines, "run")))
    line = assert_one_line_error(run_cli("compare", str(target), str(target)))
    assert line == (f"popviz: error: {target} has an impossible value for metric 'memory.tiles_overflowing' of "
                    "engine 'training': 1.5 (a count is a whole number); save a new one with popviz baseline save")
    engines[0].metrics["memory.tiles_overflowing"] = 2.0  # a whole count, written as a float, is fine
    target.write_text(json.dumps(document(engines, "run")))
    assert run_cli("compare", str(target), str(target)).returncode == 0


def test_an_output_that_cannot_be_written_is_refused_before_any_output(tmp_path):
    """--junit /proc/j.xml was refused only after the whole report had printed (and its verdict
    was replaced by exit 2): now before anything, like a missing directory."""
    run = write(tmp_path, "run", [1000, 1000])
    for args in (("compare", str(run), str(run)), ("check", str(run), "--fail-on", "error")):
        proc = run_cli(*args, "--junit", "/proc/popviz-junit.xml")
        line = assert_one_line_error(proc, "/proc")
        assert proc.stdout == "", proc.stdout
        assert line in ("popviz: error: /proc/popviz-junit.xml cannot be created (No such file or directory); "
                        "choose another path", "popviz: error: /proc is not writable; choose a directory you can "
                        "write to")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # the probe leaves nothing behind
    assert run_cli("compare", str(run), str(run), "--junit", str(tmp_path / "j.xml")).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.xml", "run"]


def test_an_unquoted_dotted_metric_under_fail_says_to_quote_it(tmp_path):
    """TOML reads pipeline.imbalance_ratio = "5%" as a table: the hint budgets give (was:
    "threshold {'imbalance_ratio': '5%'} for pipeline ... is not a number")."""
    run = write(tmp_path, "run", [1000, 1000])
    (tmp_path / "pyproject.toml").write_text('[tool.popviz.fail]\npipeline.imbalance_ratio = "5%"\n')
    assert assert_one_line_error(run_cli("compare", str(run), str(run), cwd=tmp_path)) == (
        "popviz: error: pyproject.toml [tool.popviz]: fail 'pipeline' is a table, not a threshold: quote a metric "
        "name that has dots, e.g. \"pipeline.imbalance_ratio\" = \"5%\"")


def test_the_budgets_example_in_the_docs_holds_on_an_emulated_report(tmp_path):
    """docs/ci.md's budgets file had memory.tiles_overflowing, which an emulated report lacks: the
    documented emulated workflow was broken on every run ("missing from this run")."""
    from conftest import ROOT, SAMPLES

    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    example = doc.split("## `popviz check", 1)[1].split("```toml", 1)[1].split("```", 1)[0]
    (tmp_path / "budgets.toml").write_text(example)
    proc = run_cli("check", str(SAMPLES / "mnist_pipeline"), "--budget", str(tmp_path / "budgets.toml"))
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[:2] == ["popviz: OK: 10 budget(s) hold", "estimated by the emulator's cost model, "
                                            "not measured: inference, training"]


def test_check_findings_wrap_beside_their_code_and_unknown_metrics_one_per_line(tmp_path):
    """At 80 columns a finding's title wrapped under its severity ("copies (fails)" at the start
    of a line), and an engine's name and its unknown metric could land on two lines."""
    from conftest import SAMPLES

    out = run_cli("check", str(SAMPLES / "mnist_pipeline"), "--fail-on", "warning", env={"COLUMNS": "80"}).stdout
    assert ("WARNING HIO001 inference: IPU0 waits for the host: 25.4% of its cycles in stream\n"
            "               copies (fails)\n") in out
    target = tmp_path / "baseline.json"
    assert run_cli("baseline", "save", str(SAMPLES / "mnist_pipeline"), "-o", str(target)).returncode == 0
    doc = json.loads(target.read_text())
    doc["engines"][0]["metrics"]["pipeline.future_metric_pct"] = 12.5
    target.write_text(json.dumps(doc))
    out = run_cli("compare", str(target), str(SAMPLES / "mnist_pipeline"), env={"COLUMNS": "80"}).stdout
    engine = doc["engines"][0]["name"]
    assert ("not compared, unknown to this popviz (from a newer one, or misspelt):\n"
            f"  {engine} pipeline.future_metric_pct\n") in out


def test_a_faster_split_that_fills_the_fullest_ipu_more_but_under_90_percent_is_traded(tmp_path):
    """`popviz plan`'s split moves layers (and their memory) onto emptier IPUs: the plan's own
    check, `compare`, failed it on memory.max_used_pct (33% -> 39%) while analyse found nothing.
    Under the memory analysis's 90% it is traded; above it, or with the split unchanged, it fails."""
    blocks = [["embed"], ["layers1"], ["layers4"], ["layers7"]]
    new_blocks = [["embed"], ["layers1"], ["layers3"], ["layers7"]]
    base = write(tmp_path, "base", [1000, 3000, 1000, 1000], blocks=blocks, memory_frac=[0.33, 0.3, 0.3, 0.3])
    fuller = write(tmp_path, "fuller", [1000, 1500, 1500, 1000], blocks=new_blocks,
                   memory_frac=[0.33, 0.3, 0.39, 0.3])
    doc = json.loads(run_cli("compare", str(base), str(fuller), "--json").stdout)
    verdicts = {m["metric"]: m["verdict"] for m in doc["metrics"]}
    assert not doc["failed"], doc["headline"]
    assert verdicts["memory.max_used_pct"] == verdicts["memory.fullest_tile_pct"] == "traded"
    assert verdicts["pipeline.call_cycles_per_micro_batch"] == IMPROVED
    assert "2 memory fill(s) under 90% traded for a faster split" in doc["headline"]
    # over 90%: a regression, as analyse warns there
    full = write(tmp_path, "full", [1000, 1500, 1500, 1000], blocks=new_blocks, memory_frac=[0.33, 0.3, 0.95, 0.3])
    doc = json.loads(run_cli("compare", str(base), str(full), "--json").stdout)
    assert doc["failed"] and {m["metric"]: m["verdict"] for m in doc["metrics"]}["memory.max_used_pct"] == REGRESSED
    # a --fail rule naming it gates it again
    proc = run_cli("compare", str(base), str(fuller), "--fail", "memory.max_used_pct:+1pp", "--json")
    assert json.loads(proc.stdout)["failed"]


def test_a_memory_only_reports_modelled_ramp_is_not_a_ci_metric():
    """oom_model never ran: its ramp (99.9%, weighed by its per-layer estimate) is no share of a
    call, so the split popviz plan proposes for it (which runs at 91%) cannot 'regress' it."""
    from popviz import analyse, load
    from popviz.ci.metrics import engine_metrics

    from conftest import SAMPLES

    engine = analyse(load(SAMPLES / "oom_model")).engines[0]
    assert engine.metrics["pipeline"]["ramp_efficiency_basis"] == "model"
    metrics = engine_metrics(engine)
    assert "pipeline.ramp_efficiency_pct" not in metrics and metrics["memory.max_used_pct"] == pytest.approx(126.3, abs=0.05)


@pytest.mark.parametrize(("width", "threshold", "mib"), [(80, False, True), (87, False, True), (88, True, True),
                                                       (100, True, True), (101, True, False), (120, True, False)])
def test_metric_names_are_never_folded_where_they_fit(width, threshold, mib):
    """At 100-105 columns the wide table (threshold column, full figures) used to fold long names
    ("pipeline.cycles_per_micro_batc" / "h"), and below 100 it dropped the threshold even where it
    fitted: the widest layout with whole names wins (here full figures need 101 columns, the
    threshold in the tight layout 88)."""
    import io

    from popviz.ci.render import console

    m = {"pipeline.call_cycles_per_micro_batch": 3_154_795.0, "pipeline.stage0.cycles_per_micro_batch": 2_705_594.0,
         "memory.ipu0.used_bytes": 250_000_000.0}
    c = compare(side(m), side({k: v * 1.4 for k, v in m.items()}), [])
    buf = io.StringIO()
    console(c, file=buf, width=width, hints=False)
    lines = buf.getvalue().splitlines()
    for name in m:
        assert any(line.startswith(name + " ") for line in lines), (width, lines)
    assert ("MiB" in buf.getvalue()) == mib
    header = next(line for line in lines if line.startswith("metric"))
    assert ("threshold" in header) == threshold, lines


def test_a_file_that_is_neither_report_nor_baseline_says_both(tmp_path):
    from conftest import SAMPLES, assert_one_line_error, run_cli

    (tmp_path / "base.txt").write_text("hello")
    assert_one_line_error(run_cli("compare", "base.txt", str(SAMPLES / "mnist_pipeline"), cwd=tmp_path),
                          "base.txt is neither a report nor a baseline file", "popviz baseline save")


def test_a_change_of_100_percent_or_more_is_whole_percents_everywhere():
    """The headline and --json used "+31662.73%" where the table showed "+31,663%"."""
    from popviz.ci.compare import Row

    assert Row("t", "m", "bytes", 36.0, 11_434.0, "", REGRESSED).change == "+31,661%"
    assert Row("t", "m", "cycles", 100.0, 199.5, "", REGRESSED).change == "+99.50%"
    assert Row("t", "m", "cycles", 100.0, 0.0, "", IMPROVED).change == "-100%"


def test_a_directory_holding_several_captures_is_not_one_side(tmp_path):
    """capture --new-run into a directory with an earlier capture makes a timestamped run inside it:
    a side of compare (or a baseline) made of both would gate the old run. Refused, naming the
    newest; a directory with exactly one capture below it is read as that run (its engines keep
    their names), and analyse still reads several runs together."""
    import shutil

    sample = SAMPLES / "mnist_pipeline"
    shutil.copytree(sample, tmp_path / "runs")
    record = json.loads((sample / "popviz-run.json").read_text())
    shutil.copytree(sample, tmp_path / "runs" / "20261125-122911")
    (tmp_path / "runs" / "20261125-122911" / "popviz-run.json").write_text(
        json.dumps({**record, "started_at": "2026-11-25T12:29:11+00:00"}))
    (tmp_path / "runs" / "popviz-run.json").write_text(  # the earlier capture (whenever the sample was made)
        json.dumps({**record, "started_at": "2026-11-24T09:00:00+00:00"}))
    for args in (("compare", str(sample), "runs"), ("baseline", "save", "runs", "-o", "b.json"),
                 ("check", "runs", "--fail-on", "error")):
        assert_one_line_error(run_cli(*args, cwd=tmp_path), "runs holds 2 captured runs; pass one of the runs "
                              "inside it (runs/20261125-122911; the newest is runs/20261125-122911); the run "
                              "captured in runs itself is read alone once the runs inside it are moved out (e.g. "
                              "mv runs/20261125-122911 runs-20261125-122911)")
    assert len(popviz.load(tmp_path / "runs")) == 4  # analysed together, run by run
    # what the message says works: each run alone
    (tmp_path / "runs" / "20261125-122911").rename(tmp_path / "runs-20261125-122911")
    for side in ("runs", "runs-20261125-122911"):
        proc = run_cli("compare", str(sample), side, cwd=tmp_path)
        assert proc.returncode == 0 and proc.stdout.startswith("popviz: OK"), proc.stdout + proc.stderr
    shutil.copytree(sample, tmp_path / "fresh" / "20261125-123211")
    proc = run_cli("compare", str(sample), "fresh", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("popviz: OK"), proc.stdout + proc.stderr
    assert sorted(r.label for r in popviz.load(tmp_path / "fresh")) == ["inference", "training"]


def test_a_misspelt_table_beside_budgets_is_refused(tmp_path):
    from popviz.ci.thresholds import load_budgets

    path = tmp_path / "b.toml"
    path.write_text('[budgets]\n"memory.*.used_pct" = "<= 85"\n\n[bugdets]\n"pipeline.imbalance_ratio" = "<= 1.0"\n')
    with pytest.raises(UsageError, match=r"b.toml: 'bugdets' beside \[budgets\]"):
        load_budgets(str(path))
    path.write_text('[budgets]\n"memory.*.used_pct" = "<= 85"\n')
    assert [b.pattern for b in load_budgets(str(path))] == ["memory.*.used_pct"]


def test_the_inputs_per_micro_batch_are_part_of_the_configuration():
    """A larger micro-batch changes bytes, cycles and throughput: the configuration says why (it
    listed no change at all). A baseline from before the field existed shows no change."""
    from popviz.ci.baseline import from_reports

    [training] = [e for e in from_reports(SAMPLES / "mnist_pipeline") if e.name == "training"]
    assert training.config["inputs"] == "images 8×1×28×28 float32, labels 8 int64"
    small = {"device_iterations": 4, "inputs": "x 8×1×28×28 float32"}
    big = {"device_iterations": 4, "inputs": "x 32×1×28×28 float32"}
    c = compare(side({"pipeline.imbalance_ratio": 1.0}, config=small), side({"pipeline.imbalance_ratio": 1.0}, config=big), [])
    assert c.config_changes == [{"engine": "training", "field": "inputs", "base": small["inputs"], "new": big["inputs"]}]
    old = compare(side({"pipeline.imbalance_ratio": 1.0}, config={"device_iterations": 4}),
                  side({"pipeline.imbalance_ratio": 1.0}, config=big), [])
    assert old.config_changes == []


def test_frozen_parameters_are_part_of_the_configuration(tmp_path):
    """Freezing layers cuts the backward and the optimizer state: the configuration says so (a
    fine-tuning user saw a regression with no change listed). Older baselines have no such field."""
    script = tmp_path / "ft.py"
    script.write_text(textwrap.dedent("""\
        import sys, torch, poptorch
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(64, 64), torch.nn.Linear(64, 4)
            def forward(self, x, y):
                out = self.b(torch.relu(self.a(x)))
                return out, torch.nn.functional.cross_entropy(out, y)
        net = Net()
        net.a.requires_grad_(len(sys.argv) == 1)  # "frozen": the first layer's weights are frozen
        m = poptorch.trainingModel(net, poptorch.Options(), optimizer=torch.optim.SGD(net.parameters(), lr=0.1))
        m(torch.randn(8, 64), torch.randint(0, 4, (8,)))
    """))
    for out, extra in (("full", []), ("frozen", ["frozen"])):
        proc = run_cli("capture", "-o", str(tmp_path / out), "--emulate", "--", sys.executable, str(script), *extra)
        assert proc.returncode == 0, proc.stderr
    c = run_cli("compare", str(tmp_path / "full"), str(tmp_path / "frozen"), "--json")
    changes = json.loads(c.stdout)["config_changes"]
    assert {"engine": "training", "field": "trainable_parameters", "base": 4420, "new": 260} in changes
    old = compare(side({"pipeline.imbalance_ratio": 1.0}, config={"device_iterations": 4}),
                  side({"pipeline.imbalance_ratio": 1.0}, config={"device_iterations": 4, "trainable_parameters": 9}), [])
    assert old.config_changes == []


def test_layer_tables_with_no_layer_in_common_are_named():
    a = {"layer_ipus": {"l0": 0, "l1": 0, "l2": 1, "l3": 1}}
    b = {"layer_ipus": {"inp": 0, **{f"layers.{i}": i // 2 for i in range(8)}, "head": 3}}
    c = compare(side({"pipeline.imbalance_ratio": 1.0}, config=a), side({"pipeline.imbalance_ratio": 1.2}, config=b), [])
    assert {"engine": "training", "field": "layers (none in common: another model?)",
            "base": "l0, l1, l2, l3", "new": "inp, layers.0, layers.1, layers.2 and 6 more"} in c.config_changes


def test_budgets_take_the_units_thresholds_take():
    from popviz.ci.compare import check_budgets
    from popviz.ci.thresholds import parse_budget

    b = parse_budget("memory.*.used_bytes", "<= 30MiB", "test")
    assert (b.limit, b.unit, b.text) == (30 * 2**20, "bytes", "<= 30MiB")
    engines = side({"memory.ipu0.used_bytes": 31 * 2**20, "memory.ipu0.used_pct": 3.5, "time.call_wall_seconds": 0.004})
    [hit] = check_budgets(engines, [b])
    assert (hit["metric"], hit["ok"]) == ("memory.ipu0.used_bytes", False)
    [ms] = check_budgets(engines, [parse_budget("time.call_wall_seconds", "<= 5ms", "test")])
    assert ms["ok"] and parse_budget("memory.*.used_pct", "<= 85%", "test").limit == 85
    with pytest.raises(UsageError, match="is in bytes .* but memory.ipu0.used_pct is in percentage points"):
        check_budgets(engines, [parse_budget("memory.ipu0.used_pct", "<= 30MiB", "test")])
    with pytest.raises(UsageError, match="unknown unit 'parsecs'"):
        parse_budget("memory.*.used_bytes", "<= 3parsecs", "test")


def test_changes_too_small_for_two_decimals_and_from_zero():
    from popviz.ci.compare import Row

    assert Row("t", "m", "bytes", 100_000.0, 99_999.0, "1%", WITHIN).change == "-<0.01%"
    assert Row("t", "m", "pct", 50.0, 50.001, "+1pp", WITHIN).change == "+<0.01pp"
    assert Row("t", "m", "bytes", 0.0, 5.0, "1%", REGRESSED).change == "from 0"
    assert Row("t", "m", "bytes", 100.0, 101.0, "1%", WITHIN).change == "+1.00%"


def test_markdown_counts_the_unchanged_metrics_and_github_annotates_failing_findings(tmp_path):
    base = side({"pipeline.imbalance_ratio": 1.1, "memory.max_used_pct": 50.0})
    new = side({"pipeline.imbalance_ratio": 1.1, "memory.max_used_pct": 60.0},
               findings=[{"code": "MEM002", "severity": "error", "title": "IPU 0 is nearly full"}])
    c = compare(base, new, [])
    assert "1 metric(s) unchanged." in markdown(c)
    summary = tmp_path / "s.md"
    proc = run_cli("check", str(SAMPLES / "mnist_pipeline"), "--github", "--fail-on", "info",
                   env={"GITHUB_STEP_SUMMARY": str(summary)})
    lines = [x for x in proc.stdout.splitlines() if x.startswith("::error title=popviz finding::")]
    assert proc.returncode == 1 and lines, proc.stdout


def test_a_new_split_that_is_faster_trades_its_imbalance():
    base_cfg = {"layer_ipus": {f"l{i}": i // 2 for i in range(8)}}
    new_cfg = {"layer_ipus": {f"l{i}": i for i in range(8)}}
    base = side({"pipeline.imbalance_ratio": 1.27, "throughput.samples_per_second": 100.0}, config=base_cfg)
    new = side({"pipeline.imbalance_ratio": 1.64, "throughput.samples_per_second": 136.0}, config=new_cfg)
    c = compare(base, new, [])
    assert {r.metric: r.verdict for r in c.rows} == {"pipeline.imbalance_ratio": TRADED,
                                                     "throughput.samples_per_second": IMPROVED}
    assert not c.failed
    same_split = compare(side({"pipeline.imbalance_ratio": 1.27, "throughput.samples_per_second": 100.0}),
                         side({"pipeline.imbalance_ratio": 1.64, "throughput.samples_per_second": 136.0}), [])
    assert same_split.failed  # the same split: an imbalance that grew is a regression


def test_headline_figures_gone_from_new_fail_and_other_gone_rows_are_listed():
    base = side({"pipeline.cycles_per_micro_batch": 1000.0, "throughput.samples_per_second": 50.0,
                 "memory.max_used_pct": 40.0, "time.call_wall_seconds": 0.2})
    new = side({"memory.max_used_pct": 40.0})  # a compile that failed: memory only
    c = compare(base, new, [])
    assert c.failed and c.lost == [
        "engine training has no pipeline.cycles_per_micro_batch, throughput.samples_per_second in NEW"]
    only_wall = compare(base, side({k: v for k, v in base[0].metrics.items() if k != "time.call_wall_seconds"}), [])
    assert not only_wall.failed and {r.verdict for r in only_wall.rows} >= {"gone"}


def test_bytes_per_call_follow_the_batching_and_the_speed_decides():
    """HIO003 advises a larger D: the bytes one call carries grow with it, which is no regression
    (an output mode that returns more still is)."""
    metrics = lambda k: {"host_io.input_bytes_per_call": 8448.0 * k,  # noqa: E731
                         "throughput.samples_per_second": 29_400.0 * (1.3 if k > 1 else 1)}
    c = compare(side(metrics(1), config={"device_iterations": 2}), side(metrics(4), config={"device_iterations": 8}), [])
    assert {r.metric: r.verdict for r in c.rows} == {"host_io.input_bytes_per_call": "moved",
                                                     "throughput.samples_per_second": IMPROVED}
    assert not c.failed
    mode = compare(side(metrics(1), config={"device_iterations": 2, "output_mode": "Final"}),
                   side(metrics(4), config={"device_iterations": 8, "output_mode": "All"}), [])
    assert mode.failed


def test_layers_removed_or_added_are_a_configuration_change():
    a = {"layer_ipus": {"layers.0": 0, "layers.1": 0, "layers.2": 1, "layers.3": 1}}
    b = {"layer_ipus": {"layers.0": 0, "layers.1": 0, "layers.2": 1}}
    c = compare(side({"pipeline.imbalance_ratio": 1.0}, config=a), side({"pipeline.imbalance_ratio": 1.2}, config=b), [])
    assert {"engine": "training", "field": "layers (only in base → only in new)", "base": "layers.3",
            "new": "none"} in c.config_changes


def test_a_glob_budget_in_a_unit_none_of_its_metrics_has_is_bad_input():
    from popviz.ci.compare import check_budgets
    from popviz.ci.thresholds import parse_budget

    engines = side({"memory.ipu0.used_pct": 3.5, "memory.max_used_pct": 3.5})
    with pytest.raises(UsageError, match=r'budget memory.\*_pct = "<= 30MiB" is in bytes .* but the metrics it '
                                         r"matches are in percentage points"):
        check_budgets(engines, [parse_budget("memory.*_pct", "<= 30MiB", "test")])


def test_check_with_only_fail_on_says_what_it_checked():
    proc = run_cli("check", str(SAMPLES / "bert_planned"), "--fail-on", "error")
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == "popviz: OK: no finding at the --fail-on severity"


def test_a_new_run_that_does_not_fit_is_said_under_the_headline_without_failing_by_itself():
    """Two out-of-memory runs compare their memory (progress towards fitting), but the output must
    not read as a clean bill: NEW's compile still runs out of memory (a reviewer saw only "OK")."""
    oom = [{"code": "MEM001", "severity": "error", "title": "IPU0 is out of memory"}]
    base = side({"memory.max_used_pct": 199.2}, findings=oom)
    c = compare(base, side({"memory.max_used_pct": 177.8}, findings=oom), [])
    assert not c.failed and c.not_fitting == ["training"]
    assert text(c).splitlines()[:2] == ["popviz: OK: no regression (1 metric(s) compared, 1 improved)",
                                        "NEW does not fit its IPUs (the compile runs out of memory): training"]
    assert "**NEW does not fit its IPUs (the compile runs out of memory): training.**" in markdown(c)
    assert c.to_dict()["not_fitting"] == ["training"]
    warning = [{"code": "MEM002", "severity": "warning", "title": "IPU0 is nearly full"}]
    fits = compare(base, side({"memory.max_used_pct": 95.0}, findings=warning), [])
    assert fits.not_fitting == [] and "does not fit" not in text(fits)


def test_a_bare_budget_limit_is_refused_with_the_quoted_form(tmp_path):
    # TOML needs "<= 85" quoted; the parser's own message ("Invalid value") said nothing of that
    path = tmp_path / "bad.toml"
    path.write_text('[budgets]\n"memory.*.used_pct" = <= 85  # percent\n')
    proc = run_cli("check", str(SAMPLES / "mnist_pipeline"), "--budget", str(path))
    assert_one_line_error(proc, "bad.toml is not valid TOML (Invalid value (at line 2, column 23)); a limit or "
                          'threshold is a quoted string: "memory.*.used_pct" = "<= 85" (docs/ci.md)')
    path.write_text('[budgets\n"memory.*.used_pct" = "<= 85"\n')  # another slip: no hint to give
    assert run_cli("check", str(SAMPLES / "mnist_pipeline"), "--budget", str(path)).stderr.strip().endswith(")")
