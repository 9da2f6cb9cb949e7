from __future__ import annotations

import json

import pytest

from popviz import __version__, testing
from popviz.sources.bundle import write_bundle

from conftest import ROOT, SAMPLES, assert_one_line_error, run_cli, unwrapped


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"popviz {__version__}"


def test_analyse_sample_prints_summary():
    proc = run_cli("analyse", "sample_reports/bert_pipeline", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for text in ("training", "inference", "Mk2 · 4 IPUs × 1,472 tiles", "PipelinedExecution, 4 stages",
                 "ShardedExecution", "stage 3 → IPU3: encoder.layer.9-11, qa_outputs",
                 "device iterations 4 · gradient accumulation 12", "output mode All",
                 "per tile, 5,888 rows"):
        assert text in out, text


def test_analyse_json_is_valid():
    proc = run_cli("analyse", str(SAMPLES / "bert_pipeline"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1
    [inference, training] = doc["engines"]
    assert training["name"] == "training" and training["present"] == [
        "target", "memory", "execution", "config", "host_io"]
    assert training["config"]["gradient_accumulation"] == 12
    assert training["provenance"]["source"] == "bundle"
    assert inference["config"]["execution_strategy"] == "ShardedExecution"


def test_memory_only_sample_says_execution_missing():
    proc = run_cli("analyse", str(SAMPLES / "oom_compile"), "--json")
    doc = json.loads(proc.stdout)
    assert doc["engines"][0]["missing"] == ["execution"]


def test_markdown(tmp_path):
    proc = run_cli("analyse", str(SAMPLES / "oom_compile"), "--markdown")
    assert proc.returncode == 0
    assert proc.stdout.startswith("# popviz analysis of")
    assert "execution: missing" in proc.stdout


# ---------------------------------------------------------------- every bad input: exit 2, one line

@pytest.fixture
def bundle(tmp_path):
    write_bundle(testing.pipeline_report([10, 20], tiles_per_ipu=4), tmp_path / "r" / "training")
    return tmp_path / "r"


def test_missing_path(tmp_path):
    assert_one_line_error(run_cli("analyse", str(tmp_path / "nope")), "nope", "no such file")


def test_empty_dir(tmp_path):
    assert_one_line_error(run_cli("analyse", str(tmp_path)), str(tmp_path), "is empty")


def test_dir_without_report(tmp_path):
    (tmp_path / "train.py").write_text("print()")
    assert_one_line_error(run_cli("analyse", str(tmp_path)), "no report found", "profile.pop")


def test_truncated_json(bundle):
    meta = bundle / "training" / "popviz-report.json"
    meta.write_text(meta.read_text()[:100])
    assert_one_line_error(run_cli("analyse", str(bundle)), "popviz-report.json", "not valid JSON")


def test_truncated_parquet(bundle):
    table = bundle / "training" / "memory.parquet"
    table.write_bytes(table.read_bytes()[:300])
    assert_one_line_error(run_cli("analyse", str(bundle)), "memory.parquet", "not a readable Parquet")


def test_newer_format(bundle):
    meta = bundle / "training" / "popviz-report.json"
    doc = json.loads(meta.read_text())
    doc["format_version"] = 99
    meta.write_text(json.dumps(doc))
    assert_one_line_error(run_cli("analyse", str(bundle)), "format 99", "pip install -U popviz")


def test_profile_without_pva(tmp_path):
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "profile.pop").write_bytes(b"\0" * 4096)
    line = assert_one_line_error(run_cli("analyse", str(tmp_path)),
                                 "training/profile.pop", "needs libpva", "popviz export")
    assert line.startswith("popviz: error: ")


def test_debug_shows_traceback(tmp_path):
    proc = run_cli("analyse", str(tmp_path / "nope"), "--debug")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_usage_errors_are_one_line():
    assert_one_line_error(run_cli("analyse"), "required", "--help")
    assert_one_line_error(run_cli("analyse", ".", "--fail-on", "sometimes"), "invalid choice")
    assert_one_line_error(run_cli("frobnicate"), "invalid choice")
    assert_one_line_error(run_cli("analyse", str(SAMPLES / "oom_compile"), "--only", "nonsense"),
                          "unknown analysis 'nonsense'")


def test_no_command_prints_help():
    proc = run_cli()
    assert proc.returncode == 2 and "analyse" in proc.stderr


def test_a_standard_output_that_cannot_be_written_is_one_line(tmp_path):
    """`popviz analyse DIR > /dev/full`: exit 2 and one line (was exit 3, "internal error"); a
    closed standard output (`>&-`) keeps the command's own exit code, no traceback."""
    import os
    import subprocess
    import sys

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    d = write_bundle(testing.pipeline_report([1000, 3000]), tmp_path / "r" / "training")
    for argv in (["analyse", str(d.parent)], ["analyse", "--json", str(d.parent)]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, "-m", "popviz", *argv], stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=600, stdin=subprocess.DEVNULL)
        assert proc.returncode == 2, proc.stderr
        assert unwrapped(proc.stderr).splitlines() == [
            "popviz: error: the standard output cannot be written (No space left on device); the output is "
            "incomplete: redirect it to a file or pipe that can take it"]
    proc = subprocess.run(f"{sys.executable} -m popviz analyse --fail-on warning {d.parent} >&-", shell=True,
                          stderr=subprocess.PIPE, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "error" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("popviz: --fail-on warning: 3 findings at or above warning")


def test_a_path_the_system_refuses_is_one_line(tmp_path):
    """A file name longer than the file system takes (ENAMETOOLONG): exit 2, one line naming it
    (was exit 3 for baseline save, plot, capture, history add, --html)."""
    d = write_bundle(testing.pipeline_report([1000, 3000]), tmp_path / "r" / "training")
    long = "a" * 300
    for argv in (["analyse", str(d.parent), "--html", f"{long}.html"],
                 ["baseline", "save", str(d.parent), "-o", f"{long}.json"],
                 ["plot", str(d.parent), "-o", long], ["history", "add", str(d.parent), "--db", f"{long}.db"]):
        assert_one_line_error(run_cli(*argv, cwd=tmp_path), long, "File name too long", "choose another path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


@pytest.mark.parametrize("args", [
    ("analyse", "{sample}", "--html", ""),
    ("plot", "{sample}", "-o", " "),
    ("baseline", "save", "{sample}", "-o", ""),
    ("compare", "{sample}", "{sample}", "--junit", ""),
    ("capture", "-o", "", "--", "true"),
])
def test_an_empty_output_path_is_a_usage_error(tmp_path, args):
    # an unset shell variable ('--html "$OUT"') must not mean "nothing" or the current directory
    sample = str(SAMPLES / "mnist_pipeline")
    proc = run_cli(*(a.format(sample=sample) for a in args), cwd=tmp_path)
    assert_one_line_error(proc, "needs a path, not an empty string")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("toml", "needle"), [
    ('"pipeline.cycles_per_micro_batch" = "<= -5"',
     'cannot pass for pipeline.cycles_per_micro_batch (its values are 0 cycles or more)'),
    ('"host_io.stream_copy_pct" = "> 100"', "cannot pass for host_io.stream_copy_pct (its values are 0 to 100%)"),
    ('pipeline.imbalance_ratio = "<= 1.2"', "budget 'pipeline' in budget.toml is a table, not a limit: quote"),
])
def test_a_budget_no_run_can_meet_is_a_usage_error(tmp_path, toml, needle):
    (tmp_path / "budget.toml").write_text(toml + "\n", encoding="utf-8")
    proc = run_cli("check", str(SAMPLES / "mnist_pipeline"), "--budget", "budget.toml", cwd=tmp_path)
    assert_one_line_error(proc, needle)
