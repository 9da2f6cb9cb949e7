"""A script that builds a PopTorch model and never calls it (its DataLoader holds less than one
call) leaves only the capture hooks' record: every command says so instead of a clean run."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import SAMPLES, assert_one_line_error, run_cli, unwrapped

pytest.importorskip("torch")

MODEL = """
import torch, poptorch
net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = net
    def forward(self, x, y):
        out = self.net(x)
        return out, torch.nn.functional.cross_entropy(out, y)
"""

SCRIPT = MODEL + """
net[1] = poptorch.BeginBlock(net[1], ipu_id=1)
opts = poptorch.Options().deviceIterations(26)
opts.Training.gradientAccumulation(8)
opts.setExecutionStrategy(poptorch.PipelinedExecution())
data = torch.utils.data.TensorDataset(torch.randn(2048, 8), torch.randint(0, 2, (2048,)))
loader = poptorch.DataLoader(opts, data, batch_size=16)  # one call takes 16 x 26 x 8 = 3,328 samples
model = poptorch.trainingModel(WithLoss(), opts, optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))
for x, y in loader:
    model(x, y)
print("batches:", len(loader))
"""


@pytest.fixture(scope="module")
def never(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("never")
    (tmp / "train.py").write_text(SCRIPT)
    proc = run_cli("capture", "--emulate", "-o", "out", "--", sys.executable, "train.py", cwd=tmp,
                   env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "batches: 0" in proc.stdout
    return tmp, proc


def test_capture_analyse_and_fail_on_say_it_never_ran(never):
    tmp, proc = never
    text = " ".join(proc.stderr.split())  # the summary's lines wrap at the terminal's width
    line = text[text.index(" training NEVER CALLED:"):]
    assert line.split()[1:3] == ["NEVER", "CALLED:"] and "· D=26 G=8 R=1 " in line
    out = run_cli("analyse", "out", cwd=tmp)
    assert out.returncode == 0, out.stderr
    assert "strategy   training, never called: no stages traced (RUN001)" in out.stdout
    assert " training: 1. RUN001 The engine was never called (nothing was measured)" in out.stdout
    assert "ERROR   RUN001 The engine was never called" in out.stdout
    assert "3,328" not in out.stdout  # the batch size is unknown: the finding counts micro-batches
    assert "208 micro-batches (device iterations 26 × gradient accumulation 8 × replicas 1)" in " ".join(
        out.stdout.split())
    assert "no findings" not in out.stdout
    gate = run_cli("analyse", "out", "--fail-on", "error", cwd=tmp)
    assert gate.returncode == 1 and "RUN001" in gate.stderr
    plot = run_cli("plot", "out", "-o", "figures", cwd=tmp)  # every figure skipped, each saying why
    lines = unwrapped(plot.stderr).splitlines()  # each skipped line wraps at the terminal's width
    assert lines[0] == "popviz plot: reading the report and drawing its figures ...", plot.stderr
    assert lines[-1] == "0 figure(s) written to figures", plot.stderr
    skipped = [line for line in lines if line.startswith("skipped ")]
    assert skipped and all("never called (RUN001)" in line for line in skipped), plot.stderr


def test_compare_and_baseline_refuse_a_run_with_no_metrics(never):
    tmp, _ = never
    # a run whose engine stopped running fails the gate (exit 1); as a base it compares nothing (exit 2)
    lost = run_cli("compare", str(SAMPLES / "mnist_pipeline"), "out", cwd=tmp)
    assert lost.returncode == 1 and unwrapped(lost.stdout).splitlines()[0] == (
        "popviz: FAIL: engine training ran in BASE but has no metrics in NEW: never called (RUN001); "
        "engine inference ran in BASE and is missing from NEW"), lost.stdout
    assert_one_line_error(run_cli("compare", "out", str(SAMPLES / "mnist_pipeline"), cwd=tmp),
                          "no metric is on both sides", "base: engine training has no metrics: never called (RUN001)")
    assert_one_line_error(run_cli("baseline", "save", "out", "-o", "b.json", cwd=tmp),
                          "no metric to save", "never called (RUN001)")
    assert not (tmp / "b.json").exists()


BOTH = MODEL + """
train = poptorch.trainingModel(WithLoss(), poptorch.Options(), optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))
infer = poptorch.inferenceModel(net, poptorch.Options())
for step in range(2):
    train(torch.randn(4, 8), torch.randint(0, 2, (4,)))
