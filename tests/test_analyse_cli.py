"""`popviz analyse` end to end: the real CLI in a subprocess on real bundle files."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from popviz import testing
from popviz.render.json import schema
from popviz.sources.bundle import write_bundle

from conftest import ROOT, SAMPLES, run_cli, unwrapped

VALIDATOR = jsonschema.Draft202012Validator


def analyse_json(*args: str) -> dict:
    proc = run_cli("analyse", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    VALIDATOR(schema()).validate(doc)
    return doc


def test_schema_is_a_valid_json_schema():
    VALIDATOR.check_schema(schema())


@pytest.mark.parametrize("columns", [80, 200])
def test_sample_is_readable_at_80_and_200_columns(columns):
    proc = run_cli("analyse", "sample_reports/bert_pipeline", cwd=ROOT, env={"COLUMNS": str(columns)})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert not [line for line in lines if line.endswith(" ")]  # piped: no padding at line ends
    for title in ("pipeline", "memory", "host I/O"):
        assert sum(line.strip() == title for line in lines) == 2, title  # one table per engine
    for code in ("PIPE001", "PIPE004", "MEM002", "MEM004"):
        assert f"WARNING {code} " in out, code
    assert re.search(r"INFO +HIO002 ", out)  # 188.2 KiB of outputs per call: under +0.1% throughput
    assert "3 ◀" in out and "1,855,417" in out  # the training bottleneck, cycles per micro-batch
    # every table header stays on one line (none folded into a second header row)
    headers = [line for line in lines if line.startswith(("IPU ", "stage "))]
    assert "IPU  used %  max tile %  tiles >90%  OOM tiles  always live %  top category" in headers
    assert not any(line.strip() in ("%", "live %") for line in lines)
    # what each percentage is a share of (always live % of used, a reviewer read as of capacity)
    assert "used = bytes including gaps, % of capacity; always live and top category: % of the IPU's used bytes" in (
        " ".join(out.split()))
    # time-weighted: IPU3 (the bottleneck) works 85.7% of the time it is not copying; the
    # count bound G/(G+S-1) = 66.7% is not what the trace shows
    assert "ramp efficiency 85.7% time-weighted (S = 7; G = 18 reaches 90%)" in out
    assert "INFO    PIPE003 Low pipeline ramp efficiency: 85.7%" in out
    assert out.rstrip().endswith("2 engines analysed; worst finding: warning")
    assert "ERROR" not in out


def test_findings_sorted_by_severity_on_the_oom_sample():
    proc = run_cli("analyse", str(SAMPLES / "oom_compile"), env={"COLUMNS": "100"})
    severities = [line.split()[0] for line in proc.stdout.splitlines()
                  if line.split() and line.split()[0] in ("ERROR", "WARNING", "INFO")]
    assert severities == ["ERROR", "WARNING", "INFO"]
    assert "ERROR   MEM001 IPU0 is out of memory: 40 tiles overflow" in proc.stdout
    assert "not checked:" in proc.stdout and "no execution profile" in proc.stdout


def test_markdown_has_tables_findings_and_code():
    proc = run_cli("analyse", str(SAMPLES / "bert_pipeline"), "--markdown")
    assert proc.returncode == 0
    md = proc.stdout
    assert md.count("### pipeline") == 2 and md.count("### memory") == 2 and md.count("### host I/O") == 2
    assert "| stage | IPU | blocks | cycles/micro-batch | idle % |" in md
    assert "| 3 ◀ | 3 | encoder.layer.9-11, qa_outputs | 1,855,417 | 0.0 |" in md
    assert "`opts.Training.gradientAccumulation(18)`" in md
    assert "- ⚠️ **warning** `PIPE001` Unbalanced pipeline: stage 3 (IPU3) is the bottleneck" in md


def test_sample_json_numbers():
    doc = analyse_json(str(SAMPLES / "bert_pipeline"))
    assert doc["analyses"] == ["pipeline", "memory", "host_io", "throughput"]
    inference, training = doc["engines"]
    p = training["metrics"]["pipeline"]
    assert p["bottleneck_stage"] == 3
    assert p["imbalance_ratio"] == pytest.approx(610 / 445)  # work is proportional to forward cycles
    assert p["ramp_efficiency_count_frac"] == pytest.approx(12 / 18)
    assert (p["ramp_efficiency_basis"], round(p["ramp_efficiency_frac"], 4)) == ("time", 0.8574)
    shares = p["cycle_shares"]
    parts = ("useful", "weight_update", "imbalance", "ramp", "exchange", "host", "other")
    assert sum(shares[f"{k}_cycles"] for k in parts) == 4 * shares["elapsed_cycles"]
    assert shares["useful_frac"] + shares["weight_update_frac"] == pytest.approx(p["utilisation_frac"])
    assert [s["blocks"] for s in p["stages"]][3] == ["encoder.layer.9-11", "qa_outputs"]
    mem = training["metrics"]["memory"]["ipus"]
    assert [i["tiles_over_90pct"] for i in mem] == [17, 0, 0, 0]
    assert [i["tiles_overflowing"] for i in mem] == [0, 0, 0, 0]
    assert round(mem[0]["max_tile_pct"], 2) == 97.0
    h = training["metrics"]["host_io"]
    assert (h["output_mode"], h["outputs_per_call"], h["output_bytes_per_call"]) == ("All", 48, 196_800)
    assert inference["metrics"]["pipeline"]["pipelining_speedup_ratio"] == pytest.approx(597 / 205)
    assert [f["code"] for f in inference["findings"]] == ["PIPE004"]


def test_oom_sample_json():
    doc = analyse_json(str(SAMPLES / "oom_compile"))
    [engine] = doc["engines"]
    assert engine["findings"][0]["code"] == "MEM001" and engine["findings"][0]["severity"] == "error"
    assert "IPU0" in engine["findings"][0]["title"]
    checks = [(n["analysis"], n["check"]) for n in engine["not_checked"]]
    assert checks == [("pipeline", "stage cycles and balance"),
                      # (the sample was captured before the emulator estimated liveness)
                      ("memory", "liveness peak (step, program, layer)"),
                      ("host_io", "stream-copy share, device time per call"),
                      ("throughput", "samples per second")]
    assert engine["metrics"]["pipeline"]["imbalance_ratio"] is None


BUILDER_CASES = {
    "estimated_per_ipu": dict(stage_cycles=[1000, 2000], memory_level="ipu", memory_frac=[0.9, 1.1],
                              source="emulator", estimated=True),
    "no_config": dict(stage_cycles=[1000, 2000], with_config=False, with_host_io=False),
    "single_ipu": dict(stage_cycles=[5000], strategy=None, mode="inference", device_iterations=8),
    "memory_only": dict(stage_cycles=[1000, 2000], execution=False, memory_level=None),
    "every_n": dict(stage_cycles=[1000, 2000], output_mode="EveryN", output_return_period=2,
                    device_iterations=4, gradient_accumulation=8, replication_factor=2),
    "shared_ipu": dict(stage_cycles=[1000, 2000, 1000], stage_ipus=[0, 1, 0]),
}


@pytest.mark.parametrize("case", sorted(BUILDER_CASES))
def test_json_validates_on_partial_reports(tmp_path, case):
    kwargs = dict(BUILDER_CASES[case])
    report = testing.pipeline_report(kwargs.pop("stage_cycles"), tiles_per_ipu=64, **kwargs)
    write_bundle(report, tmp_path / case / report.name)
    doc = analyse_json(str(tmp_path / case))
    [engine] = doc["engines"]
    assert set(engine["metrics"]) == {"pipeline", "memory", "host_io", "throughput"}
    # console and Markdown render the same result without error
    for extra in ((), ("--markdown",)):
        proc = run_cli("analyse", str(tmp_path / case), *extra, env={"COLUMNS": "80"})
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_only_selects_analyses_in_registry_order():
    doc = analyse_json(str(SAMPLES / "bert_pipeline"), "--only", "host_io,pipeline")
    assert doc["analyses"] == ["pipeline", "host_io"]
    for engine in doc["engines"]:
        assert list(engine["metrics"]) == ["pipeline", "host_io"]
        assert {f["analysis"] for f in engine["findings"]} <= {"pipeline", "host_io"}
    proc = run_cli("analyse", str(SAMPLES / "bert_pipeline"), "--only", "memory", env={"COLUMNS": "100"})
    assert "MEM002" in proc.stdout and "PIPE001" not in proc.stdout and "HIO002" not in proc.stdout


@pytest.mark.parametrize("sample,args,code", [
    ("bert_pipeline", ["--fail-on", "warning"], 1),
    ("bert_pipeline", ["--fail-on", "error"], 0),
    ("bert_pipeline", ["--fail-on", "info"], 1),
    ("bert_pipeline", [], 0),
    ("oom_compile", ["--fail-on", "error"], 1),
    ("oom_compile", ["--only", "pipeline", "--fail-on", "warning"], 0),  # only an info finding
    ("oom_compile", ["--only", "pipeline", "--fail-on", "info"], 1),
    ("oom_compile", ["--only", "host_io", "--fail-on", "info"], 0),
])
def test_fail_on_exit_codes(sample, args, code):
    proc = run_cli("analyse", str(SAMPLES / sample), *args)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "engine" in proc.stdout  # the report is printed either way
    # which findings tripped the gate, on stderr (stdout stays the report)
    assert (proc.stderr == "") == (code == 0)
    if code:
        assert proc.stderr.startswith(f"popviz: --fail-on {args[-1]}: ")


def test_fail_on_with_json_keeps_stdout_valid(tmp_path):
    proc = run_cli("analyse", str(SAMPLES / "oom_compile"), "--json", "--fail-on", "error")
    assert proc.returncode == 1
    VALIDATOR(schema()).validate(json.loads(proc.stdout))


def test_clean_report_passes_the_strictest_gate(tmp_path):
    report = testing.pipeline_report([400_000] * 4, gradient_accumulation=64, device_iterations=4,
                                     tiles_per_ipu=64)
    write_bundle(report, tmp_path / "r" / "training")
    proc = run_cli("analyse", str(tmp_path / "r"), "--fail-on", "info")
    assert proc.returncode == 0, proc.stdout
    assert "no findings" in proc.stdout


def test_analyze_alias_and_fail_on_names_the_findings():
    proc = run_cli("analyze", str(SAMPLES / "oom_compile"), "--fail-on", "warning", "--json")
    assert proc.returncode == 1
    json.loads(proc.stdout)  # stdout stays the report
    assert unwrapped(proc.stderr) == ("popviz: --fail-on warning: 2 findings at or above warning: "
                           "training: MEM001 (error), training: MEM004 (warning)\n")


def test_popviz_namespace_is_the_public_api():
    import popviz

    assert dir(popviz) == ["__version__", "analyse", "capture", "load", "wrap"]


@pytest.mark.parametrize(("args", "code"), [
    (("analyse", "mnist_pipeline"), 0),
    (("analyse", "mnist_pipeline", "--json"), 0),
    (("--help",), 0),
    (("compare", "bert_planned", "bert_even_split"), 1),  # the verdict still counts
    (("compare", "bert_planned", "bert_even_split", "--json"), 1),
    (("compare", "bert_planned", "bert_even_split", "--markdown"), 1),
    (("analyse", "oom_model", "--fail-on", "error"), 1),
    (("analyse", "oom_model", "--fail-on", "error", "--json"), 1),
])
def test_a_reader_that_goes_away_leaves_the_exit_code_alone(args, code):
    """`popviz analyse DIR | head`: the pipe closes before popviz writes; no traceback, and the
    exit code is the command's own (rich alone exits 1, popviz's verdict code; JSON printing
    used to end with 0, losing a failed verdict)."""
    import os
    import subprocess
    import sys

    from conftest import SAMPLES

    argv = [str(SAMPLES / a) if (SAMPLES / a).is_dir() else a for a in args]
    read, write = os.pipe()
    os.close(read)  # no reader at all: the first write fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "popviz", *argv], stdout=write, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True, timeout=600)
    finally:
        os.close(write)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_a_ramp_hidden_behind_host_copies_shows_the_count_bound():
    """lightning_pipeline's inference call is mostly host copies: the last stage's waits while the
    pipeline fills coincide with IPU0's copies and count as host time, so the time-weighted ramp
    efficiency would read 100% (impossible with D = 20 and S = 4). The line shows the count bound
    87.0% and says why; a pipeline whose ramp shows in the trace (bert_pipeline) has no such remark."""
    from conftest import SAMPLES

    out = " ".join(run_cli("analyse", str(SAMPLES / "lightning_pipeline"), env={"COLUMNS": "200"}).stdout.split())
    assert ("ramp efficiency: the count bound D/(D+S-1) is 87.0% (S = 4); in this call the ramp's waits "
            "overlap host transfers and count there") in out
    assert "ramp efficiency 100.0%" not in out
    out = " ".join(run_cli("analyse", str(SAMPLES / "bert_pipeline"), env={"COLUMNS": "200"}).stdout.split())
    assert "ramp efficiency 85.7% time-weighted (S = 7; G = 18 reaches 90%)" in out and "overlap" not in out


def test_the_pipeline_table_puts_the_gain_per_call_first():
    """A balanced split gains a call less than the stages alone (host copies, syncs and the ramp
    stay); the pipeline line gives the figure the summary ranks PIPE001 by first."""
    proc = run_cli("analyse", str(SAMPLES / "lightning_pipeline"), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())  # the line wraps at the terminal's width
    # Lightning's predict runs under torch.inference_mode(): its Linear layers are costed as under
    # no_grad (they were free before, which made the last stage look 2.19x the mean)
    assert "imbalance 1.13 (max/mean) · balanced: up to +7.8% per call (+13% for the stages alone) · " in out
    out = " ".join(run_cli("analyse", str(SAMPLES / "bert_pipeline"), env={"COLUMNS": "200"}).stdout.split())
    assert "imbalance 1.37 (max/mean) · balanced: up to +30% per call (+37% for the stages alone)" in out
    assert "PIPE001 Unbalanced pipeline: stage 3 (IPU3) is the bottleneck (up to +30% throughput)" in out
