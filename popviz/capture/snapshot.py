"""What the capture hooks record about an executor when it is created: a snapshot of its
Options (batching, output mode, execution strategy and stages, memory proportions, tensor
locations), the model's parameter count and bytes, and descriptions of tensors (shapes, dtypes,
bytes) for the per-call records."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from typing import Any

from popviz.capture.hooks import _OUTPUT_MODES

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
                               "parameter_bytes": None, "trainable_parameters": None, "begin_blocks": []}
    with contextlib.suppress(Exception):
        summary["parameters"], summary["parameter_bytes"] = _params_of(model.parameters())
        # frozen parameters (requires_grad False) get no gradient, accumulator or optimizer state
        summary["trainable_parameters"] = _params_of(p for p in model.parameters() if p.requires_grad)[0]
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