train.detachFromDevice()
infer(torch.randn(4, 8))
"""


def test_an_engine_after_calls_n_is_not_reached_not_never_called(tmp_path):
    """--calls 1 stops the script at the training call: inference was not reached, which is no
    finding (the script does call it later); without --calls it runs, and compare then fails a run
    whose inference stopped running."""
    (tmp_path / "both.py").write_text(BOTH)
    once = run_cli("capture", "--emulate", "--calls", "1", "-o", "once", "--", sys.executable, "both.py", cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert once.returncode == 0, once.stderr
    assert "inference  not reached: --calls 1 stopped the script before it called this engine · D=1 G=1 R=1" in once.stderr
    out = run_cli("analyse", "once", "--fail-on", "error", cwd=tmp_path, env={"COLUMNS": "200"})
    assert out.returncode == 0, out.stdout
    assert "RUN001" not in out.stdout
    assert ("strategy   inference, not reached: no stages traced (--calls 1 stopped the script before it called "
            "this engine)") in out.stdout
    full = run_cli("capture", "--emulate", "-o", "full", "--", sys.executable, "both.py", cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert full.returncode == 0, full.stderr
    # NEW's inference gone (the same script stopped before it): compare fails, naming it
    cmp = run_cli("compare", "full", "once", cwd=tmp_path)
    assert cmp.returncode == 1, cmp.stdout + cmp.stderr
    assert cmp.stdout.splitlines()[0] == "popviz: FAIL: engine inference ran in BASE but has no metrics in NEW"
    save = run_cli("baseline", "save", "once", "-o", "b.json", cwd=tmp_path)
    assert save.returncode == 0 and "engine inference has no metrics: left out of the baseline" in save.stderr
    assert [e["name"] for e in json.loads((tmp_path / "b.json").read_text())["engines"]] == ["training"]


def test_a_calls_limit_that_never_triggered_excuses_nothing():
    from popviz.sources.runrecord import not_reached_reason

    doc = {"environment": {"POPVIZ_EMULATOR_CALLS": "1"}, "exit_code": 0, "engines": [{"model": {"calls": 0}}]}
    assert not_reached_reason(doc) is None  # the script ended on its own before any call: RUN001 stands
    doc["engines"].append({"model": {"calls": 1}})
    assert not_reached_reason(doc) == "--calls 1 stopped the script before it called this engine"
    assert not_reached_reason({"exit_code": 1}) == "the script exited with code 1 before it called this engine"
    assert not_reached_reason({"signal": "SIGTERM"}) == "the script was killed by SIGTERM before it called this engine"
    assert not_reached_reason({"exit_code": 0}) is None


def test_a_hostile_compile_error_is_run002_and_never_reaches_the_terminal_raw(tmp_path):
    """The error text is the script's: ESC and markup from it stay inert in capture's summary and in
    the finding (RUN002 quotes it)."""
    (tmp_path / "h.py").write_text(
        "import torch, poptorch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        raise RuntimeError('\\x1b[31m[bold red]boom[/] ::error ::x')\n"
        "try:\n"
        "    poptorch.inferenceModel(M())(torch.randn(2, 4))\n"
        "except Exception:\n"
        "    pass\n")
    cap = run_cli("capture", "--emulate", "-o", "out", "--", sys.executable, "h.py", cwd=tmp_path,
                  env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert cap.returncode == 0, cap.stderr
    (line,) = [ln for ln in cap.stderr.splitlines() if "compile failed:" in ln]
    assert "\x1b" not in line and "RuntimeError: \ufffd[31m[bold red]boom[/] ::error ::x" in line
    out = run_cli("analyse", "out", "--fail-on", "error", cwd=tmp_path)
    assert out.returncode == 1 and "\x1b" not in out.stdout
    assert "RUN002 The compile failed" in out.stdout and "[bold red]boom[/]" in out.stdout


def test_a_compile_only_engine_says_it_was_never_called_not_that_calls_ran():
    from popviz.capture.launcher import _times_text

    m = {"compile_seconds": 0.4, "poptorch_compile_seconds": 0.19, "calls": 0}
    assert _times_text(m, {"emulated": True, "environment": {}}) == (
        ", estimated in 0.19 s, never called (compile() only)")
