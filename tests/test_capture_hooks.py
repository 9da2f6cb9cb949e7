"""The capture hooks on PopTorch executors, through real `popviz capture` runs.

PopTorch is not installable here, so the children import tests/fake_poptorch: a small double laid
out like PopTorch 3.x's internals (see its docstring). The end-to-end runs against popviz's
emulator are in test_capture_emulated.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import popviz
from popviz.capture import hooks
from popviz.model import ModelConfig
from popviz.sources.manifest import outputs_per_call, per_micro_batch

from conftest import ROOT, assert_one_line_error, run_cli, unwrapped

PY = sys.executable
FAKE = ROOT / "tests" / "fake_poptorch"
FAKE_ENV = {"PYTHONPATH": str(FAKE)}

NET = '''
import sys, torch, poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(4, 8)
        self.l2 = torch.nn.Linear(8, 3)

    def forward(self, x, labels):
        with poptorch.Block("B1", ipu_id=0):
            h = self.l1(x)
        with poptorch.Block("B2", ipu_id=1):
            out = self.l2(h)
            loss = torch.nn.functional.cross_entropy(out, labels)
        return out, loss

torch.manual_seed(0)
'''

PIPELINE = NET + '''
opts = poptorch.Options().deviceIterations(2)
opts.Training.gradientAccumulation(3)
opts.outputMode(poptorch.OutputMode.All)
opts.setAvailableMemoryProportion({"IPU0": 0.3, "IPU1": 0.5})
opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.Stage("B1").ipu(0),
                                                      poptorch.Stage("B2").ipu(1)))
net = Net()
model = poptorch.trainingModel(net, opts)
for _ in range(5):
    model(torch.randn(30, 4), torch.randint(0, 3, (30,)))
inference = poptorch.inferenceModel(net, poptorch.Options().deviceIterations(4))
inference(torch.randn(16, 4), torch.randint(0, 3, (16,)))
'''


def write_script(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def captured(tmp_path: Path, script: str, *args: str, env: dict[str, str] | None = None,
             out: str = "out") -> subprocess.CompletedProcess[str]:
    path = write_script(tmp_path, script)
    proc = run_cli("capture", "-o", out, *args, "--", PY, str(path), cwd=tmp_path,
                   env={**FAKE_ENV, **(env or {})})
    return proc


def manifest(path: Path) -> dict:
    return json.loads((path / "popviz-model.json").read_text())


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("pipeline")
    proc = captured(tmp_path, PIPELINE)
    assert proc.returncode == 0, proc.stderr
    return tmp_path / "out", proc


def test_pipeline_manifest_records_options_stages_blocks_and_calls(pipeline_run):
    out, _ = pipeline_run
    doc = manifest(out / "training")
    assert (doc["format"], doc["format_version"], doc["engine"], doc["status"]) == (
        "popviz-model", 1, "training", "final")
    assert doc["executor"]["mode"] == "training"
    assert doc["versions"]["poptorch"] == "3.3.0+fake"
    opts = doc["options"]
    assert (opts["device_iterations"], opts["gradient_accumulation"], opts["replication_factor"]) == (2, 3, 1)
    assert (opts["output_mode"], opts["execution_strategy"], opts["stages_from"]) == (
        "All", "PipelinedExecution", "options")
    assert opts["stages"] == [{"index": 0, "ipu": 0, "blocks": ["B1"]},
                              {"index": 1, "ipu": 1, "blocks": ["B2"]}]
    assert opts["available_memory_proportion"] == {"0": 0.3, "1": 0.5}
    assert opts["optimizer_state_on_chip"] is True
    model = doc["model"]
    # Linear(4, 8): 32 + 8 parameters; Linear(8, 3): 24 + 3; float32
    assert (model["class"], model["parameters"], model["parameter_bytes"]) == ("Net", 67, 268)
    assert model["trainable_parameters"] == 67
    assert [(b["name"], b["ipu"], b["parameters"], b["parameter_bytes"]) for b in model["blocks"]] == [
        ("B1", 0, 40, 160), ("B2", 1, 27, 108)]
    calls = doc["calls"]
    assert calls["count"] == 5
    wall = next(s for s in calls["stats"] if s["metric"] == "wall_seconds")
    assert wall["count"] == 4  # the compiling call is the compile time, not a call time
    assert calls["compile"]["wall_seconds"] > 0 and calls["compile"]["poptorch_seconds"] > 0
    latency = next(s for s in calls["stats"] if s["metric"] == "latency_seconds")
    assert (latency["count"], latency["p50"]) == (5, 0.0007)
    [sig] = doc["io"]["signatures"]
    assert sig["sampled_calls"] == 5 and doc["io"]["sampled_calls"] == 5
    assert sig["inputs"] == [{"name": "x", "shape": [30, 4], "dtype": "float32", "bytes": 480},
                             {"name": "labels", "shape": [30], "dtype": "int64", "bytes": 240}]
    assert sig["outputs"] == [{"name": "output.0", "shape": [30, 3], "dtype": "float32", "bytes": 360},
                              {"name": "output.1", "shape": [6], "dtype": "float32", "bytes": 24}]
    assert doc["notes"] == ["cycleCount() unavailable: Cycle count logging is disabled."]


def test_load_merges_manifest_per_micro_batch(pipeline_run):
    out, _ = pipeline_run
    reports = popviz.load(out)
    assert reports.labels == ["inference", "training"]
    training = reports["training"]
    assert training.provenance.source == "capture"
    assert training.memory is None and training.execution is None
    cfg = training.config
    assert (cfg.mode, cfg.device_iterations, cfg.gradient_accumulation, cfg.output_mode) == (
        "training", 2, 3, "All")
    assert [(s.index, s.ipu, s.blocks) for s in cfg.stages] == [(0, 0, ("B1",)), (1, 1, ("B2",))]
    assert cfg.available_memory_proportion == {0: 0.3, 1: 0.5}
    assert cfg.options["model"]["parameters"] == 67
    # 30 samples per call = D·G·R (6) micro-batches of 5; All returns 6 of each output
    assert [(t.name, t.direction, t.shape, t.bytes) for t in training.host_io.tensors] == [
        ("x", "input", (5, 4), 80), ("labels", "input", (5,), 40),
        ("output.0", "output", (5, 3), 60), ("output.1", "output", (1,), 4)]
    assert training.host_io.calls == 5
    inference = reports["inference"]
    assert (inference.config.mode, inference.config.output_mode,
            inference.config.effective_output_mode) == ("inference", "Default", "All")
    # No strategy set, but the blocks carry IPUs: PopTorch's default PipelinedExecution(SameAsIpu)
    assert [(s.ipu, s.blocks) for s in inference.config.stages] == [(0, ("B1",)), (1, ("B2",))]
    assert [(t.name, t.shape) for t in inference.host_io.tensors] == [
        ("x", (4, 4)), ("labels", (4,)), ("output.0", (4, 3)), ("output.1", (1,))]


def test_run_record_and_summary_list_engines(pipeline_run):
    out, proc = pipeline_run
    run = json.loads((out / "popviz-run.json").read_text())
    assert run["status"] == "succeeded"
    assert [e["path"] for e in run["engines"]] == ["inference", "training"]
    assert run["engines"][1]["model"]["calls"] == 5
    assert run["versions"]["poptorch"] == "3.3.0+fake"
    assert "training no profile · training, PipelinedExecution, 2 stage(s) · D=2 G=3 R=1, " \
           "output All · 5 call(s)" in " ".join(proc.stderr.split())  # its line, wrapped at the width
    assert max(len(line) for line in proc.stderr.splitlines()) <= 100  # the terminal's width (COLUMNS)
    assert f"next: popviz analyse {out.name}" in proc.stderr


def test_analyse_shows_what_the_manifest_recorded(pipeline_run):
    out, _ = pipeline_run
    proc = run_cli("analyse", str(out), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    for text in ("training, PipelinedExecution, 2 stages", "stage 0 → IPU0: B1", "stage 1 → IPU1: B2",
                 "device iterations 2 · gradient accumulation 3 · replication 1 · output mode All",
                 "in: x 5×4 float32, labels 5 int64 (120 B) · out: output.0 5×3 float32, "
                 "output.1 1 float32 (64 B) per micro-batch · 5 calls"):
        assert text in proc.stdout, text


BEGIN_BLOCKS = '''
import torch, poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(2, 2)
        self.b = torch.nn.Linear(2, 2)
        self.c = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.c(self.b(self.a(x)))

net = Net()
poptorch.BeginBlock(net.a, "first", ipu_id=0)
poptorch.BeginBlock(net.b, "second", ipu_id=0)
poptorch.BeginBlock(net.c, "third", ipu_id=1)
opts = poptorch.Options().deviceIterations(3).modelName("encoder")
opts.outputMode(poptorch.OutputMode.EveryN, 3)
model = poptorch.inferenceModel(net, opts)
model(torch.randn(6, 2))
plain = poptorch.inferenceModel(torch.nn.Linear(2, 1), poptorch.Options().outputMode(poptorch.OutputMode.Sum))
plain(torch.randn(1, 2))
'''


def test_begin_blocks_same_as_ipu_model_name_and_single_ipu(tmp_path):
    proc = captured(tmp_path, BEGIN_BLOCKS)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    reports = popviz.load(out)
    assert reports.labels == ["encoder", "inference"]
    enc = reports["encoder"].config
    # SameAsIpu: consecutive blocks on one IPU form one stage
    assert [(s.index, s.ipu, s.blocks) for s in enc.stages] == [(0, 0, ("first", "second")),
                                                                 (1, 1, ("third",))]
    assert (enc.execution_strategy, enc.output_mode, enc.output_return_period) == (
        "PipelinedExecution", "EveryN", 3)
    assert [b["module"] for b in enc.options["model"]["begin_blocks"]] == ["a", "b", "c"]
    # EveryN(3) with D=3: one copy of each output per call of 3 micro-batches of 2
    assert [(t.name, t.shape) for t in reports["encoder"].host_io.tensors] == [("x", (2, 2)),
                                                                              ("output", (2, 2))]
    plain = reports["inference"].config
    assert (plain.execution_strategy, plain.stages, plain.output_mode) == (None, (), "Sum")


UNNAMED = '''
import torch, poptorch

class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(4))

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = torch.nn.Linear(2, 2)
        self.encoder = Encoder()

    def forward(self, x):
        return self.encoder(self.embeddings(x))

net = Net()
poptorch.BeginBlock(net.embeddings, ipu_id=0)
poptorch.BeginBlock(net.encoder.layer[1], ipu_id=1)
for name in ("first", "second"):  # the second executor sees the ids PopTorch kept on the hooks
    opts = poptorch.Options().deviceIterations(2).modelName(name)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.Stage("0").ipu(0),
                                                          poptorch.Stage("1").ipu(1)))
    model = poptorch.inferenceModel(net, opts)
    model(torch.randn(4, 2))
'''


def test_blocks_without_user_id_are_named_by_their_modules(tmp_path):
    """On (a double of) real PopTorch: BeginBlock without user_id gets PopTorch's id "0", "1"
    (what Stage("0") names) and keeps it; the manifest shows the modules each block ran."""
    proc = captured(tmp_path, UNNAMED)
    assert proc.returncode == 0, proc.stderr
    for name in ("first", "second"):
        doc = json.loads((tmp_path / "out" / name / "popviz-model.json").read_text())
        assert doc["options"]["stages"] == [{"index": 0, "ipu": 0, "blocks": ["embeddings+encoder.layer.0"]},
                                            {"index": 1, "ipu": 1, "blocks": ["encoder.layer.1-3"]}]
        assert [(b["id"], b["name"]) for b in doc["model"]["blocks"]] == [
            ("0", "embeddings+encoder.layer.0"), ("1", "encoder.layer.1-3")]


API = '''
import json, os, sys, torch
import poptorch   # imported before popviz captures: patched when the capture starts
import popviz

before = os.environ.get("POPLAR_ENGINE_OPTIONS")
net = torch.nn.Linear(3, 2)
with popviz.capture("api-run") as run:
    assert json.loads(os.environ["POPLAR_ENGINE_OPTIONS"])["autoReport.directory"] == str(run.dir.resolve())
    model = poptorch.inferenceModel(net, poptorch.Options().deviceIterations(2))
    assert popviz.wrap(model) is model and popviz.wrap(model, "elsewhere") is model
    with popviz.capture("other") as inner:       # nested: joins the running capture
        assert inner.joined and inner.dir == run.dir
        model(torch.randn(4, 3))
    loaded = run.load()
print(json.dumps({"labels": loaded.labels, "restored": os.environ.get("POPLAR_ENGINE_OPTIONS") == before,
                  "unpatched": not hasattr(poptorch.inferenceModel, "__popviz_original__"),
                  "other_exists": os.path.exists("other"), "elsewhere_exists": os.path.exists("elsewhere")}))
late = poptorch.inferenceModel(net)           # after the block: not captured
print(type(late).__dict__.get("_popviz_recorder") is None)
'''


def test_python_api_capture_nesting_wrap_and_restore(tmp_path):
    path = write_script(tmp_path, API)
    proc = subprocess.run([PY, str(path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, **FAKE_ENV}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert json.loads(first) == {"labels": ["inference"], "restored": True, "unpatched": True,
                                 "other_exists": False, "elsewhere_exists": False}
    assert second == "True"
    assert "popviz.capture('other'): a capture into" in proc.stderr
    run = json.loads((tmp_path / "api-run" / "popviz-run.json").read_text())
    assert (run["status"], run["started_by"]) == ("succeeded", "popviz.capture()")
    assert manifest(tmp_path / "api-run" / "inference")["calls"]["count"] == 1


def test_popviz_capture_inside_popviz_capture_joins(tmp_path):
    script = API.replace('"api-run"', '"inner-dir"')
    proc = captured(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "inner-dir").exists()
    assert manifest(tmp_path / "out" / "inference")["calls"]["count"] == 1


WRAP = '''
import torch, poptorch, popviz
model = poptorch.inferenceModel(torch.nn.Linear(3, 2))
try:
    popviz.wrap(model)
except popviz.errors.PopvizError as exc:
    print("error:", exc)
popviz.wrap(model, "wrapped")
model(torch.randn(1, 3))
opts = poptorch.Options().enableProfiling("profiled")
other = popviz.wrap(poptorch.inferenceModel(torch.nn.Linear(3, 2), opts))
other(torch.randn(1, 3))
'''


def test_wrap_without_capture(tmp_path):
    path = write_script(tmp_path, WRAP)
    proc = subprocess.run([PY, str(path)], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, **FAKE_ENV}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("error: popviz.wrap(executor): no report directory")
    assert manifest(tmp_path / "wrapped" / "inference")["calls"]["count"] == 1
    assert manifest(tmp_path / "profiled" / "inference")["calls"]["count"] == 1
    # wrapped into a directory with profiling off: said once, when it is wrapped (not for "profiled")
    assert unwrapped(proc.stderr).count("popviz: wrap: profiling is off for this executor, so wrapped gets its "
                                        "options and call times only") == 1, proc.stderr  # wrapped at 80 columns


def test_compile_failure_is_recorded_and_propagates(tmp_path):
    proc = captured(tmp_path, PIPELINE, env={"FAKE_POPTORCH_FAIL_COMPILE": "1"})
    assert proc.returncode == 1
    assert "Out of memory on tile 42" in proc.stderr
    doc = manifest(tmp_path / "out" / "training")
    assert doc["calls"]["compile"]["error"] == "Error: Out of memory on tile 42: 1024 bytes required"
    assert doc["calls"]["count"] == 0
    assert doc["model"]["blocks"][0]["parameters"] == 40  # traced before the failure
    report = popviz.load(tmp_path / "out")["training"]
    assert "compilation failed: Error: Out of memory on tile 42: 1024 bytes required" in report.provenance.notes
    assert "compile failed: Error: Out of memory" in proc.stderr


def test_distributed_options_write_under_the_instance(tmp_path):
    script = NET + '''
opts = poptorch.Options()
opts.Distributed.configureProcessId(1, 2)
model = poptorch.inferenceModel(Net(), opts)
model(torch.randn(2, 4), torch.randint(0, 3, (2,)))
import os, json
print(json.loads(os.environ["POPLAR_ENGINE_OPTIONS"])["autoReport.directory"])
'''
    proc = captured(tmp_path, script)
    assert proc.returncode == 0, proc.stderr
    out = (tmp_path / "out").resolve()
    assert proc.stdout.strip() == str(out / "instance-1")
    doc = manifest(out / "instance-1" / "inference")
    assert doc["instance"] == "instance-1" and doc["process"]["rank"] == 1
    assert popviz.load(out).labels == ["instance-1/inference"]


def test_damaged_manifest_is_one_line_error(pipeline_run, tmp_path):
    out, _ = pipeline_run
    copy = tmp_path / "copy" / "training"
    copy.mkdir(parents=True)
    text = (out / "training" / "popviz-model.json").read_text()
    (copy / "popviz-model.json").write_text(text[: len(text) // 2])
    assert_one_line_error(run_cli("analyse", str(copy.parent)), "popviz-model.json", "not valid JSON")
    doc = json.loads(text)
    doc["format_version"] = 99
    (copy / "popviz-model.json").write_text(json.dumps(doc))
    assert_one_line_error(run_cli("analyse", str(copy.parent)), "model manifest format 99", "upgrade popviz")
    doc["format_version"] = 1
    doc["io"]["signatures"][0]["inputs"][0]["shape"] = "30x4"
    (copy / "popviz-model.json").write_text(json.dumps(doc))
    assert_one_line_error(run_cli("analyse", str(copy.parent)), "popviz-model.json", "invalid shape")


# ------------------------------------------------------------------------------ pure functions

def test_outputs_per_call_by_mode():
    def cfg(mode, **kw):
        base = {"device_iterations": 10, "gradient_accumulation": 4, "replication_factor": 2}
        return ModelConfig(mode="training", output_mode=mode, **{**base, **kw})
    assert outputs_per_call(cfg("All")) == 80
    assert outputs_per_call(cfg("EveryN", output_return_period=5)) == 16
    assert outputs_per_call(cfg("Final")) == 2
    assert outputs_per_call(cfg("Sum")) == 2
    assert outputs_per_call(cfg("Default")) == 2  # Final for training
    assert outputs_per_call(ModelConfig(mode="inference", output_mode="Default", device_iterations=10,
                                        gradient_accumulation=1, replication_factor=1)) == 10
    assert outputs_per_call(cfg("All", device_iterations=None)) is None


def test_per_micro_batch():
    assert per_micro_batch((40, 3), 480, 8) == ((5, 3), 60)
    assert per_micro_batch((), 4, 1) == ((), 4)
    assert per_micro_batch((), 4, 2) is None
    assert per_micro_batch((30, 3), 360, 4) is None
    assert per_micro_batch((8,), 32, None) is None


def test_stat_keeps_a_bounded_window():
    stat = hooks.Stat()
    for i in range(3000):
        stat.add(float(i))
    assert (stat.count, stat.sum, stat.min, stat.max) == (3000, sum(range(3000)), 0.0, 2999.0)
    assert len(stat.ring) == hooks.WINDOW
    d = stat.to_dict("wall_seconds")
    # percentiles over the last 1024 values, 1976..2999
    assert (d["p50"], d["p90"]) == (2487.5, 2896.7)
    assert hooks.percentile([], 50) is None


def test_manifest_merged_into_a_poplar_profile(pipeline_run, tmp_path, monkeypatch):
    """On an IPU host the engine directory holds Poplar's profile.pop and the hooks' manifest."""
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fake_pva"))
    monkeypatch.delitem(sys.modules, "pva", raising=False)
    import pva

    out, _ = pipeline_run
    engine = tmp_path / "run" / "training"
    engine.mkdir(parents=True)
    pva.write_profile(engine / "profile.pop")
    (engine / "popviz-model.json").write_text((out / "training" / "popviz-model.json").read_text())
    [report] = popviz.load(tmp_path / "run")
    assert (report.provenance.source, report.provenance.estimated) == ("pva", False)
    assert report.provenance.tool == "Poplar SDK 3.3.0 (d8d3d63b1b)"
    assert report.provenance.notes[-2:] == (
        "configuration and host I/O recorded by popviz capture (popviz-model.json)",
        "cycleCount() unavailable: Cycle count logging is disabled.")
    assert report.provenance.versions["poptorch"] == "3.3.0+fake"
    assert report.memory.frame["total_bytes_including_gaps"].tolist()[:3] == [1000, 1001, 1002]
    assert (report.config.device_iterations, report.config.gradient_accumulation) == (2, 3)
    assert [(s.ipu, s.blocks) for s in report.config.stages] == [(0, ("B1",)), (1, ("B2",))]
    assert [t.shape for t in report.host_io.inputs] == [(5, 4), (5,)]


class _PlainExecutor:
    """An executor-shaped object (no torch): what the hooks need is a class with __call__."""

    def __init__(self) -> None:
        self._training = False
        self.destroyed = 0

    def isCompiled(self) -> bool:
        return True

    def __call__(self, x):
        return x

    def destroy(self) -> None:
        self.destroyed += 1


def test_every_call_is_counted_and_timed_calls_aggregate(tmp_path):
    executor = _PlainExecutor()
    assert popviz.wrap(executor, tmp_path) is executor
    assert isinstance(executor, _PlainExecutor) and type(executor).__name__ == "_PlainExecutor"
    for i in range(5000):
        assert executor(i) == i
    executor.destroy()
    assert executor.destroyed == 1
    doc = manifest(tmp_path / "inference")
    assert (doc["status"], doc["calls"]["count"]) == ("final", 5000)
    [wall] = [s for s in doc["calls"]["stats"] if s["metric"] == "wall_seconds"]
    assert wall["count"] == 5000 and wall["min"] <= wall["p50"] <= wall["p90"] <= wall["p99"] <= wall["max"]
    # no tensors: nothing to describe; the first 64 calls (and later ones at most every 0.5 s) sampled
    assert 64 <= doc["io"]["sampled_calls"] < 5000
    assert doc["io"]["signatures"] == [{"sampled_calls": doc["io"]["sampled_calls"], "inputs": [],
                                        "outputs": []}]
    assert hooks.recorder_of(executor).calls == 5000
