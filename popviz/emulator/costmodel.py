"""The emulator's cost model: from a measured forward pass to an estimated Report.

Input: a :class:`Measurement` of one micro-batch (operations per segment, parameters, activation
bytes; see :mod:`popviz.emulator.measure`) and the executor's :class:`EngineSetup` (batching,
output mode, optimizer, tensor locations, hardware). Output: a :class:`~popviz.model.Report`
labelled ``estimated`` with a per-IPU memory table, the simulated execution steps of one call
(:mod:`popviz.schedule`), the configuration and the host tensors.

Every constant comes from :mod:`popviz.emulator.hardware`; ``docs/emulator.md`` describes the
model and its known errors. This module is pure (no torch, no files), so it is tested with exact
numbers on hand-made measurements. Its inputs (:class:`Measurement`, :class:`EngineSetup`) are
defined in :mod:`popviz.emulator.cost_inputs`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from popviz._version import __version__
from popviz.emulator import hardware as hw
from popviz.emulator import host_transfers, known_errors, liveness_estimate, recompute, report_notes
from popviz.emulator.cost_inputs import AnchoredTensor, EngineSetup, Measurement, OpCost, ParamInfo, Segment
from popviz.emulator.op_kinds import (  # noqa: F401  (the op classes, re-exported from here)
    CONV_OPS,
    GATHER_OPS,
    MATMUL_OPS,
    NORM_SOFTMAX_OPS,
    OP_KINDS,
    REDUCTION_OPS,
    op_kind,
)
from popviz.model import (
    ExecutionTable,
    HostIO,
    LayerTable,
    MemoryTable,
    ModelConfig,
    Provenance,
    Report,
    Stage,
    Target,
)
from popviz.model.numbers import reserved_ipus

# ------------------------------------------------------------------------------ the estimate

MEMORY_CATEGORIES = ("weights", "optimizerState", "gradientAccumulators", "activationStash",
                     "temporaries", "codeAndExchange")
"""The emulator's memory categories (``cat_<name>_bytes`` columns); see docs/emulator.md."""


def peak_rate(op: OpCost, spec: hw.IpuSpec, half_partials: bool) -> float:
    """Peak FLOPs per cycle of the whole IPU for this operation's precision: float32, float16
    with float32 partials (half the float16 peak) or float16 with half partials (the peak)."""
    rate = spec.flops_per_cycle(op.element_bytes)
    if op.element_bytes == 2 and not half_partials:
        rate /= hw.HALF_PARTIALS_SPEEDUP
    return rate


def amp_rate(op: OpCost, spec: hw.IpuSpec, half_partials: bool) -> float:
    """FLOPs per cycle of the whole IPU this product or convolution can reach: the peak for its
    precision (:func:`peak_rate`) times the share its channels fill (:func:`channel_utilisation`)."""
    return peak_rate(op, spec, half_partials) * channel_utilisation(op, spec, half_partials)


def channel_utilisation(op: OpCost, spec: hw.IpuSpec, half_partials: bool) -> float:
    """Share of the AMP's peak a product's or convolution's channels fill (1 without a recorded
    shape): input channels per group padded to ``AMP_INPUT_CHANNEL_GRAIN``, output channels to the
    conv units, and never below PopLibs' vector-MAC vertices (``VECTOR_MACS_PER_TILE_CYCLE``), which
    it uses where the AMP would mostly compute padding (depthwise convolutions)."""
    if len(op.dims) != 5 or not op.dims[2] or not op.dims[3]:  # no shape, or an empty product
        return 1.0
    _, _, cin, cout, _ = op.dims
    eb = 2 if op.element_bytes <= 2 else 4
    peak_macs = peak_rate(op, spec, half_partials) / spec.tiles_per_ipu / 2
    grain = hw.AMP_INPUT_CHANNEL_GRAIN[eb]
    units = max(1, round(peak_macs / grain))
    filled = cin / (math.ceil(cin / grain) * grain) * cout / (math.ceil(cout / units) * units)
    return max(filled, min(1.0, hw.VECTOR_MACS_PER_TILE_CYCLE[eb] / peak_macs))


