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

The hooks are split along their responsibilities; this module holds what all parts share: the
environment variables and limits, the per-call statistics (:class:`Stat`), the capture state of
the process (:data:`STATE`) and :func:`recorder_of`. The parts, bottom up:

* :mod:`popviz.capture.snapshot` — the Options snapshot, the model summary, tensors described;
* :mod:`popviz.capture.block_tracing` — the blocks the forward pass enters;
* :mod:`popviz.capture.recorder` — everything recorded about one executor, and its writer;
* :mod:`popviz.capture.patching` — wrapping executors, patching ``poptorch``'s factories,
  ``install`` / ``uninstall`` / ``install_from_env``.

These modules import only the standard library at import time: the bootstrap of every captured
Python process imports them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from popviz.capture.patching import PoptorchFinder
    from popviz.capture.recorder import Recorder

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
        from popviz.escape import status_line
        from popviz.ui import fitted

        print(fitted(status_line(f"popviz capture: {message}")), file=sys.stderr, flush=True)


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


# ------------------------------------------------------------------------------ state

class _State:
    """The capture running in this process (one per process: :data:`STATE`)."""

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


def instance_env_problem(env: Mapping[str, str]) -> str | None:
    """What is wrong with a launcher's rank variables (a rank that is not a number, a rank without
    its size, a rank outside it), in one sentence, or None: ``instance_from_env`` would otherwise
    file such a process as a single run."""
    for rank_key, size_key in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("PMI_RANK", "PMI_SIZE")):
        if rank_key not in env and size_key not in env:
            continue
        raw_rank, raw_size = env.get(rank_key), env.get(size_key)
        if raw_rank is None or raw_size is None:
            given, missing = (rank_key, size_key) if raw_size is None else (size_key, rank_key)
            return f"{given} is set but {missing} is not: a launcher sets both (unset {given} for a single run)"
        try:
            rank, size = int(raw_rank), int(raw_size)
        except ValueError:
            return f"{rank_key}={raw_rank!r} and {size_key}={raw_size!r} must be whole numbers"
        if size < 1 or not 0 <= rank < size:
            return f"{rank_key}={rank} is not a rank of {size_key}={size} (ranks are 0 to {size_key} - 1)"
        return None
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


# ------------------------------------------------------------------------------ wrapped executors

RECORDER_ATTR = "_popviz_recorder"


def recorder_of(executor: Any) -> Recorder | None:
    """The recorder of a wrapped executor, None when it is not wrapped."""
    return type(executor).__dict__.get(RECORDER_ATTR)
