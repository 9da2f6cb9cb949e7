"""Hardware facts and cost-model constants of the emulator, each with its source and known error.

Everything the emulator's estimates depend on lives here, so one file answers "where does this
number come from?". ``docs/emulator.md`` explains how the cost model combines them. Hardware
facts come from Graphcore's public specifications; each modelling constant says where it comes
from: a documented PopTorch/PopART behaviour, or a fit over the public hardware figures of
``benchmarks/fidelity/`` taken together (``python benchmarks/fidelity/run.py`` prints every case's
measured error; docs/emulator.md's "Fidelity" table is its output). Sources a reader can open:

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

import dataclasses
import os
from dataclasses import dataclass

from popviz.errors import UsageError
from popviz.model.ipu_peak import FLOPS_PER_TILE_CYCLE


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

_PEAK = FLOPS_PER_TILE_CYCLE  # the FLOPs per tile per cycle, with their datasheets: popviz/model/ipu_peak.py
SPECS: dict[str, IpuSpec] = {
    "Mk1": IpuSpec("Mk1", 1216, 256 * 1024, 1.6e9, _PEAK["Mk1"]["float16"], _PEAK["Mk1"]["float32"],
                   45e12, 8e12, 64e9),
    "Mk2": IpuSpec("Mk2", 1472, 638_976, 1.33e9, _PEAK["Mk2"]["float16"], _PEAK["Mk2"]["float32"],
                   47.5e12, 8e12, 64e9),
    "Bow": IpuSpec("Bow", 1472, 638_976, 1.85e9, _PEAK["Bow"]["float16"], _PEAK["Bow"]["float32"],
                   65e12, 11.1e12, 64e9),
}
DEFAULT_ARCHITECTURE = "Mk2"
IPU_VERSIONS = {1: "Mk1", 2: "Mk2", 21: "Bow"}
"""``Options.useOfflineIpuTarget`` versions -> architecture."""

# ------------------------------------------------------------------------- modelling constants
AMP_PEAK_EFFICIENCY = 0.6
"""Fraction of the AMP units' peak a very large matmul or convolution approaches (the limit of
``AMP_PEAK_EFFICIENCY x c / (c + AMP_HALF_CYCLES)``). BERT-Base phase 1 (P6: 32 x 128 tokens,
products of 4.8-19 GFLOP) implies about 35-40% of Bow's FP16 peak in its encoder stages once the
recomputed forward is counted, and the products there are 0.3-0.8 of the way up the curve.
Fitted with ``AMP_HALF_CYCLES`` over the fidelity cases together (a grid over 0.4-0.7 and
6,000-24,000 cycles; this pair gave the lowest median error). Measured error per case:
docs/emulator.md's fidelity table."""

AMP_HALF_CYCLES = 18_000
"""Cycles at peak at which a matmul or convolution reaches half of ``AMP_PEAK_EFFICIENCY``: a
product worth c cycles at peak takes ``(c + AMP_HALF_CYCLES) / AMP_PEAK_EFFICIENCY``. So small
products are dominated by a fixed cost (operand rearrangement and the partial-sum reduction
across tiles: ~42,000 cycles, ~32 us on a Mk2) and large ones approach ``AMP_PEAK_EFFICIENCY``.
Public figures imply ~3% of peak for micro-batch-1 transformers (B12 ViT-B/16, B17 GPT, 128-197
tokens x 768) and ~13% for BERT-Large at 384 tokens (B15), ~35% for BERT-Base at 32 x 128 tokens
(P6): ``AMP_PEAK_EFFICIENCY x c / (c + AMP_HALF_CYCLES)`` with c the product's cycles at peak
follows all four within ~20% (fitted over the fidelity cases together, not per case)."""

