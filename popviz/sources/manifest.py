"""Read ``popviz-model.json``, the per-engine manifest the capture hooks write, into the model.

The hooks record what Poplar's profile does not say: the executor's PopTorch options (device
iterations, gradient accumulation, replication, output mode, execution strategy and stages),
the blocks found on the model, and the host tensors and timings of its calls. The file format is
documented in ``docs/capture.md``. This module turns it into a :class:`ModelConfig` and a
:class:`HostIO` (tensors **per micro-batch**) and merges them into the engine's Report,
whichever source (libpva, a bundle, the emulator) provides memory and execution.

Reading runs no code: the file is parsed with :func:`json.loads` and every value is checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from popviz._version import __version__
from popviz.errors import CorruptReportError, brief, shown
from popviz.fileio import read_versioned_json
from popviz.model import (
    EXECUTION_STRATEGIES,
    CallStats,
    HostIO,
    HostTensor,
    ModelConfig,
    ModelError,
    Provenance,
    Report,
    Stage,
)
from popviz.model.names import output_mode_name
from popviz.sources import layer_flops
from popviz.sources.layer_flops import CapturedFlops

MODEL_FILE = "popviz-model.json"
MODEL_FORMAT = "popviz-model"
MODEL_FORMAT_VERSION = 1

# Options the hooks record in fields of their own; everything else goes to ModelConfig.options.
_CONFIG_FIELDS = ("device_iterations", "replication_factor", "gradient_accumulation", "output_mode",
                  "output_return_period", "execution_strategy", "stages",
                  "available_memory_proportion", "optimizer_state_on_chip")


@dataclass(frozen=True)
class ModelManifest:
    """What one ``popviz-model.json`` says, in the model's terms."""

    engine: str
    config: ModelConfig
    host_io: HostIO
    notes: tuple[str, ...]
    versions: Mapping[str, str]
    written_at: str | None
    path: Path
    flops: CapturedFlops | None = None
    """The model's FLOPs per module the hooks counted (:mod:`popviz.sources.layer_flops`)."""


def outputs_per_call(config: ModelConfig) -> int | None:
    """How many micro-batch results one call returns per output, by the effective output mode:
    All D·G·R, EveryN (D/N)·G·R, Final and Sum R. None when a figure is unknown."""
    d, g, r = config.device_iterations, config.gradient_accumulation, config.replication_factor
    mode = config.effective_output_mode
    if r is None:
        return None
    if mode in ("Final", "Sum"):
        return r
    if d is None or g is None:
        return None
    if mode == "All":
        return d * g * r
    if mode == "EveryN" and config.output_return_period:
        return max(1, d // config.output_return_period) * g * r
    return None


def inputs_per_call(config: ModelConfig) -> int | None:
    """Micro-batches one call consumes: D·G·R (None when a figure is unknown)."""
    d, g, r = config.device_iterations, config.gradient_accumulation, config.replication_factor
    if d is None or g is None or r is None:
        return None
    return d * g * r


def per_micro_batch(shape: tuple[int, ...], nbytes: int, count: int | None
                    ) -> tuple[tuple[int, ...], int] | None:
    """One call's tensor ``shape``/``nbytes`` divided into ``count`` micro-batch slices along
    dim 0, or None when it does not divide (unknown count, a scalar, dim 0 not a multiple)."""
    if count is None:
        return None
    if count == 1:
        return shape, nbytes
    if not shape or shape[0] % count or nbytes % count:
        return None
    return (shape[0] // count, *shape[1:]), nbytes // count


class _Checker:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, what: str) -> CorruptReportError:
        return CorruptReportError(f"{shown(self.path)}: {what}; the file is damaged: delete it, or "
                                  "capture the run again (popviz capture)")

    def obj(self, parent: Mapping[str, Any], key: str) -> dict[str, Any]:
        value = parent.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"field {key!r} must be a JSON object")
        return value

    def lst(self, parent: Mapping[str, Any], key: str) -> list[Any]:
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(f"field {key!r} must be a JSON list")
        return value

    def int_or_none(self, parent: Mapping[str, Any], key: str) -> int | None:
        value = parent.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(f"field {key!r} must be an integer, got {value!r}")
        return value


