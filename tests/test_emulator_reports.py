"""Estimated reports: written only with profiling on, where PopTorch would write them, and never
over anything the emulator did not write. Real subprocesses through ``popviz emulate``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import popviz
from popviz import testing
from popviz.sources.bundle import write_bundle

from conftest import run_cli, unwrapped

SCRIPT = '''
import sys, torch, poptorch
torch.manual_seed(0)

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(6, 6), torch.nn.Linear(6, 2)

    def forward(self, x, y):
        with poptorch.Block("first", ipu_id=0):
            x = torch.relu(self.a(x))
        with poptorch.Block("second", ipu_id=1):
            x = self.b(x)
            return x, torch.nn.functional.mse_loss(x, y)

opts = poptorch.Options().deviceIterations(2)
opts.Training.gradientAccumulation(3)
for arg in sys.argv[1:]:
    key, _, value = arg.partition("=")
    if key == "enable":
        opts.enableProfiling(value)
    elif key == "name":
        opts.modelName(value)
model = poptorch.trainingModel(Model(), opts)
x, y = torch.randn(12, 6), torch.randn(12, 2)
for _ in range(3):
    model(x, y)
print("trained", flush=True)
'''


def first_line(tmp_path: Path) -> str:
    """``popviz emulate``'s own first line (the command shown to 60 characters), before the
    script's output; the tests read stderr unwrapped (lines popviz broke at 80 columns joined)."""
    import shlex

    shown = shlex.join([sys.executable, str(tmp_path / "train.py")])
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"popviz emulate: running {shown} with popviz's emulator as poptorch\n"


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    # progress lines (tests/test_progress.py) off: these tests read the report messages exactly
    environment = {"OMP_NUM_THREADS": "1", "POPVIZ_PROGRESS": "off", **(env or {})}
    if "POPLAR_ENGINE_OPTIONS" not in environment:
        environment["POPLAR_ENGINE_OPTIONS"] = ""
    proc = run_cli("emulate", "--", sys.executable, str(script), *args, cwd=tmp_path, env=environment)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "trained"
    return proc


def engine_opts(directory: Path, all_value: object = "true") -> dict[str, str]:
    return {"POPLAR_ENGINE_OPTIONS": json.dumps({"autoReport.all": all_value,
                                                 "autoReport.directory": str(directory)})}


def test_no_profiling_switch_writes_nothing(tmp_path):
    proc = run(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]
    assert unwrapped(proc.stderr) == first_line(tmp_path)


def test_engine_options_then_a_later_run_replaces_only_its_own_report(tmp_path):
    out = tmp_path / "reports"
    proc = run(tmp_path, env=engine_opts(out))
    assert sorted(p.name for p in out.iterdir()) == ["training"]
    report = popviz.load(out)["training"]
    assert report.provenance.source == "emulator" and report.provenance.estimated
    assert report.host_io.calls == 3  # updated at exit, after the compile-time write said 0
    assert [s.blocks for s in report.config.stages] == [("first",), ("second",)]
    assert report.config.gradient_accumulation == 3 and report.config.device_iterations == 2
    assert report.memory.level == "ipu" and report.target.num_ipus == 2
    assert [t.name for t in report.host_io.tensors] == ["x", "y", "output.0", "loss"]
    assert unwrapped(proc.stderr) == (first_line(tmp_path) + "popviz emulator: estimated report of 'training' "
                                      "written to reports/training\n")

    (out / "training" / "notes.txt").write_text("mine")
    (out / "keep.txt").write_text("mine too")
    proc = run(tmp_path, env=engine_opts(out))
    assert unwrapped(proc.stderr).splitlines()[0] == first_line(tmp_path).strip()
    assert unwrapped(proc.stderr).splitlines()[1] == ("popviz emulator: warning: replacing the estimated "
                                                      "report of an earlier run in reports/training")
    assert (out / "training" / "notes.txt").read_text() == "mine" and (out / "keep.txt").read_text() == "mine too"
    assert popviz.load(out)["training"].host_io.calls == 3


def test_lightning_boolean_model_name_and_environment_wins(tmp_path):
    out = tmp_path / "lightning"
    proc = run(tmp_path, "enable=ignored", "name=encoder", env=engine_opts(out, True))
    assert "Profiling setting overridden by environment variable" in proc.stderr
    assert not (tmp_path / "ignored").exists()
    assert [p.name for p in out.iterdir()] == ["encoder"]
    assert popviz.load(out)["encoder"].name == "encoder"


def test_poplar_report_is_left_alone(tmp_path):
    engine = tmp_path / "reports" / "training"
    engine.mkdir(parents=True)
    (engine / "profile.pop").write_bytes(b"not really a profile")
    proc = run(tmp_path, env=engine_opts(tmp_path / "reports"))
    assert [p.name for p in engine.iterdir()] == ["profile.pop"]
    assert (engine / "profile.pop").read_bytes() == b"not really a profile"
    assert unwrapped(proc.stderr) == first_line(tmp_path) + (
        "popviz emulator: warning: reports/training holds a Poplar report (profile.pop); "
        "leaving it alone and writing no report for 'training' (choose another "
        "autoReport.directory)\n")


def test_enable_profiling_in_process_destroy_and_foreign_bundles(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import popviz.emulator as poptorch

    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)
    opts = poptorch.Options().modelName("in_process").enableProfiling(str(tmp_path))
    model = poptorch.inferenceModel(torch.nn.Linear(3, 3), opts)
    for _ in range(4):
        model(torch.ones(2, 3))
    assert popviz.load(tmp_path)["in_process"].host_io.calls == 0  # written at compile time
    model.destroy()
    assert popviz.load(tmp_path)["in_process"].host_io.calls == 4  # updated by destroy()

    foreign = tmp_path / "inference"
    write_bundle(testing.pipeline_report([10, 20], tiles_per_ipu=4), foreign)
    before = {p.name: p.read_bytes() for p in foreign.iterdir()}
    other = poptorch.inferenceModel(torch.nn.Linear(3, 3), poptorch.Options().enableProfiling(str(tmp_path)))
    other(torch.ones(1, 3))
    other.destroy()
    assert {p.name: p.read_bytes() for p in foreign.iterdir()} == before

    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", "{autoReport")
    with pytest.raises(poptorch.Error, match="POPLAR_ENGINE_OPTIONS is not valid JSON"):
        poptorch.inferenceModel(torch.nn.Linear(3, 3))(torch.ones(1, 3))


def test_capture_style_environment_keeps_user_pythonpath(tmp_path):
    """The child sees its own PYTHONPATH entries after the shim."""
    (tmp_path / "mylib.py").write_text("VALUE = 42\n")
    code = "import mylib, poptorch; print(mylib.VALUE)"
    proc = run_cli("emulate", "--", sys.executable, "-c", code,
                   env={"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"


def test_report_registry_does_not_keep_models_alive(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import gc
    import weakref

    import popviz.emulator as poptorch

    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)
    model = torch.nn.Linear(3, 3)
    executor = poptorch.inferenceModel(model, poptorch.Options().enableProfiling(str(tmp_path)))
    executor(torch.ones(1, 3))
    alive = weakref.ref(model), weakref.ref(executor)
    report = executor.popvizReport()
    assert report.host_io.calls == 1 and report.provenance.estimated
    del model, executor
    gc.collect()
    assert [ref() for ref in alive] == [None, None]
