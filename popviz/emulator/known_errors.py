"""Where an estimate is known to be far from the hardware, said in its report's notes.

The cost model's fixed cost per matmul or convolution was fitted on transformer-sized products;
public traces show much smaller products running many times faster (``hardware.SMALL_PRODUCT_ELEMENTS``,
docs/emulator.md). Until the model separates them, an estimate dominated by such products says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from popviz.analysis.throughput import PESSIMISTIC_SHARE
from popviz.emulator import hardware as hw
from popviz.emulator.cost_inputs import OpCost


def small_product_share(ops: Sequence[OpCost], kinds: Sequence[str], cycles: Sequence[float]) -> float:
    """Share of ``cycles`` (one entry per op: forward plus backward) spent in matmuls and
    convolutions with fewer than ``SMALL_PRODUCT_ELEMENTS`` activation elements; 0 without cycles."""
    total = sum(cycles)
    if total <= 0:
        return 0.0
    small = sum(c for op, kind, c in zip(ops, kinds, cycles, strict=True)
                if kind in ("matmul", "conv") and op.element_bytes > 0
                and op.activation_bytes / op.element_bytes < hw.SMALL_PRODUCT_ELEMENTS)
    return small / total


def small_products(ops: Sequence[OpCost], kinds: Sequence[str], forward: Sequence[float],
                   backward: Sequence[float]) -> tuple[float, str]:
    """The small products' share of the cycles (forward plus backward per op) and the report note
    it calls for (empty when it does not)."""
    share = small_product_share(ops, kinds, [f + b for f, b in zip(forward, backward, strict=True)])
    return share, small_products_note(share)


def small_products_note(share: float) -> str:
    """The report note for an estimate whose small products hold ``share`` of its cycles (empty
    below ``PESSIMISTIC_SHARE``, from which the analysis shows it too)."""
    if not share >= PESSIMISTIC_SHARE:
        return ""
    return (f"Likely pessimistic: {share:.0%} of the estimated operation cycles are matmuls or convolutions "
            f"with under {hw.SMALL_PRODUCT_ELEMENTS:,} activation elements, charged the fixed cost fitted on "
            "transformer-sized products. Public traces of such small products ran them several times faster "
            "(a tiny MLP 11x, a pipeline's Linear(320, 256) stage 5x: docs/emulator.md, T1 and B10), so expect "
            "more throughput on an IPU than estimated here, and check a pipeline's slowest stage on hardware: "
            "on B10 the estimate picks the Linear stage, the trace shows the convolution stages.")
