"""Report.layers from the emulator: depth choice, roles, pins, tied weights, and per-layer figures
that add up exactly to the report's per-stage and per-IPU figures. In-process, small models."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402
from popviz.emulator import hardware as hw  # noqa: E402
from popviz.emulator.structure import DEPTH_ENV, SPLIT_ENV  # noqa: E402

H, V, SEQ = 8, 32, 4


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(H, 2 * H)
        self.down = torch.nn.Linear(2 * H, H)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Tiny(torch.nn.Module):
    """Embeddings, 4 repeated blocks over 2 IPUs, a head tied to the embeddings back on IPU 0."""

    def __init__(self, tied: bool = True, blocks: bool = True) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(V, H)
        self.body = torch.nn.ModuleList(Block() for _ in range(4))
        self.norm = torch.nn.LayerNorm(H)
        self.proj = torch.nn.Linear(H, V, bias=False)
        if tied:
            self.proj.weight = self.embed.weight
        self.loss = torch.nn.CrossEntropyLoss()
        if blocks:
            poptorch.BeginBlock(self.embed, "emb", ipu_id=0)
            poptorch.BeginBlock(self.body[2], "second", ipu_id=1)
            poptorch.BeginBlock(self.norm, "head", ipu_id=0 if tied else 1)

    def forward(self, ids, labels=None):
        x = self.embed(ids) * 2.0  # an operation outside every layer-level module
        for block in self.body:
            x = block(x)
        logits = self.proj(self.norm(x))
        if labels is None:
            return logits
        return logits, self.loss(logits.flatten(0, 1), labels.flatten())


def compiled(model, training=True, offload=False, g=6):
    opts = poptorch.Options()
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
    if training:
        opts.Training.gradientAccumulation(g)
        if offload:
            opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
        ex = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.Adam(model.parameters(), lr=1e-3))
        ids = torch.randint(0, V, (2 * g, SEQ), generator=torch.Generator().manual_seed(0))
        ex.compile(ids, ids.clone())
    else:
        opts.deviceIterations(4)
        ex = poptorch.inferenceModel(model, opts)
        ex.compile(torch.randint(0, V, (8, SEQ), generator=torch.Generator().manual_seed(0)))
    return ex


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv(DEPTH_ENV, raising=False)
    monkeypatch.delenv(SPLIT_ENV, raising=False)


def check_sums(ex) -> None:
    """Per-layer figures add up exactly to the estimate's per-stage and per-IPU figures."""
    est = ex.popvizEstimate()
    table = ex.popvizReport().layers
    frame = table.frame()
    for s in est.stages:
        mine = frame[frame.stage == s.index]
        assert (mine.ipu == s.ipu).all()
        assert int(mine.fwd_cycles.sum()) == s.forward_cycles
        assert int(mine.bwd_cycles.sum()) == s.backward_cycles
        assert int(mine.activation_bytes.sum()) == (s.saved_bytes if ex.training else 0)
    depth = {s.index: s.stash_depth for s in est.stages}
    mem = est.memory.frame.set_index("ipu")
    for ipu, rows in frame.groupby("ipu"):
        assert int(rows.weight_bytes.sum()) == mem.loc[ipu, "cat_weights_bytes"]
        assert int(rows.optimizer_bytes.sum()) == mem.loc[ipu, "cat_optimizerState_bytes"]
        assert int(rows.accumulator_bytes.sum()) == mem.loc[ipu, "cat_gradientAccumulators_bytes"]
        stash = sum(int(r.activation_bytes) * depth[r.stage] for r in rows.itertuples())
        assert stash == mem.loc[ipu, "cat_activationStash_bytes"]
        assert int(rows.temporary_bytes.max()) == mem.loc[ipu, "cat_temporaries_bytes"]
        # code: the layers' own, plus each tile's fixed overhead and the stage boundaries' exchange
        fixed = hw.TILE_OVERHEAD_BYTES * ex.popvizReport().target.tiles_per_ipu
        assert 0 <= mem.loc[ipu, "cat_codeAndExchange_bytes"] - fixed - int(rows.code_bytes.sum()) < 1 << 20


