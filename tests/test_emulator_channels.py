"""Products and convolutions run at the share of the AMP their channels fill
(popviz/emulator/costmodel.channel_utilisation): PopLibs groups input channels by what a conv unit
loads per cycle (float16 4, float32 2) and output channels by the conv units, and falls back to its
vector-MAC vertices (4 float16 or 2 float32 MACs per tile cycle) for depthwise convolutions. The
shapes are recorded from the traced ATen operations, as a user's script runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402
from popviz.emulator import costmodel  # noqa: E402
from popviz.emulator import hardware as hw  # noqa: E402
from popviz.emulator.cost_inputs import OpCost  # noqa: E402

MK2, MK1 = hw.SPECS["Mk2"], hw.SPECS["Mk1"]


def conv(dims: tuple[int, ...], element_bytes: int = 4) -> OpCost:
    return OpCost(0, "convolution", 1e9, element_bytes, in_bytes=1000, out_bytes=1000, matmul=True, dims=dims)


def test_channels_padded_to_the_amp_groups():
    # float32 on a Mk2: 16 MACs per tile cycle = 8 conv units x 2 input channels per cycle.
    # 1 input channel of 2, 5 output channels of 8: 0.3125 (the tutorial CNN's first layer)
    assert costmodel.channel_utilisation(conv((1, 254_016, 1, 5, 9)), MK2, False) == 0.3125
    # 5 of 6, 12 of 16: 0.625
    assert costmodel.channel_utilisation(conv((1, 55_696, 5, 12, 25)), MK2, False) == pytest.approx(0.625)
    # float16 with half partials: 16 units x 4; a transformer's 768 x 768 fills them
    assert costmodel.channel_utilisation(conv((1, 128, 768, 768, 1), 2), MK2, True) == 1.0
    # float16 with float partials: 8 units, so 12 output channels fill 12 of 16; 3 inputs of 4
    assert costmodel.channel_utilisation(conv((1, 100, 3, 12, 49), 2), MK2, False) == pytest.approx(0.75 * 0.75)
    # Mk1 float32: 8 MACs = 4 units x 2: 5 outputs of 8
    assert costmodel.channel_utilisation(conv((1, 100, 2, 5, 1)), MK1, False) == pytest.approx(5 / 8)
    # an operation without a recorded shape (older measurements) keeps the whole peak
    assert costmodel.channel_utilisation(conv(()), MK2, False) == 1.0
    # and so does an empty one (no channels: nothing to pad, no division by zero)
    assert costmodel.channel_utilisation(conv((1, 100, 0, 8, 1)), MK2, False) == 1.0


def test_depthwise_convolutions_run_on_the_vector_macs():
    # one channel per group: the AMP would fill 1/4 x 1/16; the vector MACs give 4 of 64
    assert costmodel.channel_utilisation(conv((32, 1000, 1, 1, 9), 2), MK2, True) == 4 / 64
    # float32: 2 of 16
    assert costmodel.channel_utilisation(conv((32, 1000, 1, 1, 9)), MK2, False) == 2 / 16
    # a depthwise convolution costs its FLOPs at that rate: 1e9 FLOPs / (2 x 2 x 1,472) MAC cycles
    op = conv((32, 1000, 1, 1, 9), 4)
    assert costmodel.amp_rate(op, MK2, False) == 32 * 1472 / 8


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(1, 5, 3)
        self.depthwise = torch.nn.Conv2d(5, 5, 3, groups=5)
        self.head = torch.nn.Linear(5 * 12 * 12, 10)

    def forward(self, x, target):
        y = self.depthwise(torch.relu(self.stem(x)))
        out = self.head(y.flatten(1))
        return out, torch.nn.functional.cross_entropy(out, target)


class Attention(torch.nn.Module):
    def forward(self, q, k):
        return torch.bmm(q, k.transpose(1, 2)).sum()


@pytest.mark.parametrize("trace", ["fake", "real"])
def test_shapes_are_recorded_from_the_traced_operations(monkeypatch, trace):
    monkeypatch.setenv("POPVIZ_EMULATOR_TRACE", trace)
    seen = []
    real = costmodel.estimate
    monkeypatch.setattr(costmodel, "estimate", lambda m, setup: seen.append(m) or real(m, setup))
    model = Net()
    ex = poptorch.trainingModel(model, poptorch.Options(), optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
    ex.compile(torch.randn(8, 1, 16, 16), torch.zeros(8, dtype=torch.long))
    inference = poptorch.inferenceModel(Attention(), poptorch.Options())
    inference.compile(torch.randn(4, 6, 16), torch.randn(4, 7, 16))
    training, attention = seen
    dims = {o.name: o.dims for o in training.ops if o.dims}
    # (groups, positions, in channels per group, out channels per group, kernel elements)
    assert [o.dims for o in training.ops if o.name == "convolution"] == [
        (1, 8 * 14 * 14, 1, 5, 9), (5, 8 * 12 * 12, 1, 1, 9)]
    assert dims["addmm"] == (1, 8, 720, 10, 1)
    assert [o.dims for o in attention.ops if o.name == "bmm"] == [(4, 6, 16, 7, 1)]
    assert all(not o.dims for o in training.ops if o.name not in ("convolution", "addmm"))