CONV_HALF_CYCLES = 9_000
"""``AMP_HALF_CYCLES`` for convolutions: a convolution reaches half of ``AMP_PEAK_EFFICIENCY`` at
half the size a matmul does. With the matmul's curve every CNN figure was estimated too slow
(B9 −15%, B7 −22% (B7 has since proved to be one replica's rate: see below), P1 −22%, B10's
trace −40%) while the transformer figures, all matmuls, held
within 7%. Hypothesis: a CNN's convolutions have many output positions to spread over the tiles
and a short contraction (input channels × kernel), so PopLibs' planner needs less partial-sum
reduction across tiles than for a transformer's matmuls at a few hundred tokens, whose long
contraction (768-4,096) must be split to use the tiles. Fitted over the four CNN figures and B3
together (a grid over 4,000-18,000 cycles; 6,000-9,000 gave the lowest mean error; none is tuned
to one figure): B9 +3%, B3 +17%, B7 −12%, P1 −6%, B10's trace −28%. Refitted after B7 was found
to be an artefact and B5 (the same CNN on SDK 2.5, 26% slower than B9 on SDK 3.1) came in: a grid
of 9,000-18,000 gives B9 +3 to −15%, B3 +17 to +5%, B5 +38 to +15%, P1 −6 to −22% and B10's trace
−29 to −40%, with the same mean error (18-19%) across it; 15,000 would bring B5 within 25% at the
cost of B10 and P1, and B10 would lose its "likely pessimistic" note, so 9,000 stays. Checked
again once only the gradients autodiff grows were counted (``BACKWARD_FACTORS``): over
6,000-18,000 the mean absolute error of B9, B3, B5, P1 and B10's trace is 17-20%, lowest (17.2%)
at 12,000 and 18.2% at 9,000, a flat optimum, so 9,000 stays (B9 +8%, B5 +45%; +4% and +40% since
its convolutions run at their channels' share of the AMP). The same
CNN on SDK 3.0 (E1, held out) is +54%: eight runs of it on SDKs 2.4-3.0 agree at ~32,500 items/s
and SDK 3.1's B9 is 1.46 times that, close to the Bow's clock over the Mk2's (1.39), so B9
probably ran on a Bow and this CNN wants ~50% more cycles than the model gives (docs/emulator.md,
"Eight runs of one CNN"),
while B10's trace wants fewer for its smaller convolutions: no value of this constant gives both.
Measured error per case: docs/emulator.md's fidelity table."""

WEIGHT_STREAM_CYCLES = {2: 1.0, 4: 2.85}
"""Cycles a matmul takes at least per parameter element on each tile, by element bytes (float16,
float32), whatever its batch: the AMP units read every weight once however few rows use it, so a
product with large weights and a batch of a few rows is bound by its weights, not its FLOPs.
Measured on hardware: PopSparse's dense benchmarks (graphcore-research/sparsity-benchmarks,
``analysis/Analysis.ipynb``, figure ``dense_ipu_gpu``; arXiv 2303.16999) time isolated square
matmuls on a Bow IPU (rates up to 239 TFLOP/s in float16, 68% of Bow's peak). At a batch of 4 the
8192 x 8192 and 4096 x 4096 products take 46,400 and 13,600 cycles in float16 (1.0 and 1.2 per
weight element per tile) and 129,000 and 35,000 in float32 (2.8 and 3.1); the constants are the
8192 x 8192 points, the least affected by fixed costs. Below this floor the model's FLOP curve
estimated them 17% and 59% too fast. Mk1 is assumed to read weights at the same rate per tile
(unchecked)."""

MEMORY_EFFICIENCY = 0.5
"""Fraction of the on-chip memory bandwidth element-wise and data-movement ops reach (reads and
writes of their inputs and outputs): vectorised codelets reach about half (uneven layouts and
per-tile edge cases cost the rest). Matters only for large activations (ResNet's early layers,
P1); small ones are dominated by ``FIXED_CYCLES``. Fitted with the AMP constants (0.25 and 0.5
change the fidelity cases by under 3%)."""

NORM_PASSES = 3
"""Passes over the data of a normalisation or softmax (statistics, then normalise; softmax: max,
exp-sum, divide). From PopLibs' implementations (popnn::groupNorm / layerNorm statistics then
whitening; popnn::nonLinearity softmax's stable max-subtract form)."""

FIXED_CYCLES = {"matmul": 4000, "conv": 5000, "norm": 5000, "reduce": 2500, "gather": 3000,
                "elementwise": 1200}
"""Fixed cycles per operation by kind: its compute sets' launches and BSP syncs and the exchange
that lays out its operands, independent of its size. A matmul is several compute sets
(operand rearrangement, AMP partials, partials reduction); a normalisation or softmax is two or
three reductions and the passes between them; an element-wise op is one compute set. Sources:
the IPU Programmer's Guide (BSP: every compute set ends in a sync and an exchange) and the
small-model figures (B1/B9: a 12-op CNN takes ~450k cycles per training micro-batch, and the
micro-batch-1 transformers B12/B15/B17 are dominated by these costs). Measured error: see the
fidelity table."""

