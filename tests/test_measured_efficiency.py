"""Achieved efficiency on a measured profile: the FLOPs the capture hooks count on the model
(popviz/capture/flops.py) joined to the cycles a real profile measures per layer and stage
(popviz/sources/layer_flops.py, popviz/analysis/efficiency.py).

The capture runs under tests/fake_poptorch (PopTorch's Python surface, the model run on the CPU);
the profile is tests/fake_pva's pipelined training profile, whose debug contexts are nested as
PopTorch 3 and PopART nest them, placed beside the hooks' popviz-model.json as on an IPU host.
"""

from __future__ import annotations

import json
import sys
import textwrap

import jsonschema
import pytest

import popviz
from popviz import testing
from popviz.analysis import pipeline
from popviz.capture.flops import count_model_flops, skip_reason
from popviz.render.json import schema

from conftest import FAKE_PVA, ROOT, assert_one_line_error, run_cli

torch = pytest.importorskip("torch")

PEAK = 32 * 4  # float32 FLOPs per cycle of the double's Mk2 IPU: 32 per tile (IPU-M2000 datasheet), 4 tiles
MB = 8  # rows per micro-batch: D=2, G=3 → 6 micro-batches of 8 in a call of 48
L1_FWD = 2 * MB * 16 * 32  # Linear(16, 32): 2·batch·in·out
L2_FWD = 2 * MB * 32 * 16  # Linear(32, 16)

SCRIPT = '''
import torch, poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(16, 32)
        self.l2 = torch.nn.Linear(32, 16)

    def forward(self, x, labels):
        with poptorch.Block("B1", ipu_id=0):
            h = torch.relu(self.l1(x))
        with poptorch.Block("B2", ipu_id=1):
            out = self.l2(h)
            loss = poptorch.identity_loss(torch.nn.functional.cross_entropy(out, labels), reduction="mean")
        return out, loss

torch.manual_seed(0)
opts = poptorch.Options().deviceIterations(2)
opts.Training.gradientAccumulation(3)
opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.Stage("B1").ipu(0), poptorch.Stage("B2").ipu(1)))
model = poptorch.trainingModel(Net(), opts)
for _ in range(2):
    model(torch.randn(48, 16), torch.randint(0, 16, (48,)))
'''


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("measeff")
    (tmp / "train.py").write_text(textwrap.dedent(SCRIPT))
    proc = run_cli("capture", "-o", "out", "--", sys.executable, "train.py", cwd=tmp,
                   env={"PYTHONPATH": str(ROOT / "tests" / "fake_poptorch")})
    assert proc.returncode == 0, proc.stderr
    return tmp / "out" / "training" / "popviz-model.json"


@pytest.fixture
def fake_pva(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE_PVA))
    monkeypatch.delitem(sys.modules, "pva", raising=False)
    import pva

    return pva


def profile(pva, *, names=("l1", "l2")) -> dict:
    """Two stages of 100 and 200 forward cycles per micro-batch (backward twice that), 6
    micro-batches per call, 2 calls; the operations in layers ``names`` (PopTorch 3 contexts)."""
    data = pva.pipeline_profile(work=(100, 200), micro_batches=6, updates=1, calls=2)
    for op in data["operations"]:
        i = int(op["layer"].rpartition(".")[2])
        op.update(layer=names[i], name=f"{names[i]}/{op['op_type']}", context="poptorch3")
        if op["op_type"] == "MatMulGrad":  # PopTorch's context names the forward op; PopART's the gradient
            op.update(op_type="MatMul", popart_op="MatMulRhsGrad")
    data["variables"] = [[f"{names[0]}.weight", 100], [f"{names[1]}.weight", 200]]
    return data


def engine_dir(tmp_path, pva, manifest_path=None, data=None):
    engine = tmp_path / "run" / "training"
    engine.mkdir(parents=True)
    pva.write_data(engine / "profile.pop", data or profile(pva))
    (engine / "debug.cbor").write_bytes(b"\xa0")
    if manifest_path is not None:
        (engine / "popviz-model.json").write_text(manifest_path.read_text())
    return tmp_path / "run"