def amp_efficiency(op: OpCost, spec: hw.IpuSpec, half_partials: bool = False) -> float:
    """Fraction of the AMP units' peak a matmul or convolution reaches:
    ``AMP_PEAK_EFFICIENCY × c / (c + AMP_HALF_CYCLES)`` where c is its cycles at peak
    (``CONV_HALF_CYCLES`` for a convolution). Small
    products (micro-batch 1 transformers) reach a few percent, large ones approach the
    efficiency of a well-shaped product; equivalently each costs its cycles at
    ``AMP_PEAK_EFFICIENCY`` plus ``AMP_HALF_CYCLES / AMP_PEAK_EFFICIENCY`` of planning overhead
    (operand rearrangement, partial-sum reductions across tiles)."""
    ideal = op.flops / amp_rate(op, spec, half_partials)
    return hw.AMP_PEAK_EFFICIENCY * ideal / (ideal + half_cycles(op_kind(op)))


def half_cycles(kind: str) -> int:
    """Cycles at peak at which a product of this kind reaches half of ``AMP_PEAK_EFFICIENCY``."""
    return hw.CONV_HALF_CYCLES if kind == "conv" else hw.AMP_HALF_CYCLES


def op_cycles(op: OpCost, spec: hw.IpuSpec, cap: float | None = None, half_partials: bool = False) -> float:
    """Forward cycles of one operation on one IPU (see docs/emulator.md, "Cycles per operation").

    Matmuls and convolutions run on the AMP units at :func:`amp_efficiency` of the peak for their
    operands' precision, and never faster than reading its parameters
    (:func:`weight_stream_cycles`); a matmul whose temporaries the available memory proportion caps at
    ``cap`` bytes runs serialised. Every other operation moves its bytes at ``MEMORY_EFFICIENCY``
    of the on-chip bandwidth (normalisations in ``NORM_PASSES`` passes, gathers at the
    exchange's bandwidth). Each kind adds its fixed cycles (``FIXED_CYCLES``: compute-set
    launches, syncs and the exchange laying out operands)."""
    kind = op_kind(op)
    if kind in ("matmul", "conv"):
        compute = max((op.flops / amp_rate(op, spec, half_partials) + half_cycles(kind)) / hw.AMP_PEAK_EFFICIENCY,
                      weight_stream_cycles(op, spec))
        exchange = op.activation_bytes / spec.per_cycle(spec.exchange_bytes_per_second)
        cycles = (compute + exchange) * serialisation_factor(op, cap)
    elif kind == "gather":
        cycles = (op.in_bytes - op.weight_bytes + 2 * op.out_bytes) / (
            spec.per_cycle(spec.exchange_bytes_per_second) * hw.MEMORY_EFFICIENCY)
    else:
        passes = hw.NORM_PASSES if kind == "norm" else 1
        cycles = passes * (op.in_bytes + op.out_bytes) / (spec.per_cycle(spec.memory_bytes_per_second)
                                                          * hw.MEMORY_EFFICIENCY)
    return cycles + hw.FIXED_CYCLES[kind]


def weight_stream_cycles(op: OpCost, spec: hw.IpuSpec) -> float:
    """The least a matmul or convolution takes to read its parameters on each tile
    (``WEIGHT_STREAM_CYCLES`` per element): what bounds a product with large weights and a batch
    of a few rows, whose FLOPs alone would make it far cheaper."""
    if not op.weight_bytes or op.element_bytes <= 0:
        return 0.0
    per_element = hw.WEIGHT_STREAM_CYCLES.get(op.element_bytes, hw.WEIGHT_STREAM_CYCLES[4])
    return per_element * op.weight_bytes / op.element_bytes / spec.tiles_per_ipu


def gradient_share(op: OpCost) -> float:
    """Share of an operation's full backward that autodiff grows: PopART's autodiff
    (``transforms/autodiff``) makes gradient ops only towards tensors that need a gradient, so a
    product reading the model's inputs and a weight computes the weight's gradient alone (half of
    ``BACKWARD_FACTORS``' two products), one reading a frozen weight the input's gradient alone,
    and an operation on inputs and frozen weights alone has no backward."""
    if not op.has_backward:
        return 0.0
    if op_kind(op) in ("matmul", "conv") and op.weight_bytes:
        return (op.activation_grad + op.weight_grad) / 2
    return 1.0


