"""The captured samples in sample_reports/ are what sample_reports/regenerate.py makes.

Each sample is regenerated into a temporary directory (its example script under
`popviz capture --emulate`, real subprocesses) and `popviz analyse --json` of the regenerated
and the committed directory must agree on everything but what differs by nature between two
runs: timestamps, paths, and host wall times.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import popviz
from popviz.model import ReportSet

from conftest import SAMPLES, run_cli

pytest.importorskip("torch")

VOLATILE_KEYS = {"captured_at", "root", "path", "wall_seconds", "compile_seconds",
                 "host_seconds_between_calls", "host_wall_seconds_between_calls",
                 "loop_samples_per_second"}
"""Keys whose values differ between two captures of the same script (time and place, and the
script's own host work between calls, which the emulator measures rather than estimates)."""

MEASURED_NOTE = "The script's own host work between calls, measured"
"""The note reporting that measurement: its figures differ between captures, its words do not."""


def _regenerate_module():
    spec = importlib.util.spec_from_file_location("regenerate", SAMPLES / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["regenerate"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


REGEN = _regenerate_module()


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    if isinstance(value, str) and value.startswith(MEASURED_NOTE):
        return re.sub(r"\d+(\.\d+)?", "N", value)
    return value


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Paths at which two JSON values differ, with both values (readable assertion messages)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _differences(a.get(key), b.get(key), f"{where}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def _analysis(path: Path) -> dict:
    proc = run_cli("analyse", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    return _stable(json.loads(proc.stdout))


@pytest.mark.parametrize("sample", [s.name for s in REGEN.SAMPLES])
def test_sample_is_committed_and_small(sample):
    directory = SAMPLES / sample
    assert directory.is_dir(), f"run python sample_reports/regenerate.py {sample}"
    size = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    assert size < 2_000_000, (sample, size)
    reports = popviz.load(directory)
    assert len(reports) >= 1
    assert all(r.provenance.estimated for r in reports), "captured samples are emulator estimates"


@pytest.mark.parametrize("sample", [s.name for s in REGEN.SAMPLES])
def test_sample_gives_the_findings_its_readme_line_promises(sample):
    chosen = next(s for s in REGEN.SAMPLES if s.name == sample)
    result = popviz.analyse(popviz.load(SAMPLES / sample))
    assert sorted({f.code for f in result.findings}) == sorted(chosen.findings)


def test_oom_model_compile_fails_and_its_memory_only_report_is_kept():
    """The script exits 1 with PopTorch's error; capture records the failed run and keeps the report."""
    run = json.loads((SAMPLES / "oom_model" / "popviz-run.json").read_text(encoding="utf-8"))
    assert (run["status"], run["exit_code"], run["popviz_exit_code"]) == ("failed", 1, 1)
    [engine] = run["engines"]
    assert engine["path"] == "training" and engine["model"]["calls"] == 0
    assert engine["model"]["compile_error"] == (
        "Error: 'popart_exception': Out of memory: Cannot fit all variable data onto one or more tiles.")
    log = (SAMPLES / "oom_model" / "capture.log").read_text(encoding="utf-8")
    assert "Out of memory on IPU 0: 1,187,646,464 bytes used but IPUs only have 940,572,672 bytes" in log
    report = popviz.load(SAMPLES / "oom_model")["training"]
    assert report.execution is None and report.provenance.estimated
    per_ipu = report.memory.frame.set_index("ipu")
    assert per_ipu["total_bytes_including_gaps"].to_dict() == {0: 1_187_646_464, 1: 293_394_500}
    assert per_ipu["overflow_bytes"].to_dict() == {0: 247_073_792, 1: 0}
    [mem001] = [f for f in popviz.analyse(popviz.load(SAMPLES / "oom_model")).findings if f.code == "MEM001"]
    assert mem001.title == "IPU0 is out of memory" and mem001.severity == "error"


def test_bert_planned_is_the_split_popviz_plan_proposes_and_it_is_faster():
    """The pair shows the loop: plan on the even split, re-run with its split, compare."""
    from popviz.analysis.layer_plan import make_plan

    even = popviz.load(SAMPLES / "bert_even_split")["training"]
    planned = popviz.load(SAMPLES / "bert_planned")["training"]
    plan = make_plan(even)
    assert ",".join(map(str, plan.proposed.layers_per_ipu)) == REGEN.BERT_PLANNED
    assert [x.ipu for x in planned.layers if x.name == "mlm"] == [0]  # the tied head stays on IPU0
    # the re-run's per-IPU cycles are what the plan predicted for each IPU (within 1%)
    metrics = popviz.analyse(popviz.load(SAMPLES / "bert_planned")).engines[0].metrics["pipeline"]
    measured = [row["cycles"] for row in metrics["ipus"]]
    assert measured == pytest.approx([s.cycles for s in plan.proposed.stages], rel=0.01)
    # and the calls are faster by about what the plan said (syncs and copies aside)
    before = popviz.analyse(popviz.load(SAMPLES / "bert_even_split")).engines[0].metrics["pipeline"]
    gain = before["call_cycles_per_micro_batch"] / metrics["call_cycles_per_micro_batch"] - 1
    assert gain == pytest.approx(plan.throughput_change_frac, abs=0.02) and gain > 0.05
    # the plan quotes the report's own figures (as analyse shows them) beside its model's
    assert max(row["cycles"] for row in before["ipus"]) == pytest.approx(3900262.45, abs=0.1)
    assert ("now, as the report (and popviz analyse) has it: IPU0 3,900,262 cycles/µb (model 3,898,919); "
            "IPU0 43.7% full (model 43.7%); ramp efficiency 99.1% (model 99.1%: the fill and drain of G "
            "micro-batches weighed by its stage cycles, where the trace also has host copies and syncs; it "
            "rates both splits so). The model's cycles leave out inter-IPU copies and syncs, "
            "the same on both sides of the comparison") in plan.notes


ONE_LONG_CALL = ("bert_even_split", "bert_planned")
"""Samples of one call whose execution on the CPU takes CPU-minutes (64 micro-batches of BERT
training): their analysis is the estimate's, the same with the call run or not (--steps 1: one
call). Without ``--run-long`` they are regenerated with that call estimated and not run
(POPVIZ_EMULATOR_CALLS=1, what ``capture --calls 1`` sets), and
:func:`test_a_bert_samples_call_runs_on_the_cpu` runs such a call, 7 times smaller."""


@pytest.mark.slow  # minutes: each sample's example runs whole under the emulator
@pytest.mark.parametrize("sample", [s.name for s in REGEN.SAMPLES])
def test_regenerating_a_sample_gives_the_same_analysis(sample, tmp_path, request, monkeypatch):
    chosen = next(s for s in REGEN.SAMPLES if s.name == sample)
    reason = REGEN.available(chosen)
    if reason:
        pytest.skip(f"{sample}: {reason}")
    if sample in ONE_LONG_CALL and not request.config.getoption("--run-long"):
        monkeypatch.setenv("POPVIZ_EMULATOR_CALLS", "1")
    REGEN.regenerate([sample], tmp_path)
    assert _differences(_analysis(tmp_path / sample), _analysis(SAMPLES / sample)) == []


@pytest.mark.slow  # the bert samples' call, 9 micro-batches of their 64, run on the CPU
def test_a_bert_samples_call_runs_on_the_cpu(tmp_path):
    chosen = next(s for s in REGEN.SAMPLES if s.name == "bert_even_split")
    args = list(chosen.args)
    args[args.index("--gradient-accumulation") + 1] = "9"  # the least PopTorch takes for 5 + 4 pipeline stages
    proc = run_cli("capture", "-o", "out", "--emulate", "--", sys.executable, str(SAMPLES.parent / chosen.script),
                   *args, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    run = json.loads((tmp_path / "out" / "popviz-run.json").read_text(encoding="utf-8"))
    [engine] = run["engines"]
    assert (run["status"], engine["path"], engine["model"]["calls"]) == ("succeeded", "training", 1)
    assert "POPVIZ_EMULATOR_CALLS" not in run["environment"]  # the call ran, not only its estimate


def test_pipe001_never_advises_moving_layers_that_popviz_plan_cannot_move():
    """One layer per IPU, the first twice as slow: no split of its 4 layers is faster, so PIPE001
    says so (and what else balances the stages) instead of "shift a BeginBlock by a layer";
    bert_even_split, where moving layers helps, still names the plan's split. (mnist_pipeline,
    one Linear per IPU, used to show this; with the calibrated cost model its stages are nearly
    balanced, max/mean 1.04, each Linear mostly its product's fixed cost, and it has no PIPE001.)"""
    from popviz import testing

    table = testing.layer_table([200_000, 100_000, 100_000, 100_000], layers_per_ipu=[1, 1, 1, 1])
    result = popviz.analyse(ReportSet([testing.layered_report(table, mode="training")]))
    (f,) = [f for f in result.engines[0].findings if f.code == "PIPE001"]
    assert f.recommendation.startswith(
        "Moving whole layers does not help here: `popviz plan` finds no faster split of the report's "
        "4 layers that fits (the current one is the best at layer granularity); split a layer across "
        "blocks (a BeginBlock inside it) or make the bottleneck's layers cheaper."), f.recommendation
    assert "by a layer or more" not in f.recommendation
    (a,) = [a for a in result.engines[0].plan.actions if a.code == "PIPE001"]  # the summary's gain says so too
    assert a.gain_text == ("up to +56% throughput; not by moving whole layers (`popviz plan` finds no faster "
                           "split)"), a.gain_text
    mnist = popviz.analyse(popviz.load(SAMPLES / "mnist_pipeline"))
    assert all(f.code != "PIPE001" for f in mnist.findings)
    (f,) = [f for f in popviz.analyse(popviz.load(SAMPLES / "bert_even_split")).engines[0].findings
            if f.code == "PIPE001"]
    assert "`popviz plan` finds a split with +" in f.recommendation and "Moving whole layers" not in f.recommendation
    bert = popviz.analyse(popviz.load(SAMPLES / "bert_even_split")).engines[0].plan.actions
    assert all(a.caveat is None for a in bert)


def test_cnn_replicated_is_bound_by_its_inputs_not_its_output_mode():
    """The README's line: the 24 MiB of inputs, not the 80 KiB OutputMode.All returns."""
    result = popviz.analyse(popviz.load(SAMPLES / "cnn_replicated"))
    inference = next(e for e in result.engines if e.report.name == "inference")
    assert inference.report.cfg.output_mode == "All"
    assert (inference.metrics["host_io"]["input_bytes_per_call"], inference.metrics["host_io"]["output_bytes_per_call"]) \
        == (24 * 2**20, 80 * 2**10)
    assert sorted(f.code for f in inference.findings) == ["HIO001"]  # a 13 ms call: D = 64 is enough
