"""A script that builds a PopTorch model and never calls it (its DataLoader holds less than one
call) leaves only the capture hooks' record: every command says so instead of a clean run."""

from __future__ import annotations

import sys

import pytest

from conftest import SAMPLES, assert_one_line_error, run_cli

pytest.importorskip("torch")

SCRIPT = """
import torch, poptorch
net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
net[1] = poptorch.BeginBlock(net[1], ipu_id=1)
class WithLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = net
    def forward(self, x, y):
        out = self.net(x)
        return out, torch.nn.functional.cross_entropy(out, y)
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
    line = next(ln for ln in proc.stderr.splitlines() if ln.strip().startswith("training"))
    assert line.split()[1:3] == ["NEVER", "CALLED:"] and line.rstrip().endswith("D=26 G=8 R=1")
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


def test_compare_and_baseline_refuse_a_run_with_no_metrics(never):
    tmp, _ = never
    assert_one_line_error(run_cli("compare", str(SAMPLES / "mnist_pipeline"), "out", "--allow-mixed", cwd=tmp),
                          "no metric is on both sides", "new: engine training has no metrics: never called (RUN001)")
    assert_one_line_error(run_cli("baseline", "save", "out", "-o", "b.json", cwd=tmp),
                          "no metric to save", "never called (RUN001)")
    assert not (tmp / "b.json").exists()
