"""Peak arithmetic throughput of each IPU architecture, from Graphcore's datasheets.

The one source of these figures: the emulator's hardware facts (``popviz/emulator/hardware.py``)
read them from here, and the achieved-efficiency analysis (``popviz/analysis/efficiency.py``)
divides by them. Figures are FLOPs per tile per cycle (a multiply-accumulate is 2 FLOPs):

* Mk1 (GC2): ~124.5 TFLOPS FP16 and ~31 TFLOPS FP32 over 1216 tiles (Graphcore C2 card
  specification): 64 and 16 FLOPs per tile per cycle at the derived ~1.6 GHz clock.
* Mk2 (GC200): 250 TFLOPS FP16 = 1472 tiles x 128 FLOPs/cycle x ~1.33 GHz, 62.5 TFLOPS FP32
  (IPU-M2000 datasheet,
  https://docs.graphcore.ai/projects/graphcore-ipu-m2000-datasheet/en/1.0.0/).
* Bow: the Mk2 die at 1.85 GHz, 350 TFLOPS FP16 and 87.5 TFLOPS FP32, so the same figures per
  tile per cycle (Bow-2000 datasheet,
  https://docs.graphcore.ai/projects/bow-2000-datasheet/en/latest/).

The FP16 peak is reached with half-precision partials; PopTorch's default float32 partials halve
it (the emulator's ``HALF_PARTIALS_SPEEDUP``). This module imports nothing heavy.
"""

from __future__ import annotations

FLOPS_PER_TILE_CYCLE: dict[str, dict[str, float]] = {
    "Mk1": {"float16": 64.0, "float32": 16.0},
    "Mk2": {"float16": 128.0, "float32": 32.0},
    "Bow": {"float16": 128.0, "float32": 32.0},
}
"""Peak FLOPs per tile per cycle by architecture and precision (``float16`` or ``float32``)."""


def flops_per_tile_cycle(architecture: str, precision: str) -> float | None:
    """Peak FLOPs per tile per cycle, or None for an architecture or precision not listed."""
    return FLOPS_PER_TILE_CYCLE.get(architecture, {}).get(precision)


__all__ = ["FLOPS_PER_TILE_CYCLE", "flops_per_tile_cycle"]
