"""Wrap PopTorch executors and record what Poplar's profile does not say.

``poptorch.trainingModel`` and ``poptorch.inferenceModel`` are replaced, once poptorch is
imported, by functions that call the originals and wrap the executor they return (so
Lightning's ``IPUStrategy`` and optimum-graphcore, which call these factories, are caught too).
A wrapped executor records:

* when it is created: a snapshot of its Options (D, G, R, output mode and period, execution
  strategy with its stages, available memory proportion, tensor locations, model name,
  distributed rank), the model's parameter count and bytes, and its ``BeginBlock`` markers;
* on the call that compiles (or ``compile()``): the blocks the forward pass enters (``Block``,
  ``Block.start``, ``BeginBlock``) with the parameters of the modules run inside each, the
  compile time;
* on every call: input and output shapes (one record per distinct shape signature), the wall
  time, and, sampled, PopTorch's own figures (latency getters, perf counters, ``cycleCount``).

Per-call figures are aggregated (count, sum, min, max and percentiles over the last
:data:`WINDOW` calls), so a million calls do not make a million records. Each engine's record
is written atomically to ``<dir>[/<instance>]/<engine>/popviz-model.json`` (format in
``docs/capture.md``) when the executor is created, after it compiles, at most every
:data:`REFRESH_SECONDS` while it runs, when it is destroyed and at exit.

Hooks never break the program they observe: an error inside popviz turns recording off for that
executor with one line on stderr.

This module imports only the standard library at import time: the bootstrap of every captured
Python process imports it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

ENV_DIR = "POPVIZ_CAPTURE_DIR"
"""Report directory of a capture started by ``popviz capture`` (set in the child's environment)."""
ENV_INSTANCE = "POPVIZ_CAPTURE_INSTANCE"
"""Set by the launcher when it already made ``ENV_DIR`` the instance's own directory."""
ENGINE_OPTIONS_ENV = "POPLAR_ENGINE_OPTIONS"

REFRESH_SECONDS = 5.0
"""At most this long between two writes of a running engine's manifest (a run killed by a signal
keeps what was written last)."""
WINDOW = 1024
"""Percentiles of per-call figures are over the most recent WINDOW calls (count, sum, min and max
over all calls)."""
MAX_SIGNATURES = 8
"""Distinct input/output shape signatures recorded per engine; further ones are only counted."""
SAMPLE_FIRST_CALLS = 64
SAMPLE_INTERVAL_SECONDS = 0.5
"""Input/output shapes and PopTorch's own figures (latency getters, perf counters, cycle count)
are read on each of the first SAMPLE_FIRST_CALLS calls, then on at most one call per
SAMPLE_INTERVAL_SECONDS; every call only has its wall time taken. This keeps the per-call cost a
few microseconds (benchmarks/bench_capture_overhead.py): reading tensor shapes after a long
device run costs tens of microseconds with cold caches."""

FACTORIES = {"trainingModel": "training", "inferenceModel": "inference"}
_OUTPUT_MODES = {0: "Final", 1: "EveryN", 2: "All", 3: "Sum", 4: "Default"}
_LATENCY_GETTERS = (("getHostIpuLatency", "host_ipu_latency_seconds"),
                    ("getComputeLatency", "compute_latency_seconds"),
                    ("getIpuHostLatency", "ipu_host_latency_seconds"),
                    ("getLatency", "latency_seconds"))


def _warn(message: str) -> None:
    with contextlib.suppress(Exception):
        print(f"popviz capture: {message}", file=sys.stderr, flush=True)


def _now() -> str:
    import datetime as _dt  # not at import: every captured Python process imports this module

    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------ aggregation

class Stat:
    """Count, sum, min and max of a per-call figure over all calls, and its last :data:`WINDOW`
    values (for percentiles).

    Cheap to add to: a value goes into a ring buffer; count, sum, min and max are updated from
    the buffer once per WINDOW values (and when read)."""

    __slots__ = ("_count", "_max", "_min", "_sum", "filled", "pos", "ring")

    def __init__(self) -> None:
        self._count = 0
        self._sum = 0.0
        self._min = math.inf
        self._max = -math.inf
        self.ring = [0.0] * WINDOW
        self.pos = 0
        """Next slot of ``ring``; values before it are not yet in count/sum/min/max."""
        self.filled = False

    def add(self, value: float) -> None:
        self.ring[self.pos] = value
        self.pos += 1
        if self.pos == WINDOW:
            self.fold()

    def extend(self, values: list[float]) -> None:
        """Add many values (slices into the ring: no per-value Python work)."""
        i, n = 0, len(values)
        while i < n:
            take = values[i:i + WINDOW - self.pos]
            self.ring[self.pos:self.pos + len(take)] = take
            self.pos += len(take)
            i += len(take)
            if self.pos == WINDOW:
                self.fold()

    def fold(self) -> None:
        """Move the values added since the last fold into count, sum, min and max."""
        pending = self.ring[: self.pos]
        if pending:
            self._count += len(pending)
            self._sum += math.fsum(pending)
            self._min = min(self._min, min(pending))
            self._max = max(self._max, max(pending))
        if self.pos == WINDOW:
            self.pos = 0
            self.filled = True

    def _totals(self) -> tuple[int, float, float, float]:
        pending = self.ring[: self.pos]
        if not pending:
            return self._count, self._sum, self._min, self._max
        return (self._count + len(pending), self._sum + math.fsum(pending), min(self._min, min(pending)),
                max(self._max, max(pending)))

    @property
    def count(self) -> int:
        return self._totals()[0]

    @property
    def sum(self) -> float:
        return self._totals()[1]

    @property
    def min(self) -> float:
        return self._totals()[2]

    @property
    def max(self) -> float:
        return self._totals()[3]

    def window(self) -> list[float]:
        """The last (up to) WINDOW values, oldest first."""
        return self.ring[self.pos:] + self.ring[: self.pos] if self.filled else self.ring[: self.pos]

    def to_dict(self, metric: str) -> dict[str, Any]:
        count, total, lo, hi = self._totals()
        values = sorted(self.window())
        return {"metric": metric, "count": count, "sum": total, "min": lo, "max": hi,
                "p50": percentile(values, 50), "p90": percentile(values, 90),
                "p99": percentile(values, 99)}


def percentile(sorted_values: list[float], pct: float) -> float | None:
    """Linear-interpolated percentile of already sorted values (None when empty)."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * pct / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


# ------------------------------------------------------------------------------ tensors

_TENSOR_TYPES: dict[type, bool] = {}


def _is_tensor(x: Any) -> bool:
    t = type(x)
    known = _TENSOR_TYPES.get(t)
    if known is None:
        known = all(hasattr(t, a) for a in ("shape", "dtype", "element_size", "numel"))
        _TENSOR_TYPES[t] = known
    return known


def _shape_key(x: Any, out: list) -> None:
    """Append (shape, dtype) of every tensor in ``x`` (nested tuples, lists, dicts) to ``out``."""
    if _is_tensor(x):
        out.append((x.shape, x.dtype))
    elif type(x) in (tuple, list):
        for item in x:
            _shape_key(item, out)
    elif isinstance(x, Mapping):
        for key, item in x.items():
            out.append(key)
            _shape_key(item, out)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def named_tensors(x: Any, name: str) -> Iterator[tuple[str, Any]]:
    """(dotted name, tensor) for every tensor in a nested structure."""
    if _is_tensor(x):
        yield name, x
    elif isinstance(x, (tuple, list)):
        for i, item in enumerate(x):
            yield from named_tensors(item, f"{name}.{i}")
    elif isinstance(x, Mapping):
        for key, item in x.items():
            yield from named_tensors(item, f"{name}.{key}")


def describe(x: Any, name: str) -> list[dict[str, Any]]:
    """Name, shape, dtype and bytes of every tensor in ``x``."""
    return [{"name": n, "shape": [int(d) for d in t.shape], "dtype": _dtype_name(t.dtype),
             "bytes": int(t.numel()) * int(t.element_size())} for n, t in named_tensors(x, name)]


# ------------------------------------------------------------------------------ options

def _attr(obj: Any, *path: str, default: Any = None) -> Any:
    """``obj.a.b`` for path ("a", "b"), or ``default`` when any step is missing or raises."""
    for name in path:
        try:
            obj = getattr(obj, name)
        except Exception:
            return default
        if obj is None:
            return default
    return obj


def _jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON-compatible copy of ``value``; enums by name, unknown objects by type name."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        name = getattr(value, "name", None)
        return name if isinstance(name, str) else int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    name = getattr(value, "name", None)
    if isinstance(name, str) and type(value).__module__ != "builtins" and hasattr(value, "value"):
        return name  # an Enum member
    if depth > 4:
        return f"<{type(value).__name__}>"
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v, depth + 1) for v in value]
    return f"<{type(value).__name__}>"


def _options_dict(obj: Any) -> dict[str, Any]:
    """The values of a PopTorch options object (``toDict()``, else its ``_values``)."""
    for get in (lambda: obj.toDict(), lambda: dict(obj.__dict__["_values"])):
        try:
            values = get()
            if isinstance(values, Mapping):
                return dict(values)
        except Exception:
            continue
    return {}


def output_mode_name(value: Any) -> str | None:
    name = getattr(value, "name", None)
    if isinstance(name, str) and name in _OUTPUT_MODES.values():
        return name
    if isinstance(value, int) and not isinstance(value, bool):
        return _OUTPUT_MODES.get(int(value))
    if isinstance(value, str) and value.rsplit(".", 1)[-1] in _OUTPUT_MODES.values():
        return value.rsplit(".", 1)[-1]
    return None


def _positive_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and int(value) >= 1 else None
    except (TypeError, ValueError):
        return None


def explicit_stages(strategy: Any) -> list[dict[str, Any]]:
    """The stages an execution strategy was given explicitly (``Stage(...).ipu(n)`` or block
    ids), in order, as ``{"index", "ipu" (None when not set), "blocks"}``."""
    block_map = _attr(strategy, "_block_map")
    if not isinstance(block_map, Mapping) or not block_map:
        return []
    stages: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    for block, stage in block_map.items():
        key = id(stage)
        if key not in stages:
            blocks = _attr(stage, "blocks") or _attr(stage, "_blocks") or ()
            stage_id = _attr(stage, "_stage_id")
            stages[key] = {"index": stage_id if isinstance(stage_id, int) and stage_id >= 0 else None,
                           "ipu": _attr(stage, "_ipu"), "blocks": [str(b) for b in blocks]}
            order.append(key)
        if str(block) not in stages[key]["blocks"]:
            stages[key]["blocks"].append(str(block))
    result = [stages[k] for k in order]
    if all(s["index"] is not None for s in result):
        result.sort(key=lambda s: s["index"])
    for i, s in enumerate(result):
        s["index"] = i
    return result


def snapshot_options(options: Any, mode: str | None) -> dict[str, Any]:
    """What the executor's Options say, in the manifest's terms (every field may be None)."""
    values = _options_dict(options)
    training = _attr(options, "Training")
    locations = _options_dict(_attr(options, "TensorLocations")) if options is not None else {}
    optimizer_location = locations.get("location_optimizer")
    on_chip = None
    if isinstance(optimizer_location, Mapping) and "onChip" in optimizer_location:
        on_chip = bool(optimizer_location["onChip"])
    elif mode == "training":
        on_chip = True  # PopART keeps optimizer state on chip unless told otherwise
    strategy = _attr(options, "_execution_strategy")
    auto_stage = None
    if strategy is not None and not explicit_stages(strategy):
        auto_stage = _attr(strategy, "_stages_manager", "_auto_stage")
        auto_stage = getattr(auto_stage, "name", None) or "SameAsIpu"
    amp = _attr(options, "available_memory_proportion") or values.get("available_memory_proportion") or {}
    model_name = values.get("model_name")
    taken = {"device_iterations", "replication_factor", "output_mode", "output_return_period",
             "available_memory_proportion", "model_name"}
    snap = {
        "device_iterations": _positive_int(_attr(options, "device_iterations")),
        "replication_factor": _positive_int(_attr(options, "replication_factor")),
        "gradient_accumulation": _positive_int(_attr(training, "gradient_accumulation")),
        "output_mode": output_mode_name(_attr(options, "output_mode")),
        "output_return_period": _positive_int(_attr(options, "output_return_period")),
        "execution_strategy": type(strategy).__name__ if strategy is not None else None,
        "auto_stage": auto_stage,
        "stages": explicit_stages(strategy) if strategy is not None else [],
        "available_memory_proportion": _memory_proportions(amp),
        "optimizer_state_on_chip": on_chip,
        "tensor_locations": _jsonable(locations),
        "model_name": model_name if isinstance(model_name, str) and model_name else None,
        "distributed": {"process_id": _attr(options, "Distributed", "processId"),
                        "num_processes": _attr(options, "Distributed", "numProcesses")},
        "other": _jsonable({k: v for k, v in values.items() if k not in taken}),
    }
    if mode == "inference" and snap["gradient_accumulation"] is None:
        snap["gradient_accumulation"] = 1
    return snap


def _memory_proportions(amp: Any) -> dict[str, float]:
    """``{ipu: proportion}`` (PopTorch stores int keys; ``"IPU0"`` style accepted too)."""
    out = {}
    with contextlib.suppress(Exception):
        for key, value in dict(amp).items():
            text = str(key).removeprefix("IPU")
            if text.isdigit():
                out[text] = float(value)
    return out


_AUTOMATIC_HOOKS: set[int] = set()
"""BeginBlock markers first seen without a user_id: PopTorch keeps the automatic id it gives
one on its first run, so a later executor sees an id the user never wrote."""


def _hook_is_automatic(hook: Any) -> bool:
    if getattr(hook, "_user_id", None) is None or getattr(hook, "_automatic", False):
        _AUTOMATIC_HOOKS.add(id(hook))
    return id(hook) in _AUTOMATIC_HOOKS


def _begin_block_hook(module: Any) -> Any:
    """The BeginBlock marker (a forward pre-hook) on ``module``, if any."""
    hooks = getattr(module, "_forward_pre_hooks", None)
    if not hooks:
        return None
    for hook in hooks.values():
        if type(hook).__name__ == "_BlockHook" or repr(hook).startswith("BeginBlock("):
            return hook
    return None


def _params_of(params: Any) -> tuple[int, int]:
    n = b = 0
    for p in params:
        k = int(p.numel())
        n += k
        b += k * int(p.element_size())
    return n, b


def model_summary(model: Any) -> dict[str, Any]:
    """Parameter count and bytes, and the BeginBlock markers on the model's modules."""
    summary: dict[str, Any] = {"class": type(model).__name__, "parameters": None,
                               "parameter_bytes": None, "begin_blocks": []}
    with contextlib.suppress(Exception):
        summary["parameters"], summary["parameter_bytes"] = _params_of(model.parameters())
    with contextlib.suppress(Exception):
        for name, module in model.named_modules():
            hook = _begin_block_hook(module)
            if hook is not None:
                user_id = None if _hook_is_automatic(hook) else getattr(hook, "_user_id", None)
                summary["begin_blocks"].append({
                    "name": None if user_id is None else str(user_id),
                    "ipu": getattr(hook, "_ipu_id", None), "module": name or type(module).__name__})
    return summary


def derive_stages(blocks: list[dict[str, Any]], auto_stage: str | None) -> list[dict[str, Any]]:
    """Stages of an automatic strategy from the blocks in the order the forward pass entered
    them: with ``SameAsIpu`` consecutive blocks on one IPU form one stage; with
    ``AutoIncrement`` every block is a stage."""
    stages: list[dict[str, Any]] = []
    for block in blocks:
        ipu = block.get("ipu")
        if (auto_stage != "AutoIncrement" and stages and ipu is not None
                and stages[-1]["ipu"] == ipu):
            stages[-1]["blocks"].append(block["name"])
            continue
        stages.append({"index": len(stages), "ipu": ipu if ipu is not None else len(stages),
                       "blocks": [block["name"]]})
    return stages


# ------------------------------------------------------------------------------ block tracing

class BlockTracer:
    """While the executor compiles: which blocks the forward pass enters, in order, and which
    parameters the modules run inside each own. Watches ``poptorch.Block`` (context manager and
    ``Block.start``) and BeginBlock markers through a global module forward pre-hook."""

    def __init__(self, poptorch: Any, root_model: Any) -> None:
        self.poptorch = poptorch
        self.root = root_model
        self.blocks: dict[str, dict[str, Any]] = {}
        self.automatic: set[str] = set()
        """Ids PopTorch made (blocks without a user_id): named by their modules."""
        self.spans: dict[str, set[str | None]] = {}
        """Module path -> the blocks current while it ran (:mod:`popviz.block_names`)."""
        self._open: list[set[str | None]] = []
        self._paths: dict[int, str] = {}
        self.current: str | None = None
        self.auto_id = 0
        self.seen_params: set[int] = set()
        self.first_layers = False
        """Whether a leaf module (or one with its own parameters) ran before the first block of
        a pass: PopTorch places those first layers on IPU 0 (user guide, overview.rst)."""
        self.entered = False
        self.in_enter = False
        self.depth = 0
        """Module forwards running now: 0 between passes. Each pass (the emulator runs one per
        micro-batch) restarts the numbering of unnamed blocks, so a block is recorded once."""
        self._undo: list[Callable[[], None]] = []

    def _enter(self, user_id: Any, ipu_id: Any, automatic: bool = False) -> None:
        if user_id is None:
            user_id = str(self.auto_id)
            self.auto_id += 1
            automatic = True
        name = str(user_id)
        if automatic:
            self.automatic.add(name)
        for blocks in self._open:
            blocks.add(name)
        block = self.blocks.setdefault(name, {"name": name, "ipu": None, "parameters": 0,
                                              "parameter_bytes": 0, "modules": 0})
        if isinstance(ipu_id, int) and block["ipu"] is None:
            block["ipu"] = ipu_id
        self.current = name
        self.entered = True

    def _post_hook(self, _module: Any, _inputs: Any, _output: Any) -> None:
        self.depth = max(0, self.depth - 1)
        if self._open:
            self._open.pop()

    def _span(self, module: Any) -> None:
        """Record that ``module`` runs now, in the current block (its own BeginBlock started)."""
        path = self._paths.get(id(module))
        blocks = self.spans.setdefault(path, set()) if path is not None else set()
        blocks.add(self.current)
        self._open.append(blocks)

    def _pre_hook(self, module: Any, _inputs: Any) -> None:
        top = self.depth == 0
        self.depth += 1
        if top:
            self._open.clear()
        spanned = len(self._open)
        try:
            if module is self.root or top:
                self.auto_id = 0
                self.current = None
                self.entered = False
            hook = _begin_block_hook(module)
            if hook is not None:
                user_id = getattr(hook, "_user_id", None)
                self._enter(user_id, getattr(hook, "_ipu_id", None),
                            automatic=user_id is not None and _hook_is_automatic(hook))
            self._span(module)
            if self.current is None:
                if not self.entered and module is not self.root and not top and (
                        next(module.children(), None) is None
                        or next(module.parameters(recurse=False), None) is not None):
                    self.first_layers = True
                return
            block = self.blocks[self.current]
            # the emulator's fake-tensor trace runs with fakes of the parameters: count the real one
            fresh = [p for p in module.parameters(recurse=False)
                     if id(getattr(p, "popviz_real_tensor", p)) not in self.seen_params]
            if fresh:
                self.seen_params.update(id(getattr(p, "popviz_real_tensor", p)) for p in fresh)
                n, b = _params_of(fresh)
                block["parameters"] += n
                block["parameter_bytes"] += b
                block["modules"] += 1
        except Exception:  # never disturb the trace
            if len(self._open) == spanned:
                self._open.append(set())

    def _patch_block_class(self, block_cls: type) -> None:
        tracer = self
        original_start = block_cls.__dict__.get("start")
        if isinstance(original_start, (staticmethod, classmethod)):
            func = original_start.__func__
            is_static = isinstance(original_start, staticmethod)

            def start_body(call: Callable[[], Any], user_id: Any, ipu_id: Any) -> Any:
                if not tracer.in_enter:
                    tracer._enter(user_id, ipu_id)
                return call()

            if is_static:
                def start(user_id: Any = None, ipu_id: Any = None, *a: Any, **k: Any) -> Any:
                    return start_body(lambda: func(user_id, ipu_id, *a, **k), user_id, ipu_id)
                block_cls.start = staticmethod(start)
            else:
                def start_cm(cls: type, user_id: Any = None, ipu_id: Any = None, *a: Any,
                             **k: Any) -> Any:
                    return start_body(lambda: func(cls, user_id, ipu_id, *a, **k), user_id, ipu_id)
                block_cls.start = classmethod(start_cm)
            self._undo.append(lambda: setattr(block_cls, "start", original_start))
        original_enter = block_cls.__dict__.get("__enter__")
        if callable(original_enter):
            def enter(block_self: Any, *a: Any, **k: Any) -> Any:
                user_id = getattr(block_self, "_user_id", getattr(block_self, "user_id", None))
                ipu_id = getattr(block_self, "_ipu_id", getattr(block_self, "ipu_id", None))
                tracer._enter(user_id, ipu_id)
                tracer.in_enter = True
                try:
                    return original_enter(block_self, *a, **k)
                finally:
                    tracer.in_enter = False

            block_cls.__enter__ = enter
            self._undo.append(lambda: setattr(block_cls, "__enter__", original_enter))
        original_exit = block_cls.__dict__.get("__exit__")
        if callable(original_exit):
            def exit_(block_self: Any, *a: Any, **k: Any) -> Any:
                tracer.current = None
                return original_exit(block_self, *a, **k)

            block_cls.__exit__ = exit_
            self._undo.append(lambda: setattr(block_cls, "__exit__", original_exit))

    def __enter__(self) -> BlockTracer:
        with contextlib.suppress(Exception):
            self._paths = {id(m): path for path, m in self.root.named_modules()}
        block_cls = getattr(self.poptorch, "Block", None)
        if isinstance(block_cls, type):
            self._patch_block_class(block_cls)
        torch = sys.modules.get("torch")
        register = _attr(torch, "nn", "modules", "module", "register_module_forward_pre_hook")
        register_post = _attr(torch, "nn", "modules", "module", "register_module_forward_hook")
        if register is not None and register_post is not None:
            try:
                post = register_post(self._post_hook, always_call=True)
            except TypeError:  # torch without always_call
                post = register_post(self._post_hook)
            self._undo.append(post.remove)
            handle = register(self._pre_hook)
            self._undo.append(handle.remove)
        return self

    def __exit__(self, *exc: Any) -> None:
        for undo in reversed(self._undo):
            with contextlib.suppress(Exception):
                undo()
        self._undo.clear()

    def ordered(self) -> list[dict[str, Any]]:
        """The blocks in order of first start: ``name`` (the display name: the user_id, else the
        modules, e.g. ``layers.0-2``) and, where it differs, ``id`` (PopTorch's automatic id,
        what ``Stage(...)`` names)."""
        from popviz.block_names import display_names

        names = display_names(list(self.blocks), self.automatic, self.spans)
        return [{**b, "name": names[k], **({"id": k} if names[k] != k else {})}
                for k, b in self.blocks.items()]


# ------------------------------------------------------------------------------ state

class _State:
    def __init__(self) -> None:
        self.root: str | None = None
        """Report directory the hooks write under (None: not capturing)."""
        self.instance: str | None = None
        self.instance_fixed = False
        """True when the launcher already made ``root`` the instance's own directory."""
        self.owner: str | None = None
        """``env`` (bootstrap of popviz capture) or ``api`` (popviz.capture())."""
        self.depth = 0
        self.lock = threading.RLock()
        self.recorders: list[Recorder] = []
        self.engines: dict[str, Recorder] = {}
        self.executors_per_engine: dict[str, int] = {}
        self.finder: PoptorchFinder | None = None
        self.atexit_registered = False


STATE = _State()


def active_dir() -> str | None:
    """The report directory of the capture running in this process, or None."""
    return STATE.root


def instance_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """``instance-<rank>`` for a process of a multi-instance run (PopRun/OpenMPI variables)."""
    env = os.environ if env is None else env
    for rank_key, size_key in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("PMI_RANK", "PMI_SIZE")):
        try:
            rank, size = int(env[rank_key]), int(env[size_key])
        except (KeyError, ValueError):
            continue
        if size > 1 and 0 <= rank < size:
            return f"instance-{rank}"
    return None