BACKWARD_FACTORS = {"matmul": 2.0, "conv": 2.0, "norm": 2.0, "reduce": 1.0, "gather": 1.0,
                    "elementwise": 1.0}
"""Backward cycles per forward cycle by kind: two products (input and weight gradients) per
matmul or convolution; a normalisation's gradient needs two reductions as its forward did; an
element-wise op's gradient is one element-wise op (a gather's is a scatter-add into the whole
dense table, counted apart). Only the gradients autodiff grows are counted
(``costmodel.gradient_share``): PopART makes gradient ops only towards tensors that need a
gradient, so the first layer's product computes its weight's gradient alone and a frozen layer's
its input's alone. Counting the first layer's input gradient too had B9 at +3% (+8% without it) and
T1 at −91% (−90%)."""

WEIGHT_UPDATE_CYCLES_PER_TENSOR = 1500
"""Fixed cycles of the optimizer step per trainable tensor (one compute set each; PopART merges
some, ``mergeVarUpdate``). Assumption from the per-op fixed costs above; known error 2x."""

SYNC_CYCLES = 500
"""Fixed cycles of one cross-IPU sync (on top of waiting for the slowest IPU). Assumption; known
error 3x. Matters only when pipeline stages are very short."""

INTER_IPU_COPY_CYCLES = 2000
"""Fixed cycles of one inter-IPU copy program (on top of bytes / link bandwidth). Assumption;
known error 2x."""

ALLREDUCE_EFFICIENCY = 0.65
"""Fraction of one IPU-Link's bandwidth (the spec's ``ipu_link_bytes_per_second``: 64 GB/s, 512
Gbps, the IPU-M2000 / Bow-2000 datasheets) a gradient all-reduce among R replicas gets, for the
``2(R - 1)/R`` x gradient bytes each IPU sends round the ring, whatever R. Measured on the
efficient-data-loading tutorial's CNN, whose 16.7 MB of float32 gradients are all-reduced after
every micro-batch (no gradient accumulation), against the same README's 1-replica rate, so the
IPU's own work cancels out: SDK 3.1's 2 replicas (B3: 46,384 against 47,324 items/s for 1) add
~350 us per micro-batch, 47.7 GB/s for the 16.7 MB each IPU sends (75% of a link); SDK 3.0's 4
replicas (E2: 54,289 against 31,971 for 1) add ~680 us, 36.7 GB/s for its 25.1 MB (57%). 0.65 is
between the two (each within ~15%). GCL's documentation describes a bi-directional ring pair (half
the data each way round the ring), which would make 4 replicas take 0.75x as long as 2; they took
1.95x, so the model uses one direction (and GCL's quad-directional rings are not modelled either).
Before E2 was found, the ring pair made the 4-replica figure +124%."""

STREAMING_MEMORY_BYTES_PER_SECOND = 20e9
"""Bandwidth from one IPU to streaming memory, where offloaded optimizer state lives (an
IPU-M2000 shares its gateway's DDR among 4 IPUs; ~20 GB/s each is assumed). Known error 2x."""

TILE_OVERHEAD_BYTES = 16 * 1024
"""Always-live bytes per tile before any model code: worker and supervisor stacks, the shared
codelets' vertex code (shared by every operation using them, so it does not grow with the op
count), control code and host-exchange buffers. Fitted with ``CODE_BYTES_PER_OP`` to the tiny
BERT compile profile (A1: 62.6 MB of vertex code, vertex state, exchange and control code for
~1,000 operations on 1,472 tiles)."""

CODE_BYTES_PER_OP = {"matmul": 160 * 1024, "conv": 160 * 1024, "norm": 160 * 1024, "reduce": 64 * 1024,
                     "gather": 96 * 1024, "elementwise": 48 * 1024}
"""Always-live bytes (over the whole IPU) per forward operation by kind: vertex state (one vertex
per tile the op spreads over, each with its field pointers), exchange code and control code of
its compute sets. Matmuls and normalisations are several compute sets; an element-wise op is
one. Fitted to the tiny BERT compile profile (A1) together with ``TILE_OVERHEAD_BYTES``;
measured error in the fidelity table."""

UPDATE_CODE_BYTES_PER_TENSOR = 256 * 1024
"""Always-live bytes (over the IPU) of the optimizer step's programs per trainable tensor when
training: an Adam/LAMB update is several element-wise compute sets per tensor (PopART's
VarUpdate ops; the tiny BERT profile counts 1,025 operations for 78 forward ones). Fitted to A1
together with the two constants above."""

