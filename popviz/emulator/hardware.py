"""Hardware facts and cost-model constants of the emulator, each with its source and known error.

Everything the emulator's estimates depend on lives here, so one file answers "where does this
number come from?". ``docs/emulator.md`` explains how the cost model combines them. Hardware
facts come from Graphcore's public specifications; the modelling constants are engineering
assumptions, marked as such, with the error we expect from them. Sources a reader can open:

* IPU Programmer's Guide, IPU hardware overview (tiles, In-Processor Memory, exchange):
  https://docs.graphcore.ai/projects/ipu-programmers-guide/en/latest/about_ipu.html
* IPU-M2000 datasheet (Mk2 GC200: tiles, memory, FP16/FP32 TFLOPS):
  https://docs.graphcore.ai/projects/graphcore-ipu-m2000-datasheet/en/1.0.0/
* Bow-2000 datasheet (Bow IPU: clock, TFLOPS, memory bandwidth):
  https://docs.graphcore.ai/projects/bow-2000-datasheet/en/latest/
* PopTorch user guide (available memory proportion default, options):
  https://docs.graphcore.ai/projects/poptorch-user-guide/en/latest/

The architecture is Mk2 unless ``POPVIZ_EMULATOR_ARCH`` (``Mk1``, ``Mk2``, ``Bow``) or the
script's ``Options.useOfflineIpuTarget(1 | 2 | 21)`` says otherwise. Host-link figures are
parameters (environment variables below), not facts: the effective host<->IPU bandwidth PopTorch
sees is not published and depends on the host.

This module does not import torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from popviz.errors import UsageError


@dataclass(frozen=True)
class IpuSpec:
    """One IPU architecture."""

    architecture: str
    tiles_per_ipu: int
    bytes_per_tile: int
    clock_hz: float
    fp16_flops_per_tile_cycle: float
    """Peak half-precision multiply-accumulate throughput (2 FLOPs per MAC) per tile per cycle."""
    fp32_flops_per_tile_cycle: float
    memory_bytes_per_second: float
    """Aggregate on-chip SRAM bandwidth of one IPU."""
    exchange_bytes_per_second: float
    """Aggregate tile-to-tile exchange bandwidth of one IPU."""
    ipu_link_bytes_per_second: float
    """Bandwidth of one pipeline copy between two neighbouring IPUs (see IPU_LINK_NOTE)."""

    @property
    def bytes_per_ipu(self) -> int:
        return self.tiles_per_ipu * self.bytes_per_tile

    def flops_per_cycle(self, element_bytes: int) -> float:
        """Peak FLOPs per cycle of the whole IPU for elements of ``element_bytes`` (2 = FP16)."""
        per_tile = self.fp16_flops_per_tile_cycle if element_bytes <= 2 else self.fp32_flops_per_tile_cycle
        return per_tile * self.tiles_per_ipu

    def per_cycle(self, bytes_per_second: float) -> float:
        return bytes_per_second / self.clock_hz


# ----------------------------------------------------------------------------- hardware facts
# Mk1 (GC2): 1216 tiles × 256 KiB (304 MiB); ~124.5 TFLOPS FP16 and ~31 TFLOPS FP32 at ~1.6 GHz
# (clock derived: 124.5e12 / (1216 × 64)); 45 TB/s memory bandwidth, 8 TB/s exchange (Graphcore
# C2 card specification). Solid except the derived clock (±5%).
# Mk2 (GC200): 1472 tiles × 624 KiB = 638,976 B (the figure Poplar's out-of-memory message
# quotes); 250 TFLOPS FP16 = 1472 tiles × 128 FLOP/cycle × ~1.33 GHz (clock derived), 62.5
# TFLOPS FP32; 47.5 TB/s memory bandwidth, ~8 TB/s exchange (IPU-M2000 datasheet). Solid.
# Bow: the Mk2 die at 1.85 GHz: 350 TFLOPS FP16, 87.5 TFLOPS FP32, 65 TB/s memory bandwidth (Bow-2000
# datasheet); exchange scaled with the clock (~11 TB/s, derived, ±15%).
IPU_LINK_NOTE = (
    "A Mk2 IPU has 10 IPU-Links, ~320 GB/s in total (secondary source); how many link a pipeline's "
    "neighbours depends on the system, so one copy is assumed to get 64 GB/s (two links). "
    "Known error: up to 2x either way.")

SPECS: dict[str, IpuSpec] = {
    "Mk1": IpuSpec("Mk1", 1216, 256 * 1024, 1.6e9, 64.0, 16.0, 45e12, 8e12, 64e9),
    "Mk2": IpuSpec("Mk2", 1472, 638_976, 1.33e9, 128.0, 32.0, 47.5e12, 8e12, 64e9),
    "Bow": IpuSpec("Bow", 1472, 638_976, 1.85e9, 128.0, 32.0, 65e12, 11.1e12, 64e9),
}
DEFAULT_ARCHITECTURE = "Mk2"
IPU_VERSIONS = {1: "Mk1", 2: "Mk2", 21: "Bow"}
"""``Options.useOfflineIpuTarget`` versions -> architecture."""

# ------------------------------------------------------------------------- modelling constants
MATMUL_EFFICIENCY = 0.4
"""Fraction of peak FLOP rate a matmul/convolution reaches. Assumption: large, well-shaped
matmuls reach 50-70% of peak on the IPU, small or skinny ones much less; 0.4 is a middle value.
Known error: about 2x either way per op (small micro-batches are slower than this)."""

MEMORY_EFFICIENCY = 0.25
"""Fraction of the on-chip memory bandwidth element-wise and data-movement ops reach (reads and
writes of their inputs and outputs). Assumption: vectorised codelets reach about half, uneven
tensor layouts and per-tile edge cases cost the rest. Known error: up to 4x for small tensors."""

OP_OVERHEAD_CYCLES = 1500
"""Fixed cycles per operation: its compute set's launch and internal sync plus the exchange that
lays out its operands. Assumption from typical PopVision execution traces where tiny ops take
1-3 thousand cycles. Known error: 2x; it dominates the estimate of very small models."""

BACKWARD_FACTOR = 2.0
"""Backward cycles per forward cycle (gradients with respect to inputs and to weights: two
matmuls per forward matmul). Standard rule of thumb; known error ±30% (more for models dominated
by element-wise ops)."""

SYNC_CYCLES = 500
"""Fixed cycles of one cross-IPU sync (on top of waiting for the slowest IPU). Assumption; known
error 3x. Matters only when pipeline stages are very short."""

INTER_IPU_COPY_CYCLES = 2000
"""Fixed cycles of one inter-IPU copy program (on top of bytes / link bandwidth). Assumption;
known error 2x."""

STREAMING_MEMORY_BYTES_PER_SECOND = 20e9
"""Bandwidth from one IPU to streaming memory, where offloaded optimizer state lives (an
IPU-M2000 shares its gateway's DDR among 4 IPUs; ~20 GB/s each is assumed). Known error 2x."""

TILE_OVERHEAD_BYTES = 8 * 1024
"""Always-live bytes per tile before any model code: worker and supervisor stacks, control
code, host-exchange code and buffers. Assumption from PopVision memory reports of small models
(4-16 KiB per tile). Known error 2x."""

CODE_BYTES_PER_OP = 96 * 1024
"""Always-live bytes (over the whole IPU) per operation instance: vertex code and state,
internal-exchange code. Training counts each forward op three times (forward, two backward
ops). Assumption; known error 3x; large models are dominated by weights and activations, where
this matters less."""

MATMUL_TEMPORARY_FACTOR = 2.0
"""Temporary memory of a matmul/convolution relative to its inputs plus output (re-arranged
operand copies and partial sums), capped by the available memory proportion. Assumption; known
error 2x."""

DEFAULT_AVAILABLE_MEMORY_PROPORTION = 0.6
"""PopTorch's default available memory proportion (its documentation)."""

AMP_SERIALISATION_PENALTY = 0.15
"""Extra cycles of a matmul/convolution per halving of its temporary memory below what its
fastest plan wants (``MATMUL_TEMPORARY_FACTOR`` × inputs plus output): when the available memory
proportion caps the temporaries at ``cap``, the op costs ``1 + 0.15 × log2(want / cap)`` times its
cycles (the planner serialises the op into pieces that each re-exchange an operand). Assumption
from Graphcore's guidance that lowering the proportion trades speed for memory by tens of
percent; known error 2x on the penalty, and a proportion that still leaves room for the fastest
plan changes nothing here, where the real planner may already pick a slower plan."""

HALF_PARTIALS_SPEEDUP = 2.0
"""Matmul/convolution FLOP rate gained by ``Precision.setPartialsType(torch.half)`` for float16
operands (the AMP units accumulate twice as fast in float16 on Mk2). Float32 operands are
unaffected. Known error: the gain shrinks for small or exchange-bound ops."""

# ------------------------------------------------------------------------ host-link parameters
HOST_BANDWIDTH_ENV = "POPVIZ_EMULATOR_HOST_GBPS"
HOST_LATENCY_ENV = "POPVIZ_EMULATOR_HOST_LATENCY_US"
ARCH_ENV = "POPVIZ_EMULATOR_ARCH"
DEFAULT_HOST_GBPS = 8.0
"""Effective host->IPU bandwidth, GB/s, shared by all replicas of an executor. A parameter: PCIe
Gen4 x16 is 32 GB/s per direction in theory, an IPU-M2000 reaches its host over 100 GbE RoCE
(12.5 GB/s); what PopTorch achieves is not published. Known error: 2x."""
DEFAULT_HOST_LATENCY_US = 10.0
"""Time the IPU waits for the host per transfer (StreamCopyBegin + End), microseconds. A
parameter: it depends on the host's data loading and PopTorch's callbacks. Known error: 5x."""


@dataclass(frozen=True)
class HostLink:
    bytes_per_second: float
    latency_seconds: float


def _positive_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise UsageError(f"{name}={raw!r} is not a positive number; unset it or give e.g. {default:g}")
    return value


def host_link() -> HostLink:
    """The host-link parameters (environment or defaults)."""
    return HostLink(_positive_float(HOST_BANDWIDTH_ENV, DEFAULT_HOST_GBPS) * 1e9,
                    _positive_float(HOST_LATENCY_ENV, DEFAULT_HOST_LATENCY_US) / 1e6)


def spec(architecture: str | None = None, ipu_version: int | None = None) -> IpuSpec:
    """The IPU to estimate for: ``POPVIZ_EMULATOR_ARCH``, else ``architecture`` or the offline
    target's ``ipu_version``, else Mk2."""
    env = os.environ.get(ARCH_ENV, "").strip()
    if env:
        match = {k.lower(): k for k in SPECS}.get(env.lower())
        if match is None:
            raise UsageError(f"{ARCH_ENV}={env!r} is not an IPU architecture; use one of {', '.join(SPECS)}")
        return SPECS[match]
    if architecture is None and ipu_version is not None:
        architecture = IPU_VERSIONS.get(int(ipu_version))
    return SPECS[architecture or DEFAULT_ARCHITECTURE]


__all__ = ["SPECS", "HostLink", "IpuSpec", "host_link", "spec"]
