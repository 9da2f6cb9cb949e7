"""--split: plan files, re-placing an unmodified script's blocks, one-line errors; and the issue's
"Done when": a BERT-style encoder's layers, planned, re-run with the plan through --split."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import popviz
from popviz.errors import UsageError
from popviz.plan_file import FORMAT, PlanFile, parse_split, plan_from_dict, read_plan, write_plan

from conftest import assert_one_line_error, run_cli, unwrapped

ROOT = Path(__file__).resolve().parents[1]


def plan_doc(**changes):
    doc = {"format": FORMAT, "format_version": 1, "engine": "training", "ipus": 2, "layers_per_ipu": [1, 3],
           "placements": [{"layer": f"body.{i}", "ipu": 0 if i == 0 else 1} for i in range(4)]}
    doc.update(changes)
    return doc


def test_plan_file_round_trip(tmp_path):
    plan = plan_from_dict(plan_doc(), "p.json")
    assert plan.ipus == 2 and plan.layers_per_ipu == (1, 3) and plan.engine == "training"
    assert plan.placements == (("body.0", 0), ("body.1", 1), ("body.2", 1), ("body.3", 1))
    path = write_plan(plan, tmp_path / "plan.json")
    assert json.loads(path.read_text()) == plan_doc()
    assert read_plan(path).placements == plan.placements
    with pytest.raises(UsageError, match="plan.json exists; popviz never writes over files"):
        write_plan(plan, path)
    assert parse_split(str(path)).layers_per_ipu == (1, 3)


def test_layers_per_ipu_values():
    assert parse_split("layers_per_ipu=3,7,7,7") == PlanFile(ipus=4, layers_per_ipu=(3, 7, 7, 7),
                                                             source="layers_per_ipu=3,7,7,7")
    assert parse_split("2, 2").layers_per_ipu == (2, 2)


@pytest.mark.parametrize("value, message", [
    ("layers_per_ipu=3,x", "--split 'layers_per_ipu=3,x': 'x' is not a whole number"),
    ("layers_per_ipu=3,-2", "layers_per_ipu entry -2 is not a whole number of layers (0 or more)"),
    ("layers_per_ipu=0,0", "layers_per_ipu [0, 0] places no layer; give at least one"),
    ("layers_per_ipu=", "'' is not a whole number"),
    ("layers_per_ipu=" + ",".join(["1"] * 65), "65 IPUs; PopTorch uses at most 64 per process"),
    ("missing.json", "missing.json: no such plan file"),
])
def test_bad_split_values(value, message):
    with pytest.raises(UsageError) as info:
        parse_split(value)
    assert message in info.value.message


@pytest.mark.parametrize("changes, message", [
    ({"format": "x"}, "not a popviz plan (format is 'x'"),
    ({"format_version": 9}, "plan format_version 9 is not supported"),
    ({"ipus": 0}, "ipus 0 is not a whole number from 1 to 64"),
    ({"ipus": 3}, "layers_per_ipu [1, 3] has 2 entries for ipus 3"),
    ({"layers_per_ipu": "1,3"}, "layers_per_ipu '1,3' is not a list"),
    ({"placements": [{"layer": "body.0", "ipu": 2}]}, "placement of 'body.0' on IPU 2: expected 0 to 1"),
    ({"placements": [{"layer": "body.0", "ipu": 0}] * 2}, "layer 'body.0' is placed twice"),
    ({"placements": [{"ipu": 0}]}, "needs a \"layer\""),
    ({"placements": [{"layer": "body.0", "ipu": 0}]}, "1 placements but layers_per_ipu [1, 3] counts 4"),
])
def test_bad_plan_files(tmp_path, changes, message):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_doc(**changes)))
    with pytest.raises(UsageError) as info:
        read_plan(path)
    assert message in info.value.message


def test_bad_json_plan(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("{")
    with pytest.raises(UsageError, match="plan.json: not valid JSON"):
        read_plan(path)


# ------------------------------------------------------------------------------ in process

torch = pytest.importorskip("torch")

from test_emulator_layers import Tiny, check_sums, compiled  # noqa: E402

import popviz.emulator as poptorch  # noqa: E402
from popviz.emulator.structure import SPLIT_ENV  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(SPLIT_ENV, raising=False)
    monkeypatch.delenv("POPVIZ_EMULATOR_LAYER_DEPTH", raising=False)


def placements(ex):
    return [(x.name, x.stage, x.ipu) for x in ex.popvizReport().layers]


def test_split_re_places_the_blocks(monkeypatch):
    monkeypatch.setenv(SPLIT_ENV, "layers_per_ipu=1,3")
    ex = compiled(Tiny())
    assert placements(ex) == [("embed", 0, 0), ("body.0", 0, 0), ("body.1", 1, 1), ("body.2", 1, 1),
                              ("body.3", 1, 1), ("norm", 2, 0), ("proj", 2, 0)]
    report = ex.popvizReport()
    note = ("Blocks re-placed by --split layers_per_ipu=1,3 (2 IPUs); the script's own BeginBlock/Block "
            "placements were ignored.")
    assert note in report.provenance.notes and note in report.layers.notes
    # the re-placed blocks are named by the modules they run, like blocks without a user_id
    assert [s.blocks for s in report.config.stages] == [("embed+body.0",), ("body.1-3",), ("norm+proj+loss",)]
    check_sums(ex)


def test_split_of_an_untied_model_puts_the_head_last(monkeypatch):
    monkeypatch.setenv(SPLIT_ENV, "layers_per_ipu=2,1,1")
    ex = compiled(Tiny(tied=False), g=6)
    assert placements(ex) == [("embed", 0, 0), ("body.0", 0, 0), ("body.1", 0, 0), ("body.2", 1, 1),
                              ("body.3", 2, 2), ("norm", 2, 2), ("proj", 2, 2)]
    # 3 IPUs: PopTorch would refuse them without autoRoundNumIPUs(True); the estimate assumes it and says so
    report = ex.popvizReport()
    assert report.target.ipus_per_replica == 4
    assert any(n.endswith("PopTorch reserves IPUs in powers of two: the script needs opts.autoRoundNumIPUs(True) "
                          "for 3 IPUs, which this estimate assumes (4 reserved, 1 more than the split names).")
               for n in report.provenance.notes)


def test_split_from_a_plan_file_with_a_script_without_blocks(monkeypatch, tmp_path):
    path = write_plan(plan_from_dict(plan_doc(placements=[
        {"layer": "body.0", "ipu": 0}, {"layer": "body.1", "ipu": 0}, {"layer": "body.2", "ipu": 0},
        {"layer": "body.3", "ipu": 1}], layers_per_ipu=[3, 1]), "doc"), tmp_path / "plan.json")
    monkeypatch.setenv(SPLIT_ENV, str(path))
    ex = compiled(Tiny(blocks=False))
    assert placements(ex) == [("embed", 0, 0), ("body.0", 0, 0), ("body.1", 0, 0), ("body.2", 0, 0),
                              ("body.3", 1, 1), ("norm", 2, 0), ("proj", 2, 0)]


@pytest.mark.parametrize("value, message", [
    ("layers_per_ipu=1,2", "--split layers_per_ipu=1,2: covers 3 layers; the model has 4 at module depth 2 "
                           "('body.0', 'body.1', 'body.2', 'body.3'); the counts must add up to 4"),
    ("layers_per_ipu=x", "--split 'layers_per_ipu=x': 'x' is not a whole number; expected e.g. "
                         "layers_per_ipu=3,7,7,7 or a plan file"),
])
def test_split_that_does_not_fit_the_model(monkeypatch, capsys, value, message):
    monkeypatch.setenv(SPLIT_ENV, value)
    with pytest.raises(SystemExit) as info:
        compiled(Tiny())
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert unwrapped(err) == f"popviz: error: {message}\n"  # one message, broken between words at the width
    assert max(len(line) for line in err.splitlines()) <= 80


def test_plan_naming_an_unknown_layer(monkeypatch, capsys, tmp_path):
    doc = plan_doc(placements=[{"layer": "encoder.layer.0", "ipu": 0}, *plan_doc()["placements"][1:]])
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setenv(SPLIT_ENV, str(path))
    with pytest.raises(SystemExit) as info:
        compiled(Tiny())
    assert info.value.code == 2
    assert ("layer 'encoder.layer.0' is not a layer of this model (its layers at depth 2: body.0, body.1, "
            "body.2 ...)") in unwrapped(capsys.readouterr().err)


def test_split_script_blocks_with_explicit_stages_are_ignored(monkeypatch):
    """A strategy listing the script's own block ids does not reject the split's blocks."""

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

        def forward(self, x):
            with poptorch.Block("A"):
                x = self.body[0](x)
            with poptorch.Block("B"):
                x = self.body[2](self.body[1](x))
            return x

    monkeypatch.setenv(SPLIT_ENV, "layers_per_ipu=2,1")
    opts = poptorch.Options().deviceIterations(2)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.Stage("A").ipu(0), poptorch.Stage("B").ipu(1)))
    ex = poptorch.inferenceModel(Two(), opts)
    ex(torch.randn(4, 4))
    assert placements(ex) == [("body.0", 0, 0), ("body.1", 0, 0), ("body.2", 1, 1)]


# ------------------------------------------------------------------------------ the CLI


def test_cli_bad_split_is_one_line_exit_2(tmp_path):
    proc = run_cli("emulate", "--split", "layers_per_ipu=3,-1", "--", sys.executable, "-c", "pass")
    assert_one_line_error(proc, "layers_per_ipu entry -1 is not a whole number of layers (0 or more)")
    proc = run_cli("capture", "-o", str(tmp_path / "c"), "--split", "layers_per_ipu=3,7", "--", sys.executable,
                   "-c", "pass")
    assert_one_line_error(proc, "--split layers_per_ipu=3,7 applies to an emulated run: add --emulate")
    assert not (tmp_path / "c").exists()
    proc = run_cli("emulate", "--split", str(tmp_path / "nope.json"), "--", sys.executable, "-c", "pass")
    assert_one_line_error(proc, "nope.json: no such plan file")



def test_a_split_that_does_not_fit_the_model_under_capture(tmp_path):
    """The model has 4 layers, the split 12: one error line from the script's process, exit 2,
    and a summary that says what happened (not 'single IPU, 0 stage(s)', not 'LayerSetupError: 2')."""
    proc = run_cli("capture", "-o", str(tmp_path / "c"), "--emulate", "--split", "layers_per_ipu=1,4,4,3", "--",
                   sys.executable, str(ROOT / "examples" / "mnist_pipeline.py"), "--steps", "1", cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2
    message = ("--split layers_per_ipu=1,4,4,3: covers 12 layers; the model has 4 at module depth 2 "
               "('model.layer1', 'model.layer2', 'model.layer3', 'model.layer4'); the counts must add up to 4")
    assert f"popviz: error: {message}\n" in unwrapped(proc.stderr)  # broken between words at 100 columns
    out = " ".join((proc.stdout + proc.stderr).split())  # the summary's lines wrap at the terminal's width
    assert ("training, PipelinedExecution, stages of --split layers_per_ipu=1,4,4,3 (no report)" in out
            and f"compile failed: LayerSetupError: {message}" in out), out
    assert "Traceback" not in out


# ------------------------------------------------------------------------------ Done when


def capture(tmp_path: Path, name: str, *extra: str, split: str | None = None):
    out = tmp_path / name
    args = ["capture", "-o", str(out), "--emulate", "--calls", "1"]
    if split:
        args += ["--split", split]
    proc = run_cli(*args, "--", sys.executable, str(ROOT / "examples" / "bert_pipeline.py"), "--mlm", *extra,
                   cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    report = popviz.load(out)[0]
    # the end-of-run summary counts the stages that ran (under --split: the re-placed ones)
    summary = proc.stdout + proc.stderr
    assert f"training, PipelinedExecution, {len(report.config.stages)} stage(s)" in summary, summary
    return report


def per_ipu_cycles(report) -> dict[int, int]:
    out: dict[int, int] = {}
    for x in report.layers:
        out[x.ipu] = out.get(x.ipu, 0) + x.fwd_cycles + x.bwd_cycles
    return out


BERT_ARGS = ("--layers", "8", "--hidden", "128", "--heads", "4", "--seq", "128", "--vocab", "30522",
             "--masked", "128")
"""A BERT-style encoder small enough for the test suite, built like BERT-Large (embeddings and a
tied projection on IPU 0, an even split over 4 IPUs, BERT's vocabulary, every position predicted
as BertForMaskedLM does, so the tied head outweighs a layer); the full-size run is in
docs/emulator.md."""


def test_done_when_plan_then_split(tmp_path):
    from popviz.analysis import layer_costs, planner
    from popviz.plan_file import from_split

    even = capture(tmp_path, "even", *BERT_ARGS)
    layers = even.layers
    assert [x.name for x in layers] == ["embeddings", *(f"layers.{i}" for i in range(8)), "mlm"]
    assert layers.layers[0].pin == "first" and layers.layers[-1].tied_to == "embeddings"
    assert [x.ipu for x in layers] == [0, 0, 0, 1, 1, 2, 2, 3, 3, 0]
    # IPU0's head of 2 classes (next-sentence) runs at 2/16 of the AMP's output channels: +83 cycles
    assert per_ipu_cycles(even) == {0: 2390280, 1: 1575664, 2: 1575664, 3: 1575664}
    # the script's BeginBlocks have no user_id: each block is named by the modules it runs
    assert [(s.ipu, s.blocks) for s in even.config.stages] == [
        (0, ("embeddings", "layers.0-1")), (1, ("layers.2-3",)), (2, ("layers.4-5",)), (3, ("layers.6-7",)),
        (0, ("mlm+loss",))]
    costs = layer_costs.layer_costs(layers.layers)
    assert [c.name for c in costs] == ["embeddings"] + [f"layers.{i}" for i in range(8)]
    assert layer_costs.extra_stages(layers.layers) == 1  # the tied projection runs on IPU 0 again
    settings = planner.PlanSettings(capacity_bytes=even.target.bytes_per_tile * even.target.tiles_per_ipu,
                                    extra_stages=1)
    best = planner.plan(costs, 4, settings, exact_n=True).best
    plan = from_split(layers.layers, [c.name for c in costs], best.layers_per_ipu, engine=even.name)
    # IPU 0 holds the embeddings (with the tied projection) and no encoder layer
    assert plan.layers_per_ipu == (0, 3, 2, 3)
    predicted = {i: st.cycles for i, st in enumerate(best.stages)}
    assert predicted == {0: 814616, 1: 2363496, 2: 1575664, 3: 2363496}
    path = write_plan(plan, tmp_path / "plan.json")

    planned = capture(tmp_path, "planned", *BERT_ARGS, split=str(path))
    assert [x.ipu for x in planned.layers] == [0, 1, 1, 1, 2, 2, 3, 3, 3, 0]
    # the stages are the re-placed blocks (not the script's own, which the split ignored): the
    # tied head stays on IPU 0, a fifth stage
    assert [(s.ipu, s.blocks) for s in planned.config.stages] == [
        (0, ("embeddings",)), (1, ("layers.0-2",)), (2, ("layers.3-4",)), (3, ("layers.5-7",)), (0, ("mlm+loss",))]
    assert any("Blocks re-placed by --split" in n and "layers_per_ipu=0,3,2,3 over 4 IPUs" in n
               for n in planned.provenance.notes)
    measured = per_ipu_cycles(planned)
    for ipu, cycles in predicted.items():
        assert abs(measured[ipu] - cycles) <= 0.10 * cycles
    # the same cost model on the same layers: equal up to rounding each stage's total
    assert all(abs(measured[i] - predicted[i]) <= 2 for i in predicted)
    assert max(measured.values()) < max(per_ipu_cycles(even).values())
    # memory: with the emulator's code and exchange bytes of each IPU, the prediction is exact on
    # every IPU. Under PopTorch's default pipeline recomputation (no checkpoints here) a stage's
    # recomputed activations are live at once: each layer carries its own (recompute_bytes, one
    # group), so a stage given 3 layers where the report had 2 holds 3 layers' worth (this was
    # 2,370,560 and 2,637,824 bytes low on IPUs 1 and 3 when the plan took the report's per-layer
    # temporaries as they were).
    # The layers' own code moves with them (code_bytes); each IPU's fixed part (tile overhead,
    # stage-boundary exchange) is what the plan adds per IPU.
    mem = planned.memory.frame.set_index("ipu")
    own_code = {i: sum(x.code_bytes for x in planned.layers if x.ipu == i) for i in predicted}
    got = {i: int(mem.loc[i, "total_bytes_including_gaps"] - mem.loc[i, "cat_codeAndExchange_bytes"]) + own_code[i]
           for i in predicted}
    want = {i: st.memory_bytes for i, st in enumerate(best.stages)}
    assert got == want == {0: 258633636, 1: 45185024, 2: 31084544, 3: 44136448}
    assert [(x.recompute_bytes, x.recompute_group) for x in layers][:3] == [(266240, 0), (2637824, 0), (2637824, 0)]
    assert (layers.layers[-1].recompute_bytes, layers.layers[-1].recompute_group) == (0, None)  # final stage


def test_cli_passes_depth_and_split_to_the_script(tmp_path):
    write_plan(plan_from_dict(plan_doc(), "doc"), tmp_path / "plan.json")
    show = "import os; print(os.environ['POPVIZ_EMULATOR_LAYER_DEPTH'], os.environ['POPVIZ_EMULATOR_SPLIT'])"
    proc = run_cli("emulate", "--layer-depth", "3", "--split", "plan.json", "--", sys.executable, "-c", show,
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", str((tmp_path / "plan.json").resolve())]
    proc = run_cli("emulate", "--split", "3, 7,7,7", "--", sys.executable, "-c",
                   "import os; print(os.environ['POPVIZ_EMULATOR_SPLIT'])", cwd=tmp_path)
    assert proc.stdout.strip() == "layers_per_ipu=3,7,7,7"


def test_extra_stage_deepens_every_stash():
    from popviz.analysis import layer_costs, planner
    from popviz.model import Layer

    layers = [Layer("emb", role="embeddings", activation_bytes=1, pin="first"),
              *(Layer(f"l{i}", activation_bytes=10, fwd_cycles=5) for i in range(4)),
              Layer("head", role="head", activation_bytes=2, tied_to="emb")]
    assert layer_costs.extra_stages(layers) == 1
    assert layer_costs.extra_stages(layers[:-1]) == 0
    costs = layer_costs.layer_costs(layers)
    assert [(c.name, c.activation_bytes) for c in costs] == [("emb", 3)] + [(f"l{i}", 10) for i in range(4)]
    for extra, depths in ((0, [3, 1]), (1, [5, 3])):
        settings = planner.PlanSettings(capacity_bytes=10**6, extra_stages=extra)
        split = planner.evaluate(costs, [3, 2], settings)
        assert [s.stash_depth for s in split.stages] == depths
        # IPU0 stashes emb + l0 + l1 (21 B) at its depth and the tied head's 2 B once: the head
        # runs in the last stage, which holds one micro-batch
        assert [s.memory_bytes for s in split.stages] == [21 * depths[0] + 2, 20 * depths[1]]
        best = planner.plan(costs, 2, settings, exact_n=True).best
        assert [s.stash_depth for s in best.stages] == depths


def test_a_plan_whose_counts_disagree_with_its_placements_is_refused():
    """Editing layers_per_ipu alone ran the placements' split while the report named the edit."""
    doc = plan_doc()
    doc["layers_per_ipu"] = [2, 2]
    with pytest.raises(UsageError, match=r"placements disagree with layers_per_ipu \[2, 2\] \(layer 'body.1' is on "
                                         r"IPU 1, where the counts put IPU 0\)"):
        plan_from_dict(doc, "p.json")
    doc = plan_doc()
    doc["placements"][0]["ipu"] = 1  # not contiguous: body.0 on IPU 1, then body.1 on IPU 1 ...
    with pytest.raises(UsageError, match="placements disagree"):
        plan_from_dict(doc, "p.json")
