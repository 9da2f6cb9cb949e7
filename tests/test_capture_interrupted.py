"""Issue 42: after Ctrl-C during the first call, capture's summary says what was interrupted — the
first call after a compile that succeeded, or the compile — not "0 call(s), compile failed:
KeyboardInterrupt:". The child raises KeyboardInterrupt itself (what Python does on SIGINT) at a
chosen moment, under tests/fake_poptorch, whose compile runs the model once and whose call runs it
once per micro-batch; before the compile the hooks run its forward once on data-less tensors to
count its FLOPs (popviz/capture/flops.py), so that is the first run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

SCRIPT = '''
import torch, poptorch

runs = 0

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(4, 3)

    def forward(self, x):
        global runs
        runs += 1
        if runs == {stop_at}:
            raise KeyboardInterrupt
        return self.l1(x)

model = poptorch.inferenceModel(Net(), poptorch.Options())
model(torch.randn(2, 4))
'''


@pytest.mark.parametrize("stop_at, said, note", [
    (3, "0 call(s), compiled in ", "interrupted (KeyboardInterrupt) during the first call, after the "
     "compile succeeded"),
    (2, "interrupted (Ctrl-C) while compiling", "interrupted (KeyboardInterrupt) while compiling"),
    (1, "interrupted (Ctrl-C) while compiling", "interrupted (KeyboardInterrupt) while compiling"),
], ids=["during-the-first-call", "while-compiling", "while-counting-flops"])
def test_the_summary_says_what_ctrl_c_interrupted(tmp_path: Path, stop_at, said, note):
    (tmp_path / "s.py").write_text(SCRIPT.format(stop_at=stop_at))
    proc = run_cli("capture", "-o", "out", "--", sys.executable, "s.py", cwd=tmp_path,
                   env={"PYTHONPATH": str(ROOT / "tests" / "fake_poptorch"), "COLUMNS": "200"},
                   timeout=600)  # a hang guard only: the run takes about a second
    out = proc.stdout + proc.stderr
    assert "KeyboardInterrupt:" not in out and "compile failed" not in out, out
    assert said in out, out
    if stop_at == 3:
        assert "interrupted (Ctrl-C) during its first call, after the compile succeeded" in out, out
    doc = json.loads((tmp_path / "out" / "inference" / "popviz-model.json").read_text())
    assert doc["calls"]["compile"]["error"] is None
    assert doc["calls"]["compile"]["interrupted"] == ("first call" if stop_at == 3 else "compile")
    assert note in doc["notes"]
    assert "NEVER CALLED" not in out
