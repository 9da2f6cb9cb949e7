"""The PopTorch 3.x names real clients call beyond the common surface (issue 21), each checked
against PopTorch's own source: ``poptorch.Attribute`` (python/options.py), optimizer
``variable_attrs`` (python/optim.py), ``poptorch._impl`` (python/_impl.py), ``custom_op``,
``cond``, ``dynamic_slice``, ``dynamic_update`` (python/ops.py), ``torch.ops.poptorch.*`` with
the schemas of poptorch/source/dispatch_tracer/RegisterAtenOverloads.cpp, and
``poptorch._poplar_executor.PoplarExecutor``."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402
from popviz.emulator import custom_ops, torch_ops  # noqa: E402

from conftest import run_cli  # noqa: E402

torch_ops.register()


def test_torch_ops_have_poptorchs_schemas():
    torch.ops.poptorch.push_name_scope("stem")
    torch.ops.poptorch.push_name_scope("conv")
    torch.ops.poptorch.pop_name_scope()
    assert torch_ops.STATE.name_scopes[-1] == "stem"
    torch.ops.poptorch.pop_name_scope()
    with pytest.raises(RuntimeError, match="Expected a value of type 'str' for argument 'name'"):
        torch.ops.poptorch.push_name_scope(3)
    x = torch.arange(6.0)
    assert torch.ops.poptorch.internal_cast(x, "FLOAT16").dtype == torch.float16
    with pytest.raises(poptorch.Error, match="unsupported type 'INT8'"):
        torch.ops.poptorch.internal_cast(x, "INT8")
    assert torch.ops.poptorch.nop(x) is x or torch.equal(torch.ops.poptorch.nop(x), x)
    assert torch.equal(torch.ops.poptorch.recomputation_checkpoint(x), x)


def test_attribute_sets_and_restores_like_poptorch():
    with poptorch.Attribute(__outline={"layer": "Embedding"}):
        assert torch_ops.STATE.attributes["__outline"] == {"layer": "Embedding"}
        with poptorch.Attribute(__outline={"layer": "Encoder"}):
            assert torch_ops.STATE.attributes["__outline"] == {"layer": "Encoder"}
        assert torch_ops.STATE.attributes["__outline"] == {"layer": "Embedding"}
    assert torch_ops.STATE.attributes["__outline"] == {}


def test_variable_attrs_as_poptorch_tracks_them():
    model = torch.nn.Linear(2, 2)
    opt = poptorch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    attrs = opt.variable_attrs
    # arguments given are variable; the others constant (python/optim.py _parseArgs)
    assert (attrs.isConstant("lr"), attrs.isConstant("weight_decay"), attrs.isConstant("eps")) == (
        False, False, True)
    attrs.markAsConstant("weight_decay")
    attrs.markAsVariable("eps")
    assert (attrs.isConstant("weight_decay"), attrs.isConstant("eps")) == (True, False)
    with pytest.raises(AssertionError, match="Unknown attribute max_weight_norm"):
        attrs.markAsConstant("max_weight_norm")
    lamb = poptorch.optim.LAMB(model.parameters())
    lamb.variable_attrs.markAsConstant("max_weight_norm")  # what optimum's IPUTrainer does for LAMB
    assert lamb.variable_attrs.isConstant("loss_scaling")


def test_float16_adamw_with_float32_second_moments_stays_finite_with_zero_gradients():
    """optimum-graphcore's IPUTrainer builds AdamW(..., first_order_momentum_accum_type=float16,
    second_order_momentum_accum_type=float32) for a .half() model. An embedding row not in the
    batch has a zero gradient: PopART computes the update in the float32 state's type, so it
    stays 0 (in float16, eps=1e-8 underflows and 0/0 gave NaN weights)."""
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x):
            return poptorch.identity_loss(self.lin(self.emb(x)).float().pow(2).mean(), reduction="none")

    model = Model().half()
    before = model.emb.weight.detach().clone()
    opt = poptorch.optim.AdamW(model.parameters(), lr=1e-3, first_order_momentum_accum_type=torch.float16,
                               second_order_momentum_accum_type=torch.float32)
    training = poptorch.trainingModel(model, optimizer=opt)
    for _ in range(3):
        training(torch.tensor([[1, 2]]))
    weight = model.emb.weight.detach()
    assert weight.dtype == torch.float16 and bool(torch.isfinite(weight).all())
    assert torch.equal(weight[3:], before[3:])  # rows not in the batch: unchanged
    assert not torch.equal(weight[1:3], before[1:3])
    assert opt.state[model.emb.weight]["exp_avg_sq"].dtype == torch.float32


def test_dynamic_slice_and_update_validate_as_poptorch():
    x = torch.arange(10.0).reshape(2, 5)
    assert poptorch.dynamic_slice(x, 1, torch.tensor([1]), 3, 1).tolist() == [[1, 2, 3], [6, 7, 8]]
    assert poptorch.dynamic_slice(x, 1, torch.tensor([0]), 2, 2).tolist() == [[0, 2], [5, 7]]
    updated = poptorch.dynamic_update(x, torch.zeros(2, 2), 1, torch.tensor([3]), 2)
    assert updated.tolist() == [[0, 1, 2, 0, 0], [5, 6, 7, 0, 0]]
    with pytest.raises(poptorch.Error, match="Slice start argument to dynamic_slice must be a torch.tensor"):
        poptorch.dynamic_slice(x, 1, 1, 3, 1)
    with pytest.raises(poptorch.Error, match="input and src tensor must have same dtype"):
        poptorch.dynamic_update(x, torch.zeros(2, 2, dtype=torch.float16), 1, torch.tensor([0]), 2)
    with pytest.raises(poptorch.Error, match="same dimensionality"):
        poptorch.dynamic_update(x, torch.zeros(2), 1, torch.tensor([0]), 2)


def test_cond_runs_the_selected_branch_and_needs_lists():
    a = torch.ones(2)
    assert poptorch.cond(torch.tensor(True), lambda t: t + 1, [a], lambda t: t - 1, [a])[0].tolist() == [2, 2]
    assert poptorch.cond(torch.tensor(False), lambda t: t + 1, [a], lambda t: (t - 1, t), [a])[0].tolist() == [0, 0]
    with pytest.raises(ValueError, match="to be a list of tensors"):
        poptorch.cond(torch.tensor(True), lambda t: t, (a,), lambda t: t, [a])


def test_custom_op_validates_attributes_and_runs_a_registered_cpu_implementation():
    data, idx = torch.randn(2, 5), torch.tensor([[4, 0], [1, 1]])
    with pytest.raises(ValueError, match="The types in a list/tuple attribute must all be the same."):
        poptorch.custom_op([data], "X", "d", 1, example_outputs=[data], attributes={"k": [1, "a"]})
    with pytest.raises(ValueError, match="contains non-ASCII characters"):
        poptorch.custom_op([data], "X", "d", 1, example_outputs=[data], attributes={"k": "é"})
    # without a CPU implementation: zeros shaped like example_outputs
    [out] = poptorch.custom_op([data, idx], "Gather", "test.ops", 1, example_outputs=[torch.empty(2, 2)],
                               attributes={"axis": -1})
    assert out.shape == (2, 2) and out.abs().sum().item() == 0
    custom_ops.register_cpu_implementation("Gather", "test.ops", lambda d, i, axis: torch.gather(d, axis, i))
    [out] = poptorch.custom_op([data, idx], "Gather", "test.ops", 1, example_outputs=[torch.empty(2, 2)],
                               attributes={"axis": -1})
    assert torch.equal(out, torch.gather(data, -1, idx))


def test_impl_and_poplar_executor_modules():
    from popviz.emulator import _impl, _poplar_executor

    model = torch.nn.Linear(2, 2)
    training = poptorch.trainingModel(model)
    _impl.unwrapModelIfNecessary(model)
    _impl.rewrapModelIfNecessary(model)
    assert type(model) is torch.nn.Linear
    assert isinstance(training, _poplar_executor.PoplarExecutor)
    assert _impl.internal_cast(torch.ones(1), torch.half).dtype == torch.float16
    with pytest.raises(ValueError, match="Invalid poptorch.cast target type"):
        _impl.internal_cast(torch.ones(1), torch.int32)
    training.destroy()


def test_a_script_using_them_runs_unmodified_under_emulate():
    code = """
