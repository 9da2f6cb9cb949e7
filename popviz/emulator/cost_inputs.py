"""What the cost model takes: a :class:`Measurement` of one micro-batch (operations per segment,
parameters, saved activations; made by :mod:`popviz.emulator.measure`) and the executor's
:class:`EngineSetup` (batching, output mode, optimizer, tensor locations, hardware). Plain data,
below the cost model (:mod:`popviz.emulator.costmodel`), the measurement, recomputation and the
layer table, which all read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from popviz.emulator import hardware as hw
from popviz.model import HostTensor

# ------------------------------------------------------------------------------ measurements


@dataclass(frozen=True)
class OpCost:
    """One ATen operation of the measured forward pass."""

    segment: int
    name: str
    flops: float
    element_bytes: int
    in_bytes: int
    out_bytes: int
    matmul: bool = False
    block: str | None = None
    """The block the operation ran in (None before the first block)."""
    weight_bytes: int = 0
    """The part of ``in_bytes`` that are parameters (already laid out on the tiles: no exchange,
    no temporary copy)."""
    module: str | None = None
    """The layer-level module (:mod:`popviz.emulator.layers`) running it, None outside every one."""
    activation_grad: bool = True
    """Some non-parameter input needs a gradient (False for an operation on the model's inputs
    alone: autodiff grows no gradient towards them)."""
    weight_grad: bool = True
    """Some parameter it reads is trainable (False when it reads none, or only frozen ones)."""
    dims: tuple[int, ...] = ()
    """A product's or convolution's shape as PopLibs plans it (:func:`product_dims`): ``(groups,
    positions, in channels per group, out channels per group, kernel elements)``; empty for every
    other operation (and for measurements made before it was recorded)."""

    @property
    def has_backward(self) -> bool:
        """Autodiff grows a gradient op for it: it reads an activation that needs a gradient or a
        trainable parameter."""
        return bool(self.activation_grad or (self.weight_bytes and self.weight_grad))

    @property
    def activation_bytes(self) -> int:
        """Bytes of non-parameter inputs and of outputs."""
        return self.in_bytes - self.weight_bytes + self.out_bytes

    def replace(self, **changes: Any) -> OpCost:
        return dataclasses.replace(self, **changes)


@dataclass
class Segment:
    """Consecutive blocks on one IPU: one forward stage."""

    ipu: int
    blocks: list[str]


@dataclass(frozen=True)
class ParamInfo:
    """A parameter (or buffer, ``trainable=False`` and named ``buffer:...``) and its segment."""

    name: str
    segment: int
    bytes: int
    numel: int
    element_bytes: int
    trainable: bool = True
    block: str | None = None


@dataclass
class Measurement:
    segments: list[Segment]
    ops: list[OpCost]
    params: list[ParamInfo]
    saved_bytes: list[int]
    """Bytes autograd keeps for the backward pass, per segment, per micro-batch."""
    boundary_bytes: list[int]
    """Bytes crossing each boundary between consecutive segments, per micro-batch."""
    grad_boundary_bytes: list[int] | None = None
    """The part of ``boundary_bytes`` an operation with a backward reads (what a recomputing stage
    stashes of its inputs; a no-grad teacher's activations are copied, never stashed); None: all
    of it (measurements made before it was recorded)."""
    saved_bytes_by_block: dict[str, int] = field(default_factory=dict)
    param_ops: dict[str, int] = field(default_factory=dict)
    """Parameter name -> index in ``ops`` of the first operation reading it."""
    saved_slots: list[tuple[int, int, int]] = field(default_factory=list)
    """Each saved-for-backward tensor counted in ``saved_bytes``: (segment, index in ``ops`` of the
    operation saving it, bytes)."""
    structure: Any = None
    """The model's layer structure (:class:`popviz.emulator.structure.Structure`) when it was
    tracked; the report's per-layer table is built from it."""
    checkpoints: list[Any] = field(default_factory=list)
    """``recomputationCheckpoint`` calls (:class:`popviz.emulator.recompute.Checkpoint`)."""
    saved_keys: list[int] = field(default_factory=list)
    """Per entry of ``saved_slots``: the saved tensor's storage key."""
    saved_producers: list[int | None] = field(default_factory=list)
    """Per entry of ``saved_slots``: index in ``ops`` of the operation that made the tensor (None:
    an input, a parameter or a tensor made outside the measurement)."""
    overlap: dict[str, str] = field(default_factory=dict)
    """``"input"`` / ``"output"`` -> the ``OverlapMode`` value (``"overlap_accumulation_loop"``,
    ``"overlap_device_iteration_loop"``) the forward gave its inputs or outputs with
    ``poptorch.set_overlap_for_input`` / ``set_overlap_for_output`` (the least overlapping when
    several); absent: not overlapped."""
    op_sources: list[tuple[int, ...]] = field(default_factory=list)
    """Per operation: indices in ``ops`` of the operations that made its non-parameter inputs
    (which recomputed operations depend on each other, :func:`popviz.emulator.recompute.plan`);
    empty when not recorded."""


# ------------------------------------------------------------------------------ engine setup


@dataclass(frozen=True)
class AnchoredTensor:
    """A tensor returned with ``opts.anchorTensor(short, long, output_mode, period)`` that the
    emulator can size: a parameter, or its gradient (``Gradient___<name>``)."""

    tensor: HostTensor
    """Named by its short name, direction ``anchor``: one whole copy."""
    parameter: str
    output_mode: str
    """Its own effective mode (the engine's when it was anchored without one): All, EveryN, Final
    or Sum."""
    return_period: int = 1


@dataclass
class EngineSetup:
    """What the executor was configured to do, in the cost model's terms."""

    name: str
    mode: str
    strategy: str | None
    """Execution strategy's class name, or None (single IPU, no strategy chosen)."""
    device_iterations: int = 1
    gradient_accumulation: int = 1
    replication_factor: int = 1
    output_mode: str = "Default"
    """As set by the user (``Default`` kept)."""
    output_return_period: int = 1
    optimizer_slots: Sequence[tuple[str, int]] = ()
    """Optimizer state tensors per parameter: (name, bytes per element)."""
    accumulator_element_bytes: int | None = None
    """Bytes per element of the gradient accumulators (None: the parameter's own)."""
    optimizer_on_chip: bool = True
    accumulator_on_chip: bool = True
    optimizer_sharded: bool = False
    """Optimizer state with replicated tensor sharding: each replica holds 1/R of it and the
    updated weights are all-gathered after each step."""
    half_partials: bool = False
    """``Precision.setPartialsType(torch.half)``: float16 matmuls accumulate in float16."""
    available_memory_proportion: Mapping[int, float] = field(default_factory=dict)
    synthetic_data: bool = False
    auto_round_num_ipus: bool = False
    inputs: Sequence[HostTensor] = ()
    outputs: Sequence[HostTensor] = ()
    anchors: Sequence[AnchoredTensor] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    spec: hw.IpuSpec = field(default_factory=hw.spec)
    host: hw.HostLink = field(default_factory=hw.host_link)
    prefetch_depth: int = 1
    """Inputs the host may prepare ahead of the IPU (PopART's ``defaultPrefetchBufferingDepth``,
    1 by default; 0 with ``enablePrefetchDatastreams`` off: the host starts when the IPU asks)."""
    callback_threads: int = 1
    """Host threads serving the stream callbacks (1 unless Poplar's runtime option
    ``streamCallbacks.multiThreadMode`` is set; at most one per local replica)."""
    processes: int = 1
    """Host processes of the run (PopRun instances, ``Distributed.numProcesses``), each with this
    engine's replicas: their replicas share the IPU-Machines' host links."""
    calls: int | None = None
    host_gaps_seconds: Sequence[tuple[float, float]] = ()
    """Measured between one call's return and the script's next call, one per pair of consecutive
    calls: (wall seconds, CPU seconds of the thread that calls the executor)."""
    host_gaps_skipped: int = 0
    """Gaps left out of ``host_gaps_seconds`` because another executor compiled or ran in them
    (Lightning's validation between training calls, a whole epoch after its sanity check)."""
    extra_notes: Sequence[str] = ()
    """More provenance notes (e.g. the ``--split`` applied)."""

    @property
    def training(self) -> bool:
        return self.mode == "training"

    @property
    def io_tiles(self) -> int:
        """Tiles per IPU reserved for I/O (``opts.TensorLocations.numIOTiles``; 0 when not set)."""
        raw = self.options.get("TensorLocations.numIOTiles", 0)
        try:
            return max(0, int(raw or 0))
        except (TypeError, ValueError):
            return 0

    @property
    def compute_spec(self) -> hw.IpuSpec:
        """The IPU less its I/O tiles (:func:`popviz.emulator.hardware.compute_spec`): what
        computes, and the memory that holds the model."""
        return hw.compute_spec(self.spec, self.io_tiles)

    @property
    def system_replicas(self) -> int:
        """Replicas of the whole run, every process's (PopRun instances): the gradient all-reduce,
        replicated tensor sharding and the host links span them all."""
        return self.replication_factor * max(1, self.processes)

    @property
    def effective_output_mode(self) -> str:
        if self.output_mode == "Default":
            return "Final" if self.training else "All"
        return self.output_mode