def test_the_capture_counts_each_linear_layer_exactly(captured):
    flops = json.loads(captured.read_text())["flops"]
    assert (flops["status"], flops["micro_batches_per_call"], flops["micro_batch_inputs"]) == (
        "counted", 6, [[MB, 16], [MB]])
    assert flops["counted_by"].startswith("torch.utils.flop_counter formulas (torch ")
    # forward 2·in·out·batch; backward: l1's input gradient is not grown (x needs none), so only
    # its weight gradient (as much again); l2 both its input and weight gradients
    assert flops["modules"] == [{"module": "l1", "fwd_flops": L1_FWD, "bwd_flops": L1_FWD},
                                {"module": "l2", "fwd_flops": L2_FWD, "bwd_flops": 2 * L2_FWD}]
    assert (L1_FWD, L2_FWD) == (8192, 8192)
    assert (flops["forward_flops"], flops["backward_flops"], flops["backward_from"]) == (
        16_384, 24_576, "loss")  # the loss: poptorch.identity_loss, computed as PopTorch's CPU kernel
    ops = [o["op"] for o in flops["uncounted_ops"]]
    assert "aten._log_softmax" in ops and "aten.nll_loss_forward" in ops
    assert flops["elementwise_calls"] > 0 and flops["seconds"] > 0


def test_measured_efficiency_joins_the_hooks_flops_to_the_profile_cycles(captured, fake_pva, tmp_path):
    [report] = popviz.load(engine_dir(tmp_path, fake_pva, captured))
    assert report.layers.source == "debug_context"
    assert [(x.name, x.stage, x.fwd_cycles, x.bwd_cycles, x.fwd_flops, x.bwd_flops) for x in report.layers] == [
        ("l1", 0, 100, 200, L1_FWD, L1_FWD), ("l2", 1, 200, 400, L2_FWD, 2 * L2_FWD)]
    assert report.layers.notes[-2].startswith(
        "FLOPs: counted by the capture hooks on the model (forward and backward, per micro-batch, ")
    out = pipeline.analyse(report)
    eff = out.metrics["efficiency"]
    assert {k: eff[k] for k in ("estimated", "precision", "flops_counted", "flops_estimated", "flops_source",
                                "basis", "peak_flops_per_cycle")} == {
        "estimated": False, "precision": "float32", "flops_counted": "forward+backward",
        "flops_estimated": False, "flops_source": "capture",
        "basis": "FLOPs counted by the capture hooks on the model; cycles measured",
        "peak_flops_per_cycle": PEAK}
    l1, l2 = 2 * L1_FWD, 3 * L2_FWD
    assert eff["layers"] == [
        {"name": "l1", "stage": 0, "flops": l1, "cycles": 300, "frac": l1 / 300 / PEAK},
        {"name": "l2", "stage": 1, "flops": l2, "cycles": 600, "frac": l2 / 600 / PEAK}]
    assert [round(r["frac"], 6) for r in eff["layers"]] == [0.426667, 0.32]
    # a stage's cycles per micro-batch include its weight update (work / 2 once per call of 6)
    assert [s["cycles"] for s in out.metrics["stages"]] == [300 + 50 / 6, 600 + 100 / 6]
    assert [round(s["frac"], 6) for s in eff["stages"]] == [0.415135, 0.311351]
    assert [x for x in out.caption.splitlines() if "achieved efficiency" in x] == [
        "achieved efficiency (forward+backward FLOPs counted by the capture hooks / Mk2 float32 peak; "
        "cycles measured): stage 0 42%, stage 1 31%, layers up to 43% (l1)"]
    assert not [n for n in out.not_checked if n.check == "achieved efficiency"]
    assert "PIPE006" not in {f.code for f in out.findings}


