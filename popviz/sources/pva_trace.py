"""Host traces: PopVision System Analyser files (``.pvti``, one per process, written where
``PVTI_OPTIONS`` says: ``popviz capture --pvti`` puts them in the capture directory) read
through libpva.

Names from Graphcore's tutorial (graphcore/tutorials ``tutorials/popvision/reading_pvti_files/
walkthrough.py`` @ b7ffa4d): ``pva.openTrace(path)``, ``trace.processes[i].pid`` / ``.threads``,
``thread.tid`` / ``.events``, ``event.label`` / ``.channel`` / ``.timestamp`` / ``.duration``
(microseconds) / ``.children()``. The labels are PopTorch's (graphcore/poptorch
``python/profiling.py``: a tracepoint is labelled ``<channel>.<name>``;
``python/_poplar_executor.py``: channel ``poptorch.trainingModel`` or
``poptorch.inferenceModel``, tracepoint ``modelExecution`` around each executor call,
``modelCompilation`` around the compile; ``python/__init__.py``: the dataset's ``__getitem__``
on channel ``dataset``, the DataLoader's channel ``poptorch.DataLoader``).

Per executor call (one ``modelExecution`` event), the host time since the previous call
returned is split into data loading (data events in that gap, on any thread of the process,
clipped to it) and the rest (the Python loop, waiting); the call itself is the executor's time.
Each trace's process is matched to a PopRun instance by the pid the capture hooks recorded in
that instance's ``popviz-model.json`` (``process.pid``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from popviz.errors import shown
from popviz.model import Report
from popviz.model.measured import HostTrace

TRACE_SUFFIX = ".pvti"
EXECUTION_TRACEPOINT = "modelExecution"
ENGINE_CHANNELS = {"poptorch.trainingModel": "training", "poptorch.inferenceModel": "inference"}
DATA_CHANNELS = ("dataset", "poptorch.DataLoader")
DATA_LABELS = ("__getitem__", "DataLoader", "dataloader")
MAX_TRACES = 256
"""``.pvti`` files read at most (one per process of the run)."""


def find_traces(root: Path) -> list[Path]:
    """``.pvti`` files in ``root`` and up to two directory levels below (instances, engines)."""
    if not root.is_dir():
        return []
    found = []
    for pattern in ("*" + TRACE_SUFFIX, "*/*" + TRACE_SUFFIX, "*/*/*" + TRACE_SUFFIX):
        found += [p for p in root.glob(pattern) if p.is_file()]
    return sorted(set(found))[:MAX_TRACES]


def _text(value: Any) -> str:
    name = getattr(value, "name", None)
    name = name() if callable(name) else name
    return str(name if name is not None else value or "")


def _is_data(label: str, channel: str) -> bool:
    return channel in DATA_CHANNELS or any(d in label for d in DATA_LABELS)


def _engine_of(label: str, channel: str) -> str | None:
    """``training`` / ``inference`` for an executor call's event, else None."""
    if not label.endswith(EXECUTION_TRACEPOINT):
        return None
    for prefix, mode in ENGINE_CHANNELS.items():
        if channel == prefix or label.startswith(prefix + "."):
            return mode
    return "unknown"