def _redirect_engine_options(root: str, instance: str) -> None:
    """Point this process's autoReport.directory at ``root/instance`` (if it was ``root``), so
    the instances of a multi-instance run do not overwrite each other's profiles."""
    raw = os.environ.get(ENGINE_OPTIONS_ENV)
    if not raw:
        return
    try:
        opts = json.loads(raw)
    except ValueError:
        return
    if not isinstance(opts, dict):
        return
    current = opts.get("autoReport.directory")
    if current is not None and os.path.abspath(str(current)) == os.path.abspath(root):
        opts["autoReport.directory"] = os.path.join(root, instance)
        os.environ[ENGINE_OPTIONS_ENV] = json.dumps(opts)


def _set_instance(instance: str) -> None:
    if STATE.instance is None and not STATE.instance_fixed and STATE.root:
        STATE.instance = instance
        _redirect_engine_options(STATE.root, instance)


def base_dir() -> str | None:
    """Directory engines are written under: the capture root, plus the instance if any."""
    if STATE.root is None:
        return None
    if STATE.instance and not STATE.instance_fixed:
        return os.path.join(STATE.root, STATE.instance)
    return STATE.root


# ------------------------------------------------------------------------------ recorder

class Recorder:
    """Everything recorded about one executor, and the writer of its ``popviz-model.json``."""

    def __init__(self, executor: Any, mode: str | None, root: str | None,
                 instance: str | None = None) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self._disabled = False
        self._compiled = False
        self.hot: list[Any] = [False, 0.0]
        """[fast, next_due]: read on every call (a list: the cheapest to reach with cold caches).
        ``fast``: compiled and recording, calls take the fast path (see _recording_subclass);
        ``next_due``: ``time.perf_counter`` time from which :meth:`on_due` has work to do."""
        self.times: list[float] = []
        """Wall times of the calls since the last :meth:`on_due` (folded into ``wall`` there)."""
        self.counted = 0
        """Calls already folded into the figures."""
        self.mode = mode
        own = getattr(executor, "__dict__", {})
        self.options = own.get("_options")
        if self.options is None:
            self.options = _attr(executor, "options")
        model = own.get("_user_model")
        if model is None:
            model = _attr(executor, "model")
        self.model = model
        self.opts = snapshot_options(self.options, mode)
        self.engine = self.opts["model_name"] or mode or "engine"
        self.explicit_root = root
        self.instance = instance
        self.summary = model_summary(model) if model is not None else {}
        self.input_names = self._input_names(model)
        self.created_at = _now()
        self.engine_options_at_creation = os.environ.get(ENGINE_OPTIONS_ENV)
        self.compile_wall: float | None = None
        self.compile_poptorch: float | None = None
        self.compile_error: str | None = None
        self.report_directory: str | None = None
        """Absolute ``autoReport.directory`` of the engine options when it compiled (None: unset)."""
        self.traced_blocks: list[dict[str, Any]] = []
        self.first_layers = False
        """Whether layers ran before the first block (they are on IPU 0)."""
        self.wall = Stat()
        self.figures: dict[str, Stat] = {}
        self.signatures: dict[Any, dict[str, Any]] = {}
        self.other_sampled_calls = 0
        self.sampled_calls = 0
        self.last_sample = -SAMPLE_INTERVAL_SECONDS
        self.cycle_count_note: str | None = None
        self.notes: list[str] = []
        self.last_write = 0.0
        self.final = False
        self.path: str | None = None

    # -- state ---------------------------------------------------------------------------

    @property
    def calls(self) -> int:
        """Executor calls seen (the compiling one included)."""
        return self.counted + len(self.times)

    @property
    def compiled(self) -> bool:
        return self._compiled

    @compiled.setter
    def compiled(self, value: bool) -> None:
        self._compiled = value
        self.hot[0] = value and not self._disabled

    @property
    def disabled(self) -> bool:
        return self._disabled

    @disabled.setter
    def disabled(self, value: bool) -> None:
        self._disabled = value
        self.hot[0] = self._compiled and not value

    # -- identity and paths ------------------------------------------------------------

    def engine_dir(self) -> str | None:
        from popviz.paths import as_component

        engine = as_component(self.engine)  # a modelName is data: it never leaves the report root
        if self.explicit_root is not None:
            root = self.explicit_root
            return os.path.join(root, as_component(self.instance), engine) if self.instance else \
                os.path.join(root, engine)
        base = base_dir()
        return None if base is None else os.path.join(base, engine)

    @staticmethod
    def _input_names(model: Any) -> list[str] | None:
        try:
            import inspect

            params = inspect.signature(model.forward).parameters.values()
            return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except Exception:
            return None

    # -- events --------------------------------------------------------------------------

    def on_compiled(self, executor: Any, wall_seconds: float, tracer: BlockTracer | None) -> None:
        self.compiled = True
        if self.path is not None:  # Poplar writes the last engine compiled under a name: so do we
            with STATE.lock:
                STATE.engines[self.path] = self
        self.compile_wall = wall_seconds
        self.report_directory = _report_directory()
        if tracer is not None:
            self.traced_blocks = tracer.ordered()
            self.first_layers = tracer.first_layers
        with contextlib.suppress(Exception):
            self.compile_poptorch = float(executor.compilationTime().total_seconds())

    def on_compile_error(self, exc: BaseException) -> None:
        # a bad --split exits (SystemExit(2)) with its message as an attribute: the line, not "2"
        text = getattr(exc, "message", None) if isinstance(exc, SystemExit) else None
        first = (str(text if isinstance(text, str) else exc).splitlines() or [""])[0][:300]
        self.compile_error = f"{type(exc).__name__}: {first}"
        self.notes.append(f"compilation failed: {self.compile_error}")
        self.write()

    def on_call(self, executor: Any, args: tuple, kwargs: dict, output: Any,
                seconds: float | None) -> None:
        """One call: ``seconds`` is its wall time (None for the call that compiled, whose
        time is compile plus run and is kept as the compile time instead). The wrapped
        ``__call__`` has its own fast path doing the first two steps (see
        :func:`_recording_subclass`)."""
        if seconds is None:
            self.counted += 1
        else:
            self.times.append(seconds)
        self.on_due(executor, args, kwargs, output, time.perf_counter())

    def on_due(self, executor: Any, args: tuple, kwargs: dict, output: Any, now: float) -> None:
        """Sample shapes and PopTorch's figures, and refresh the manifest, when due; set when
        this is next due (``hot[1]``, in ``time.perf_counter`` seconds)."""
        self._fold_times()
        sample_at = self.last_sample + SAMPLE_INTERVAL_SECONDS
        if self.calls <= SAMPLE_FIRST_CALLS or now >= sample_at:
            self.last_sample = now
            self.sampled_calls += 1
            self._sample_shapes(args, kwargs, output)
            self._sample_poptorch(executor)
            sample_at = now + SAMPLE_INTERVAL_SECONDS
        if self.calls == 1 or now >= self.last_write + REFRESH_SECONDS:
            self.write()
        self.hot[1] = 0.0 if self.calls < SAMPLE_FIRST_CALLS else min(
            sample_at, self.last_write + REFRESH_SECONDS)
        restamp = getattr(type(executor), "_popviz_host_work_starts", None)
        if restamp is not None:  # the emulator measures the script's host work between calls: not ours
            restamp(executor)

    def _fold_times(self) -> None:
        """Move the call times the fast path appended into the ``wall`` figures."""
        times = self.times
        if times:
            n = len(times)  # another thread may append meanwhile: take exactly n
            self.wall.extend(times[:n])
            self.counted += n
            del times[:n]

    def _sample_shapes(self, args: tuple, kwargs: dict, output: Any) -> None:
        key_parts: list = []
        _shape_key(args, key_parts)
        if kwargs:
            _shape_key(kwargs, key_parts)
        key_parts.append(None)
        _shape_key(output, key_parts)
        key = tuple(key_parts)
        sig = self.signatures.get(key)
        if sig is not None:
            sig["sampled_calls"] += 1
        elif len(self.signatures) < MAX_SIGNATURES:
            self.signatures[key] = {"sampled_calls": 1, "inputs": self._describe_inputs(args, kwargs),
                                    "outputs": describe(output, "output")}
        else:
            self.other_sampled_calls += 1

    def _describe_inputs(self, args: tuple, kwargs: dict) -> list[dict[str, Any]]:
        names = self.input_names or []
        out = []
        for i, arg in enumerate(args):
            out += describe(arg, names[i] if i < len(names) else f"args.{i}")
        for key, arg in kwargs.items():
            out += describe(arg, key)
        return out

    def _figure(self, metric: str, value: float) -> None:
        stat = self.figures.get(metric)
        if stat is None:
            stat = self.figures[metric] = Stat()
        stat.add(value)

    def _sample_poptorch(self, executor: Any) -> None:
        for getter, metric in _LATENCY_GETTERS:
            fn = getattr(type(executor), getter, None)
            if fn is None:
                continue
            try:
                _lo, hi, avg = fn(executor)
            except Exception:
                continue
            if hi or avg:  # (0, 0, 0) means no figures (e.g. synthetic data)
                self._figure(metric, float(avg))
        fn = getattr(type(executor), "getPerfCounters", None)
        if fn is not None:
            try:
                counters = fn(executor)
                starts = [t for per in counters.get("input", []) for t in per]
                ends = [t for per in counters.get("output_complete", []) for t in per]
                if starts and ends:
                    self._figure("perf_counter_span_seconds", float(max(ends) - min(starts)))
            except Exception:
                pass
        if self.cycle_count_note is None:
            fn = getattr(type(executor), "cycleCount", None)
            if fn is None:
                self.cycle_count_note = "cycleCount() not available"
            else:
                try:
                    self._figure("cycles", float(fn(executor)))
                except Exception as exc:
                    first = (str(exc).splitlines() or [""])[0][:200]
                    self.cycle_count_note = f"cycleCount() unavailable: {first}"

    # -- the manifest --------------------------------------------------------------------

    def stages(self) -> tuple[list[dict[str, Any]], str | None]:
        """Stages and where they come from: the strategy's explicit stages (IPUs completed
        from the traced blocks), or derived from the traced blocks or BeginBlock markers. None
        under the emulator's ``--split``: the script's own blocks and stages did not run there,
        and the emulator's report records the stages of the re-placed blocks."""
        if _under_split():
            return [], None
        label = {b.get("id", b["name"]): b["name"] for b in self.traced_blocks}
        explicit = [dict(s, blocks=[label.get(b, b) for b in s["blocks"]]) for s in self.opts["stages"]]
        block_ipu = {b["name"]: b.get("ipu") for b in self.traced_blocks}
        for b in self.summary.get("begin_blocks", []):
            if b["name"] is not None:
                block_ipu.setdefault(b["name"], b["ipu"])
        if explicit:
            for s in explicit:
                if not isinstance(s["ipu"], int):
                    known = [block_ipu.get(b) for b in s["blocks"] if block_ipu.get(b) is not None]
                    s["ipu"] = known[0] if known else s["index"]
            return explicit, "options"
        if self.traced_blocks:
            stages = derive_stages(self.traced_blocks, self.opts["auto_stage"])
            if self.first_layers and stages and stages[0]["ipu"] != 0:
                # Layers before the first block run on IPU 0 (PopTorch's default placement).
                stages = [{"index": 0, "ipu": 0, "blocks": []},
                          *({**s, "index": s["index"] + 1} for s in stages)]
            return stages, "traced"
        named = [b for b in self.summary.get("begin_blocks", []) if b["name"] is not None]
        if named:
            return derive_stages(named, self.opts["auto_stage"]), "BeginBlock"
        return [], None

    def document(self) -> dict[str, Any]:
        from popviz._version import __version__
        from popviz.sources.manifest import MODEL_FORMAT, MODEL_FORMAT_VERSION

        self._fold_times()
        opts = dict(self.opts)
        stages, stages_from = self.stages()
        opts["stages"] = stages
        opts["stages_from"] = stages_from
        strategy = opts.get("execution_strategy")
        if not stages and strategy == "PipelinedExecution" and not _under_split():
            opts["execution_strategy"] = None  # PopTorch's default strategy with no blocks: one IPU
        blocks = self.traced_blocks or [
            {"name": b["name"], "ipu": b["ipu"], "parameters": None, "parameter_bytes": None,
             "modules": None} for b in self.summary.get("begin_blocks", []) if b["name"] is not None]
        model = {k: v for k, v in self.summary.items() if k != "begin_blocks"}
        model["blocks"] = blocks
        model["begin_blocks"] = self.summary.get("begin_blocks", [])
        stats = [self.wall.to_dict("wall_seconds")] if self.wall.count else []
        stats += [s.to_dict(m) for m, s in sorted(self.figures.items())]
        notes = list(self.notes)
        if self.cycle_count_note and self.cycle_count_note != "cycleCount() not available":
            notes.append(self.cycle_count_note)
        shared = STATE.executors_per_engine.get(self.path or "", 1)
        if shared > 1:
            notes.append(f"{shared} executors of this process used the engine name {self.engine!r}; "
                         "this manifest describes the last one compiled")
        poptorch = sys.modules.get("poptorch")
        torch = sys.modules.get("torch")
        versions = {"popviz": __version__, "python": sys.version.split()[0],
                    "poptorch": str(getattr(poptorch, "__version__", "")) or None,
                    "torch": str(getattr(torch, "__version__", "")) or None}
        rank = opts["distributed"].get("process_id")
        return {
            "format": MODEL_FORMAT,
            "format_version": MODEL_FORMAT_VERSION,
            "written_by": f"popviz {__version__}",
            "written_at": _now(),
            "status": "final" if self.final else "running",
            "engine": self.engine,
            "instance": self.instance if self.explicit_root is not None else (
                STATE.instance if STATE.root else None),
            "process": {"pid": self.pid, "hostname": _hostname(), "rank": rank,
                        "num_processes": opts["distributed"].get("num_processes")},
            "versions": {k: v for k, v in versions.items() if v},
            "executor": {"mode": self.mode, "created_at": self.created_at,
                         "engine_options": _jsonable(_parse_json(self.engine_options_at_creation)),
                         "report_directory": self.report_directory},
            "options": opts,
            "model": model,
            "calls": {"count": self.calls, "window": WINDOW,
                      "sampling": {"first_calls": SAMPLE_FIRST_CALLS,
                                   "interval_seconds": SAMPLE_INTERVAL_SECONDS},
                      "compile": {"wall_seconds": self.compile_wall,
                                  "poptorch_seconds": self.compile_poptorch,
                                  "error": self.compile_error},
                      "stats": stats},
            "io": {"sampled_calls": self.sampled_calls, "signatures": list(self.signatures.values()),
                   "other_sampled_calls": self.other_sampled_calls},
            "notes": notes,
        }

    def write(self, final: bool = False) -> None:
        """Write the manifest atomically (only from the process that created the executor, and
        only by the engine's current recorder)."""
        if self.disabled or os.getpid() != self.pid:
            return
        path = self.engine_dir()
        if path is None:
            return
        with self.lock:
            if final:
                self.final = True
            file = os.path.join(path, "popviz-model.json")
            if STATE.engines.get(file, self) is not self:
                return
            try:
                from pathlib import Path

                from popviz.fileio import atomic_write_bytes

                text = json.dumps(self.document(), indent=1, allow_nan=False) + "\n"
                os.makedirs(path, exist_ok=True)
                atomic_write_bytes(Path(file), text.encode())
            except Exception as exc:
                self.disabled = True
                _warn(f"cannot write {file} ({type(exc).__name__}: {exc}); recording of this "
                      "executor stopped")
            self.last_write = time.perf_counter()


