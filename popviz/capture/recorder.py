"""Everything the capture hooks record about one executor (options, blocks, compile time, per-call
shapes, timings and PopTorch's own figures) and the atomic writer of its ``popviz-model.json``."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from typing import Any

from popviz.capture.block_tracing import BlockTracer
from popviz.capture.hooks import (
    _LATENCY_GETTERS,
    ENGINE_OPTIONS_ENV,
    MAX_SIGNATURES,
    REFRESH_SECONDS,
    SAMPLE_FIRST_CALLS,
    SAMPLE_INTERVAL_SECONDS,
    STATE,
    WINDOW,
    Stat,
    _now,
    _warn,
    base_dir,
)
from popviz.capture.snapshot import (
    _attr,
    _jsonable,
    _shape_key,
    derive_stages,
    describe,
    model_summary,
    snapshot_options,
)


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
        self.interrupted: str | None = None
        """What a KeyboardInterrupt (Ctrl-C) interrupted: ``"compile"`` or ``"first call"``."""
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
        self.flops: dict[str, Any] | None = None
        """The model's FLOPs per module for one micro-batch (:mod:`popviz.capture.flops`), once
        counted when it compiles."""

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

    def on_compile_inputs(self, executor: Any, args: tuple, kwargs: dict) -> None:
        """Count the model's FLOPs on one micro-batch of the inputs it compiles with (once, before
        the compile: PopTorch's training model copies its weights back from the device when they
        are read after a run)."""
        if self.flops is not None or BlockTracer.active:  # an outer compile is still tracing: count after it
            return
        from popviz.capture import flops

        why = flops.skip_reason(executor) or (None if self.model is not None else "the executor has no model")
        if why is not None:
            self.flops = {"status": "skipped", "reason": why}
            return
        o = self.opts
        training = self.mode == "training"
        factors = [o.get("device_iterations"), o.get("replication_factor")] + (
            [o.get("gradient_accumulation")] if training else [])
        n = None
        if all(isinstance(f, int) and f > 0 for f in factors):
            n = 1
            for f in factors:
                n *= f
        self.flops = flops.count_model_flops(self.model, args, kwargs, n, training)

    def on_compile_error(self, exc: BaseException) -> None:
        # a bad --split exits (SystemExit(2)) with its message as an attribute: the line, not "2"
        text = getattr(exc, "message", None) if isinstance(exc, SystemExit) else None
        first = (str(text if isinstance(text, str) else exc).splitlines() or [""])[0][:300]
        self.compile_error = f"{type(exc).__name__}: {first}"
        self.notes.append(f"compilation failed: {self.compile_error}")
        self.write()

    def on_interrupted(self, executor: Any, seconds: float, tracer: BlockTracer | None, compiled: bool) -> None:
        """Ctrl-C during the call that compiles: after the compile (it succeeded) or during it."""
        if compiled:
            self.on_compiled(executor, seconds, tracer)
        self.interrupted = "first call" if compiled else "compile"
        self.notes.append("interrupted (KeyboardInterrupt) " + ("during the first call, after the compile succeeded"
                                                                 if compiled else "while compiling"))
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
            self._sample_shapes(args, kwargs, output, executor)
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

    def _anchors(self, executor: Any) -> list[dict[str, Any]]:
        """The tensors anchored with ``opts.anchorTensor``, as the last call returned them
        (``getAnchoredTensor``); none when PopTorch cannot give one (then the analysis says
        their size is not recorded)."""
        names = (self.opts.get("other") or {}).get("anchored_tensors")
        fn = getattr(type(executor), "getAnchoredTensor", None)
        out: list[dict[str, Any]] = []
        if not isinstance(names, dict) or fn is None:
            return out
        for short in names:
            try:
                out += describe(fn(executor, short), str(short))
            except Exception:
                continue
        return out

    def _sample_shapes(self, args: tuple, kwargs: dict, output: Any, executor: Any = None) -> None:
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
            anchors = self._anchors(executor) if executor is not None else []
            if anchors:
                self.signatures[key]["anchors"] = anchors
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
                                  "error": self.compile_error, "interrupted": self.interrupted},
                      "stats": stats},
            "io": {"sampled_calls": self.sampled_calls, "signatures": list(self.signatures.values()),
                   "other_sampled_calls": self.other_sampled_calls},
            "notes": notes,
            "flops": self.flops,
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


def _under_split() -> bool:
    """The emulator's ``--split`` re-places the script's blocks: their stages did not run."""
    from popviz.emulator.structure import SPLIT_ENV

    return bool(os.environ.get(SPLIT_ENV, "").strip())