import torch, poptorch, popart
from poptorch._impl import rewrapModelIfNecessary, unwrapModelIfNecessary
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.a = torch.nn.Linear(8, 8); self.b = torch.nn.Linear(8, 8)
    def forward(self, x, i):
        torch.ops.poptorch.push_name_scope("stem")
        with poptorch.Attribute(__outline={"layer": "a"}):
            y = self.a(x)
        torch.ops.poptorch.pop_name_scope()
        y = torch.ops.poptorch.internal_cast(y, "FLOAT16").float()
        z = poptorch.dynamic_update(y, poptorch.dynamic_slice(y, 1, i, 4, 1) * 2, 1, i, 4)
        o = poptorch.custom_op([z, i], "G", "poptorch.custom_ops", 1, example_outputs=[z])[0]
        return self.b(poptorch.cond(i.sum() > 0, lambda t: t + 1, [o], lambda t: t - 1, [o])[0])
m = M(); unwrapModelIfNecessary(m); rewrapModelIfNecessary(m)
opts = poptorch.Options(); opts._Popart.set("autoRecomputation", int(popart.RecomputationType.Pipeline))
im = poptorch.inferenceModel(m, opts)
print(tuple(im(torch.randn(2, 8), torch.tensor([2])).shape),
      isinstance(im, poptorch._poplar_executor.PoplarExecutor))
"""
    proc = run_cli("emulate", "--", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-3:] == ["(2,", "8)", "True"]
    assert "custom op poptorch.custom_ops::G (version 1) has no CPU implementation" in proc.stderr