def test_layers_of_a_pipelined_model_with_a_tied_head():
    ex = compiled(Tiny())
    table = ex.popvizReport().layers
    assert table.source == "emulator" and table.depth == 2 and table.micro_batch_size == 2
    assert "depth 2 chosen automatically" in table.notes[0]
    got = [(x.name, x.role, x.block, x.stage, x.ipu, x.pin, x.tied_to) for x in table]
    assert got == [
        ("embed", "embeddings", "emb", 0, 0, "first", None),
        ("body.0", "layer", "emb", 0, 0, None, None),
        ("body.1", "layer", "emb", 0, 0, None, None),
        ("body.2", "layer", "second", 1, 1, None, None),
        ("body.3", "layer", "second", 1, 1, None, None),
        ("norm", "head", "head", 2, 0, None, None),
        ("proj", "head", "head", 2, 0, None, "embed"),
    ]
    by = {x.name: x for x in table}
    block_params = (H * 2 * H + 2 * H) + (2 * H * H + H)
    assert by["body.0"].weight_bytes == block_params * 4 == 1120
    assert by["body.0"].optimizer_bytes == block_params * 2 * 4 == 2240  # Adam: 2 fp32 per weight
    assert by["body.0"].accumulator_bytes == block_params * 4 == 1120  # one fp32 per weight (G > 1)
    assert by["embed"].weight_bytes == V * H * 4 == 1024  # the shared weight, counted once
    assert by["proj"].weight_bytes == 0
    # identical blocks cost the same, up to the one cycle that rounding to the stage's total moves:
    # two Linears ((c + 18,000) / 0.6 + 4,000 each), a ReLU and an add (1,200 each, + their bytes)
    assert abs(by["body.0"].fwd_cycles - by["body.3"].fwd_cycles) <= 1 and by["body.0"].fwd_cycles == 70_401
    # backward: 2 x the Linears, 1 x the rest, and (PopTorch's Pipeline recomputation, stages 0 and 1
    # are not the last) the forward again
    assert by["body.0"].bwd_cycles == 208_801
    assert "Recomputation: Pipeline" in ex.popvizReport().provenance.notes[5]
    # of that backward, the forward again (what a re-split that stops recomputing it takes out);
    # the last forward stage (the tied head, back on IPU0) recomputes nothing
    assert table.recomputation == "Pipeline" and by["body.0"].recompute_cycles == 70_401
    assert {x.name: x.recompute_cycles for x in table if x.stage == 2} == {"norm": 0, "proj": 0}
    assert not any(x.checkpoint for x in table)
    # its code: two Linears (160 KiB), a ReLU and an add (48 KiB), forward and twice backward, and
    # the update code of its 4 trainable tensors (256 KiB each)
    assert by["body.0"].code_bytes == 3 * (2 * 160 + 2 * 48) * 1024 + 4 * 256 * 1024 == 2_326_528
    # recomputed stages stash no activation of their own layers (no checkpoint); the last stage does
    assert by["body.0"].activation_bytes == 0 and by["norm"].activation_bytes > 0
    assert by["body.0"].temporary_bytes > 0
    check_sums(ex)
    # the bundle round trip keeps the table
    from popviz.sources.bundle import read_bundle, write_bundle  # noqa: F401


def test_bundle_round_trip(tmp_path):
    from popviz.sources.bundle import read_bundle, write_bundle

    report = compiled(Tiny()).popvizReport()
    write_bundle(report, tmp_path / "r")
    assert read_bundle(tmp_path / "r").layers == report.layers


def test_loss_and_head_on_the_last_ipu_are_pinned_last():
    table = compiled(Tiny(tied=False)).popvizReport().layers
    pins = {x.name: (x.ipu, x.pin, x.tied_to) for x in table}
    assert pins["embed"] == (0, None, None)  # nothing tied to it: free to move with its neighbours
    assert pins["norm"] == (1, "last", None) and pins["proj"] == (1, "last", None)


