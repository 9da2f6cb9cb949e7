"""Only the gradients autodiff needs are costed (popviz/emulator/costmodel.gradient_share): a
product reading the model's inputs computes its weight's gradient alone, a frozen layer its
input's gradient alone, and an operation on inputs alone has no backward. In-process, small
models through the emulator, as a user's script runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402
from popviz.emulator import costmodel  # noqa: E402
from popviz.emulator import hardware as hw  # noqa: E402
from popviz.emulator.cost_inputs import OpCost  # noqa: E402

W = 256


class Three(torch.nn.Module):
    """Three equal products: the first reads the input, the second's weight may be frozen."""

    def __init__(self, freeze_middle: bool) -> None:
        super().__init__()
        self.first = torch.nn.Linear(W, W)
        self.middle = torch.nn.Linear(W, W)
        self.last = torch.nn.Linear(W, W)
        self.middle.requires_grad_(not freeze_middle)

    def forward(self, x, target):
        scaled = x * 0.5  # on the input alone: no gradient flows into it
        y = self.last(self.middle(self.first(scaled)))
        return y, torch.nn.functional.mse_loss(y, target)


def op_rows(monkeypatch, freeze_middle: bool) -> list[tuple[str, float, float]]:
    seen = []
    real = costmodel.estimate
    monkeypatch.setattr(costmodel, "estimate", lambda m, setup: seen.append((m, setup)) or real(m, setup))
    model = Three(freeze_middle)
    ex = poptorch.trainingModel(model, poptorch.Options(), optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(32, W, generator=torch.Generator().manual_seed(0))
    ex.compile(x, x.clone())
    (m, setup), = seen
    table = costmodel.op_table(m, setup)
    return [(o.name, f, b) for o, f, b in zip(m.ops, table.forward, table.backward, strict=True)]


@pytest.mark.parametrize("trace", ["fake", "real"])
def test_products_on_the_input_and_frozen_weights_grow_one_gradient(monkeypatch, trace):
    monkeypatch.setenv("POPVIZ_EMULATOR_TRACE", trace)  # traced with fake tensors or real ones
    rows = op_rows(monkeypatch, freeze_middle=True)
    assert [name for name, _, _ in rows] == ["mul", "addmm", "addmm", "addmm", "mse_loss"]
    (_, mul_f, mul_b), (_, f1, b1), (_, f2, b2), (_, f3, b3), _ = rows
    assert mul_f > 0 and mul_b == 0  # the input's scaling has no backward
    assert f1 == f2 == f3
    factor = hw.BACKWARD_FACTORS["matmul"]
    assert (b1, b2, b3) == (f1 * factor / 2, f2 * factor / 2, f3 * factor)


def test_trainable_middle_grows_both_gradients(monkeypatch):
    rows = op_rows(monkeypatch, freeze_middle=False)
    _, _, (_, f2, b2), _, _ = rows
    assert b2 == f2 * hw.BACKWARD_FACTORS["matmul"]


def test_a_measurement_without_gradient_information_costs_every_backward():
    # traced with autograd off (nothing requires a gradient): every op keeps its whole backward,
    # rather than a training run estimated with no backward at all
    op = OpCost(0, "mm", 1e9, 4, in_bytes=3000, out_bytes=1000, matmul=True, weight_bytes=1000,
                activation_grad=False, weight_grad=False)
    assert costmodel.gradient_share(op) == 0.0
    assert costmodel.gradient_share(op.replace(weight_grad=True)) == 0.5
    assert costmodel.gradient_share(op.replace(activation_grad=True, weight_grad=True)) == 1.0
    no_weights = op.replace(weight_bytes=0, activation_grad=True)
    assert costmodel.gradient_share(no_weights) == 1.0  # two activations: both gradients


class TwoStages(torch.nn.Module):
    """A frozen stage on IPU 0 (its input alone, frozen weights) and a trainable one on IPU 1."""

    def __init__(self, checkpoint: bool = False) -> None:
        super().__init__()
        self.frozen = torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.ReLU(), torch.nn.Linear(W, W))
        self.head = torch.nn.Sequential(torch.nn.Linear(W, W), torch.nn.ReLU(), torch.nn.Linear(W, W))
        self.frozen.requires_grad_(False)
        self.checkpoint = checkpoint
        poptorch.BeginBlock(self.frozen, "frozen", ipu_id=0)
        poptorch.BeginBlock(self.head, "head", ipu_id=1)

    def forward(self, x, target):
        h = self.frozen[0](x)
        if self.checkpoint:
            h = poptorch.recomputationCheckpoint(h)
        y = self.head(self.frozen[2](self.frozen[1](h)))
        return y, torch.nn.functional.mse_loss(y, target)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_frozen_stage_recomputes_and_stashes_nothing(checkpoint):
    # PopTorch's default Pipeline recomputation exists to feed gradient ops: a stage that grows
    # none runs its forward once and keeps nothing for the micro-batches in flight
    model = TwoStages(checkpoint)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(4)
    ex = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(4 * 8, W, generator=torch.Generator().manual_seed(0))
    ex.compile(x, x.clone())
    frozen, head = ex.popvizEstimate().stages
    assert (frozen.backward_cycles, frozen.recompute_cycles, frozen.saved_bytes) == (0, 0, 0)
    # the last stage is not recomputed (PopART's setFinalFwdStageRecomputation); its first product
    # reads the frozen stage's output, so it grows its weight's gradient alone
    assert head.recompute_cycles == 0 and head.backward_cycles > head.forward_cycles
    assert head.saved_bytes == 4 * (8 * W * 4)  # 4 activations of one micro-batch (8 rows, float32)


class NoGradRegion(torch.nn.Module):
    """A product run under torch.no_grad() inside a training forward (a reentrant
    torch.utils.checkpoint runs its function so): PopTorch's dispatcher ignores grad mode (an
    output needs a gradient when an input does, poptorch/source/RequiresGrad.cpp), so, reading an
    activation that needs one and a trainable weight, it keeps its whole backward."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(W, W)
        self.last = torch.nn.Linear(W, W)

    def forward(self, x, target):
        h = self.first(x * 0.5)
        with torch.no_grad():
            y = self.last(torch.relu(h))  # relu's output needs no gradient as torch sees it
        return y, torch.nn.functional.mse_loss(y + h, target)


def test_operations_under_no_grad_keep_their_whole_backward(monkeypatch):
    seen = []
    real = costmodel.estimate
    monkeypatch.setattr(costmodel, "estimate", lambda m, setup: seen.append((m, setup)) or real(m, setup))
    model = NoGradRegion()
    ex = poptorch.trainingModel(model, poptorch.Options(), optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(32, W, generator=torch.Generator().manual_seed(0))
    ex.compile(x, x.clone())
    (m, setup), = seen
    table = costmodel.op_table(m, setup)
    rows = [(o.name, f, b) for o, f, b in zip(m.ops, table.forward, table.backward, strict=True)]
    assert [name for name, _, _ in rows][:4] == ["mul", "addmm", "relu", "addmm"]
    (_, _, mul_b), (_, f1, b1), _, (_, f2, b2) = rows[:4]
    factor = hw.BACKWARD_FACTORS["matmul"]
    assert mul_b == 0 and b1 == f1 * factor / 2  # on the input: known with grad mode on
    assert b2 == f2 * factor  # under no_grad: not known, so both gradients as before