def _report_directory() -> str | None:
    """The absolute ``autoReport.directory`` in this process's engine options now (a program
    such as Lightning's IPUStrategy may set its own), or None."""
    opts = _parse_json(os.environ.get(ENGINE_OPTIONS_ENV))
    if not isinstance(opts, dict) or not opts.get("autoReport.directory"):
        return None
    return os.path.abspath(str(opts["autoReport.directory"]))


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _parse_json(raw: str | None) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


# ------------------------------------------------------------------------------ wrapping

RECORDER_ATTR = "_popviz_recorder"


def recorder_of(executor: Any) -> Recorder | None:
    """The recorder of a wrapped executor, None when it is not wrapped."""
    return type(executor).__dict__.get(RECORDER_ATTR)


def _recording_subclass(cls: type, recorder: Recorder) -> type:
    """A private subclass of the executor's class whose ``__call__`` and ``compile`` record."""
    call = cls.__call__
    perf_counter = time.perf_counter
    compile_ = getattr(cls, "compile", None)
    destroy = getattr(cls, "destroy", None)

    times = recorder.times  # the same list for the executor's life (on_due clears it in place)
    hot = recorder.hot

    def _call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if hot[0]:
            # The fast path: two clock reads and a list append; the rest only when due. With
            # caches cold after a device run, every bytecode here costs (see the benchmark).
            t0 = perf_counter()
            try:
                output = call(self, *args, **kwargs)
            except SystemExit as exc:  # the emulator's --calls stop: the call counts as done
                if getattr(exc, "popviz_call_completed", False):
                    times.append(perf_counter() - t0)
                raise
            t1 = perf_counter()
            times.append(t1 - t0)
            if t1 >= hot[1]:
                try:
                    recorder.on_due(self, args, kwargs, output, t1)
                except Exception as exc:
                    _disable(recorder, exc)
            return output
        rec = recorder
        if rec.disabled:
            return call(self, *args, **kwargs)
        if not _is_compiled(self):
            return _compile_and_run(self, rec, call, args, kwargs, record=True)
        rec.compiled = True  # compiled before it was wrapped
        return _call(self, *args, **kwargs)

    namespace: dict[str, Any] = {"__call__": _call, RECORDER_ATTR: recorder,
                                 "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                 "__doc__": cls.__doc__}
    if callable(compile_):
        def _compile(self: Any, *args: Any, **kwargs: Any) -> Any:
            if recorder.disabled or recorder.compiled:
                return compile_(self, *args, **kwargs)
            return _compile_and_run(self, recorder, compile_, args, kwargs, record=False)

        namespace["compile"] = _compile
    if callable(destroy):
        def _destroy(self: Any, *args: Any, **kwargs: Any) -> Any:
            with contextlib.suppress(Exception):
                recorder.write(final=True)
            recorder.compiled = False
            return destroy(self, *args, **kwargs)

        namespace["destroy"] = _destroy
    return type(cls.__name__, (cls,), namespace)


def _is_compiled(executor: Any) -> bool:
    fn = getattr(type(executor), "isCompiled", None)
    if fn is None:
        return False
    try:
        return bool(fn(executor))
    except Exception:
        return False


def _compile_and_run(executor: Any, rec: Recorder, fn: Callable[..., Any], args: tuple,
                     kwargs: dict, record: bool) -> Any:
    """Run the call (or ``compile``) that compiles, watching blocks and timing it."""
    tracer = None
    try:
        poptorch = sys.modules.get("poptorch")
        tracer = BlockTracer(poptorch, rec.model).__enter__()
    except Exception:
        tracer = None
    t0 = time.perf_counter()
    try:
        output = fn(executor, *args, **kwargs)
    except BaseException as exc:
        if tracer is not None:
            tracer.__exit__(None, None, None)
            rec.traced_blocks = tracer.ordered()  # what was traced before the failure
            rec.first_layers = tracer.first_layers  # layers before the first block: on IPU 0
        if getattr(exc, "popviz_call_completed", False) and _is_compiled(executor):
            # the emulator's --calls stop right after compiling: compiled, and the call counts
            with contextlib.suppress(Exception):
                rec.on_compiled(executor, time.perf_counter() - t0, tracer)
                if record:
                    rec.on_call(executor, args, kwargs, None, None)
            raise
        with contextlib.suppress(Exception):
            rec.on_compile_error(exc)
        raise
    seconds = time.perf_counter() - t0
    if tracer is not None:
        tracer.__exit__(None, None, None)
    try:
        rec.on_compiled(executor, seconds, tracer)
        if record:
            rec.on_call(executor, args, kwargs, output, None)
        else:
            rec.write()
    except Exception as exc:
        _disable(rec, exc)
    return output


def _disable(rec: Recorder, exc: BaseException) -> None:
    rec.disabled = True
    _warn(f"internal error while recording engine {rec.engine!r} ({type(exc).__name__}: {exc}); "
          "recording of this executor stopped, your program continues (please report this)")


def wrap_executor(executor: Any, mode: str | None = None, root: str | None = None) -> Any:
    """Wrap ``executor`` (idempotent) so its calls are recorded; return it.

    ``root`` is the report directory; None means the active capture's directory.
    """
    if recorder_of(executor) is not None:
        return executor
    if mode is None:
        training = getattr(executor, "__dict__", {}).get("_training")
        mode = None if training is None else ("training" if training else "inference")
    recorder = Recorder(executor, mode, root, instance=None)
    dist = recorder.opts["distributed"]
    instance = instance_from_env() if not STATE.instance_fixed else None
    if instance is None and _positive_int(dist.get("num_processes")) and dist["num_processes"] > 1:
        pid = dist.get("process_id")
        instance = f"instance-{pid}" if isinstance(pid, int) else None
    if root is not None:
        recorder.instance = instance
    elif instance is not None:
        _set_instance(instance)
    cls = type(executor)
    object.__setattr__(executor, "__class__", _recording_subclass(cls, recorder))
    with STATE.lock:
        STATE.recorders.append(recorder)
        engine_dir = recorder.engine_dir()
        if engine_dir is not None:
            file = os.path.join(engine_dir, "popviz-model.json")
            recorder.path = file
            STATE.executors_per_engine[file] = STATE.executors_per_engine.get(file, 0) + 1
            owner = STATE.engines.get(file)
            if owner is None or not owner.compiled:
                STATE.engines[file] = recorder  # else it takes over when it compiles
    _ensure_atexit()
    recorder.write()
    return executor


def flush(final: bool = False) -> None:
    """Write every recorder's manifest now."""
    for rec in list(STATE.recorders):
        with contextlib.suppress(Exception):
            rec.write(final=final)


def _ensure_atexit() -> None:
    if not STATE.atexit_registered:
        atexit.register(flush, True)
        STATE.atexit_registered = True
        _flush_on_sigterm()


def _flush_on_sigterm() -> None:
    """SIGTERM skips atexit: when the program leaves SIGTERM at its default, write the manifests
    (current call counts) first, then die of SIGTERM as before."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_term(signo: int, _frame: Any) -> None:
            flush(True)
            signal.signal(signo, signal.SIG_DFL)
            os.kill(os.getpid(), signo)

        signal.signal(signal.SIGTERM, on_term)


# ------------------------------------------------------------------------------ patching

def _make_factory(original: Callable[..., Any], mode: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def factory(*args: Any, **kwargs: Any) -> Any:
        executor = original(*args, **kwargs)
        if STATE.root is not None:
            try:
                wrap_executor(executor, mode=mode)
            except Exception as exc:
                _warn(f"could not wrap the {mode} executor ({type(exc).__name__}: {exc}); "
                      "your program continues without popviz recording it")
        return executor

    factory.__popviz_original__ = original  # type: ignore[attr-defined]
    return factory


def patch_poptorch(module: Any) -> None:
    """Replace the module's executor factories by recording ones (idempotent)."""
    for name, mode in FACTORIES.items():
        current = getattr(module, name, None)
        if current is None or getattr(current, "__popviz_original__", None) is not None:
            continue
        with contextlib.suppress(Exception):
            setattr(module, name, _make_factory(current, mode))


def unpatch_poptorch(module: Any) -> None:
    for name in FACTORIES:
        current = getattr(module, name, None)
        original = getattr(current, "__popviz_original__", None)
        if original is not None:
            with contextlib.suppress(Exception):
                setattr(module, name, original)


class _PatchingLoader:
    """Runs the real loader, then patches the module (and hands the module its real loader)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        with contextlib.suppress(Exception):
            module.__loader__ = self.loader
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        if STATE.root is not None:
            patch_poptorch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class PoptorchFinder:
    """Patches ``poptorch`` when the program imports it (a meta path hook: finds the module
    with the other finders, wraps its loader)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "poptorch":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            try:
                spec = finder.find_spec(fullname, path, target)
            except Exception:
                continue
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader)
            return spec
        return None