def test_inference_has_no_optimizer_state_stash_or_backward():
    ex = compiled(Tiny(), training=False)
    frame = ex.popvizReport().layers.frame()
    assert (frame.bwd_cycles == 0).all() and (frame.optimizer_bytes == 0).all()
    assert (frame.activation_bytes == 0).all()
    check_sums(ex)


def test_offloaded_optimizer_state_is_zero_but_its_largest_tensor_is_held_for_the_update():
    ex = compiled(Tiny(), offload=True)
    frame = ex.popvizReport().layers.frame().set_index("name")
    assert (frame.optimizer_bytes == 0).all() and frame.weight_bytes.sum() > 0
    # Adam: 8 bytes per element; IPU 0's largest tensor is the (tied) embedding, IPU 1's a Linear's
    assert frame.loc["embed", "temporary_bytes"] == V * H * 8
    assert frame.loc["body.2", "temporary_bytes"] >= 2 * H * H * 8
    # every layer holds its own largest tensor's state while it updates, so a plan moving body.1
    # to another IPU still counts it there (was: only the layer holding each IPU's largest tensor)
    assert all(frame.loc[f"body.{i}", "temporary_bytes"] >= 2 * H * H * 8 for i in range(4))
    assert "(offloaded: 0; each layer's largest tensor's state" in ex.popvizReport().layers.notes[2]
    check_sums(ex)


def test_depth_override(monkeypatch):
    monkeypatch.setenv(DEPTH_ENV, "3")
    ex = compiled(Tiny())
    table = ex.popvizReport().layers
    assert table.depth == 3
    assert "depth 3 set by --layer-depth" in table.notes[0]
    names = [x.name for x in table if x.role == "layer"]
    assert names == [f"body.{i}.{p}" for i in range(4) for p in ("up", "down")]
    check_sums(ex)


@pytest.mark.parametrize("value, message", [
    ("0", "POPVIZ_EMULATOR_LAYER_DEPTH='0' (--layer-depth): expected a module depth of at least 1"),
    ("x", "POPVIZ_EMULATOR_LAYER_DEPTH='x' (--layer-depth): expected a module depth of at least 1"),
    ("7", "--layer-depth 7 (POPVIZ_EMULATOR_LAYER_DEPTH): the model's modules go only 3 level(s) deep"),
])
def test_bad_depth_is_one_line_exit_2(monkeypatch, capsys, value, message):
    monkeypatch.setenv(DEPTH_ENV, value)
    with pytest.raises(SystemExit) as info:
        compiled(Tiny())
    assert info.value.code == 2
    from conftest import unwrapped

    err = unwrapped(capsys.readouterr().err)  # one line, wrapped at the terminal's width
    assert err.count("\n") == 1 and message in err