def backward_cycles(op: OpCost, forward: float, spec: hw.IpuSpec) -> float:
    """Backward cycles of one operation: ``BACKWARD_FACTORS[kind]`` × its forward cycles (two
    matmuls per matmul: input and weight gradients) × :func:`gradient_share`; a gather's backward
    into a trainable table scatters into a dense gradient of the whole table, so it also touches
    the table's bytes."""
    kind = op_kind(op)
    cycles = forward * hw.BACKWARD_FACTORS[kind] * gradient_share(op)
    if kind == "gather" and op.weight_bytes and op.weight_grad:
        cycles += op.weight_bytes / (hw.MEMORY_EFFICIENCY * spec.per_cycle(spec.memory_bytes_per_second))
    return cycles


def serialisation_factor(op: OpCost, cap: float | None) -> float:
    """How much slower a matmul runs when its temporaries are capped below what its fastest plan
    wants (1 when they fit): ``1 + AMP_SERIALISATION_PENALTY × log2(want / cap)``."""
    if not op.matmul or cap is None or cap <= 0:
        return 1.0
    want = op.activation_bytes * hw.MATMUL_TEMPORARY_FACTOR
    if want <= cap:
        return 1.0
    return 1.0 + hw.AMP_SERIALISATION_PENALTY * math.log2(want / cap)


def op_temporary_bytes(op: OpCost, cap: float) -> float:
    """Bytes an operation needs while it runs (its non-parameter operands and its result; matmuls
    more, capped by the available memory proportion but never below their operands and result)."""
    working = op.activation_bytes
    if op.matmul:
        return min(working * hw.MATMUL_TEMPORARY_FACTOR, max(cap, working))
    return working


def stash_depth(segment: int, num_segments: int, setup: EngineSetup) -> int:
    """Micro-batches whose activations a forward stage keeps for the backward pass: 2(N - i) - 1
    in a training pipeline (PopART), one when sharded or on one IPU, none for inference."""
    if not setup.training:
        return 0
    if setup.strategy == "PipelinedExecution" and num_segments > 1:
        return 2 * (num_segments - segment) - 1
    return 1


@dataclass(frozen=True)
class OpTable:
    """Per operation of a measurement: forward and backward cycles (the backward's including the
    recomputed forward), working bytes (including the recomputed activations live with it), the
    recomputation plan they follow and its code bytes (:func:`code_bytes`)."""

    forward: list[float]
    backward: list[float]
    temporary: list[float]
    recompute: recompute.RecomputePlan
    code: list[float]
    backward_flops: list[float] = dataclasses.field(default_factory=list)
    """FLOPs of each op's backward products as :func:`backward_cycles` counts them (training only)."""


def _caps(m: Measurement, setup: EngineSetup) -> dict[int, float]:
    return {i: setup.available_memory_proportion.get(seg.ipu, hw.DEFAULT_AVAILABLE_MEMORY_PROPORTION)
            * setup.compute_spec.bytes_per_ipu for i, seg in enumerate(m.segments)}


def op_table(m: Measurement, setup: EngineSetup) -> OpTable:
    """Every operation's cycles and bytes under this engine's setup (one place for stages,
    blocks and layers), on the IPU's compute tiles (all but its I/O tiles)."""
    spec = setup.compute_spec
    caps = _caps(m, setup)
    if setup.training and not any(o.activation_grad or o.weight_grad for o in m.ops):
        # traced with autograd off (nothing said which tensors need gradients): every op's backward
        m = dataclasses.replace(m, ops=[o.replace(activation_grad=True, weight_grad=True) for o in m.ops])
    ops = m.ops
    plan = recompute.plan(m, setup)
    fwd, bwd, temp = [], [], []
    for o, again, live in zip(ops, plan.recomputed, plan.live_bytes, strict=True):
        cap = caps.get(o.segment)
        f = op_cycles(o, spec, cap, setup.half_partials)
        fwd.append(f)
        bwd.append((backward_cycles(o, f, spec) + (f if again else 0.0)) if setup.training else 0.0)
        temp.append(op_temporary_bytes(o, cap if cap is not None else spec.bytes_per_ipu) + live)
    bflops = [o.flops * hw.BACKWARD_FACTORS[k] * gradient_share(o) if (k := op_kind(o)) in ("matmul", "conv")
              else 0.0 for o in ops] if setup.training else []
    return OpTable(fwd, bwd, temp, plan, [code_bytes(o, setup.training) for o in ops], bflops)