# An offloaded optimizer state is loaded from streaming memory next to each tensor's VarUpdate and
# stored back (PopART's RemoteLoad / RemoteStore), one tensor at a time; spread over every tile,
# each tile's peak holds its slice of one tensor's state, so the IPU's total (the sum of its
# tiles' peaks, as Poplar reports it) holds the largest tensor's state once, not-always-live and
# after the backward (so with the temporaries: the larger of the two). For the tiny BERT profile
# (A1) that is the word embeddings' AdamW state, 15.6 MB of the 40.4 MB of variables (weights and
# accumulators are 12.8 MB). No constant: the emulator counts it so.

BACKWARD_CODE_FACTOR = 2.0
"""Backward programs per forward operation when training (code of the gradient ops relative to
the forward op's): two products per matmul, and about as many for the rest."""

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

AMP_INPUT_CHANNEL_GRAIN = {2: 4, 4: 2}
"""Input channels (per convolution group) each AMP conv unit loads per cycle, by element bytes
(float16: 4, float32: 2): the AMP vertices need a product's or convolution's input channels in
groups of this size, padding the rest (PopLibs ``lib/poplin/ConvVertexType.cpp``: an AMP candidate's
``inChansPerGroup`` is a multiple of ``convInputLoadElems``). The output channels go in groups of the
conv units (peak MACs per tile cycle over this grain: 16 for float16 with half partials on a Mk2,
8 with float partials, 8 for float32). PopLibs ranks its vertex candidates by
``maxMACsPerCycle x (1 - paddingRatio)`` (``sortConvVertexTypeCandidates``); the cost model runs a
product at that share of the peak (:func:`popviz.emulator.costmodel.channel_utilisation`), so a
convolution on 1 input channel and 5 output channels in float32 runs at (1/2) x (5/8) of it. Whole
multiples of the grains (every transformer and ResNet layer but the first) are unaffected."""
VECTOR_MACS_PER_TILE_CYCLE = {2: 4, 4: 2}
"""MACs per tile cycle of PopLibs' vector-MAC convolution vertices (HMAC, VMAC: the 64-bit data
path's width, 4 float16 or 2 float32 values; ``getMaxMACsPerCyclePerTile`` in
``lib/poplin/ConvModel.cpp``), which PopLibs uses where the AMP's channel groups would be mostly
padding: depthwise convolutions (one channel per group) run at this rate, not the AMP's."""

SMALL_PRODUCT_ELEMENTS = 50_000
"""Matmuls and convolutions whose activations (non-parameter inputs and output) hold fewer
elements than this are "small products": the cost model charges them ``AMP_HALF_CYCLES`` /
``CONV_HALF_CYCLES`` and ``FIXED_CYCLES`` as if they spanned every tile, which the transformer
figures were fitted with (their smallest products hold ~197,000 elements: B17's 128 tokens x 768,
in and out). The two public traces of smaller ones run them far faster: TensorFlow 1's pipelining
tutorial's MLP (products of up to ~33,000 elements, T1 in docs/emulator.md: ~1,300-4,300 cycles
per dense layer's forward or backward, the model ~36,000 and ~71,000) and the PopTorch pipelining
tutorial's ``Linear(320, 256)`` stage (~23,000 elements, B10: ~29,000 cycles per micro-batch on
hardware, 141,000 estimated). No form fitted so far lowers their cost without breaking the other
figures (docs/emulator.md, B10), so the report says so instead once they hold
``popviz.analysis.throughput.PESSIMISTIC_SHARE`` (half) of the operation cycles or more: T1 (95%)
and B10 (53%) are estimated 90% and 28% too slow; B9 (24%, a ``Linear(100, 10)`` beside
full-size products) is within 8%."""

