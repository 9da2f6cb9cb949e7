"""Inference under ``torch.inference_mode()`` (Lightning's predict, validate and test) and the
transformer fast path: the estimate sees the same operations PopTorch lowers."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _estimate(model, x, context):
    import popviz.emulator as poptorch

    executor = poptorch.inferenceModel(model.eval(), poptorch.Options())
    with context():
        executor.compile(x)
    estimate = executor.popvizEstimate()
    executor.destroy()
    return estimate.call_cycles, None


def test_inference_mode_costs_what_no_grad_costs():
    model = torch.nn.Sequential(torch.nn.Linear(20, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    x = torch.randn(16, 20)
    plain, _ = _estimate(model, x, torch.no_grad)
    inference, _ = _estimate(model, x, torch.inference_mode)
    assert inference == plain  # was ~7x less: aten.linear reached the cost model whole, with no FLOPs


def test_a_transformer_layer_without_grad_is_costed_op_by_op_not_as_the_fused_cpu_kernel():
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    x = torch.randn(2, 16, 64)
    with_grad, _ = _estimate(layer, x, torch.enable_grad)
    without, _ = _estimate(layer, x, torch.no_grad)
    # PyTorch's fused fast path (one aten._transformer_encoder_layer_fwd) runs only on plain CPU
    # tensors, never on an IPU: the emulator's tensor-function modes keep the module on its own ops
    assert without == with_grad


def test_a_block_of_views_alone_is_still_a_stage_on_its_ipu():
    """A Block whose operations are all views records no cost, yet it is a stage on its IPU: the
    target counts that IPU (before, the report said 1 IPU beside a stage on IPU 1 and was refused
    as damaged), and PopTorch's rule on device iterations sees both stages."""
    import popviz.emulator as poptorch

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(20, 10)

        def forward(self, x):
            with poptorch.Block(ipu_id=0):
                x = self.lin(x)
            with poptorch.Block(ipu_id=1):
                x = x.view(-1)
            return x

    opts = poptorch.Options().deviceIterations(2)
    opts.setExecutionStrategy(poptorch.PipelinedExecution())
    executor = poptorch.inferenceModel(Model().eval(), opts)
    executor.compile(torch.randn(8, 20))
    report = executor.popvizReport()
    executor.destroy()
    assert report.target.num_ipus == 2
    assert [s.ipu for s in report.cfg.stages] == [0, 1]