@dataclass
class StageEstimate:
    """Per forward stage (segment): cycles per micro-batch and what it holds."""

    index: int
    ipu: int
    blocks: list[str]
    forward_cycles: int
    backward_cycles: int
    ops: int
    flops: float
    weight_bytes: int
    trainable_elements: int
    trainable_bytes: int
    param_tensors: int
    saved_bytes: int
    """Bytes stashed per micro-batch (all of autograd's saved tensors without recomputation)."""
    stash_depth: int
    temporary_bytes: int
    recompute_cycles: int = 0
    """Part of ``backward_cycles`` that recomputes forward operations."""
    code_bytes: float = 0.0
    """Code, vertex state and exchange code of its operations (forward and backward)."""


def stage_estimates(m: Measurement, setup: EngineSetup, table: OpTable | None = None) -> list[StageEstimate]:
    table = table or op_table(m, setup)
    stash = table.recompute.stash_bytes(len(m.segments))
    out = []
    for index, seg in enumerate(m.segments):
        idx = [j for j, o in enumerate(m.ops) if o.segment == index]
        ops = [m.ops[j] for j in idx]
        params = [p for p in m.params if p.segment == index]
        trainable = [p for p in params if p.trainable]
        forward = sum(table.forward[j] for j in idx)
        again = sum(table.forward[j] for j in idx if table.recompute.recomputed[j])
        out.append(StageEstimate(
            index=index, ipu=seg.ipu, blocks=list(seg.blocks),
            forward_cycles=int(round(forward)),
            backward_cycles=int(round(sum(table.backward[j] for j in idx))) if setup.training else 0,
            ops=len(ops), flops=sum(o.flops for o in ops),
            weight_bytes=sum(p.bytes for p in params),
            trainable_elements=sum(p.numel for p in trainable),
            trainable_bytes=sum(p.bytes for p in trainable),
            param_tensors=len(trainable),
            saved_bytes=stash[index] if setup.training else 0,
            stash_depth=stash_depth(index, len(m.segments), setup),
            temporary_bytes=int(max((table.temporary[j] for j in idx), default=0)),
            recompute_cycles=int(round(again)) if setup.training else 0,
            code_bytes=sum(table.code[j] for j in idx),
        ))
    return out


def code_bytes(op: OpCost, training: bool) -> float:
    """Always-live bytes over the IPU for one operation's programs: vertex state and exchange
    code per compute set (``CODE_BYTES_PER_OP[kind]``), for its forward and, in training, its
    backward instances (``BACKWARD_CODE_FACTOR``)."""
    per = hw.CODE_BYTES_PER_OP[op_kind(op)]
    return per * (1 + hw.BACKWARD_CODE_FACTOR * gradient_share(op) if training else 1)


def block_estimates(m: Measurement, setup: EngineSetup, table: OpTable | None = None) -> list[dict[str, Any]]:
    """Per block, in order of first use: where it runs and what it costs per micro-batch (the
    figures that say how far to move a block boundary)."""
    out: dict[str, dict[str, Any]] = {}
    for index, seg in enumerate(m.segments):
        for block in seg.blocks:
            out.setdefault(block, {"block": block, "stage": index, "ipu": seg.ipu, "forward_cycles": 0,
                                   "flops": 0.0, "ops": 0, "weight_bytes": 0,
                                   "saved_bytes": m.saved_bytes_by_block.get(block, 0)})
    table = table or op_table(m, setup)
    for op, cycles in zip(m.ops, table.forward, strict=True):
        row = out.get(op.block) if op.block is not None else None
        if row is not None:
            row["forward_cycles"] += cycles
            row["flops"] += op.flops
            row["ops"] += 1
    for p in m.params:
        if p.block in out:
            out[p.block]["weight_bytes"] += p.bytes
    for row in out.values():
        row["forward_cycles"] = int(round(row["forward_cycles"]))
    return list(out.values())


def num_ipus(stages: Sequence[StageEstimate], setup: EngineSetup) -> int:
    """IPUs one replica uses (rounded up to a power of two with autoRoundNumIPUs)."""
    n = max(s.ipu for s in stages) + 1
    if setup.auto_round_num_ipus:
        n = reserved_ipus(n)
    return n