# ------------------------------------------------------------------------ host-link parameters
HOST_BANDWIDTH_ENV = "POPVIZ_EMULATOR_HOST_GBPS"
HOST_LATENCY_ENV = "POPVIZ_EMULATOR_HOST_LATENCY_US"
HOST_PROCESS_ENV = "POPVIZ_EMULATOR_HOST_PROCESS_GBPS"
ARCH_ENV = "POPVIZ_EMULATOR_ARCH"
DEFAULT_HOST_GBPS = 8.0
"""Effective host->IPU bandwidth, GB/s, of one IPU-M2000's host link (``IPUS_PER_HOST_LINK`` IPUs),
shared by the replicas on it; an executor on more IPUs has one link per 4 IPUs (a Pod16's four
IPU-M2000s each reach the host over their own 100 GbE RoCE link, 12.5 GB/s in theory). A
parameter: what PopTorch achieves is not published. Known error: 2x."""
IPUS_PER_HOST_LINK = 4
"""IPUs behind one host link: an IPU-M2000 (and a Bow-2000) holds 4 IPUs (datasheets)."""
DEFAULT_HOST_LATENCY_US = 10.0
"""Time the IPU waits for the host per transfer (StreamCopyBegin + End), microseconds. A
parameter: it depends on the host's data loading and PopTorch's callbacks. Known error: 5x."""
DEFAULT_HOST_PROCESS_GBPS = 2.35
"""Rate, GB/s, at which one thread of the host process serves the input streams' callbacks
(the host's side of a StreamCopyBegin: handing each micro-batch's input to Poplar). Poplar runs
every stream callback on the process's main thread unless its runtime option
``streamCallbacks.multiThreadMode`` is set (default ``singleThread``, ``numWorkerThreads`` 0:
Poplar's RuntimeOptions reference), so one process feeds all its replicas at this rate, and
PopRun's instances each bring their own. Measured on hardware: Poplar's tutorial 6 trace (figure
C1) streams 40,004,000 bytes in a run of 19.1 ms, 2.0 ms of it the transfer (host exchange) and
most of the rest ~17 ms of StreamCopyBegin: ~2.35 GB/s for one thread. With prefetch
(PopART's ``defaultPrefetchBufferingDepth``, 1 by default) the host prepares the next inputs
while the IPU computes. Known error: 2x (one trace; hosts differ)."""


@dataclass(frozen=True)
class HostLink:
    bytes_per_second: float
    latency_seconds: float
    process_bytes_per_second: float = DEFAULT_HOST_PROCESS_GBPS * 1e9
    """One host thread's rate serving input stream callbacks (``DEFAULT_HOST_PROCESS_GBPS``)."""


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
                    _positive_float(HOST_LATENCY_ENV, DEFAULT_HOST_LATENCY_US) / 1e6,
                    _positive_float(HOST_PROCESS_ENV, DEFAULT_HOST_PROCESS_GBPS) * 1e9)


def compute_spec(spec: IpuSpec, io_tiles: int) -> IpuSpec:
    """The part of an IPU that computes when ``io_tiles`` of its tiles are reserved for I/O
    (``opts.TensorLocations.numIOTiles``: "Assigns the number of tiles on the IPU to be IO rather
    than compute", PopTorch ``python/options.py``; "Computation time will be adversely affected by
    having access to fewer tiles", ``docs/user_guide/hostio_optimisation.rst``): fewer tiles, and
    the per-IPU figures that are the tiles' sum (AMP peak, on-chip memory and its bandwidth,
    exchange) in proportion. ``io_tiles`` 0: the IPU itself."""
    if io_tiles <= 0:
        return spec
    tiles = max(1, spec.tiles_per_ipu - int(io_tiles))
    share = tiles / spec.tiles_per_ipu
    return dataclasses.replace(spec, tiles_per_ipu=tiles, memory_bytes_per_second=spec.memory_bytes_per_second * share,
                               exchange_bytes_per_second=spec.exchange_bytes_per_second * share)


def io_tile_copy_cycles(nbytes: int, spec: IpuSpec, io_tiles: int) -> int:
    """Cycles to exchange ``nbytes`` between the I/O tiles (where an overlapped host transfer
    lands or leaves from) and the compute tiles: the I/O tiles' share of the exchange (each tile
    sends and receives ``exchange_bytes_per_second / tiles`` per second: 8 TB/s over 1,472 Mk2
    tiles is 4 bytes per tile per cycle) plus the fixed cost of one exchange
    (``INTER_IPU_COPY_CYCLES`` is that of an inter-IPU copy; an on-chip one is a compute set's
    exchange, ``SYNC_CYCLES``)."""
    if io_tiles <= 0 or nbytes <= 0:
        return 0
    per_tile = spec.per_cycle(spec.exchange_bytes_per_second) / spec.tiles_per_ipu
    return int(round(nbytes / (per_tile * io_tiles))) + SYNC_CYCLES


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


__all__ = ["SPECS", "HostLink", "IpuSpec", "compute_spec", "host_link", "io_tile_copy_cycles", "spec"]