def install(root: str, *, owner: str, instance: str | None = None,
            instance_fixed: bool = False) -> None:
    """Start capturing into ``root``: patch poptorch now if imported, else when it is."""
    with STATE.lock:
        STATE.root = root
        STATE.owner = owner
        STATE.instance = instance
        STATE.instance_fixed = instance_fixed
        if STATE.finder is None:
            STATE.finder = PoptorchFinder()
            sys.meta_path.insert(0, STATE.finder)
        module = sys.modules.get("poptorch")
        if module is not None:
            patch_poptorch(module)
        _ensure_atexit()


def uninstall() -> None:
    """Stop capturing new executors (wrapped ones keep recording and are flushed)."""
    with STATE.lock:
        flush(final=True)
        for rec in STATE.recorders:
            # Executors captured (not wrapped) that outlive the capture stop recording: they
            # would otherwise write into a later capture of the same process (e.g. the next
            # test's popviz_capture fixture).
            if rec.explicit_root is None:
                rec.disabled = True
        if STATE.finder is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(STATE.finder)
            STATE.finder = None
        module = sys.modules.get("poptorch")
        if module is not None:
            unpatch_poptorch(module)
        STATE.root = None
        STATE.owner = None
        STATE.instance = None
        STATE.instance_fixed = False


def install_from_env() -> bool:
    """Called by the bootstrap ``sitecustomize`` of a ``popviz capture`` child: capture into
    ``$POPVIZ_CAPTURE_DIR``. Returns False when that variable is not set."""
    root = os.environ.get(ENV_DIR)
    if not root:
        return False
    fixed = os.environ.get(ENV_INSTANCE) or None
    if fixed:
        install(root, owner="env", instance=fixed, instance_fixed=True)
        return True
    instance = instance_from_env()
    install(root, owner="env", instance=None)
    if instance is not None:
        _set_instance(instance)
    return True


def _under_split() -> bool:
    """The emulator's ``--split`` re-places the script's blocks: their stages did not run."""
    from popviz.emulator.structure import SPLIT_ENV

    return bool(os.environ.get(SPLIT_ENV, "").strip())