def read_manifest(path: str | Path) -> ModelManifest:
    """Read one ``popviz-model.json`` (or the engine directory holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL_FILE
    check = _Checker(path)
    doc = read_versioned_json(path, format_name=MODEL_FORMAT, format_version=MODEL_FORMAT_VERSION,
                              kind="model manifest", fail=check.fail)
    engine = doc.get("engine")
    if not isinstance(engine, str) or not engine:
        raise check.fail("has no engine name")
    try:
        config, notes = _config(check, doc)
        host_io, io_notes = _host_io(check, doc, config)
    except (ModelError, TypeError, ValueError) as exc:
        raise check.fail(f"does not match the manifest format ({exc})") from None
    versions = {str(k): str(v) for k, v in check.obj(doc, "versions").items() if v is not None}
    notes += io_notes + [str(n) for n in check.lst(doc, "notes")]
    written_at = doc.get("written_at") if isinstance(doc.get("written_at"), str) else None
    flops = layer_flops.parse(doc.get("flops"), check.fail)
    return ModelManifest(engine, config, host_io, tuple(notes), versions, written_at, path, flops)


def _config(check: _Checker, doc: Mapping[str, Any]) -> tuple[ModelConfig, list[str]]:
    opts = check.obj(doc, "options")
    executor = check.obj(doc, "executor")
    model = check.obj(doc, "model")
    mode = executor.get("mode")
    stages = []
    for i, s in enumerate(check.lst(opts, "stages")):
        if not isinstance(s, dict):
            raise check.fail("field 'stages' must hold JSON objects")
        ipu = check.int_or_none(s, "ipu")
        index = check.int_or_none(s, "index")
        stages.append(Stage(index=i if index is None else index, ipu=i if ipu is None else ipu,
                            blocks=tuple(str(b) for b in check.lst(s, "blocks"))))
    amp = {int(k): float(v) for k, v in check.obj(opts, "available_memory_proportion").items()}
    on_chip = opts.get("optimizer_state_on_chip")
    if on_chip is not None and not isinstance(on_chip, bool):
        raise check.fail(f"field 'optimizer_state_on_chip' must be true, false or null, got {on_chip!r}")
    strategy = opts.get("execution_strategy")
    notes = []
    if strategy is not None and not isinstance(strategy, str):
        raise check.fail("field 'execution_strategy' must be a string")
    other = {k: v for k, v in opts.items() if k not in _CONFIG_FIELDS}
    if strategy is not None and strategy not in EXECUTION_STRATEGIES:
        notes.append(f"execution strategy {strategy} is not one popviz knows; kept in options")
        other["execution_strategy"] = strategy
        strategy = None
    if model:
        other["model"] = model
    if mode is not None and mode not in ("training", "inference"):
        raise check.fail(f"field 'mode' must be \"training\" or \"inference\", got {brief(mode)}")
    output_mode = output_mode_name(opts.get("output_mode"))
    if opts.get("output_mode") is not None and output_mode is None:
        raise check.fail("field 'output_mode' must be one of PopTorch's output modes (All, EveryN, Final, Sum, "
                         f"Default), got {brief(opts['output_mode'])}")
    config = ModelConfig(
        mode=mode,
        execution_strategy=strategy,
        stages=tuple(stages),
        gradient_accumulation=check.int_or_none(opts, "gradient_accumulation"),
        device_iterations=check.int_or_none(opts, "device_iterations"),
        replication_factor=check.int_or_none(opts, "replication_factor"),
        output_mode=output_mode,
        output_return_period=check.int_or_none(opts, "output_return_period"),
        optimizer_state_on_chip=on_chip,
        available_memory_proportion=amp,
        options=other,
    )
    return config, notes


def _tensor(check: _Checker, t: Any, direction: str) -> tuple[str, tuple[int, ...], str, int]:
    if not isinstance(t, dict):
        raise check.fail(f"{direction} tensors must be JSON objects")
    shape = t.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise check.fail(f"{direction} tensor {t.get('name')!r} has an invalid shape {shape!r}")
    nbytes = check.int_or_none(t, "bytes")
    if nbytes is None or nbytes < 0:
        raise check.fail(f"{direction} tensor {t.get('name')!r} has invalid bytes {nbytes!r}")
    return str(t.get("name")), tuple(shape), str(t.get("dtype")), nbytes


def _host_io(check: _Checker, doc: Mapping[str, Any], config: ModelConfig
             ) -> tuple[HostIO, list[str]]:
    calls = check.obj(doc, "calls")
    io = check.obj(doc, "io")
    notes: list[str] = []
    signatures = [s for s in check.lst(io, "signatures") if isinstance(s, dict)]
    tensors: list[HostTensor] = []
    if signatures:
        main = max(signatures, key=lambda s: s.get("sampled_calls") or 0)
        if len(signatures) > 1:
            notes.append(f"host tensors: {len(signatures)} different input/output shapes were seen; "
                         f"shown: the most frequent ({main.get('sampled_calls')} of "
                         f"{io.get('sampled_calls')} sampled calls)")
        for direction, count in (("input", inputs_per_call(config)),
                                 ("output", outputs_per_call(config))):
            for t in check.lst(main, direction + "s"):
                name, shape, dtype, nbytes = _tensor(check, t, direction)
                sliced = per_micro_batch(shape, nbytes, count)
                if sliced is None:
                    notes.append(f"{direction} {name}: shape {list(shape)} per call could not be "
                                 f"divided into {count if count else 'an unknown number of'} "
                                 "micro-batches; shown per call")
                    sliced = (shape, nbytes)
                tensors.append(HostTensor(name=name, direction=direction, shape=sliced[0], dtype=dtype,
                                          bytes=sliced[1]))
        for t in check.lst(main, "anchors"):  # opts.anchorTensor's, one whole copy each
            name, shape, dtype, nbytes = _tensor(check, t, "anchor")
            tensors.append(HostTensor(name=name, direction="anchor", shape=shape, dtype=dtype, bytes=nbytes))
    stats = []
    for s in check.lst(calls, "stats"):
        if not isinstance(s, dict):
            raise check.fail("call stats must be JSON objects")
        stats.append(CallStats(**{k: s.get(k) for k in ("metric", "count", "sum", "min", "max",
                                                         "p50", "p90", "p99")}))
    compile_ = check.obj(calls, "compile")
    compile_seconds = compile_.get("poptorch_seconds")
    if compile_seconds is None:
        compile_seconds = compile_.get("wall_seconds")
    if compile_seconds is not None and not isinstance(compile_seconds, (int, float)):
        raise check.fail(f"compile seconds must be a number, got {compile_seconds!r}")
    error = compile_.get("error")
    if error is not None and not isinstance(error, str):
        raise check.fail(f"compile error must be a string, got {type(error).__name__}")
    host_io = HostIO(tensors=tuple(tensors), calls=check.int_or_none(calls, "count"),
                     compile_seconds=None if compile_seconds is None else float(compile_seconds),
                     call_stats=tuple(stats), compile_error=error)
    return host_io, notes


# ----------------------------------------------------------------------------------- merging

def _merge_config(base: ModelConfig | None, top: ModelConfig) -> ModelConfig:
    """``top``'s known fields over ``base``'s (the manifest records what the program set)."""
    if base is None:
        return top
    changes: dict[str, Any] = {}
    for name in ("mode", "execution_strategy", "gradient_accumulation", "device_iterations",
                 "replication_factor", "output_mode", "output_return_period", "optimizer_state_on_chip"):
        value = getattr(top, name)
        changes[name] = value if value is not None else getattr(base, name)
    changes["stages"] = top.stages or base.stages
    changes["available_memory_proportion"] = dict(top.available_memory_proportion) or dict(
        base.available_memory_proportion)
    changes["options"] = {**base.options, **top.options}
    return ModelConfig(**changes)


def _generic(name: str) -> bool:
    """A name the hooks give an output they know nothing about: ``output`` or ``output.<i>``."""
    return name == "output" or (name.startswith("output.") and name[len("output."):].isdigit())


def _merge_host_io(base: HostIO | None, top: HostIO) -> HostIO:
    if base is None:
        return top
    # per direction: a capture stopped at its N-th call (--calls N) saw that call's inputs but
    # never its outputs, which the report itself (the emulator's trace) may know
    tensors = tuple(t for direction in ("input", "output")
                    for t in ([x for x in top.tensors if x.direction == direction]
                              or [x for x in base.tensors if x.direction == direction]))
    # anchors by name: the hooks size those a call returned, the emulator those it can
    seen = {t.name for t in top.anchors}
    anchors = top.anchors + tuple(t for t in base.anchors if t.name not in seen)
    # the hooks see a call's outputs as values (output, output.1, ...); the emulator's trace knows
    # which one is the loss: the same tensors keep its names, so a full run and a --calls 1 run
    # name them alike
    outs = [t for t in tensors if t.direction == "output"]
    traced = [t for t in base.tensors if t.direction == "output"]
    if traced and len(outs) == len(traced) and any(a.name != b.name for a, b in zip(outs, traced, strict=True)) \
            and all((a.dtype, a.bytes) == (b.dtype, b.bytes) and _generic(a.name)
                    for a, b in zip(outs, traced, strict=True)):  # a scalar loss may be [] or [1]: same bytes
        tensors = tuple(t for t in tensors if t.direction == "input") + tuple(
            dataclasses.replace(a, name=b.name) for a, b in zip(outs, traced, strict=True))
    tensors += anchors
    return HostIO(tensors=tensors,
                  calls=top.calls if top.calls is not None else base.calls,
                  compile_seconds=top.compile_seconds if top.compile_seconds is not None
                  else base.compile_seconds,
                  call_stats=top.call_stats or base.call_stats,
                  compile_error=top.compile_error if top.compile_error is not None else base.compile_error)


def merge_into(report: Report, manifest: ModelManifest) -> Report:
    """``report`` with the manifest's config and host I/O merged in (manifest values win where
    it knows them; the report's own values fill the rest) and a provenance note saying so."""
    config = _merge_config(report.config, manifest.config)
    host_io = _merge_host_io(report.host_io, manifest.host_io)
    prov = report.provenance
    note = f"configuration and host I/O recorded by popviz capture ({manifest.path.name})"
    versions = {**manifest.versions, **prov.versions}
    provenance = Provenance(source=prov.source, estimated=prov.estimated, tool=prov.tool,
                            versions=versions, captured_at=prov.captured_at,
                            notes=(*prov.notes, note, *manifest.notes))
    return report.replace(config=config, host_io=host_io, provenance=provenance)


def manifest_report(manifest: ModelManifest) -> Report:
    """A Report from the manifest alone (an engine whose profile is absent: no profiling, a
    compile that failed before Poplar wrote anything, or a profile written elsewhere)."""
    notes = ("only popviz-model.json in this engine directory: no memory or execution profile "
             "(was profiling on? see popviz-run.json)", *manifest.notes)
    provenance = Provenance(source="capture", estimated=False,
                            tool=f"popviz {manifest.versions.get('popviz', __version__)} capture hooks",
                            versions=manifest.versions, captured_at=manifest.written_at, notes=notes)
    return Report(name=manifest.engine, provenance=provenance, config=manifest.config,
                  host_io=manifest.host_io)
