"""The emulator's known-error note: estimates dominated by small matmuls and convolutions."""

from __future__ import annotations

from popviz.emulator import hardware as hw
from popviz.emulator.cost_inputs import OpCost
from popviz.emulator.known_errors import small_product_share, small_products, small_products_note


def product(elements: int, element_bytes: int = 4, kind_matmul: bool = True) -> OpCost:
    """A product whose activations (non-parameter inputs and output) hold ``elements`` elements."""
    return OpCost(0, "addmm", 1e6, element_bytes, in_bytes=elements * element_bytes + 1_000, out_bytes=0,
                  matmul=kind_matmul, weight_bytes=1_000)


def test_share_counts_products_under_the_threshold_only():
    ops = [product(49_999), product(50_000), product(10, element_bytes=2), product(10, kind_matmul=False)]
    kinds = ["matmul", "matmul", "conv", "elementwise"]
    assert hw.SMALL_PRODUCT_ELEMENTS == 50_000
    # 49,999 elements and the 10-element convolution are small: (3 + 1) of 3 + 5 + 1 + 1 cycles
    assert small_product_share(ops, kinds, [3.0, 5.0, 1.0, 1.0]) == 0.4
    assert small_product_share(ops, kinds, [0.0, 0.0, 0.0, 0.0]) == 0.0
    assert small_product_share([], [], []) == 0.0


def test_note_from_half_of_the_cycles():
    assert small_products_note(0.4999) == "" and small_products_note(float("nan")) == ""
    note = small_products_note(0.5)
    assert note.startswith("Likely pessimistic: 50% of the estimated operation cycles are matmuls or convolutions "
                           "with under 50,000 activation elements")
    assert note.endswith("(a tiny MLP 11x, a pipeline's Linear(320, 256) stage 5x: docs/emulator.md, T1 and B10), "
                         "so expect more throughput on an IPU than estimated here, and check a pipeline's slowest "
                         "stage on hardware: on B10 the estimate picks the Linear stage, the trace shows the "
                         "convolution stages.")
    share, text = small_products([product(100)], ["matmul"], [30_000.0], [60_000.0])
    assert share == 1.0 and text.startswith("Likely pessimistic: 100% ")
    assert small_products([product(60_000)], ["matmul"], [30_000.0], [60_000.0]) == (0.0, "")
