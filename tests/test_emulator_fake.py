"""Estimate without computing (popviz.emulator.fake): the fake-tensor trace gives the real trace's
report, figure for figure, on several models; it falls back to the real trace, with one note
naming the operation, where values are needed; it leaves the model's tensors as they were and
allocates nothing proportional to the activations."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402
from popviz.emulator import costmodel, fake  # noqa: E402
from popviz.emulator.executor import PoplarExecutor  # noqa: E402
from popviz.sources.bundle import write_bundle  # noqa: E402

nn = torch.nn
F = torch.nn.functional


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def bundle(executor: PoplarExecutor, tmp_path, name: str) -> dict[str, object]:
    """Every file of the executor's report bundle: the JSON parsed, each table with its schema
    metadata; the write's time and its fresh ``bundle_id`` (a new one on every write, which every
    table must carry) left out."""
    import pyarrow.parquet as pq

    report = costmodel.build_report(executor._estimate, executor._setup, versions={"torch": "any"},
                                    captured_at="2000-01-01T00:00:00+00:00")
    directory = write_bundle(report, tmp_path / name)
    meta = json.loads((directory / "popviz-report.json").read_text(encoding="utf-8"))
    meta.pop("written_at", None)
    bundle_id = meta.pop("bundle_id")
    files: dict[str, object] = {"popviz-report.json": meta}
    for path in sorted(directory.iterdir()):
        if path.suffix != ".json":
            table = pq.read_table(path)
            metadata = dict(table.schema.metadata)
            assert metadata.pop(b"popviz.bundle_id") == bundle_id.encode(), path.name
            files[path.name] = (metadata, table.replace_schema_metadata(metadata).to_pydict())
    return files


def compile_with(trace: str, make, inputs, monkeypatch, training=True, options=None):
    monkeypatch.setenv(fake.ENV, trace)
    torch.manual_seed(0)
    model = make()
    o = options() if options is not None else poptorch.Options()
    executor = poptorch.trainingModel(model, o) if training else poptorch.inferenceModel(model, o)
    executor.compile(*inputs)
    return model, executor


def assert_same_report(make, inputs, monkeypatch, tmp_path, training=True, options=None):
    """The fake trace's report equals the real trace's (every file of the bundle)."""
    _, real = compile_with("real", make, inputs, monkeypatch, training, options)
    _, faked = compile_with("auto", make, inputs, monkeypatch, training, options)
    assert faked._setup.extra_notes == real._setup.extra_notes  # no fallback note
    a, b = bundle(real, tmp_path, "real"), bundle(faked, tmp_path, "fake")
    assert sorted(a) == ["execution.parquet", "liveness.parquet", "memory.parquet", "popviz-report.json",
                         "runs.parquet"]
    assert a == b
    return real, faked


# ------------------------------------------------------------------ models


class PipelinedCNN(nn.Module):
    """Convolution, BatchNorm (running statistics), dropout (RNG), on two IPUs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x, y):
        with poptorch.Block("features", ipu_id=0):
            x = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 1)
        with poptorch.Block("classifier", ipu_id=1):
            x = self.fc(self.drop(x.flatten(1)))
            return x, F.cross_entropy(x, y)


def pipeline_options():
    o = poptorch.Options()
    o.Training.gradientAccumulation(4)
    return o


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x, mask):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads) + mask
        context = torch.softmax(scores, dim=-1) @ v
        return self.out(context.transpose(1, 2).reshape(b, s, h))


class Layer(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.attention = Attention(hidden, heads)
        self.norm1 = nn.LayerNorm(hidden)
        self.ff = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
        self.norm2 = nn.LayerNorm(hidden)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask):
        x = self.norm1(x + self.drop(self.attention(x, mask)))
        x = poptorch.set_available_memory(x, 0.4)
        return self.norm2(x + self.drop(self.ff(x)))


class TinyBert(nn.Module):
    """BERT-like: embeddings, 4 layers in 4 blocks, a masked-LM head tied to the embeddings, the
    loss through identity_loss; recomputation checkpoints and a printed tensor."""

    def __init__(self, vocab: int = 50, hidden: int = 32, heads: int = 4, seq: int = 8, layers: int = 4) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(seq, hidden)
        self.layers = nn.ModuleList(Layer(hidden, heads) for _ in range(layers))
        for i, layer in enumerate(self.layers):
            poptorch.BeginBlock(layer, f"layer{i}", ipu_id=i)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.word.weight
        self.register_buffer("positions", torch.arange(seq).unsqueeze(0))

    def forward(self, ids, mask, labels):
        x = self.word(ids) + self.position(self.positions)
        extended = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = poptorch.recomputationCheckpoint(layer(x, extended))
        x = poptorch.ipu_print_tensor(x, "last hidden: ")
        logits = self.head(x).float()
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), reduction="none")
        return logits, poptorch.identity_loss(loss, reduction="mean")