class Convs(torch.nn.Module):
    """A CNN: a stem, conv blocks in a Sequential (parameterless ReLUs between), a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.blocks = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1),
                                                                torch.nn.BatchNorm2d(4), torch.nn.ReLU())
                                            for _ in range(3)])
        self.fc = torch.nn.Linear(4 * 6 * 6, 3)

    def forward(self, x, y=None):
        with poptorch.Block("a", ipu_id=0):
            x = torch.relu(self.stem(x))
        with poptorch.Block("b", ipu_id=1):
            x = self.blocks(x)
        with poptorch.Block("c", ipu_id=1):
            out = self.fc(x.flatten(1))
            return out if y is None else (out, torch.nn.functional.cross_entropy(out, y))


def test_conv_blocks_are_the_layers():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    opts.setExecutionStrategy(poptorch.ShardedExecution(poptorch.AutoStage.SameAsIpu))
    model = Convs()
    ex = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
    ex.compile(torch.randn(3, 1, 6, 6), torch.tensor([0, 1, 2]))
    table = ex.popvizReport().layers
    got = [(x.name, x.role, x.ipu, x.pin) for x in table]
    assert got == [("stem", "other", 0, None), ("blocks.0", "layer", 1, None), ("blocks.1", "layer", 1, None),
                   ("blocks.2", "layer", 1, None), ("fc", "head", 1, "last")]
    assert {x.name: x.optimizer_bytes for x in table}["fc"] == 0  # plain SGD keeps no state
    check_sums(ex)


def test_backward_factors_are_the_cost_model():
    assert hw.BACKWARD_FACTORS == {"matmul": 2.0, "conv": 2.0, "norm": 2.0, "reduce": 1.0, "gather": 1.0,
                                   "elementwise": 1.0}


def test_a_model_without_child_modules_is_one_layer():
    class Bare(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3, 3))

        def forward(self, x):
            return x @ self.w

    ex = poptorch.inferenceModel(Bare())
    ex(torch.ones(2, 3))
    table = ex.popvizReport().layers
    assert [(x.name, x.role, x.weight_bytes) for x in table] == [("(model)", "layer", 36)]
    assert table.depth == 0
    assert table.notes[0] == "Layers at module depth 0: no child module has parameters, so the model is its only layer."


def test_a_block_boundary_inside_a_layer():
    """A block starting inside a layer: the layer goes where most of its cycles are, its
    operations in the other stage count with the neighbour there, and the sums still agree."""

    class Split(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.ModuleList(Block() for _ in range(3))
            poptorch.BeginBlock(self.body[1].down, "late", ipu_id=1)

        def forward(self, x):
            for block in self.body:
                x = block(x)
            return x

    opts = poptorch.Options().deviceIterations(2)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
    model = Split()
    poptorch.BeginBlock(model.body[0], "early", ipu_id=0)
    ex = poptorch.inferenceModel(model, opts)
    ex(torch.randn(4, H))
    table = ex.popvizReport().layers
    assert [(x.name, x.stage) for x in table] == [("body.0", 0), ("body.1", 0), ("body.2", 1)]
    assert "body.1 run in more than one stage" in table.notes[-1]
    check_sums(ex)


class SharedEmbedding(torch.nn.Module):
    """T5's layout (transformers' T5ForConditionalGeneration): one embedding registered as
    ``shared``, ``encoder.embed_tokens`` and ``decoder.embed_tokens``."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = torch.nn.Embedding(V, H)
        self.encoder = torch.nn.Module()
        self.encoder.embed_tokens = self.shared
        self.encoder.block = torch.nn.ModuleList(Block() for _ in range(2))
        self.decoder = torch.nn.Module()
        self.decoder.embed_tokens = self.shared
        self.decoder.block = torch.nn.ModuleList(Block() for _ in range(2))
        self.decoder.final_layer_norm = torch.nn.LayerNorm(H)  # unlike the encoder, as in T5
        poptorch.BeginBlock(self.decoder.block[0], "decoder", ipu_id=1)

    def forward(self, ids):
        x = self.encoder.embed_tokens(ids)
        for b in self.encoder.block:
            x = b(x)
        y = self.decoder.embed_tokens(ids) + x
        for b in self.decoder.block:
            y = b(y)
        return self.decoder.final_layer_norm(y)


def test_a_module_under_two_names_is_one_layer():
    """Was ``KeyError: 'decoder.embed_tokens'`` (issue 21): the shared embedding is one layer,
    under its first name, and both of its calls count there."""
    from popviz.emulator.layers import discover

    model = SharedEmbedding()
    structure = discover(model)
    assert structure.units == ("shared", "encoder.block.0", "encoder.block.1", "decoder.block.0",
                               "decoder.block.1", "decoder.final_layer_norm")
    assert structure.roles["shared"] == "embeddings"
    opts = poptorch.Options()
    opts.deviceIterations(2)
    ex = poptorch.inferenceModel(model, opts)
    ex.compile(torch.randint(0, V, (2, SEQ), generator=torch.Generator().manual_seed(0)))
    layers = {x.name: x for x in ex.popvizReport().layers}
    assert list(layers) == list(structure.units)
    assert (layers["shared"].ipu, layers["decoder.block.0"].ipu) == (0, 1)
    assert layers["shared"].weight_bytes == V * H * 4
