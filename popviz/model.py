"""The one data model every source produces and every analysis, plot and renderer consumes.

A :class:`Report` is one compiled engine (PopTorch writes one per executor: ``training``,
``inference`` or the ``modelName``). Every part of it may be missing: an out-of-memory compile
has memory but no execution; an emulated report has per-IPU memory but no per-tile figures.
Absence is always explicit (``None``), never an empty table pretending to be data.

Units are in the names: ``*_bytes``, ``cycles``, ``*_seconds``, ``*_hz``, ``*_frac`` (0-1),
``*_pct`` (0-100).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is a core dependency, but importing it costs ~0.3 s: keep it lazy.
    import pandas as pd

PARTS = ("target", "memory", "execution", "config", "host_io")
"""The parts of a Report, in the order summaries list them."""

SOURCES = ("pva", "emulator", "bundle", "capture")
"""Where a report's figures come from: a real Poplar profile read through libpva (also when
exported to a bundle), popviz's emulator cost model, a bundle written directly by a program
(``popviz.testing`` builders, a user's own converter), or only the capture hooks'
``popviz-model.json`` (configuration and host I/O, no profile)."""

OUTPUT_MODES = ("All", "EveryN", "Final", "Sum", "Default")
EXECUTION_STRATEGIES = (
    "PipelinedExecution",
    "ShardedExecution",
    "SerialPhasedExecution",
    "ParallelPhasedExecution",
)
MODES = ("training", "inference")
INFERABLE_FIELDS = ("mode", "execution_strategy", "stages", "gradient_accumulation",
                    "device_iterations", "replication_factor")
"""ModelConfig fields popviz can infer from a profile alone (``popviz.sources.infer``)."""

PROGRAM_TYPES = (
    "OnTileExecute",
    "DoExchange",
    "GlobalExchange",
    "StreamCopyBegin",
    "StreamCopyMid",
    "StreamCopyEnd",
    "Sync",
)
"""Program types popviz gives meaning to. Other types (as libpva names them) are kept as-is."""

STREAM_COPY_TYPES = ("StreamCopyBegin", "StreamCopyMid", "StreamCopyEnd")
COMPUTE_TYPES = ("OnTileExecute",)
EXCHANGE_TYPES = ("DoExchange", "GlobalExchange")

# Column name -> dtype. Tables are coerced to these on construction, so every source and the
# bundle round trip give identical dtypes.
MEMORY_COLUMNS: dict[str, str] = {
    "ipu": "int32",
    "tile": "int32",
    "total_bytes_including_gaps": "int64",
    "total_bytes_excluding_gaps": "int64",
    "always_live_bytes": "int64",
    "not_always_live_bytes": "int64",
    "overflow_bytes": "int64",
}
CATEGORY_PREFIX = "cat_"
CATEGORY_SUFFIX = "_bytes"

EXECUTION_COLUMNS: dict[str, str] = {
    "run": "int32",
    "step": "int32",
    "program": "category",
    "program_type": "category",
    "ipu": "int32",
    "cycles": "int64",
    "start_cycle": "Int64",
}
RUN_COLUMNS: dict[str, str] = {"run": "int32", "name": "str", "duration_seconds": "float64"}


class ModelError(ValueError):
    """A Report part was built with values that break the model's rules (a programming error
    in a source or builder; sources turn it into a CorruptReportError naming the file)."""


def _coerce(df: pd.DataFrame, columns: Mapping[str, str], what: str, optional: Sequence[str] = (),
            extra_dtype: str | None = None, extra_prefix: str | None = None) -> pd.DataFrame:
    """Return ``df`` with exactly the declared columns (in order) and dtypes.

    ``optional`` columns may be absent (they are then filled with nulls); columns starting with
    ``extra_prefix`` are kept with ``extra_dtype``; any other column is an error.
    """
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise ModelError(f"{what} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns and c not in optional]
    if missing:
        raise ModelError(f"{what} lacks column(s) {', '.join(missing)}")
    extra = [c for c in df.columns if c not in columns]
    unknown = [c for c in extra if not (extra_prefix and str(c).startswith(extra_prefix))]
    if unknown:
        raise ModelError(f"{what} has unknown column(s) {', '.join(map(str, unknown))}")
    out = {}
    n = len(df)
    for name, dtype in columns.items():
        if name in df.columns:
            col = df[name]
        elif dtype == "Int64":  # all missing, built without n Python objects
            import numpy as np

            col = pd.Series(pd.arrays.IntegerArray(np.zeros(n, dtype="int64"), np.ones(n, dtype=bool)),
                            copy=False)
        else:
            col = pd.Series([None] * n, dtype="object")
        try:
            if dtype == "category":
                col = col.astype("str").astype("category") if col.dtype != "category" else col
                if col.cat.categories.dtype != "str":
                    col = col.cat.rename_categories([str(c) for c in col.cat.categories])
            elif col.dtype == dtype:
                pass  # already right (and an int64/int32 numpy column holds no missing values)
            elif dtype.startswith("int") and col.isna().any():
                raise ModelError(f"{what} column {name} has missing values")
            else:
                if dtype.lower().startswith("int"):
                    _check_integral(col, dtype, what, name)
                col = col.astype(dtype)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ModelError):
                raise
            raise ModelError(f"{what} column {name} cannot be read as {dtype}: {exc}") from None
        out[name] = col.reset_index(drop=True)
    for name in sorted(c for c in extra):
        col = df[name]
        if col.isna().any():
            raise ModelError(f"{what} column {name} has missing values")
        try:
            out[name] = col.astype(extra_dtype).reset_index(drop=True)
        except (TypeError, ValueError) as exc:
            raise ModelError(f"{what} column {name} cannot be read as {extra_dtype}: {exc}") from None
    # copy=False: no consolidation into 2-D blocks, which would copy every column (copy-on-write
    # keeps the caller's frame and this one independent).
    return pd.DataFrame(out, copy=False)


def _check_integral(col: pd.Series, dtype: str, what: str, name: str) -> None:
    """Refuse values an integer cast would silently change: fractions, booleans, out of range."""
    import numpy as np

    kind = col.dtype.kind
    if kind == "b":
        raise ModelError(f"{what} column {name} holds booleans, not integers")
    if kind not in "fu":
        return
    info = np.iinfo(dtype.lower())
    values = col.dropna().to_numpy()
    if kind == "f":
        bad = ~np.isfinite(values) | (values != np.floor(values))
        bad |= (values < info.min) | (values >= float(info.max))
    else:
        bad = values > info.max
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ModelError(f"{what} column {name} row {row}: {values[row]!r} is not a whole number "
                         f"that fits {dtype.lower()}")


def _distinct(values):
    """The distinct values of a 1-D integer array: in one linear pass when sorted (execution
    steps come in run order), else by hashing."""
    import numpy as np
    import pandas as pd

    if len(values) > 1 and bool((values[1:] >= values[:-1]).all()):
        return values[np.concatenate(([True], values[1:] != values[:-1]))]
    return pd.unique(values)


def _frames_equal(a: pd.DataFrame | None, b: pd.DataFrame | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return list(a.columns) == list(b.columns) and a.dtypes.equals(b.dtypes) and a.equals(b)


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


class MemoryTable:
    """Memory use, either per tile (``level == "tile"``) or, where only per-IPU figures exist
    (e.g. the emulator), per IPU (``level == "ipu"``; no ``tile`` column).

    Columns: ``ipu``, ``tile`` (tile level only), ``total_bytes_including_gaps``,
    ``total_bytes_excluding_gaps``, ``always_live_bytes``, ``not_always_live_bytes``,
    ``overflow_bytes`` (bytes beyond the tile's capacity; non-zero means out of memory), and one
    ``cat_<category>_bytes`` column per memory category where known (libpva's names, e.g.
    ``cat_vertexCode_bytes``).
    """

    LEVELS = ("tile", "ipu")

    def __init__(self, frame: pd.DataFrame, level: str = "tile") -> None:
        if level not in self.LEVELS:
            raise ModelError(f"memory level must be 'tile' or 'ipu', got {level!r}")
        columns = dict(MEMORY_COLUMNS)
        if level == "ipu":
            del columns["tile"]
        self.level = level
        self.frame = _coerce(frame, columns, f"{level} memory table",
                             extra_dtype="int64", extra_prefix=CATEGORY_PREFIX)
        bad = [c for c in self.frame.columns
               if c.startswith(CATEGORY_PREFIX) and not c.endswith(CATEGORY_SUFFIX)]
        if bad:
            raise ModelError(f"memory category column(s) {', '.join(bad)} must end in _bytes")

    @property
    def categories(self) -> list[str]:
        """Memory category names present (without prefix/suffix), e.g. ``["constant", ...]``."""
        return [c[len(CATEGORY_PREFIX):-len(CATEGORY_SUFFIX)] for c in self.frame.columns
                if c.startswith(CATEGORY_PREFIX)]

    @property
    def ipus(self) -> list[int]:
        return sorted(int(i) for i in self.frame["ipu"].unique())

    def per_ipu(self) -> pd.DataFrame:
        """Sums per IPU (a copy of the table itself at IPU level)."""
        if self.level == "ipu":
            return self.frame.copy()
        return (self.frame.drop(columns="tile").groupby("ipu", sort=True).sum()
                .reset_index().astype({"ipu": "int32"}))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, MemoryTable) and self.level == other.level
                and _frames_equal(self.frame, other.frame))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MemoryTable(level={self.level!r}, rows={len(self.frame)}, ipus={self.ipus})"


class ExecutionTable:
    """Execution steps: one row per program step per IPU.

    ``steps`` columns: ``run`` (index into ``runs``), ``step`` (index of the step within its
    run), ``program`` (name), ``program_type`` (``OnTileExecute``, ``DoExchange``,
    ``GlobalExchange``, ``StreamCopyBegin``/``Mid``/``End``, ``Sync``, ...), ``ipu``, ``cycles``
    and ``start_cycle`` (cycle at which the step started on that IPU, null where unknown).
    ``runs`` columns: ``run``, ``name``, ``duration_seconds`` (NaN where unknown).
    """

    def __init__(self, steps: pd.DataFrame, runs: pd.DataFrame | None = None) -> None:
        import pandas as pd

        self.steps = _coerce(steps, EXECUTION_COLUMNS, "execution steps table",
                             optional=("start_cycle",))
        present = _distinct(self.steps["run"].to_numpy())
        if runs is None:
            ids = sorted(int(r) for r in present)
            runs = pd.DataFrame({"run": ids, "name": [f"run{r}" for r in ids],
                                 "duration_seconds": [float("nan")] * len(ids)})
        self.runs = _coerce(runs, RUN_COLUMNS, "execution runs table",
                            optional=("duration_seconds",))
        unknown = set(present.tolist()) - set(self.runs["run"].tolist())
        if unknown:
            raise ModelError(f"execution steps refer to run(s) {sorted(unknown)} missing from runs")

    @property
    def ipus(self) -> list[int]:
        return sorted(int(i) for i in self.steps["ipu"].unique())

    def cycles_by_type(self) -> pd.DataFrame:
        """Total cycles per IPU and program type (IPUs as rows, types as columns)."""
        return (self.steps.groupby(["ipu", "program_type"], observed=True)["cycles"].sum()
                .unstack(fill_value=0))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ExecutionTable) and _frames_equal(self.steps, other.steps)
                and _frames_equal(self.runs, other.runs))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ExecutionTable(steps={len(self.steps)}, runs={len(self.runs)}, ipus={self.ipus})"


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


@dataclass(frozen=True)
class HostTensor:
    """An input or output of the executor, per micro-batch (one of the D·G·R slices along dim 0
    that one call consumes or returns)."""

    name: str
    direction: str
    """``input`` or ``output``."""
    shape: tuple[int, ...]
    dtype: str
    bytes: int

    def __post_init__(self) -> None:
        if self.direction not in ("input", "output"):
            raise ModelError(f"host tensor {self.name!r}: direction must be 'input' or 'output'")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if not isinstance(self.bytes, int) or self.bytes < 0:
            raise ModelError(f"host tensor {self.name!r}: bytes must be a non-negative integer")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "direction": self.direction, "shape": list(self.shape),
                "dtype": self.dtype, "bytes": self.bytes}


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
                "call_stats": [c.to_dict() for c in self.call_stats]}


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


LAYER_ROLES = ("layer", "embeddings", "head", "loss", "other")
"""What a layer is to the planner: ``layer`` is one of the repeated units it may move between
IPUs; the others are the parts that stay with their neighbours (embeddings, output heads, the
loss) or anything else the model has between them."""
LAYER_PINS = ("first", "last")
LAYER_SOURCES = ("emulator", "debug_context", "calibrated")
"""How the per-layer figures were obtained: the emulator's cost model on the measured forward
pass, PopTorch's debug contexts in a real profile, or a real profile's per-stage figures
distributed over its layers in the proportions of an emulator estimate."""
_LAYER_INTS = ("fwd_cycles", "bwd_cycles", "weight_bytes", "optimizer_bytes", "accumulator_bytes",
               "activation_bytes", "temporary_bytes", "recompute_bytes")


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
                "notes": list(self.notes), "layers": [x.to_dict() for x in self.layers]}


@dataclass(eq=False)
class Report:
    """One compiled engine. Any part but ``name`` and ``provenance`` may be ``None``."""

    name: str
    provenance: Provenance
    target: Target | None = None
    memory: MemoryTable | None = None
    execution: ExecutionTable | None = None
    config: ModelConfig | None = None
    host_io: HostIO | None = None
    path: str | None = None
    """Directory the report was read from (None when built in memory)."""
    instance: str | None = None
    """Instance (process) of a multi-instance run, e.g. ``instance-1``; None for a single one."""
    layers: LayerTable | None = None
    """Per-layer placement and costs (for ``popviz plan``), where known."""

    def has(self, part: str) -> bool:
        if part not in PARTS:
            raise ModelError(f"unknown report part {part!r}; parts are {', '.join(PARTS)}")
        value = getattr(self, part)
        if isinstance(value, ModelConfig):
            return not value.is_empty()
        if isinstance(value, HostIO):
            return value != HostIO()
        return value is not None

    @property
    def present(self) -> list[str]:
        return [p for p in PARTS if self.has(p)]

    @property
    def missing(self) -> list[str]:
        return [p for p in PARTS if not self.has(p)]

    @property
    def label(self) -> str:
        """``name``, or ``instance/name`` in a multi-instance run."""
        return f"{self.instance}/{self.name}" if self.instance else self.name

    @property
    def cfg(self) -> ModelConfig:
        """``config``, or an all-unknown ModelConfig when absent (saves None checks)."""
        return self.config if self.config is not None else ModelConfig()

    def replace(self, **changes: Any) -> Report:
        return dataclasses.replace(self, **changes)

    def __eq__(self, other: object) -> bool:
        """Equal content; where it was read from (``path``, ``instance``) does not count."""
        if not isinstance(other, Report):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(self)
                   if f.name not in ("path", "instance"))

    __hash__ = None  # type: ignore[assignment]

    def _repr_html_(self) -> str:
        from popviz.render.html import notebook

        return notebook(self)

    # What each figure of popviz.plot draws, as a DataFrame (popviz/frames.py documents the columns).
    def steps(self, run: int | None = None) -> pd.DataFrame:
        """One executor call's steps in time order per IPU, with start/end cycles and category."""
        from popviz import frames
        return frames.steps(self, run)

    def stage_cycles(self) -> pd.DataFrame:
        """Cycles per micro-batch of each pipeline stage, its idle % and the bottleneck."""
        from popviz import frames
        return frames.stage_cycles(self)

    def ipu_cycles(self) -> pd.DataFrame:
        """Cycles per micro-batch of each IPU running pipeline stages (the balance measured per
        IPU when stages share one), its stages, idle % and the bottleneck."""
        from popviz import frames
        return frames.ipu_cycles(self)

    def memory_by_ipu(self) -> pd.DataFrame:
        """Bytes per IPU: used, capacity, used %, gaps and one column per memory category."""
        from popviz import frames
        return frames.memory_by_ipu(self)

    def tile_memory(self) -> pd.DataFrame:
        """Bytes and used % of every tile."""
        from popviz import frames
        return frames.tile_memory(self)

    def time_shares(self) -> pd.DataFrame:
        """Per IPU, % of the calls' cycles in compute, exchange, sync/idle, host copy and other."""
        from popviz import frames
        return frames.time_shares(self)

    def output_modes(self) -> pd.DataFrame:
        """Outputs and output bytes per call under each output mode, the current one marked."""
        from popviz import frames
        return frames.output_modes(self)

    def __repr__(self) -> str:
        return (f"Report(name={self.label!r}, source={self.provenance.source!r}, "
                f"estimated={self.provenance.estimated}, present={self.present})")


class ReportSet(Sequence[Report]):
    """Every engine found under a report directory (or the one in a bundle)."""

    def __init__(self, reports: Sequence[Report], root: str | None = None,
                 warnings: Sequence[str] = ()) -> None:
        self._reports = list(reports)
        self.root = root
        self.warnings = list(warnings)
        """Problems with the input that leave the reports usable (e.g. an interrupted capture)."""

    def __len__(self) -> int:
        return len(self._reports)

    def __iter__(self) -> Iterator[Report]:
        return iter(self._reports)

    def __getitem__(self, key):  # type: ignore[override]
        """By position, or by name (``"training"``) or label (``"instance-0/training"``)."""
        if isinstance(key, str):
            matches = [r for r in self._reports if r.label == key] or \
                      [r for r in self._reports if r.name == key]
            if not matches:
                raise KeyError(f"no engine named {key!r}; engines: {', '.join(self.labels) or 'none'}")
            if len(matches) > 1:
                raise KeyError(f"{len(matches)} engines are named {key!r} (one per instance); "
                               f"use one of: {', '.join(r.label for r in matches)}")
            return matches[0]
        return self._reports[key]

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(r.name for r in self._reports))

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self._reports]

    @property
    def instances(self) -> list[str]:
        return list(dict.fromkeys(r.instance for r in self._reports if r.instance))

    def summary(self) -> pd.DataFrame:
        """One row per engine: where it came from and which parts are present."""
        import pandas as pd

        rows = []
        for r in self._reports:
            t = r.target
            rows.append({
                "engine": r.label, "source": r.provenance.source, "estimated": r.provenance.estimated,
                "num_ipus": t.num_ipus if t else None,
                "strategy": r.cfg.execution_strategy, "stages": r.cfg.num_stages,
                **{f"has_{p}": r.has(p) for p in PARTS},
            })
        return pd.DataFrame(rows)

    def _repr_html_(self) -> str:
        from popviz.render.html import notebook

        return notebook(self)

    def __repr__(self) -> str:
        return f"ReportSet(root={self.root!r}, engines={self.labels})"
