"""The per-layer table of a Report (placement and costs of each layer, for ``popviz plan``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from popviz.model.tables import ModelError

if TYPE_CHECKING:
    import pandas as pd

LAYER_ROLES = ("layer", "embeddings", "head", "loss", "other")
"""What a layer is to the planner: ``layer`` is one of the repeated units it may move between
IPUs; the others are the parts that stay with their neighbours (embeddings, output heads, the
loss) or anything else the model has between them."""
LAYER_PINS = ("first", "last")
LAYER_SOURCES = ("emulator", "debug_context", "calibrated")
"""How the per-layer figures were obtained: the emulator's cost model on the measured forward
pass, PopTorch's debug contexts in a real profile, or a real profile's per-stage figures
distributed over its layers in the proportions of an emulator estimate."""
FLOPS_NOTE = "FLOPs: "
"""Start of a layer table's notes about its ``fwd_flops``/``bwd_flops`` (how they were counted, or
why there are none: :mod:`popviz.sources.layer_flops`)."""
_LAYER_INTS = ("fwd_cycles", "bwd_cycles", "weight_bytes", "optimizer_bytes", "accumulator_bytes",
               "activation_bytes", "temporary_bytes", "recompute_bytes", "recompute_cycles", "code_bytes")


@dataclass(frozen=True)
class Layer:
    """One layer of the model in execution order, with its placement and costs.

    Cycles are per micro-batch on one IPU; bytes are per IPU (one replica).
    """

    name: str
    """Module path, e.g. ``encoder.layer.3`` (``""`` is not allowed)."""
    role: str = "layer"
    """One of :data:`LAYER_ROLES`."""
    block: str | None = None
    """The PopTorch block it runs in, where known, by its display name (the ``user_id``, else the
    module paths the block ran, e.g. ``layers.0-2``: :mod:`popviz.block_names`)."""
    stage: int | None = None
    ipu: int | None = None
    fwd_cycles: int = 0
    bwd_cycles: int = 0
    """0 in inference."""
    weight_bytes: int = 0
    optimizer_bytes: int = 0
    """Optimizer state (e.g. Adam's two moments) kept with the weights unless offloaded."""
    accumulator_bytes: int = 0
    """Gradient accumulators (gradient accumulation > 1, in training), unless offloaded."""
    activation_bytes: int = 0
    """Bytes stashed per micro-batch in flight for the backward pass."""
    temporary_bytes: int = 0
    """Peak temporary bytes while the layer runs."""
    pin: str | None = None
    """``first`` or ``last`` when the layer must stay on the first or last IPU (embeddings whose
    weights a tied output projection shares, the loss); None when it may move."""
    tied_to: str | None = None
    """Name of another layer sharing this layer's weights (a tied projection), where known."""
    recompute_bytes: int = 0
    """Activations this layer's forward saves for the backward that the backward makes again
    (recomputation), per micro-batch; 0 when nothing is recomputed. They are live, with the rest of
    their recomputation interval's, while that interval's backward runs (in ``temporary_bytes``)."""
    recompute_group: int | None = None
    """Its recomputation interval, stage aside: layers of one stage with the same group are
    recomputed together (the recomputationCheckpoints before it); None when not recomputed."""
    recompute_cycles: int = 0
    """Of ``bwd_cycles``, the forward run again before the backward (recomputation); 0 when
    nothing of it is recomputed."""
    checkpoint: bool = False
    """A ``recomputationCheckpoint`` output is made in this layer."""
    code_bytes: int = 0
    """Code its operations' compute sets (forward and backward) and its tensors' updates take on
    its IPU, where known (0 otherwise: the planner then counts code per IPU only)."""
    fwd_flops: int | None = None
    """FLOPs of its forward products and convolutions per micro-batch, where known (the emulator
    counts them from the shapes it measured); None otherwise (bundles written before it)."""
    bwd_flops: int | None = None
    """FLOPs of its backward products per micro-batch as the cost model counts them (two products
    per forward one, for the gradients autodiff grows; the recomputed forward not counted); None
    where unknown, 0 in inference."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ModelError(f"layer name must be a non-empty string, got {self.name!r}")
        if self.role not in LAYER_ROLES:
            raise ModelError(f"layer {self.name!r}: role must be one of {LAYER_ROLES}, got {self.role!r}")
        if self.pin is not None and self.pin not in LAYER_PINS:
            raise ModelError(f"layer {self.name!r}: pin must be one of {LAYER_PINS} or null, "
                             f"got {self.pin!r}")
        for name in ("stage", "ipu", "recompute_group"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ModelError(f"layer {self.name!r}: {name} must be a non-negative integer or null, "
                                 f"got {value!r}")
        for name in _LAYER_INTS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ModelError(f"layer {self.name!r}: {name} must be a non-negative integer, "
                                 f"got {value!r}")
        for name in ("fwd_flops", "bwd_flops"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ModelError(f"layer {self.name!r}: {name} must be a non-negative integer or null, "
                                 f"got {value!r}")
        if not isinstance(self.checkpoint, bool):
            raise ModelError(f"layer {self.name!r}: checkpoint must be true or false, got {self.checkpoint!r}")
        if self.recompute_cycles > self.bwd_cycles:
            raise ModelError(f"layer {self.name!r}: recompute_cycles ({self.recompute_cycles}) is part of "
                             f"bwd_cycles ({self.bwd_cycles}), so cannot exceed it")
        if self.block is not None:
            object.__setattr__(self, "block", str(self.block))
        if self.tied_to is not None:
            object.__setattr__(self, "tied_to", str(self.tied_to))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class LayerTable:
    """The model's layers in execution order (forward), with how the figures were obtained."""

    layers: tuple[Layer, ...]
    source: str = "emulator"
    """One of :data:`LAYER_SOURCES`."""
    depth: int | None = None
    """Module depth the layers were taken at (0 = the model itself), where chosen by depth."""
    micro_batch_size: int | None = None
    """Samples per micro-batch the per-micro-batch figures are for, where known."""
    notes: tuple[str, ...] = ()
    recomputation: str | None = None
    """PopART's recomputation type that applied (``Pipeline``, ``RecomputeAll``, ...), where known.
    Under ``Pipeline`` which layers are recomputed depends on the split: every forward stage but
    the last, and the last only up to its last checkpoint (``popviz plan`` re-derives it)."""

    def __post_init__(self) -> None:
        layers = tuple(x if isinstance(x, Layer) else Layer(**x) for x in self.layers)
        if not layers:
            raise ModelError("a layer table needs at least one layer (use None for unknown)")
        names = [x.name for x in layers]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ModelError(f"layer {dup!r} appears more than once")
        if self.source not in LAYER_SOURCES:
            raise ModelError(f"layers.source must be one of {LAYER_SOURCES}, got {self.source!r}")
        for name in ("depth", "micro_batch_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ModelError(f"layers.{name} must be a non-negative integer or null, got {value!r}")
        if self.recomputation is not None and not isinstance(self.recomputation, str):
            raise ModelError(f"layers.recomputation must be a string or null, got {self.recomputation!r}")
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "notes", tuple(str(n) for n in self.notes))

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def frame(self) -> pd.DataFrame:
        """One row per layer, in execution order."""
        import pandas as pd

        return pd.DataFrame([x.to_dict() for x in self.layers])

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "depth": self.depth, "micro_batch_size": self.micro_batch_size,
                "notes": list(self.notes), "recomputation": self.recomputation,
                "layers": [x.to_dict() for x in self.layers]}