def bert_inputs(batch: int = 32, seq: int = 8, vocab: int = 50):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[:, -2:] = 0
    return ids, mask, torch.randint(0, vocab, (batch, seq), generator=g)


def bert_options():
    o = poptorch.Options().deviceIterations(2)
    o.Training.gradientAccumulation(8)
    o.setExecutionStrategy(poptorch.PipelinedExecution())
    return o


# ------------------------------------------------------------------ same report


def test_pipelined_cnn_with_batchnorm_and_dropout(monkeypatch, tmp_path):
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
    _real, faked = assert_same_report(PipelinedCNN, (x, y), monkeypatch, tmp_path, options=pipeline_options)
    assert [s.ipu for s in faked._estimate.stages] == [0, 1]


def test_cnn_inference(monkeypatch, tmp_path):
    def make():
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(4, 2)).eval()

    assert_same_report(make, (torch.randn(6, 3, 9, 9),), monkeypatch, tmp_path, training=False,
                       options=lambda: poptorch.Options().deviceIterations(3))


def test_bert_like_transformer_pipelined(monkeypatch, tmp_path, capfd):
    _real, faked = assert_same_report(TinyBert, bert_inputs(), monkeypatch, tmp_path, options=bert_options)
    assert len(faked._estimate.stages) == 4
    err = capfd.readouterr().err
    # the real trace prints the values; the fake one says it has none
    assert "last hidden: tensor(" in err
    assert "last hidden: <tensor of shape (2, 8, 32), torch.float32: not computed (estimate-only trace)>" in err


def test_bert_like_transformer_float16(monkeypatch, tmp_path):
    _real, faked = assert_same_report(lambda: TinyBert().half(), bert_inputs(), monkeypatch, tmp_path,
                                     options=bert_options)
    half_params = [p for p in faked.model.parameters() if p.dtype == torch.float16]
    assert len(half_params) == len(list(faked.model.parameters()))


def test_built_in_transformer_encoder_and_scaled_dot_product_attention(monkeypatch, tmp_path):
    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True), num_layers=2,
                enable_nested_tensor=False)
            self.proj = nn.Linear(16, 16)

        def forward(self, x, y):
            q = self.proj(x).view(x.shape[0], x.shape[1], 2, 8).transpose(1, 2)
            attended = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(x.shape)
            out = self.encoder(attended)
            return F.mse_loss(out, y)

    assert_same_report(Encoder, (torch.randn(4, 6, 16), torch.randn(4, 6, 16)), monkeypatch, tmp_path)


# ------------------------------------------------------------------ the model is left alone


def test_fake_trace_leaves_parameters_buffers_and_rng_as_they_were(monkeypatch):
    monkeypatch.setenv(fake.ENV, "auto")
    torch.manual_seed(0)
    model = PipelinedCNN()
    params = {n: (p, p.detach().clone()) for n, p in model.named_parameters()}
    buffers = {n: (b, b.detach().clone()) for n, b in model.named_buffers()}
    executor = poptorch.trainingModel(model, pipeline_options())
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
    rng = torch.get_rng_state()
    x_before = x.clone()
    executor.compile(x, y)
    for name, p in model.named_parameters():
        assert p is params[name][0] and not fake.is_fake(p) and torch.equal(p, params[name][1])
        assert p.grad is None
    for name, b in model.named_buffers():
        assert b is buffers[name][0] and not fake.is_fake(b) and torch.equal(b, buffers[name][1])
    assert model.bn.num_batches_tracked.item() == 0
    assert torch.equal(torch.get_rng_state(), rng) and torch.equal(x, x_before)
    # and the executor then runs for real (values, a training step)
    _out, loss = executor(x, y)
    assert not fake.is_fake(loss) and loss.dim() == 0 and torch.isfinite(loss)
    assert model.bn.num_batches_tracked.item() == 4


