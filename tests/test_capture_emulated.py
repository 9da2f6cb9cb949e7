"""End to end with popviz's emulator: `popviz capture --emulate` on the MNIST pipeline example,
then `popviz analyse`; and `popviz.capture()` inside a script run by `popviz emulate`."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

import popviz

from conftest import assert_one_line_error, run_cli

PY = sys.executable


# mnist_capture (tests/conftest.py): the example captured for two training steps, shared


def test_mnist_capture_leaves_run_log_and_both_engines(mnist_capture):
    out, proc = mnist_capture
    assert sorted(p.name for p in out.iterdir()) == ["capture.log", "inference", "popviz-run.json",
                                                     "training"]
    for engine in ("training", "inference"):
        names = {p.name for p in (out / engine).iterdir()}
        assert {"popviz-report.json", "popviz-model.json"} <= names, names
    log = (out / "capture.log").read_text()
    assert "step 2/2: loss" in log and "inference: accuracy" in log
    assert "step 2/2: loss" in proc.stdout  # shown live too
    run = json.loads((out / "popviz-run.json").read_text())
    assert (run["status"], run["exit_code"], run["emulated"]) == ("succeeded", 0, True)
    assert run["versions"]["poptorch"].startswith("3.4.0+popviz.emulator")
    assert [e["path"] for e in run["engines"]] == ["inference", "training"]
    assert "popviz/emulator/_shim" in run["environment"]["PYTHONPATH"]
    assert "training popviz bundle · training, PipelinedExecution, 4 stage(s) · D=10 G=10 R=1, " \
           "output All · 2 call(s)" in " ".join(proc.stderr.split())  # its line, wrapped at the width
    assert "next: popviz analyse out" in proc.stderr


def test_mnist_manifest_and_merged_reports(mnist_capture):
    out, _ = mnist_capture
    doc = json.loads((out / "training" / "popviz-model.json").read_text())
    assert doc["options"]["stages"] == [{"index": i, "ipu": i, "blocks": [f"B{i + 1}"]} for i in range(4)]
    # Linear(784, 784) twice, Linear(784, 128), Linear(128, 10); float32
    assert [(b["name"], b["parameters"]) for b in doc["model"]["blocks"]] == [
        ("B1", 615_440), ("B2", 615_440), ("B3", 100_480), ("B4", 1_290)]
    assert doc["model"]["parameter_bytes"] == 4 * 1_332_650
    [sig] = doc["io"]["signatures"]
    # a call: batch 8 × D 10 × G 10 = 800 images
    assert [(t["name"], t["shape"]) for t in sig["inputs"]] == [("images", [800, 1, 28, 28]),
                                                                ("labels", [800])]
    reports = popviz.load(out)
    training = reports["training"]
    assert (training.provenance.source, training.provenance.estimated) == ("emulator", True)
    assert any("popviz capture" in n for n in training.provenance.notes)
    cfg = training.config
    assert (cfg.mode, cfg.device_iterations, cfg.gradient_accumulation, cfg.output_mode) == (
        "training", 10, 10, "All")
    assert [(s.ipu, s.blocks) for s in cfg.stages] == [(i, (f"B{i + 1}",)) for i in range(4)]
    assert [(t.name, t.direction, t.shape, t.bytes) for t in training.host_io.tensors] == [
        ("images", "input", (8, 1, 28, 28), 8 * 784 * 4), ("labels", "input", (8,), 64),
        ("output.0", "output", (8, 10), 320), ("loss", "output", (1,), 4)]
    assert training.host_io.calls == 2
    assert training.memory is not None and training.execution is not None
    inference = reports["inference"]
    assert (inference.config.mode, inference.config.device_iterations, inference.host_io.calls) == (
        "inference", 10, 4)


def test_mnist_analyse_shows_what_the_manifest_recorded(mnist_capture):
    out, _ = mnist_capture
    proc = run_cli("analyse", str(out), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for needle in ("training  (estimated)", "training, PipelinedExecution, 4 stages",
                   "stage 0 → IPU0: B1", "stage 3 → IPU3: B4",
                   "device iterations 10 · gradient accumulation 10 · replication 1 · output mode All",
                   "in: images 8×1×28×28 float32, labels 8 int64 (24.6 KiB) · out: output.0 8×10 float32, "
                   "loss 1 float32 (324 B) per micro-batch · 2 calls",
                   "inference, PipelinedExecution, 4 stages",
                   "in: x 8×1×28×28 float32 (24.5 KiB) · out: output 8×10 float32 (320 B) per micro-batch"):
        assert needle in text, needle


API_SCRIPT = '''
import json, sys, torch
import poptorch
import popviz

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        with poptorch.Block("first", ipu_id=0):
            x = torch.relu(self.a(x))
        with poptorch.Block("second", ipu_id=1):
            return self.b(x)

opts = poptorch.Options().deviceIterations(4).outputMode(poptorch.OutputMode.Final)
with popviz.capture(sys.argv[1]) as run:
    model = poptorch.inferenceModel(Net(), opts)
    for _ in range(3):
        model(torch.randn(8, 16))
    model.destroy()
print(json.dumps(run.load().labels))
'''


def test_python_api_under_the_emulator(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(API_SCRIPT))
    proc = run_cli("emulate", "--", PY, str(script), "reports", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["inference"]
    report = popviz.load(tmp_path / "reports")["inference"]
    assert (report.provenance.source, report.provenance.estimated) == ("emulator", True)
    cfg = report.config
    assert (cfg.device_iterations, cfg.output_mode, cfg.execution_strategy) == (4, "Final", "PipelinedExecution")
    assert [(s.ipu, s.blocks) for s in cfg.stages] == [(0, ("first",)), (1, ("second",))]
    # 8 rows per call = D 4 micro-batches of 2; Final returns the last one
    assert [(t.name, t.shape) for t in report.host_io.tensors] == [("x", (2, 16)), ("output", (2, 4))]
    assert report.host_io.calls == 3
    doc = json.loads((tmp_path / "reports" / "inference" / "popviz-model.json").read_text())
    assert doc["status"] == "final"
    assert os.path.exists(tmp_path / "reports" / "inference" / "popviz-report.json")


MANIFEST_ONLY_SCRIPT = '''
import torch
import poptorch

model = poptorch.inferenceModel(torch.nn.Linear(16, 4), poptorch.Options().deviceIterations(2))
for _ in range(3):
    model(torch.randn(4, 16))
'''


def test_engine_known_only_from_its_manifest_validates_against_the_json_schema(tmp_path):
    import jsonschema

    from popviz.render.json import schema

    script = tmp_path / "infer.py"
    script.write_text(MANIFEST_ONLY_SCRIPT)
    # The user's autoReport.all=false is kept: no profile, only popviz-model.json.
    proc = run_cli("capture", "-o", "out", "--emulate", "--", PY, str(script), cwd=tmp_path,
                   env={"POPLAR_ENGINE_OPTIONS": '{"autoReport.all": "false"}'}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out" / "inference").iterdir()) == ["popviz-model.json"]
    proc = run_cli("analyse", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(schema()).validate(doc)
    [engine] = doc["engines"]
    assert engine["provenance"]["source"] == "capture"
    assert engine["missing"] == ["target", "memory", "execution"]
    assert engine["config"]["device_iterations"] == 2
    assert engine["metrics"]["host_io"]["outputs_per_call"] == 2


def test_no_engine_under_emulate_does_not_suggest_emulate(tmp_path):
    proc = run_cli("capture", "-o", "out", "--emulate", "--", PY, "-c", "pass", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Poplar wrote no profile\n" in proc.stderr and "add --emulate" not in proc.stderr


@pytest.mark.parametrize("value, needle", [
    ("{oops", "POPLAR_RUNTIME_OPTIONS is not valid JSON"),
    ("[1, 2]", "POPLAR_RUNTIME_OPTIONS must be a JSON object"),
    ('{"streamCallbacks.multiThreadMode": "bogus"}', "streamCallbacks.multiThreadMode 'bogus' is not one of"),
    ('{"streamCallbacks.numWorkerThreads": "lots"}', "streamCallbacks.numWorkerThreads 'lots' is not a number"),
])
def test_poplar_runtime_options_poplar_would_reject_are_one_line_errors(tmp_path, value, needle):
    for cmd in (["capture", "-o", "out", "--emulate"], ["emulate"]):
        proc = run_cli(*cmd, "--", PY, "-c", "pass", cwd=tmp_path, env={"POPLAR_RUNTIME_OPTIONS": value})
        assert_one_line_error(proc, needle)
    assert not (tmp_path / "out").exists()


ESCAPING_NAME_SCRIPT = '''
import torch
import poptorch

opts = poptorch.Options().modelName("../../escaped")
model = poptorch.inferenceModel(torch.nn.Linear(16, 4), opts)
model(torch.randn(1, 16))
'''


def test_a_model_name_with_separators_stays_under_the_report_root(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.py").write_text(ESCAPING_NAME_SCRIPT)
    proc = run_cli("capture", "-o", "out", "--emulate", "--", PY, "script.py", cwd=work, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert sorted(p.name for p in work.iterdir()) == ["out", "script.py"]
    engine = work / "out" / "_.._escaped"
    assert (engine / "popviz-model.json").is_file() and (engine / "popviz-report.json").is_file()
    report = popviz.load(work / "out")
    assert [r.name for r in report] == ["../../escaped"]


def test_the_hooks_generic_output_names_take_the_traces_names():
    """A full run's hooks see a call's outputs as values (output, output.1); the emulator's trace
    knows which is the loss. The merged report names them as a --calls 1 run does."""
    from popviz.model import HostIO, HostTensor
    from popviz.sources.manifest import _merge_host_io

    trace = HostIO(tensors=(HostTensor("x", "input", (8, 4), "float32", 128),
                            HostTensor("output.0", "output", (8, 10), "float32", 320),
                            HostTensor("loss", "output", (), "float32", 4)))
    hooks = HostIO(tensors=(HostTensor("x", "input", (8, 4), "float32", 128),
                            HostTensor("output.0", "output", (8, 10), "float32", 320),
                            HostTensor("output.1", "output", (1,), "float32", 4)), calls=3)
    merged = _merge_host_io(trace, hooks)
    assert [(t.name, t.shape) for t in merged.outputs] == [("output.0", (8, 10)), ("loss", (1,))]
    named = HostIO(tensors=(HostTensor("logits", "output", (8, 10), "float32", 320),
                            HostTensor("aux", "output", (1,), "float32", 4)))
    assert [t.name for t in _merge_host_io(trace, named).outputs] == ["logits", "aux"]  # the script's own names


CRASH_AFTER_ONE_CALL = """
import poptorch, torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 2)

    def forward(self, x, y):
        out = self.fc(x)
        return out, torch.nn.functional.cross_entropy(out, y)


model = Net()
opts = poptorch.Options().deviceIterations(2)
opts.outputMode(poptorch.OutputMode.EveryN, output_return_period=2)
step = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
step(torch.randn(8, 8), torch.zeros(8, dtype=torch.long))
raise RuntimeError("the data loader broke")
"""


def test_a_script_that_fails_after_its_first_call_is_said_by_analyse(tmp_path):
    (tmp_path / "crash.py").write_text(CRASH_AFTER_ONE_CALL)
    proc = run_cli("capture", "-o", "out", "--emulate", "--", PY, "crash.py", cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 1 and "the data loader broke" in proc.stderr
    assert "D=2 G=1 R=1, output EveryN(2) · 1 call(s)" in " ".join(proc.stderr.split())  # capture's summary
    doc = json.loads(run_cli("analyse", "out", "--json", cwd=tmp_path).stdout)
    assert doc["warnings"] == ["popviz-run.json: the captured command failed (exit 1): the figures cover what ran "
                               "before it stopped (its own error is in capture.log beside it)"]
    console = run_cli("analyse", "out", cwd=tmp_path)
    assert "warning: popviz-run.json: the captured command failed (exit 1)" in " ".join(console.stdout.split())