def memory_table(stages: Sequence[StageEstimate], m: Measurement, setup: EngineSetup) -> MemoryTable:
    """Per-IPU memory by category (one replica), on the compute tiles: I/O tiles hold the host
    transfers' buffers, and the model must fit in the rest."""
    import pandas as pd

    spec = setup.compute_spec
    ipus = range(num_ipus(stages, setup))
    slot_bytes = sum(b for _, b in setup.optimizer_slots)
    rows = []
    for ipu in ipus:
        mine = [s for s in stages if s.ipu == ipu]
        weights = sum(s.weight_bytes for s in mine)
        elements = sum(s.trainable_elements for s in mine)
        optimizer = elements * slot_bytes if setup.training else 0
        if setup.optimizer_sharded and setup.system_replicas > 1:
            optimizer = optimizer / setup.system_replicas
        streamed = 0.0  # an offloaded state: its largest tensor's, on chip while that update runs
        if not setup.optimizer_on_chip:
            segs = {s.index for s in mine}
            largest = max((p.numel for p in m.params if p.trainable and p.segment in segs), default=0)
            streamed, optimizer = (largest * slot_bytes if setup.training else 0), 0
        accumulators = 0
        if setup.training and setup.gradient_accumulation > 1 and setup.accumulator_on_chip:
            accumulators = (elements * setup.accumulator_element_bytes if setup.accumulator_element_bytes
                            else sum(s.trainable_bytes for s in mine))
        stash = sum(s.saved_bytes * s.stash_depth for s in mine)
        temporaries = max((s.temporary_bytes for s in mine), default=0)
        boundary = sum(b for i, b in enumerate(m.boundary_bytes)
                       if ipu in (m.segments[i].ipu, m.segments[i + 1].ipu))
        code = (hw.TILE_OVERHEAD_BYTES * spec.tiles_per_ipu + sum(s.code_bytes for s in mine)
                + boundary * (2 if setup.training else 1)
                + (hw.UPDATE_CODE_BYTES_PER_TENSOR * sum(s.param_tensors for s in mine) if setup.training else 0))
        # the update runs after the backward: its streamed state and the op temporaries are not live together
        temporaries = max(temporaries, streamed)
        parts = {"weights": weights, "optimizerState": optimizer, "gradientAccumulators": accumulators,
                 "activationStash": stash, "temporaries": temporaries, "codeAndExchange": code}
        parts = {k: int(round(v)) for k, v in parts.items()}
        always = parts["weights"] + parts["optimizerState"] + parts["gradientAccumulators"] + \
            parts["codeAndExchange"]
        not_always = parts["activationStash"] + parts["temporaries"]
        total = always + not_always
        rows.append({"ipu": ipu, "total_bytes_including_gaps": total, "total_bytes_excluding_gaps": total,
                     "always_live_bytes": always, "not_always_live_bytes": not_always,
                     "overflow_bytes": max(0, total - spec.bytes_per_ipu),
                     **{f"cat_{k}_bytes": v for k, v in parts.items()}})
    return MemoryTable(pd.DataFrame(rows), level="ipu")


def weight_update_cycles(stages: Sequence[StageEstimate], setup: EngineSetup, ipus: Sequence[int]
                         ) -> dict[int, int]:
    """Cycles of the optimizer step on each IPU (training only), on its compute tiles."""
    if not setup.training:
        return {}
    spec = setup.compute_spec
    mem = spec.per_cycle(spec.memory_bytes_per_second) * hw.MEMORY_EFFICIENCY
    slot_bytes = sum(b for _, b in setup.optimizer_slots)
    out = {}
    for ipu in ipus:
        mine = [s for s in stages if s.ipu == ipu]
        elements = sum(s.trainable_elements for s in mine)
        wbytes = sum(s.trainable_bytes for s in mine)
        tensors = sum(s.param_tensors for s in mine)
        if not elements:
            out[ipu] = 0
            continue
        grad_bytes = elements * (setup.accumulator_element_bytes or 4)
        touched = 2 * wbytes + grad_bytes * (2 if setup.gradient_accumulation > 1 else 1) \
            + 2 * elements * slot_bytes
        cycles = touched / mem + hw.WEIGHT_UPDATE_CYCLES_PER_TENSOR * tensors
        if not setup.optimizer_on_chip:
            cycles += 2 * elements * slot_bytes / spec.per_cycle(hw.STREAMING_MEMORY_BYTES_PER_SECOND)
        r = setup.system_replicas
        if r > 1:
            ring = allreduce_bytes_per_cycle(spec)
            cycles += 2 * (r - 1) / r * grad_bytes / ring + hw.INTER_IPU_COPY_CYCLES
            if setup.optimizer_sharded:
                # each replica updates 1/R of the weights (its shard of the state), then all-gathers
                touched_sharded = touched - 2 * elements * slot_bytes * (r - 1) / r
                cycles -= (touched - touched_sharded) / mem
                cycles += (r - 1) / r * wbytes / ring + hw.INTER_IPU_COPY_CYCLES
        out[ipu] = int(round(cycles))
    return out