def test_analyse_json_and_80_columns(captured, fake_pva, tmp_path, fake_pva_env):
    run = engine_dir(tmp_path, fake_pva, captured)
    proc = run_cli("analyse", str(run), env={**fake_pva_env, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80
    text = " ".join(x.strip() for x in lines)
    assert ("achieved efficiency (forward+backward FLOPs counted by the capture hooks / Mk2 float32 peak; "
            "cycles measured): stage 0 42%, stage 1 31%, layers up to 43% (l1)") in text
    proc = run_cli("analyse", str(run), "--json", env=fake_pva_env)
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(schema()).validate(doc)
    eff = doc["engines"][0]["metrics"]["pipeline"]["efficiency"]
    assert (eff["flops_source"], eff["basis"]) == (
        "capture", "FLOPs counted by the capture hooks on the model; cycles measured")
    assert [s["flops"] for s in eff["stages"]] == [2 * L1_FWD, 3 * L2_FWD]


def test_the_label_survives_an_export(captured, fake_pva, tmp_path, fake_pva_env):
    run = engine_dir(tmp_path, fake_pva, captured)
    proc = run_cli("export", str(run), "-o", str(tmp_path / "bundle"), env=fake_pva_env)
    assert proc.returncode == 0, proc.stderr
    [back] = popviz.load(tmp_path / "bundle")
    eff = pipeline.analyse(back).metrics["efficiency"]
    assert eff["flops_source"] == "capture" and eff["layers"][0]["flops"] == 2 * L1_FWD


def test_the_stages_plot_labels_the_measured_figures(captured, fake_pva, tmp_path):
    pytest.importorskip("matplotlib")
    from popviz import plot

    [report] = popviz.load(engine_dir(tmp_path, fake_pva, captured))
    fig = plot.stages(report)
    ax = fig.axes[0]
    assert [t.get_text().splitlines()[-1] for t in ax.texts] == ["42% of peak", "31% of peak"]
    assert ax.get_xlabel() == ("achieved efficiency: forward+backward FLOPs counted by the capture hooks\n"
                               "per measured cycle / Mk2 float32 peak")


def reasons(report) -> list[str]:
    return [n.reason for n in pipeline.analyse(report).not_checked if n.check == "achieved efficiency"]


def test_a_profile_without_the_hooks_record_says_why(captured, fake_pva, tmp_path):
    [bare] = popviz.load(engine_dir(tmp_path / "a", fake_pva))
    assert reasons(bare) == [
        "no FLOPs per layer: not counted: no popviz-model.json beside the profile (capture the run with "
        "popviz capture, whose hooks count the model's FLOPs)"]
    doc = json.loads(captured.read_text())
    for name, flops, why in (
            ("older", None, "not counted: popviz-model.json has no FLOPs (written by a popviz that did not count "
                            "them yet, or the hooks never saw the executor compile)"),
            ("failed", {"status": "failed", "reason": "the model did not run on fake tensors (X: y)"},
             "not counted by the capture hooks: the model did not run on fake tensors (X: y)")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**doc, "flops": flops}))
        [report] = popviz.load(engine_dir(tmp_path / name, fake_pva, path))
        assert reasons(report) == [f"no FLOPs per layer: {why}"]
    # the profile's layers are not the modules the hooks counted
    [other] = popviz.load(engine_dir(tmp_path / "names", fake_pva, captured,
                                     data=profile(fake_pva, names=("enc", "dec"))))
    assert reasons(other) == [
        "no FLOPs per layer: not joined: the capture hooks counted FLOPs in modules (l1, l2) none of which is "
        "a layer of this profile's debug contexts (enc, dec) or below one"]


def test_a_damaged_flops_record_is_a_one_line_error(captured, fake_pva, tmp_path, fake_pva_env):
    doc = json.loads(captured.read_text())
    doc["flops"]["modules"][0]["fwd_flops"] = -3
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    run = engine_dir(tmp_path, fake_pva, path)
    proc = run_cli("analyse", str(run), env=fake_pva_env)
    assert_one_line_error(proc, "popviz-model.json", "flops: 'l1' fwd_flops must be a non-negative integer, got -3")