def test_an_activation_that_would_not_fit_is_never_allocated(monkeypatch):
    """A 16 GiB activation (input 2^22 rows × 1024, a broadcast view of one row) is estimated
    by the fake trace; the real one is refused here so a regression fails instead of swapping."""
    monkeypatch.setenv(fake.ENV, "auto")
    monkeypatch.setenv("POPVIZ_EMULATOR_IGNORE_OOM", "1")  # it does not fit an IPU either
    real_measure = PoplarExecutor._measure

    def fake_only(self, args, kwargs, fake=False):
        assert fake, "the real trace would allocate 16 GiB"
        return real_measure(self, args, kwargs, fake=True)

    monkeypatch.setattr(PoplarExecutor, "_measure", fake_only)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1))
    executor = poptorch.inferenceModel(model)
    rows = 1 << 22
    executor.compile(torch.zeros(1, 1024).expand(rows, 1024))
    est = executor._estimate
    assert sum(s.flops for s in est.stages) == 2 * rows * 1024 * 1024 + 2 * rows * 1024
    assert executor._setup.inputs[0].shape == (rows, 1024)
    assert executor._setup.outputs[0].shape == (rows, 1)


# ------------------------------------------------------------------ fall back, with one note


class ReadsAValue(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, y):
        h = self.linear(x)
        if h.sum() > 0:  # data-dependent control flow
            h = h * 2
        return F.mse_loss(h, y)


class SelectsByMask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x, y):
        h = self.linear(x)
        return F.mse_loss(h[h > 0].sum() + h, y)


@pytest.mark.parametrize("make,operation", [
    (ReadsAValue, "operation aten._local_scalar_dense.default needs the values (a tensor's value read in Python "
                  "(.item(), bool(), a comparison in an if))"),
    (SelectsByMask, "operation aten.nonzero.default needs the values (an output shape that depends on the values)"),
])
def test_data_dependent_models_are_traced_for_real_with_one_note(make, operation, monkeypatch, tmp_path):
    inputs = (torch.randn(4, 4), torch.randn(4, 4))
    _, real = compile_with("real", make, inputs, monkeypatch)
    _, faked = compile_with("auto", make, inputs, monkeypatch)
    note = ("The estimate traced its micro-batch with real tensors (computed on the CPU): the fake-tensor "
            f"trace stopped at {operation}.")
    assert faked._setup.extra_notes == (*real._setup.extra_notes, note)
    assert note in faked.popvizReport().provenance.notes
    a, b = bundle(real, tmp_path, "real"), bundle(faked, tmp_path, "fake")
    notes_a = a["popviz-report.json"]["provenance"].pop("notes")
    notes_b = b["popviz-report.json"]["provenance"].pop("notes")
    assert notes_b == [*notes_a, note]
    assert a == b


def test_poptorch_errors_are_raised_as_they_are_not_retried(monkeypatch):
    class NoBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            with poptorch.Block("a", ipu_id=0):
                x = self.a(x)
            return self.b(x)  # PopTorch: no active block

    calls = []
    real_measure = PoplarExecutor._measure

    def counted(self, args, kwargs, fake=False):
        calls.append(fake)
        return real_measure(self, args, kwargs, fake=fake)

    monkeypatch.setattr(PoplarExecutor, "_measure", counted)
    monkeypatch.setenv(fake.ENV, "auto")
    executor = poptorch.inferenceModel(NoBlock())
    with pytest.raises(poptorch.Error, match="No active Block, all the ops must belong to a Block"):
        executor.compile(torch.randn(2, 2))
    assert calls == [True]
    # PopTorch's assertions (an unknown block for explicit stages) are not retried either
    calls.clear()
    o = poptorch.Options()
    o.setExecutionStrategy(poptorch.ShardedExecution(poptorch.Stage("b")))
    with pytest.raises(AssertionError, match="Unknown Block 'a'"):
        poptorch.inferenceModel(NoBlock(), o).compile(torch.randn(2, 2))
    assert calls == [True]
    # the user's own assertion may be about a fake: the real trace runs instead
    calls.clear()

    class Asserts(nn.Module):
        def forward(self, x):
            assert not fake.is_fake(x), "values needed"
            return x * 2

    executor = poptorch.inferenceModel(Asserts())
    executor.compile(torch.randn(2, 2))
    assert calls == [True, False]
    assert executor._setup.extra_notes[-1] == (
        "The estimate traced its micro-batch with real tensors (computed on the CPU): the fake-tensor trace "
        "stopped at AssertionError: values needed.")


