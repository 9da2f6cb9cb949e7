"""Single matmuls on hardware against the cost model's cycles for one product.

PopSparse's dense benchmarks (graphcore-research/sparsity-benchmarks, arXiv 2303.16999) timed
isolated square products ``[n, k] x [k, m]`` with m = k from 1,024 to 8,192 and a batch n from 4
up, in float16 (half partials) and float32, on a Bow IPU: compute and exchange cycles of the
matmul alone, as TFLOP/s. The rates below were read off the notebook's figure ``dense_ipu_gpu``
(``analysis/Analysis.ipynb``; log axes, so about ±5%) and turned into cycles at Bow's 1.85 GHz.

    python benchmarks/fidelity/products.py

prints, per product, the hardware's cycles, the cost model's (``costmodel.op_cycles``, the
figure's precision, Bow) and the error, then the median error by size. These are whole-IPU
products with nothing around them; docs/emulator.md ("Fidelity") says what they show about the
cost model and why its curve is not fitted to them.
"""

from __future__ import annotations

import statistics
import sys

from popviz.emulator import costmodel, hardware
from popviz.emulator.cost_inputs import OpCost

BOW_CLOCK_HZ = 1.85e9
# precision -> m = k -> [(batch n, TFLOP/s)]
RATES = {
    "float16": {
        1024: [(4, 6.0), (16, 20.3), (64, 45.5), (256, 89.3), (1024, 120.1), (2048, 153.0), (4096, 179.8),
               (8192, 205.8), (16384, 223.1), (32768, 223.1)],
        2048: [(4, 12.8), (16, 44.3), (64, 82.4), (256, 133.7), (1024, 165.9), (2048, 200.3), (4096, 211.4),
               (8192, 229.2), (16384, 238.6)],
        4096: [(4, 18.2), (16, 61.2), (64, 130.2), (256, 175.1), (1024, 208.6), (2048, 223.1)],
        8192: [(4, 21.4), (16, 72.0), (64, 157.2), (256, 223.1)],
    },
    "float32": {
        1024: [(4, 3.7), (8, 6.5), (16, 11.1), (32, 16.2), (64, 21.2), (128, 29.2), (256, 34.3), (512, 36.2),
               (1024, 43.6), (2048, 49.9), (4096, 55.5), (8192, 57.0), (16384, 58.6), (32768, 58.6)],
        2048: [(4, 5.7), (8, 10.3), (16, 18.0), (32, 26.2), (64, 34.3), (128, 39.2), (256, 44.8), (512, 49.9),
               (1024, 52.6), (2048, 57.0), (4096, 58.6), (8192, 60.2)],
        4096: [(4, 7.1), (8, 12.4), (16, 22.3), (32, 31.7), (64, 41.4), (128, 48.6), (256, 52.6), (512, 54.1),
               (1024, 55.5), (2048, 57.0), (4096, 58.6)],
        8192: [(4, 7.7), (8, 13.8), (16, 24.9), (32, 36.2), (64, 48.6), (128, 49.9), (256, 55.5), (1024, 54.1)],
    },
}
ELEMENT_BYTES = {"float16": 2, "float32": 4}
SIZES = (("c < 5,000 cycles at peak", 0, 5_000), ("5,000 to 50,000", 5_000, 50_000),
         ("50,000 or more", 50_000, float("inf")))


def rows() -> list[tuple[str, int, int, float, float, float]]:
    """(precision, m = k, n, cycles at peak, hardware cycles, model cycles) per product."""
    spec = hardware.SPECS["Bow"]
    out = []
    for precision, by_size in RATES.items():
        eb = ELEMENT_BYTES[precision]
        for mk, points in by_size.items():
            for n, tflops in points:
                flops = 2.0 * mk * mk * n
                op = OpCost(segment=0, name="mm", flops=flops, element_bytes=eb, in_bytes=(n * mk + mk * mk) * eb,
                            out_bytes=n * mk * eb, matmul=True, weight_bytes=mk * mk * eb)
                peak = flops / costmodel.amp_rate(op, spec, half_partials=True)
                hw_cycles = flops / (tflops * 1e12) * BOW_CLOCK_HZ
                out.append((precision, mk, n, peak, hw_cycles, costmodel.op_cycles(op, spec, None, half_partials=True)))
    return out


def main() -> int:
    table = rows()
    print(f"{'precision':9} {'m = k':>6} {'n':>6} {'at peak':>10} {'hardware':>10} {'model':>10} {'error':>7}")
    for precision, mk, n, peak, hw_cycles, model in table:
        print(f"{precision:9} {mk:6,} {n:6,} {peak:10,.0f} {hw_cycles:10,.0f} {model:10,.0f} "
              f"{model / hw_cycles - 1:+7.0%}")
    print()
    for label, lo, hi in SIZES:
        errors = [model / hw_cycles - 1 for _, _, _, peak, hw_cycles, model in table if lo <= peak < hi]
        print(f"{label}: {len(errors)} products, median error {statistics.median(errors):+.0%}, "
              f"range {min(errors):+.0%} to {max(errors):+.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
