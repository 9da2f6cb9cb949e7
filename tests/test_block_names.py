"""Block names that map back to the code (popviz.block_names): a block is shown by its user_id,
else by the module paths it ran (``bert.encoder.layer.0-2``), while PopTorch's ids still resolve
``Stage("0")``; emulated runs, ``--split`` and the capture hooks name blocks the same way."""

from __future__ import annotations

import pytest

from popviz.block_names import display_names, module_label, modules_of


@pytest.mark.parametrize("paths, label", [
    (["bert.encoder.layer.0", "bert.encoder.layer.1", "bert.encoder.layer.2"], "bert.encoder.layer.0-2"),
    (["layers.7"], "layers.7"),
    (["embeddings", "layers.0"], "embeddings+layers.0"),
    (["layers.9", "layers.10", "layers.11", "classifier"], "layers.9-11+classifier"),
    (["layers.0", "layers.2"], "layers.0+layers.2"),  # not consecutive: two parts
    (["a.0", "b.1", "b.2"], "a.0+b.1-2"),
    (["conv1", "bn1", "relu", "maxpool", "layer1.0"], "conv1..layer1.0"),
    (["_forward_module.layer1"], "layer1"),  # Lightning's wrapper is not the user's path
    (["_orig_mod._private"], "_private"),
])
def test_module_label(paths, label):
    assert module_label(paths) == label


def test_modules_of_takes_the_largest_modules_inside_the_block():
    spans = {"": {None, "0", "1"}, "emb": {None}, "encoder": {None, "0", "1"},
             "encoder.layer.0": {"0"}, "encoder.layer.0.attn": {"0"}, "encoder.layer.1": {"0"},
             "encoder.layer.2": {"1"}, "encoder.layer.2.attn": {"1"}, "head": {"1"}}
    assert modules_of("0", spans) == ["encoder.layer.0", "encoder.layer.1"]
    assert modules_of("1", spans) == ["encoder.layer.2", "head"]
    assert modules_of("2", spans) == []


def test_display_names_keep_user_ids_and_never_repeat():
    spans = {"layer1": {"0"}, "l2": {"B"}, "x": {"2"}, "y": {"3"}}
    # "0" ran layer1; "B" is a user_id (kept, though it ran l2); "4" ran no module of its own;
    # "2" would take the user_id "x" as its name; "3" would take "2"'s
    names = display_names(["0", "B", "x", "2", "4"], {"0", "2", "4"}, spans)
    assert names == {"0": "layer1", "B": "B", "x": "x", "2": "x (block 2)", "4": "block 4"}
    assert display_names(["stage3"], {"stage3"}, {}) == {"stage3": "stage3"}


torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(6))

    def forward(self, x):
        for layer in self.layer:
            x = layer(x)
        return x