def test_a_missing_library_fails_the_compile_once(monkeypatch, tmp_path):
    """ctypes' OSError for a custom-op library that was never built (speech/conformer loads it in
    forward) is the user's: the real trace would raise it again, so it is raised the first time."""
    import ctypes

    class LoadsLibrary(nn.Module):
        def forward(self, x):
            ctypes.cdll.LoadLibrary(str(tmp_path / "custom_ops.so"))
            return x * 2

    calls = []
    real_measure = PoplarExecutor._measure

    def counted(self, args, kwargs, fake=False):
        calls.append(fake)
        return real_measure(self, args, kwargs, fake=fake)

    monkeypatch.setattr(PoplarExecutor, "_measure", counted)
    monkeypatch.setenv(fake.ENV, "auto")
    with pytest.raises(OSError, match="custom_ops.so"):
        poptorch.inferenceModel(LoadsLibrary()).compile(torch.randn(2, 2))
    assert calls == [True]
    calls.clear()

    class Imports(nn.Module):
        def forward(self, x):
            import popviz_no_such_module  # noqa: F401

            return x

    with pytest.raises(ModuleNotFoundError, match="popviz_no_such_module"):
        poptorch.inferenceModel(Imports()).compile(torch.randn(2, 2))
    assert calls == [True]


# ------------------------------------------------------------------ when the fake trace is used


def test_only_compilations_that_estimate_use_fake_tensors(monkeypatch):
    seen = []
    real_measure = PoplarExecutor._measure

    def counted(self, args, kwargs, fake=False):
        seen.append(fake)
        return real_measure(self, args, kwargs, fake=fake)

    monkeypatch.setattr(PoplarExecutor, "_measure", counted)
    x = torch.randn(2, 3)
    cases = [("auto", None, "call", [False]), ("auto", None, "compile", [True]), ("auto", "1", "call", [True]),
             ("auto", "2", "call", [False]), ("real", None, "compile", [False]), ("real", "1", "call", [False]),
             ("fake", None, "call", [True])]
    for trace, calls, how, expected in cases:
        seen.clear()
        monkeypatch.setenv(fake.ENV, trace)
        if calls is None:
            monkeypatch.delenv("POPVIZ_EMULATOR_CALLS", raising=False)
        else:
            monkeypatch.setenv("POPVIZ_EMULATOR_CALLS", calls)
        executor = poptorch.inferenceModel(nn.Linear(3, 1))
        try:
            executor.compile(x) if how == "compile" else executor(x)
        except SystemExit as stop:
            assert stop.code == 0 and calls == "1"
        assert seen == expected, (trace, calls, how)


def test_a_bad_trace_choice_is_one_line(monkeypatch):
    monkeypatch.setenv(fake.ENV, "maybe")
    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(nn.Linear(3, 1)).compile(torch.randn(2, 3))
    assert str(info.value) == ("'poptorch_py_error': POPVIZ_EMULATOR_TRACE='maybe': expected one of auto, fake, "
                               "real (auto: fake tensors when a compilation only estimates; real: always trace "
                               "with real tensors)")


def test_an_operation_without_a_fake_implementation_is_traced_for_real_with_one_note(monkeypatch, tmp_path):
    """A custom operator registered with a CPU kernel only (no fake/meta kernel)."""
    lib = torch.library.Library("popviz_fake_test", "FRAGMENT")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    twice = torch.ops.popviz_fake_test.twice.default

    class Custom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x, y):
            return F.mse_loss(twice(self.linear(x)), y)

    inputs = (torch.randn(4, 4), torch.randn(4, 4))
    _, real = compile_with("real", Custom, inputs, monkeypatch)
    _, faked = compile_with("auto", Custom, inputs, monkeypatch)
    assert faked._setup.extra_notes == (*real._setup.extra_notes, (
        "The estimate traced its micro-batch with real tensors (computed on the CPU): the fake-tensor trace "
        "stopped at operation popviz_fake_test.twice.default has no fake-tensor implementation."))
    a, b = bundle(real, tmp_path, "real"), bundle(faked, tmp_path, "fake")
    a["popviz-report.json"]["provenance"].pop("notes")
    b["popviz-report.json"]["provenance"].pop("notes")
    assert a == b