def test_nested_modules_share_their_layers_flops_without_counting_twice():
    from popviz.sources.layer_flops import owner

    names = {"enc", "enc.block.1"}
    assert [owner(p, names) for p in ("enc", "enc.block.0.mlp", "enc.block.1.mlp", "head", "")] == [
        "enc", "enc", "enc.block.1", None, None]


# ------------------------------------------------------------------------------ the counter itself

class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)
        self.w = torch.nn.Parameter(torch.randn(16, 16))
        self.norm = torch.nn.BatchNorm1d(16)

    def forward(self, x):
        return self.norm(x @ self.w + self.down(torch.relu(self.up(x))))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.ModuleList(Block() for _ in range(2))
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x, y):
        for b in self.body:
            x = b(x)
        out = self.head(x)
        return out, torch.nn.functional.cross_entropy(out, y)


def test_each_module_counts_its_own_forward_and_backward_and_nothing_real_changes():
    torch.manual_seed(0)
    net = Net().train()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    x, y = torch.randn(24, 16), torch.randint(0, 4, (24,))
    r = count_model_flops(net, (x, y), {}, 3, True)  # micro-batches of 8 rows
    assert r["status"] == "counted", r["reason"]
    mm = 2 * 8 * 16 * 32  # one 8×16 by 16×32 product
    # body.N's own product x @ w (8×16 by 16×16) is its own: its backward is body.N's, not up's
    assert r["modules"] == [
        {"module": "body.0", "fwd_flops": mm // 2, "bwd_flops": mm // 2},  # w's gradient only (x needs none)
        {"module": "body.0.down", "fwd_flops": mm, "bwd_flops": 2 * mm},
        {"module": "body.0.up", "fwd_flops": mm, "bwd_flops": mm},
        {"module": "body.1", "fwd_flops": mm // 2, "bwd_flops": mm},
        {"module": "body.1.down", "fwd_flops": mm, "bwd_flops": 2 * mm},
        {"module": "body.1.up", "fwd_flops": mm, "bwd_flops": 2 * mm},
        {"module": "head", "fwd_flops": 2 * 8 * 16 * 4, "bwd_flops": 2 * 2 * 8 * 16 * 4}]
    # the real model: parameters, BatchNorm's running statistics, gradients untouched; no data ran
    assert all(torch.equal(state[k], v) for k, v in net.state_dict().items())
    assert all(p.grad is None for p in net.parameters())
    inference = count_model_flops(net.eval(), (x, y), {}, 3, False)
    assert inference["backward_flops"] is None and inference["forward_flops"] == r["forward_flops"]


def test_what_cannot_be_counted_is_said():
    class Branchy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.lin(x)
            return y if y.sum() > 0 else -y  # needs the data

    class MakesCpuTensors(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 8)

        def forward(self, x):
            return self.lin(x) + torch.zeros(8, device="cpu")

    x = torch.randn(6, 4)
    assert count_model_flops(Branchy(), (x,), {}, 2, False)["reason"].startswith(
        "the model did not run on fake tensors (DataDependentOutputException")
    fallback = count_model_flops(MakesCpuTensors(), (x,), {}, 2, False)
    assert (fallback["status"], fallback["forward_flops"]) == ("counted", 2 * 3 * 4 * 8)
    assert fallback["counted_by"].endswith("on fake tensors")
    assert count_model_flops(Branchy(), (torch.randn(5, 4),), {}, 2, False)["reason"] == (
        "an input of shape [5, 4] does not divide into 2 micro-batches along dim 0")
    assert count_model_flops(Branchy(), (x,), {}, None, False)["reason"] == (
        "the micro-batches per call (D·G·R) are unknown")


def test_counting_is_skipped_under_the_emulator_and_when_turned_off(monkeypatch):
    emulated = type("PoplarExecutor", (), {"__module__": "popviz.emulator.executor"})()
    assert skip_reason(emulated) == "the emulator ran this model: its report counts the FLOPs"
    monkeypatch.setenv("POPVIZ_CAPTURE_FLOPS", "0")
    assert skip_reason(object()) == "turned off (POPVIZ_CAPTURE_FLOPS=0)"


def test_above_the_peak_is_flagged_as_inconsistent():
    # 6,000 cycles of work at the float16 peak done in 3,000: 200%
    peak16 = 128 * 1472
    table = testing.layer_table([1000, 1000, 2000], layers_per_ipu=[2, 1], source="debug_context")
    import dataclasses

    table = dataclasses.replace(table, layers=tuple(dataclasses.replace(x, fwd_flops=peak16 * 2000,
                                                                        bwd_flops=peak16 * 4000) for x in table))
    report = testing.layered_report(table, inputs={"x": ((4, 128), "float16")}, source="pva")
    out = pipeline.analyse(report)
    assert out.metrics["efficiency"] is None
    [finding] = [f for f in out.findings if f.code == "PIPE006"]
    assert finding.severity == "warning"
    assert finding.title == "Achieved efficiency above the IPU's peak: FLOPs and cycles are inconsistent"
    assert finding.evidence.startswith(
        "stage 0: 2,260,992,000 FLOPs in 6,062 cycles per micro-batch = 198%; layer layer.0: 1,130,496,000 FLOPs "
        "in 3,000 cycles per micro-batch = 200%")
    assert "the capture hooks counted" in finding.recommendation


def test_totals_match_torch_flop_counter_on_a_real_run():
    """The data-less count gives what torch's own FlopCounterMode counts running the model on
    data: attention written out (products and a softmax), a convolution, a feed-forward and an
    output head. (``scaled_dot_product_attention`` is left out: on the CPU it runs a flash kernel
    torch has no formula for, so a real CPU run counts none of it, while on meta tensors it runs
    as its products, which are counted.)"""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(32, 96)
            self.out = torch.nn.Linear(32, 32)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            weights = torch.softmax(q @ k.transpose(1, 2) / 32 ** 0.5, dim=-1)
            return x + self.out(weights @ v)

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(8, 32, 3, padding=1)
            self.layers = torch.nn.ModuleList(Attention() for _ in range(2))
            self.ff = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
            self.head = torch.nn.Linear(32, 10)

        def forward(self, x, y):
            x = self.conv(x).transpose(1, 2)
            for layer in self.layers:
                x = layer(x)
            return torch.nn.functional.cross_entropy(self.head(self.ff(x)).flatten(0, 1), y.flatten())

    model = Tiny()
    x, y = torch.randn(12, 8, 16), torch.randint(0, 10, (12, 16))
    r = count_model_flops(model, (x, y), {}, 3, True)
    with FlopCounterMode(display=False) as real:
        loss = model(x[:4], y[:4])
        fwd = real.get_total_flops()
        loss.backward()
    assert (r["forward_flops"], r["backward_flops"]) == (fwd, real.get_total_flops() - fwd)
    assert sum(m["fwd_flops"] for m in r["modules"]) == r["forward_flops"]
    assert sum(m["bwd_flops"] for m in r["modules"]) == r["backward_flops"]
    own = {m["module"]: m["fwd_flops"] for m in r["modules"]}
    # an attention block's own products: scores and weighted values, 2·(2·4·16·16·32)
    assert own["layers.0"] == own["layers.1"] == 2 * 2 * 4 * 16 * 16 * 32


def test_the_hooks_count_what_the_emulator_counts_on_the_bert_sample(monkeypatch):
    """Two counts written apart agree: the data-less count of examples/bert_pipeline.py's model
    (as captured for sample_reports/bert_even_split: 12 layers, hidden 256, the tied masked-LM
    head over 128 positions, micro-batch 4) joined to the sample's layers gives the emulator's
    own per-layer FLOPs (its cost model's products, backward twice the forward)."""
    import argparse
    import importlib.util
    import types

    from popviz.sources.layer_flops import owner

    monkeypatch.setitem(sys.modules, "poptorch", types.ModuleType("poptorch"))  # the example imports it
    spec = importlib.util.spec_from_file_location("bert_example", ROOT / "examples" / "bert_pipeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = argparse.Namespace(layers=12, hidden=256, heads=4, seq=128, vocab=30522, mlm=True, masked=128, classes=2)
    model = module.Encoder(args)
    ids = torch.zeros(4, 128, dtype=torch.long)
    r = count_model_flops(model, (ids, ids), {}, 1, True)
    [sample] = popviz.load(ROOT / "sample_reports" / "bert_even_split")
    names = {x.name for x in sample.layers}
    joined: dict[str, list[int]] = {}
    for m in r["modules"]:
        totals = joined.setdefault(owner(m["module"], names), [0, 0])
        totals[0] += m["fwd_flops"]
        totals[1] += m["bwd_flops"]
    assert None not in joined
    assert {x.name: [x.fwd_flops, x.bwd_flops] for x in sample.layers if x.fwd_flops} == joined
    assert joined["layers.0"] == [872_415_232, 1_744_830_464]


def test_poptorch_ops_without_autograd_keep_the_backward(tmp_path):
    """Under fake PopTorch (whose ops are registered as PopTorch registers them: CPU and Meta
    kernels, no autograd formula), ``identity_loss`` and ``recomputationCheckpoint`` do not cut
    the gradient: the layer before the checkpoint has its backward counted."""
    script = tmp_path / "count.py"
    script.write_text(textwrap.dedent('''
        import json, torch, poptorch
        from popviz.capture.flops import count_model_flops

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(4, 8)
                self.b = torch.nn.Linear(8, 2)

            def forward(self, x):
                h = poptorch.recomputationCheckpoint(self.a(x))
                return poptorch.identity_loss(self.b(h) ** 2, reduction="sum")

        h = poptorch.recomputationCheckpoint(torch.ones(2, requires_grad=True) * 2)
        print(json.dumps({"cut": h.grad_fn is None or "NotImplemented" in type(h.grad_fn).__name__
                                 or "Cpp" in type(h.grad_fn).__name__,
                          "flops": count_model_flops(Net(), (torch.randn(6, 4),), {}, 2, True)}))
    '''))
    import subprocess

    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "tests" / "fake_poptorch")})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["cut"] is True  # run as PopTorch registers it, the op has no gradient of its own
    r = out["flops"]
    assert (r["status"], r["backward_from"]) == ("counted", "loss")
    assert r["modules"] == [{"module": "a", "fwd_flops": 2 * 3 * 4 * 8, "bwd_flops": 2 * 3 * 4 * 8},
                            {"module": "b", "fwd_flops": 2 * 3 * 8 * 2, "bwd_flops": 2 * 2 * 3 * 8 * 2}]


def test_poptorch3_debug_contexts_name_the_module_path(fake_pva):
    """PopTorch 3's own context is a parent of PopART's (fake_pva follows graphcore/poptorch's
    test_pva_annotations): the layer is op_name's module path with dots, an operation outside any
    module has none, and PopART's opid marks a gradient."""
    from types import SimpleNamespace as NS

    from popviz.sources.attribution import layer_context

    def op(layer, op_type, popart_op=None):
        return NS(debugContext=fake_pva._poptorch3_context(
            {"layer": layer, "op_type": op_type, **({"popart_op": popart_op} if popart_op else {})}))

    assert layer_context(op("block0.lstm", "LSTM")) == {
        "layer": "block0.lstm", "op_name": "block0/lstm/LSTM", "op_type": "LSTM"}
    assert layer_context(op("", "Pow"))["layer"] == ""  # the model's own forward: no layer
    assert layer_context(op("enc.layer.3", "MatMul", "MatMulRhsGrad"))["op_type"] == "ai.graphcore.MatMulRhsGrad:1"
    plain = NS(debugContext=NS(json=json.dumps({"layer": "layers.0", "op_type": "MatMul"})))
    assert layer_context(plain)["layer"] == "layers.0"  # no poptorch ancestor: its own layer, as before