def _overlap(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of ``intervals`` within [lo, hi] (sorted by start)."""
    total, reach = 0.0, lo
    for a, b in intervals:
        a, b = max(a, reach), min(b, hi)
        if b > a:
            total += b - a
            reach = b
        if a >= hi:
            break
    return total


def read_trace(pva: Any, path: Path, instance_of: dict[int, str]) -> dict[str, tuple[list, list]]:
    """Per engine mode: (call rows, thread rows) of one trace file."""
    trace = pva.openTrace(str(path))
    out: dict[str, tuple[list, list]] = {}
    first = None
    for process in trace.processes:
        pid = int(process.pid)
        instance = instance_of.get(pid, "")
        calls: list[tuple[str, int, float, float]] = []  # (mode, tid, start, end) in µs
        data: list[tuple[float, float]] = []
        threads = []
        for thread in process.threads:
            tid = int(thread.tid)
            events = list(thread.events)
            busy = load = execu = 0.0
            for event in events:
                start, dur = float(event.timestamp), max(0.0, float(event.duration))
                first = start if first is None else min(first, start)
                label, channel = _text(event.label), _text(getattr(event, "channel", ""))
                busy += dur
                mode = _engine_of(label, channel)
                if mode is not None:
                    calls.append((mode, tid, start, start + dur))
                    execu += dur
                stack = [(event, label, channel)]
                while stack:  # data loading may sit under a user's own tracepoint
                    ev, lab, chan = stack.pop()
                    if _is_data(lab, chan):
                        s0 = float(ev.timestamp)
                        data.append((s0, s0 + max(0.0, float(ev.duration))))
                        if ev is event:
                            load += max(0.0, float(ev.duration))
                        continue
                    children = ev.children() if callable(getattr(ev, "children", None)) else ()
                    stack.extend((c, _text(c.label), _text(getattr(c, "channel", ""))) for c in children or ())
            threads.append([instance, pid, tid, len(events), busy / 1e6, load / 1e6, execu / 1e6])
        data.sort()
        for mode in sorted({c[0] for c in calls}):
            mine = sorted((c for c in calls if c[0] == mode), key=lambda c: c[2])
            rows = []
            for k, (_m, tid, start, end) in enumerate(mine):
                if k == 0:
                    rows.append([instance, pid, tid, k, start, (end - start) / 1e6, None, None])
                    continue
                gap_lo = mine[k - 1][3]
                gap = max(0.0, start - gap_lo)
                loading = min(gap, _overlap(data, gap_lo, start))
                rows.append([instance, pid, tid, k, start, (end - start) / 1e6, loading / 1e6,
                             (gap - loading) / 1e6])
            calls_rows, thread_rows = out.setdefault(mode, ([], []))
            calls_rows += rows
            thread_rows += threads
    for calls_rows, _threads in out.values():
        for row in calls_rows:
            row[4] = (row[4] - (first or 0.0)) / 1e6
    return out


def _pids(reports: list[Report]) -> dict[int, str]:
    """pid -> instance, from each engine's ``popviz-model.json`` (``process.pid``)."""
    from popviz.sources.manifest import MODEL_FILE

    out = {}
    for r in reports:
        if not r.path:
            continue
        try:
            doc = json.loads((Path(r.path) / MODEL_FILE).read_text(encoding="utf-8"))
            pid = doc["process"]["pid"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(pid, int) and not isinstance(pid, bool):
            out[pid] = r.instance or ""
    return out


def attach(root: Path, reports: list[Report]) -> tuple[list[Report], list[str]]:
    """``reports`` with each engine's host trace (matched by PopTorch's channel: training or
    inference, and by instance), and warnings for traces that could not be read."""
    import pandas as pd

    traces = find_traces(root)
    if not traces:
        return reports, []
    try:
        import pva  # type: ignore[import-not-found]
    except ImportError:
        return reports, [f"{len(traces)} host trace(s) (.pvti) in {shown(root)} not read: they need libpva "
                         "(the pva module of the Poplar SDK)"]
    if getattr(pva, "openTrace", None) is None:
        return reports, ["host traces (.pvti) not read: this libpva has no openTrace"]
    instance_of = _pids(reports)
    per_mode: dict[str, tuple[list, list]] = {}
    files: dict[str, list[str]] = {}
    warnings = []
    for path in traces:
        try:
            got = read_trace(pva, path, instance_of)
        except Exception as exc:  # libpva's own exception types
            warnings.append(f"{shown(path)}: libpva cannot read this host trace ({exc}); it is left out")
            continue
        for mode, (calls, threads) in got.items():
            c, t = per_mode.setdefault(mode, ([], []))
            c += calls
            t += threads
            files.setdefault(mode, []).append(path.name)
    out = []
    modes = set(per_mode)
    for r in reports:
        mode = r.cfg.mode
        key = mode if mode in modes else ("unknown" if "unknown" in modes else
                                          next(iter(modes)) if len(modes) == 1 and mode is None else None)
        if key is None:
            out.append(r)
            continue
        calls, threads = per_mode[key]
        calls = [c for c in calls if not r.instance or c[0] == r.instance or not c[0]]
        threads = [t for t in threads if not r.instance or t[0] == r.instance or not t[0]]
        call_frame = pd.DataFrame(calls, columns=["instance", "pid", "tid", "call", "start_seconds",
                                                  "executor_seconds", "data_loading_seconds",
                                                  "other_host_seconds"])
        thread_frame = pd.DataFrame(threads, columns=["instance", "pid", "tid", "events", "busy_seconds",
                                                      "data_loading_seconds", "executor_seconds"])
        for frame in (call_frame, thread_frame):
            for col in frame.columns:
                if col.endswith("_seconds"):
                    frame[col] = frame[col].astype("float64")
        out.append(r.replace(host_trace=HostTrace(call_frame, thread_frame.drop_duplicates(),
                                                  tuple(files[key]))))
    return out, warnings