def allreduce_bytes_per_cycle(spec: hw.IpuSpec) -> float:
    """Bytes per cycle one IPU sends round a replicas' ring collective: ``ALLREDUCE_EFFICIENCY``
    of one IPU-Link (measured on two public figures; see ``hardware.py``)."""
    return spec.per_cycle(spec.ipu_link_bytes_per_second) * hw.ALLREDUCE_EFFICIENCY


def schedule_plan(stages: Sequence[StageEstimate], m: Measurement, setup: EngineSetup, ipus: Sequence[int]):
    from popviz.schedule import SchedulePlan, StageWork

    spec = setup.spec
    link = spec.per_cycle(spec.ipu_link_bytes_per_second)
    copies = []
    for i, nbytes in enumerate(m.boundary_bytes):
        same = m.segments[i].ipu == m.segments[i + 1].ipu
        copies.append(0 if same else int(round(hw.INTER_IPU_COPY_CYCLES + nbytes / link)))
    in_bytes = sum(t.bytes for t in setup.inputs)
    out_bytes = sum(t.bytes for t in setup.outputs)
    synthetic = setup.synthetic_data
    strategy = setup.strategy if setup.strategy in ("PipelinedExecution", "ShardedExecution") else (
        "ShardedExecution" if setup.strategy else None)
    return SchedulePlan(
        stages=[StageWork(s.ipu, s.forward_cycles, s.backward_cycles) for s in stages],
        mode=setup.mode, strategy=strategy,
        gradient_accumulation=setup.gradient_accumulation if setup.training else 1,
        device_iterations=setup.device_iterations, output_mode=setup.effective_output_mode,
        output_return_period=setup.output_return_period, copy_cycles=copies,
        input_transfer=None if synthetic or not setup.inputs else host_transfers.transfer(in_bytes, setup, len(ipus), prepare=True),
        prefetch_depth=setup.prefetch_depth,
        output_transfer=None if synthetic or not setup.outputs else host_transfers.transfer(out_bytes, setup, len(ipus)),
        weight_update_cycles=weight_update_cycles(stages, setup, ipus),
        sync_cycles=hw.SYNC_CYCLES,
        anchor_transfers=[] if synthetic else host_transfers.anchor_transfers(m, setup, ipus),
        **host_transfers.io_overlap(m, setup, strategy, in_bytes, out_bytes),
    )



@dataclass
class Estimate:
    """The cost model's result for one engine."""

    stages: list[StageEstimate]
    memory: MemoryTable
    steps: Any
    """Execution steps frame of one call."""
    call_cycles: int
    target: Target
    config: ModelConfig
    layers: LayerTable | None = None
    recompute_note: str = ""
    """Which recomputation applied and why (a report note; empty for inference)."""
    caveat_note: str = ""
    """Where this estimate is known to be far from the hardware (a report note; usually empty)."""

    def timeline(self) -> dict[str, list[tuple[float, float]]]:
        """(start, end) seconds of each input and output transfer in one call (one replica).
        Computed once per estimate: PopTorch's latency getters ask for it after every call (popviz
        capture samples them), and a pipeline's steps frame has thousands of rows."""
        cached = self.__dict__.get("_timeline")
        if cached is None:
            cached = self.__dict__["_timeline"] = self._timeline()
        return cached

    def _timeline(self) -> dict[str, list[tuple[float, float]]]:
        clock = self.target.clock_hz
        out: dict[str, list[tuple[float, float]]] = {"input": [], "output": []}
        steps = self.steps
        for kind in out:
            begins = steps[steps.program == f"{kind}/begin"]
            ends = steps[steps.program == f"{kind}/end"]
            for (_, b), (_, e) in zip(begins.iterrows(), ends.iterrows(), strict=True):
                out[kind].append((b.start_cycle / clock, (e.start_cycle + e.cycles) / clock))
        return out


