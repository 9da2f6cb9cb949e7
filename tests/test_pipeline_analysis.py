"""PIPE001 when the bottleneck stage's cycles are largely its IPU's weight update: no split of the
layers moves that update (it runs after the pipeline drains, once per G micro-batches), and an
off-chip optimizer state streamed in for it is what makes it long (a reviewer's float16 encoder,
stage 0 37% weight update after offloading, was told only to move layers)."""

from __future__ import annotations

from popviz import testing
from popviz.analysis import pipeline


def _pipe001(**kwargs):
    r = testing.pipeline_report([2000, 1000, 1000], gradient_accumulation=1, device_iterations=1,
                                backward_factor=0.5, **kwargs)
    out = pipeline.analyse(r)
    return next(f for f in out.findings if f.code == "PIPE001")


def test_pipe001_names_a_large_weight_update_and_what_shortens_it():
    # stage 0: 2,000 forward + 1,000 backward + a 1,000-cycle update: 25% of its cycles
    rec = _pipe001(optimizer_state_on_chip=False).recommendation
    assert rec.endswith(
        " 25% of stage 0's cycles are IPU0's weight update, run once per G = 1 micro-batches after the "
        "pipeline drains: balancing the layers leaves it where it is; it streams the optimizer state from "
        "off-chip memory: keep the state on chip (opts.TensorLocations.setOptimizerLocation("
        "poptorch.TensorLocationSettings().useOnChipStorage(True))) if the memory table shows the room, or "
        "raise gradient accumulation to spread the update over more micro-batches.")
    on_chip = _pipe001(optimizer_state_on_chip=True).recommendation
    assert on_chip.endswith("leaves it where it is; raising gradient accumulation spreads it over more "
                            "micro-batches.")


def test_pipe001_leaves_a_small_weight_update_unsaid():
    r = testing.pipeline_report([2000, 1000, 1000], gradient_accumulation=1, device_iterations=1)
    f = next(f for f in pipeline.analyse(r).findings if f.code == "PIPE001")  # update 1/7 of stage 0
    assert "weight update" not in f.recommendation
