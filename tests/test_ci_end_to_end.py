"""CI regression checks end to end, as a team would run them: capture an example under
`popviz capture --emulate`, save a baseline, change the model the way a teammate would, capture
again, compare. Real subprocesses, real files, the emulator's estimates."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT, assert_one_line_error, run_cli, unwrapped

pytest.importorskip("torch")

EXAMPLE = (ROOT / "examples" / "mnist_pipeline.py").read_text()
FINAL = (EXAMPLE.replace("opts.outputMode(poptorch.OutputMode.All)", "opts.outputMode(poptorch.OutputMode.Final)")
         # Final returns the last micro-batch: score it against its own labels
         .replace("accuracy(logits, labels):.1f", "accuracy(logits, labels[-len(logits):]):.1f"))
CHANGES = {
    "base": FINAL,
    # a teammate moves layer3 into block B2 (B3 keeps only its activation)
    "moved": FINAL.replace('''        with poptorch.Block("B2"):
            x = self.relu(self.layer2(x))
        with poptorch.Block("B3"):
            x = self.relu(self.layer3(x))''', '''        with poptorch.Block("B2"):
            x = self.relu(self.layer2(x))
            x = self.layer3(x)
        with poptorch.Block("B3"):
            x = self.relu(x)'''),
    # ... returns every micro-batch's outputs again
    "all_outputs": EXAMPLE,
    # ... doubles a hidden size
    "wider": FINAL.replace("self.layer1 = nn.Linear(784, 784)", "self.layer1 = nn.Linear(784, 1568)")
                  .replace("self.layer2 = nn.Linear(784, 784)", "self.layer2 = nn.Linear(1568, 784)"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ci")
    out = {}
    for name, source in CHANGES.items():
        assert name == "base" or source != FINAL, f"the {name} edit did not apply to examples/mnist_pipeline.py"
        script = root / f"{name}.py"
        script.write_text(source)
        proc = run_cli("capture", "-o", str(root / name), "--emulate", "--", sys.executable, str(script),
                       "--steps", "1", "--device-iterations", "4", "--gradient-accumulation", "8", cwd=root,
                       env={"OMP_NUM_THREADS": "1"}, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[name] = root / name
    return out


def regressed(proc) -> set[str]:
    doc = json.loads(proc.stdout)
    return {(m["engine"], m["metric"]) for m in doc["metrics"] if m["verdict"] == "regressed"}


def test_a_run_against_itself_and_its_baseline_passes(runs, tmp_path):
    baseline = tmp_path / "baseline.json"
    assert run_cli("baseline", "save", str(runs["base"]), "-o", str(baseline)).returncode == 0
    same = run_cli("compare", str(baseline), str(runs["base"]))
    assert same.returncode == 0, same.stdout
    assert same.stdout.startswith("popviz: OK: no regression")


def test_moving_a_layer_regresses_the_pipeline(runs):
    proc = run_cli("compare", str(runs["base"]), str(runs["moved"]), "--json")
    assert proc.returncode == 1
    assert {("training", "pipeline.cycles_per_micro_batch"), ("training", "pipeline.imbalance_ratio")} \
        <= regressed(proc)
    doc = json.loads(proc.stdout)
    # the blocks keep their names, but the layer table shows what moved: the split changed, so the
    # per-stage rows are not like for like (moved), and the pipeline-wide ones fail the build
    assert {"engine": "training", "field": "layers moved", "base": {"model.layer3": 2},
            "new": {"model.layer3": 1}} in doc["config_changes"]
    verdicts = {m["metric"]: m["verdict"] for m in doc["metrics"] if m["engine"] == "training"}
    assert verdicts["pipeline.stage1.cycles_per_micro_batch"] == "moved"
    text = run_cli("compare", str(runs["base"]), str(runs["moved"])).stdout
    first = unwrapped(text).splitlines()[0]  # the headline, wrapped at the width
    assert first.startswith("popviz: FAIL: regression in ") and "pipeline.imbalance_ratio" in first
    assert "  training layers moved:\n    model.layer3: IPU2 → IPU1\n" in text


def test_returning_every_output_regresses_host_io_and_the_reverse_improves(runs):
    proc = run_cli("compare", str(runs["base"]), str(runs["all_outputs"]), "--json")
    assert proc.returncode == 1
    assert ("training", "host_io.output_bytes_per_call") in regressed(proc)
    doc = json.loads(proc.stdout)
    assert {"engine": "training", "field": "output_mode", "base": "Final", "new": "All"} in doc["config_changes"]
    back = run_cli("compare", str(runs["all_outputs"]), str(runs["base"]), "--fail", "host_io.stream_copy_pct:+50pp")
    assert back.returncode == 0, back.stdout
    assert "improved" in back.stdout


def test_doubling_a_hidden_size_regresses_cycles_and_memory(runs):
    proc = run_cli("compare", str(runs["base"]), str(runs["wider"]), "--json")
    assert proc.returncode == 1
    found = regressed(proc)
    # (the inference pipeline's pace is set by another stage: a 784-wide product at this micro-batch
    # is mostly the cost model's fixed cost per matmul, so doubling it moves its own stage by ~2%)
    assert {("training", "memory.ipu0.used_bytes"), ("training", "pipeline.stage0.cycles_per_micro_batch"),
            ("inference", "memory.ipu0.used_bytes")} <= found
    base = {m["metric"]: m for m in json.loads(proc.stdout)["metrics"] if m["engine"] == "training"}
    assert base["memory.ipu0.used_bytes"]["new"] > base["memory.ipu0.used_bytes"]["base"]


def test_a_bad_baseline_is_one_line(runs, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "popviz-baseline", "format_version": 1, "engines": [')
    assert_one_line_error(run_cli("compare", str(broken), str(runs["base"])), "broken.json", "not valid JSON")