def estimate(m: Measurement, setup: EngineSetup) -> Estimate:
    """The estimated stages, memory, execution steps, target and config of one engine."""
    from popviz.schedule import simulate

    table = op_table(m, setup)
    stages = stage_estimates(m, setup, table)
    spec = setup.spec
    share, caveat = known_errors.small_products(m.ops, [op_kind(o) for o in m.ops], table.forward, table.backward)
    n_ipus = num_ipus(stages, setup)
    ipus = sorted({s.ipu for s in stages})
    steps = simulate(schedule_plan(stages, m, setup, ipus))
    call_cycles = int((steps["start_cycle"] + steps["cycles"]).max()) if len(steps) else 0
    r = setup.replication_factor
    target = Target(architecture=spec.architecture, num_ipus=n_ipus * r, tiles_per_ipu=spec.tiles_per_ipu,
                    bytes_per_tile=spec.bytes_per_tile, clock_hz=spec.clock_hz, num_replicas=r,
                    ipus_per_replica=n_ipus)
    config = ModelConfig(
        mode=setup.mode, execution_strategy=setup.strategy,
        stages=tuple(Stage(s.index, s.ipu, tuple(s.blocks)) for s in stages),
        gradient_accumulation=setup.gradient_accumulation if setup.training else 1,
        device_iterations=setup.device_iterations, replication_factor=r,
        output_mode=setup.output_mode,
        output_return_period=setup.output_return_period if setup.output_mode == "EveryN" else None,
        optimizer_state_on_chip=setup.optimizer_on_chip if setup.training else None,
        available_memory_proportion=dict(setup.available_memory_proportion),
        options={**setup.options, "emulator": {**dict(setup.options.get("emulator", {})),
                                               "blocks": block_estimates(m, setup, table),
                                               **({"small_products_share": share} if caveat else {})}},
    )
    memory = memory_table(stages, m, setup)
    layers = None
    if m.structure is not None:
        from popviz.emulator.layers import layer_table

        layers = layer_table(m, setup, stages, table)
    return Estimate(stages=stages, memory=memory, steps=steps, call_cycles=call_cycles, target=target,
                    config=config, layers=layers, recompute_note=table.recompute.note,
                    caveat_note=caveat)


def build_report(est: Estimate, setup: EngineSetup, *, versions: Mapping[str, str] | None = None,
                 captured_at: str | None = None) -> Report:
    """The Report of an estimate (``setup.calls`` gives the calls observed so far)."""
    import pandas as pd

    duration = est.call_cycles / est.target.clock_hz
    runs = pd.DataFrame({"run": [0], "name": ["call"], "duration_seconds": [duration]})
    when = captured_at or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    config, host_note = report_notes.with_host_gaps(est.config, setup.host_gaps_seconds,
                                                          setup.host_gaps_skipped)
    return Report(
        name=setup.name,
        provenance=Provenance(source="emulator", estimated=True, tool=f"popviz {__version__} emulator",
                              versions={"popviz": __version__, **(versions or {})}, captured_at=when,
                              notes=report_notes.notes(setup) + tuple(n for n in (est.recompute_note, est.caveat_note) if n)
                              + tuple(setup.extra_notes) + host_note),
        target=est.target,
        memory=est.memory,
        execution=ExecutionTable(est.steps, runs),
        config=config,
        host_io=HostIO(tensors=tuple(setup.inputs) + tuple(setup.outputs) + tuple(a.tensor for a in setup.anchors),
                       calls=setup.calls),
        layers=est.layers,
        liveness=liveness_estimate.estimate(est.steps, est.stages, est.memory, setup.training,
                                            setup.optimizer_on_chip, est.layers),
    )


def summary(est: Estimate) -> dict[str, Any]:
    """Headline figures (for benchmarks and quick looks)."""
    per_ipu = est.memory.frame.set_index("ipu")["total_bytes_including_gaps"].to_dict()
    return {
        "stages": [(s.ipu, s.forward_cycles, s.backward_cycles) for s in est.stages],
        "call_cycles": est.call_cycles,
        "call_seconds": est.call_cycles / est.target.clock_hz,
        "memory_bytes_per_ipu": {int(k): int(v) for k, v in per_ipu.items()},
        "fits": bool((est.memory.frame["overflow_bytes"] == 0).all()),
        "gflops_per_micro_batch": sum(s.flops for s in est.stages) / 1e9,
    }


__all__ = ["MEMORY_CATEGORIES", "AnchoredTensor", "EngineSetup", "Estimate", "Measurement", "OpCost", "ParamInfo", "Segment",
           "build_report", "estimate", "op_cycles", "stage_estimates", "summary"]