class Bert(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embeddings = torch.nn.Linear(4, 8)
        self.encoder = Encoder()


class Model(torch.nn.Module):
    """A Hugging Face-like tree: the layers are ``bert.encoder.layer.N``."""

    def __init__(self) -> None:
        super().__init__()
        self.bert = Bert()
        self.classifier = torch.nn.Linear(8, 2)

    def forward(self, x):
        x = self.bert.encoder(self.bert.embeddings(x))
        return self.classifier(x)


def estimate(model, strategy=None):
    opts = poptorch.Options().deviceIterations(4).autoRoundNumIPUs(True)  # some use 3 IPUs
    if strategy is not None:
        opts.setExecutionStrategy(strategy)
    ex = poptorch.inferenceModel(model, opts)
    ex.compile(torch.ones(4, 4))
    return ex.popvizEstimate()


def stages(est):
    return [(s.ipu, s.blocks) for s in est.config.stages]


def test_begin_block_without_user_id_is_named_by_its_module_path():
    model = Model()
    poptorch.BeginBlock(model.bert.embeddings, ipu_id=0)
    poptorch.BeginBlock(model.bert.encoder.layer[0], ipu_id=1)
    poptorch.BeginBlock(model.bert.encoder.layer[3], ipu_id=2)
    est = estimate(model)
    # a block spanning three layers is named by all three, the last one with the classifier after it
    assert stages(est) == [(0, ("bert.embeddings",)), (1, ("bert.encoder.layer.0-2",)),
                           (2, ("bert.encoder.layer.3-5+classifier",))]
    assert [(x.name, x.block) for x in est.layers][:3] == [
        ("bert.embeddings", "bert.embeddings"), ("bert.encoder.layer.0", "bert.encoder.layer.0-2"),
        ("bert.encoder.layer.1", "bert.encoder.layer.0-2")]
    assert [b["block"] for b in est.config.options["emulator"]["blocks"]] == [
        "bert.embeddings", "bert.encoder.layer.0-2", "bert.encoder.layer.3-5+classifier"]


def test_user_ids_are_kept():
    model = Model()
    poptorch.BeginBlock(model.bert.embeddings, "Embedding", ipu_id=0)
    poptorch.BeginBlock(model.bert.encoder.layer[3], "Encoder3", ipu_id=1)
    assert stages(estimate(model)) == [(0, ("Embedding",)), (1, ("Encoder3",))]


def test_stage_with_automatic_ids_still_resolves():
    """PopTorch's automatic ids "0", "1" are what Stage() names; the output shows the modules."""
    model = Model()
    poptorch.BeginBlock(model.bert.embeddings)
    poptorch.BeginBlock(model.bert.encoder.layer[2])
    strategy = poptorch.PipelinedExecution(poptorch.Stage("0").ipu(1), poptorch.Stage("1").ipu(0))
    assert stages(estimate(model, strategy)) == [(1, ("bert.embeddings+bert.encoder.layer.0-1",)),
                                                 (0, ("bert.encoder.layer.2-5+classifier",))]


def test_an_unknown_stage_id_is_still_poptorchs_error():
    model = Model()
    poptorch.BeginBlock(model.bert.embeddings)
    strategy = poptorch.PipelinedExecution(poptorch.Stage("bert.embeddings"))
    with pytest.raises(Exception, match="Unknown Block '0'"):
        estimate(model, strategy)


class Steps(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer1 = torch.nn.Linear(4, 8)
        self.layer2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        with poptorch.Block(ipu_id=0):
            x = torch.relu(self.layer1(x))
        with poptorch.Block(ipu_id=1):
            x = self.layer2(x)
        with poptorch.Block(ipu_id=1):  # no module of its own (a Lightning step's loss)
            return x.argmax(dim=1)


class Wrapper(torch.nn.Module):
    """What Lightning's IPUStrategy hands PopTorch: the user's module as ``_forward_module``."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self._forward_module = inner

    def forward(self, x):
        return self._forward_module(x)


def test_with_block_without_user_id_and_a_moduleless_block():
    assert stages(estimate(Steps())) == [(0, ("layer1",)), (1, ("layer2", "block 2"))]


def test_a_wrapped_model_is_named_as_the_users_model(monkeypatch, tmp_path):
    est = estimate(Wrapper(Steps()))
    assert stages(est) == [(0, ("layer1",)), (1, ("layer2", "block 2"))]
    # the layers too (were: one layer, "_forward_module", spanning both stages)
    assert [(x.name, x.block, x.ipu) for x in est.layers] == [("layer1", "layer1", 0), ("layer2", "layer2", 1)]
    assert "inside the wrapper _forward_module" in est.layers.notes[0]
    # a plan file names them so too, and --split finds them
    from popviz.emulator.structure import SPLIT_ENV
    from popviz.plan_file import PlanFile, write_plan

    plan = write_plan(PlanFile(engine="inference", ipus=2, layers_per_ipu=(0, 2),
                               placements=(("layer1", 1), ("layer2", 1))), tmp_path / "plan.json")
    monkeypatch.setenv(SPLIT_ENV, str(plan))
    est = estimate(Wrapper(Steps()))
    assert stages(est) == [(1, ("layer1+layer2",))]


def test_a_layers_block_is_that_of_its_own_operations():
    """Code in the model's forward before the first block (a Hugging Face model's attention
    mask) counts with the first layer, but does not make that layer's block None."""

    class Masked(Model):
        def forward(self, x):
            x = x * 2.0  # before every block: IPU 0, no block
            return super().forward(x)

    model = Masked()
    poptorch.BeginBlock(model.bert.embeddings, "Embedding", ipu_id=0)
    poptorch.BeginBlock(model.bert.encoder.layer[3], ipu_id=1)
    est = estimate(model)
    assert [(x.name, x.block) for x in est.layers][:2] == [("bert.embeddings", "Embedding"),
                                                          ("bert.encoder.layer.0", "Embedding")]
    assert stages(est) == [(0, ("Embedding",)), (1, ("bert.encoder.layer.3-5+classifier",))]
