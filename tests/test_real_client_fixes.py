"""Behaviours real clients (optimum-graphcore, Graphcore's applications) showed wrong under
``popviz capture --emulate`` (issue 21), each checked against PopTorch's documented behaviour.
(The plan's head returning to IPU 0 is in test_planner.py, the shared T5 embedding in
test_emulator_layers.py, AdamW in test_emulator_surface.py, a ``popviz/`` folder beside the
script in test_emulator_popart.py.)"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from conftest import run_cli


def capture(tmp_path, source: str, *extra: str) -> dict:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "cap"
    proc = run_cli("capture", "-o", str(out), "--emulate", *extra, "--", sys.executable, str(script),
                   cwd=tmp_path, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    analysed = run_cli("analyse", str(out), "--json", cwd=tmp_path)
    assert analysed.returncode in (0, 1), analysed.stderr  # 1: findings; never 2 (unreadable)
    [engine] = json.loads(analysed.stdout)["engines"]
    return engine


STEM = """
import torch, poptorch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(16, 16)
        # docs/user_guide/pipeline_simple.py: "All layers before [the first BeginBlock] will be on
        # IPU 0", then blocks on IPUs 1, 2 and 3
        self.l1 = poptorch.BeginBlock(torch.nn.Linear(16, 16), ipu_id=1)
        self.l2 = poptorch.BeginBlock(torch.nn.Linear(16, 16), ipu_id=2)
        self.l3 = poptorch.BeginBlock(torch.nn.Linear(16, 16), ipu_id=3)

    def forward(self, x):
        y = self.l3(self.l2(self.l1(self.stem(x))))
        return y, poptorch.identity_loss(y.pow(2).mean(), reduction="none")

opts = poptorch.Options()
opts.Training.gradientAccumulation(8)
model = poptorch.trainingModel(Model(), opts)
model(torch.randn(8, 16))
"""


def test_first_layers_before_the_first_block_are_on_ipu0(tmp_path):
    """PopTorch's user guide (overview.rst): "PopTorch places the first layers on ipu_id 0 by
    default". Was: 3 stages on IPUs 1-3, IPU 0 empty."""
    engine = capture(tmp_path, STEM, "--calls", "1")
    assert [(s["index"], s["ipu"], s["blocks"]) for s in engine["config"]["stages"]] == [
        (0, 0, []), (1, 1, ["l1"]), (2, 2, ["l2"]), (3, 3, ["l3"])]
    assert engine["target"]["ipus_per_replica"] == 4


def test_first_layers_stay_on_ipu0_when_the_compile_fails(tmp_path):
    """The same idiom with G=4, fewer than the 7 training stages PopTorch requires: the compile
    fails, and the recorded configuration still has the stem's stage on IPU 0 (was: 3 stages on
    IPUs 1-3, contradicting the error's "a model with 4 pipeline stages")."""
    engine = capture(tmp_path, STEM.replace("gradientAccumulation(8)", "gradientAccumulation(4)"))
    assert [(s["index"], s["ipu"], s["blocks"]) for s in engine["config"]["stages"]] == [
        (0, 0, []), (1, 1, ["l1"]), (2, 2, ["l2"]), (3, 3, ["l3"])]
    assert engine["config"]["gradient_accumulation"] == 4


def test_an_available_memory_proportion_for_unused_ipus_is_ignored_with_a_note(tmp_path):
    """setAvailableMemoryProportion naming 16 IPUs on a 1-IPU model: PopTorch accepts it; the
    report stays readable, keeps IPU 0's value and says what was ignored."""
    engine = capture(tmp_path, """
        import torch, poptorch
        opts = poptorch.Options()
        opts.setAvailableMemoryProportion({f"IPU{i}": 0.3 for i in range(16)})
        model = poptorch.inferenceModel(torch.nn.Linear(8, 8), opts)
        model(torch.randn(4, 8))
        """)
    assert engine["config"]["available_memory_proportion"] == {"0": 0.3}
    [note] = [n for n in engine["not_checked"] if n["check"] == "available memory proportion of unused IPUs"]
    assert note["reason"].startswith("setAvailableMemoryProportion named IPU1, IPU2, IPU3, ")
    assert "IPU15, which this model does not use: ignored" in note["reason"]


def test_an_engine_that_never_compiled_gets_no_ramp_finding(tmp_path):
    """An operation after a ``with Block`` outside every block fails the compile (PopTorch's
    tests/pipelining_test.py test_missing_block): no pipeline ran, so no PIPE003."""
    engine = capture(tmp_path, """
        import torch, poptorch

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

            def forward(self, x):
                with poptorch.Block(ipu_id=0):
                    x = self.a(x)
                with poptorch.Block(ipu_id=1):
                    x = self.b(x)
                return poptorch.identity_loss(x.sum(), reduction="none")  # outside every block

        opts = poptorch.Options()
        opts.Training.gradientAccumulation(4)
        model = poptorch.trainingModel(Model(), opts)
        model(torch.randn(4, 8))
        """)
    assert engine["config"]["gradient_accumulation"] == 4
    assert not [f for f in engine["findings"] if f["code"].startswith("PIPE")]
    assert {"analysis": "pipeline", "check": "ramp efficiency",
            "reason": "this engine never compiled (its compile failed; the error is in the capture's summary and "
                      "log): no pipeline ran to fill or drain"} in engine["not_checked"]
    # it was called, and its compile failed: RUN002 quoting the error, not RUN001
    (run,) = [f for f in engine["findings"] if f["code"].startswith("RUN")]
    assert run["code"] == "RUN002" and run["severity"] == "error"
    assert run["evidence"].startswith("the first call (or compile()) raised: ") and "Block" in run["evidence"]


def test_after_calls_1_the_outputs_come_from_the_emulators_trace(tmp_path):
    """`--calls 1` stops the script before its call returns, so capture's hooks never see the
    outputs; the emulator traced them, and its report's sizes are kept (was: "output tensor sizes
    not recorded", and no HIO002 for OutputMode.All)."""
    engine = capture(tmp_path, STEM, "--calls", "1")
    assert "output bytes per call" not in [n["check"] for n in engine["not_checked"]]
    host = engine["metrics"]["host_io"]
    # y: 1 x 16 float32 (64 B) and the loss, 4 B, per micro-batch; OutputMode.Final: 1 copy per call
    assert (host["output_bytes_per_micro_batch"], host["outputs_per_call"], host["output_bytes_per_call"]) == (
        68, 1, 68)
