"""The small parts of a Report: its target, configuration (stages, batching, output mode), host
I/O and provenance. Each checks its values on construction (ModelError)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from popviz.model.names import EXECUTION_STRATEGIES, INFERABLE_FIELDS, MODES, OUTPUT_MODES, SOURCES
from popviz.model.tables import ModelError

if TYPE_CHECKING:
    import pandas as pd

@dataclass(frozen=True)
class Target:
    """The hardware an engine was compiled for (what libpva calls the target)."""

    architecture: str
    """``Mk1``, ``Mk2`` or ``Bow`` (libpva's ``Ipu1``/``Ipu2``/``Ipu21``); other names kept as-is."""
    num_ipus: int
    """IPUs in the target, over all replicas."""
    tiles_per_ipu: int
    bytes_per_tile: int
    clock_hz: float
    num_replicas: int = 1
    ipus_per_replica: int | None = None
    """IPUs one replica spans; memory and execution tables cover these (values are per replica).
    Defaults to ``num_ipus // num_replicas``."""

    def __post_init__(self) -> None:
        for name in ("num_ipus", "tiles_per_ipu", "bytes_per_tile", "num_replicas"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ModelError(f"target.{name} must be a positive integer, got {value!r}")
        if not (isinstance(self.clock_hz, (int, float)) and self.clock_hz > 0):
            raise ModelError(f"target.clock_hz must be positive, got {self.clock_hz!r}")
        object.__setattr__(self, "clock_hz", float(self.clock_hz))
        if self.ipus_per_replica is None:
            object.__setattr__(self, "ipus_per_replica", max(1, self.num_ipus // self.num_replicas))
        if not isinstance(self.ipus_per_replica, int) or self.ipus_per_replica < 1:
            raise ModelError(f"target.ipus_per_replica must be a positive integer, got {self.ipus_per_replica!r}")

    @property
    def bytes_per_ipu(self) -> int:
        return self.tiles_per_ipu * self.bytes_per_tile

    def cycles_to_seconds(self, cycles: float) -> float:
        return float(cycles) / self.clock_hz

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)



@dataclass(frozen=True)
class Stage:
    """One pipeline (or sharding) stage: the blocks it runs (display names,
    :mod:`popviz.block_names`) and the IPU it runs on."""

    index: int
    ipu: int
    blocks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(str(b) for b in self.blocks))

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "ipu": self.ipu, "blocks": list(self.blocks)}


@dataclass(frozen=True)
class ModelConfig:
    """What the executor was configured to do (from capture hooks, the emulator or a profile's
    framework metadata). ``None`` means unknown, not default."""

    mode: str | None = None
    """``training`` or ``inference``."""
    execution_strategy: str | None = None
    """PopTorch's class name: ``PipelinedExecution``, ``ShardedExecution``,
    ``SerialPhasedExecution`` or ``ParallelPhasedExecution``; None when no strategy is set."""
    stages: tuple[Stage, ...] = ()
    gradient_accumulation: int | None = None
    device_iterations: int | None = None
    replication_factor: int | None = None
    output_mode: str | None = None
    """As set: ``All``, ``EveryN``, ``Final``, ``Sum`` or ``Default`` (see effective_output_mode)."""
    output_return_period: int | None = None
    optimizer_state_on_chip: bool | None = None
    available_memory_proportion: Mapping[int, float] = field(default_factory=dict)
    """Per IPU, as given to ``setAvailableMemoryProportion``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Every other recorded option, JSON-compatible."""
    inferred: Mapping[str, str] = field(default_factory=dict)
    """Fields not recorded but inferred from the profile alone (a raw autoReport directory read
    without a capture manifest), each with the one-line assumption behind it, e.g.
    ``{"stages": "stages inferred: one per computing IPU (IPU0-IPU3)"}``. Empty when recorded."""

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise ModelError(f"config.mode must be one of {MODES}, got {self.mode!r}")
        if self.output_mode is not None and self.output_mode not in OUTPUT_MODES:
            raise ModelError(f"config.output_mode must be one of {OUTPUT_MODES}, got {self.output_mode!r}")
        if self.execution_strategy is not None and self.execution_strategy not in EXECUTION_STRATEGIES:
            raise ModelError(f"config.execution_strategy must be one of {EXECUTION_STRATEGIES}, "
                             f"got {self.execution_strategy!r}")
        for name in ("gradient_accumulation", "device_iterations", "replication_factor",
                     "output_return_period"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ModelError(f"config.{name} must be a positive integer or None, got {value!r}")
        stages = tuple(s if isinstance(s, Stage) else Stage(**s) for s in self.stages)
        object.__setattr__(self, "stages", stages)
        object.__setattr__(self, "available_memory_proportion",
                           {int(k): float(v) for k, v in dict(self.available_memory_proportion).items()})
        try:  # canonical JSON values, so a bundle round trip gives back an equal config
            options = json.loads(json.dumps(dict(self.options), allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ModelError(f"config.options must be JSON-compatible: {exc}") from None
        object.__setattr__(self, "options", options)
        unknown = [k for k in self.inferred if k not in INFERABLE_FIELDS]
        if unknown:
            raise ModelError(f"config.inferred names unknown field(s) {', '.join(map(repr, unknown))}")
        object.__setattr__(self, "inferred", {str(k): str(v) for k, v in dict(self.inferred).items()})

    def is_inferred(self, name: str) -> bool:
        """Whether field ``name`` was inferred from the profile rather than recorded."""
        return name in self.inferred

    @property
    def effective_output_mode(self) -> str | None:
        """The output mode PopTorch applies: ``Default`` is Final for training, All for inference."""
        if self.output_mode == "Default":
            if self.mode == "training":
                return "Final"
            if self.mode == "inference":
                return "All"
            return None
        return self.output_mode

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def stage_ipus(self) -> list[int]:
        return sorted({s.ipu for s in self.stages})

    def is_empty(self) -> bool:
        return self == ModelConfig()

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stages"] = [s.to_dict() for s in self.stages]
        d["available_memory_proportion"] = {str(k): v for k, v in self.available_memory_proportion.items()}
        return d


DIRECTIONS = ("input", "output", "anchor")


@dataclass(frozen=True)
class HostTensor:
    """An input or output of the executor, per micro-batch (one of the D·G·R slices along dim 0
    that one call consumes or returns); or an ``anchor``: a tensor returned with
    ``opts.anchorTensor(name, ...)``, one whole copy (how many copies a call returns is its own
    output mode's)."""

    name: str
    direction: str
    """``input``, ``output`` or ``anchor``."""
    shape: tuple[int, ...]
    dtype: str
    bytes: int

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ModelError(f"host tensor {self.name!r}: direction must be 'input', 'output' or 'anchor'")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if not isinstance(self.bytes, int) or self.bytes < 0:
            raise ModelError(f"host tensor {self.name!r}: bytes must be a non-negative integer")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "direction": self.direction, "shape": list(self.shape),
                "dtype": self.dtype, "bytes": self.bytes}


def tensors_text(tensors: Sequence[HostTensor], most: int) -> str:
    """``x 16×1×28×28 float32, y 16 int64``: the first ``most`` tensors, then ``+N more``."""
    text = ", ".join(f"{t.name} {'×'.join(map(str, t.shape)) or 'scalar'} {t.dtype}" for t in tensors[:most])
    return text + (f", +{len(tensors) - most} more" if len(tensors) > most else "")


@dataclass(frozen=True)
class CallStats:
    """Aggregate of one per-call measurement (e.g. ``wall_seconds``) over a run."""

    metric: str
    count: int
    sum: float
    min: float
    max: float
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class HostIO:
    """What crosses between host and IPU: tensor sizes and per-call host timings."""

    tensors: tuple[HostTensor, ...] = ()
    calls: int | None = None
    """Executor calls observed."""
    compile_seconds: float | None = None
    call_stats: tuple[CallStats, ...] = ()
    compile_error: str | None = None
    """The error the compile (the first call or ``compile()``) raised, as the capture hooks saw it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensors", tuple(
            t if isinstance(t, HostTensor) else HostTensor(**t) for t in self.tensors))
        object.__setattr__(self, "call_stats", tuple(
            c if isinstance(c, CallStats) else CallStats(**c) for c in self.call_stats))

    @property
    def inputs(self) -> tuple[HostTensor, ...]:
        return tuple(t for t in self.tensors if t.direction == "input")

    @property
    def outputs(self) -> tuple[HostTensor, ...]:
        return tuple(t for t in self.tensors if t.direction == "output")

    @property
    def anchors(self) -> tuple[HostTensor, ...]:
        """Tensors returned with ``opts.anchorTensor``, one whole copy each."""
        return tuple(t for t in self.tensors if t.direction == "anchor")

    def stat(self, metric: str) -> CallStats | None:
        return next((c for c in self.call_stats if c.metric == metric), None)

    def tensors_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([{**t.to_dict(), "shape": "x".join(map(str, t.shape)) or "scalar"}
                             for t in self.tensors],
                            columns=["name", "direction", "shape", "dtype", "bytes"])

    def to_dict(self) -> dict[str, Any]:
        return {"tensors": [t.to_dict() for t in self.tensors], "calls": self.calls,
                "compile_seconds": self.compile_seconds,
                "call_stats": [c.to_dict() for c in self.call_stats], "compile_error": self.compile_error}


@dataclass(frozen=True)
class Provenance:
    """Where the figures come from and how far to trust them."""

    source: str
    """One of :data:`SOURCES`."""
    estimated: bool = False
    """True when the figures are an estimate (the emulator's cost model), not a measurement."""
    tool: str = ""
    """What produced the figures, e.g. ``Poplar SDK 3.3.0`` or ``popviz 0.1.0 emulator``."""
    versions: Mapping[str, str] = field(default_factory=dict)
    """Versions of the software involved (``popviz``, ``poptorch``, ``poplar``, ``torch``)."""
    captured_at: str | None = None
    """ISO 8601 time the figures were produced, where known."""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ModelError(f"provenance.source must be one of {SOURCES}, got {self.source!r}")
        object.__setattr__(self, "versions", {str(k): str(v) for k, v in dict(self.versions).items()})
        object.__setattr__(self, "notes", tuple(str(n) for n in self.notes))

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["notes"] = list(self.notes)
        return d

