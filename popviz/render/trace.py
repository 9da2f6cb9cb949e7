"""A report's execution as a trace for Perfetto (ui.perfetto.dev) and chrome://tracing.

Per engine, one process with these tracks:

- ``IPU<k> program steps``: every step of the execution table on IPU k, named by its program
  and categorised by its program type (``OnTileExecute``, ``Sync``, ``StreamCopyBegin``, ...);
- ``IPU<k> pipeline stages``: IPU k's compute steps (``OnTileExecute``) named by the pipeline
  stage they run (from the program name, ``stage2/forward``, or from the stage the configuration
  places on that IPU), so the tracks of all IPUs draw the pipeline's ramp and steady state;
- ``host: executor``: the compile and each execution run (a call of the engine) as the capture
  hooks recorded them;
- ``host: transfers``: per call, the host-to-IPU and IPU-to-host latency the hooks measured
  (the median over the calls they timed: the hooks keep statistics, not a per-call timeline)
  with the bytes one call carries.

Times: the IPU's cycles over its clock (the target's, else Mk2's 1.33 GHz, said in the trace);
the compile first, then the runs one after another. Each engine is a process of its own,
starting at 0: engines are not on a common clock.

Two formats (:data:`FORMATS`): Perfetto's protobuf ``TracePacket`` / ``TrackEvent`` stream
(``.pftrace``; written here with the protobuf wire format directly, field numbers from Perfetto's
``protos/perfetto/trace/trace_packet.proto`` and ``track_event/track_event.proto``, names
interned so a large trace stays small) and the Chrome JSON trace event format (``.json``:
"Trace Event Format", complete ``X`` events and ``M`` metadata events, which chrome://tracing
and Perfetto both open). Past ``max_events`` slices, each IPU's steps are merged into groups of
consecutive steps (a slice per group, named by its dominant program type, with each type's
cycles as arguments), so a POD64 report stays openable. Every name from the report goes through
:func:`popviz.escape.term` (one printable line) and is cut to MAX_NAME_CHARS.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from popviz import escape as esc

FORMATS = ("perfetto", "json")
DEFAULT_MAX_EVENTS = 200_000
"""Slices in one trace before steps are merged: a Chrome JSON trace of this many is about 25 MB
(chrome://tracing's practical limit is a few hundred MB), a Perfetto protobuf trace about 10 MB,
and either is written in well under a minute."""
MAX_NAME_CHARS = 200
DEFAULT_CLOCK_HZ = 1.33e9
"""Mk2's IPU clock (popviz.testing.HARDWARE): used when the report has no target."""
COMPUTE = "OnTileExecute"
STAGE_PROGRAM = re.compile(r"stage[_ ]?(\d+)(?:[/_. -]+(\w+))?", re.IGNORECASE)

# Perfetto protobuf field numbers (protos/perfetto/trace/trace.proto, trace_packet.proto,
# track_event/track_descriptor.proto, track_event.proto, debug_annotation.proto,
# interned_data/interned_data.proto in github.com/google/perfetto)
_TRACE_PACKET = 1
_P_TIMESTAMP, _P_SEQ_ID, _P_TRACK_EVENT, _P_INTERNED, _P_SEQ_FLAGS, _P_TRACK_DESCRIPTOR = 8, 10, 11, 12, 13, 60
_TD_UUID, _TD_NAME, _TD_PROCESS, _TD_PARENT, _TD_CHILD_ORDERING, _TD_RANK = 1, 2, 3, 5, 11, 12
_PD_PID, _PD_NAME = 1, 6
_TE_CATEGORY_IIDS, _TE_DEBUG, _TE_TYPE, _TE_NAME_IID, _TE_TRACK_UUID = 3, 4, 9, 10, 11
_DA_NAME_IID, _DA_INT, _DA_STRING = 1, 4, 6
_ID_CATEGORIES, _ID_NAMES, _ID_ANNOTATION_NAMES = 1, 2, 3
_SLICE_BEGIN, _SLICE_END = 1, 2
_SEQ_CLEARED, _SEQ_NEEDS_STATE = 1, 2
_ORDER_EXPLICIT = 3
_SEQUENCE = 1


@functools.lru_cache(maxsize=65536)
def name(value: object) -> str:
    """A name from the report as a trace shows it: one printable line, at most MAX_NAME_CHARS."""
    text = esc.term(value)
    return text if len(text) <= MAX_NAME_CHARS else text[:MAX_NAME_CHARS - 1] + "…"


@dataclass
class Track:
    uuid: int
    name: str
    process: int
    """uuid of its process's track (0 for a process's own track)."""
    pid: int
    rank: int = 0


@dataclass
class Slice:
    track: int
    start_ns: int
    dur_ns: int
    name: str
    category: str
    args: dict[str, int | str] = field(default_factory=dict)


@dataclass
class Trace:
    processes: list[Track] = field(default_factory=list)
    tracks: list[Track] = field(default_factory=list)
    slices: list[Slice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    merged_steps: int = 0
    """Steps per merged slice (0: every step is a slice of its own)."""

    @property
    def ipus(self) -> int:
        return sum(t.name.endswith("program steps") for t in self.tracks)


def _stage_names(report: Any) -> dict[int, str]:
    """``{ipu: "stage 2"}`` from the configuration (``stages 0, 4`` for an IPU running two)."""
    out: dict[int, list[int]] = {}
    for s in report.cfg.stages if report.has("config") else ():
        out.setdefault(int(s.ipu), []).append(int(s.index))
    return {ipu: ("stage " if len(ix) == 1 else "stages ") + ", ".join(map(str, ix)) for ipu, ix in out.items()}


def _stage_label(program: str, fallback: str) -> str:
    m = STAGE_PROGRAM.search(program)
    if m:
        return f"stage {int(m.group(1))}" + (f" {m.group(2).lower()}" if m.group(2) else "")
    return name(f"{fallback}: {program}")  # the stage(s) the configuration puts on the IPU


def build(reports: Sequence[Any], *, max_events: int = DEFAULT_MAX_EVENTS) -> Trace:
    """The trace of ``reports``' executions (each with an execution table)."""
    import numpy as np
    import pandas as pd

    trace = Trace()
    total_steps = sum(len(r.execution.steps) for r in reports if r.execution is not None)
    host_slices = sum(3 * (len(r.execution.runs) + 1) for r in reports if r.execution is not None)
    pairs = sum(int(r.execution.steps.groupby(["run", "ipu"], observed=True).ngroups)
                for r in reports if r.execution is not None)
    # each (run, IPU)'s last group may be short: room for one more slice per pair and track
    budget = max(1, max_events - host_slices - 2 * pairs)
    # each step is a slice on its IPU's steps track; each compute step one more on its stages track
    k = max(1, math.ceil(2 * total_steps / budget))
    trace.merged_steps = k if k > 1 else 0
    if k > 1:
        trace.notes.append(f"{total_steps:,} steps are more than {max_events:,} events: every {k:,} consecutive "
                           "steps of an IPU are one slice, named by the program type with the most cycles")
    uuid = 0
    for pid, report in enumerate((r for r in reports if r.execution is not None), start=1):
        uuid += 1
        estimated = bool(report.provenance.estimated)
        proc = Track(uuid, name(report.label) + (" (estimated)" if estimated else ""), 0, pid)
        trace.processes.append(proc)
        clock = float(report.target.clock_hz) if report.target is not None and report.target.clock_hz else 0.0
        if not clock > 0:
            clock = DEFAULT_CLOCK_HZ
            trace.notes.append(f"{name(report.label)}: the report has no IPU clock; 1.33 GHz (Mk2) assumed")
        ns_per_cycle = 1e9 / clock
        rank = 0

        def track(title: str) -> Track:
            nonlocal uuid, rank
            uuid += 1
            rank += 1
            t = Track(uuid, title, proc.uuid, pid, rank)  # noqa: B023 (bound per engine, used at once)
            trace.tracks.append(t)
            return t

        host = track("host: executor")
        transfers = track("host: transfers")
        steps = report.execution.steps
        ipus = sorted(int(i) for i in steps["ipu"].unique())
        step_tracks = {}
        stage_tracks = {}
        for ipu in ipus:
            step_tracks[ipu] = track(f"IPU{ipu} program steps")
            stage_tracks[ipu] = track(f"IPU{ipu} pipeline stages")
        stage_of_ipu = _stage_names(report)
        hio = report.host_io
        compile_ns = 0
        if hio is not None and hio.compile_seconds:
            compile_ns = int(round(hio.compile_seconds * 1e9))
            trace.slices.append(Slice(host.uuid, 0, compile_ns, "compile", "host",
                                      {"seconds": f"{hio.compile_seconds:.6g}"}))
        calls = hio.calls if hio is not None else None
        stats = {s.metric: s for s in (hio.call_stats if hio is not None else ())}
        in_bytes = sum(t.bytes for t in hio.inputs) if hio is not None else 0
        out_bytes = sum(t.bytes for t in hio.outputs) if hio is not None else 0
        runs = report.execution.runs
        durations = {int(r): float(d) for r, d in zip(runs["run"], runs["duration_seconds"], strict=True)}
        run_names = {int(r): name(n) for r, n in zip(runs["run"], runs["name"], strict=True)}
        offset = compile_ns
        ordered = steps.sort_values(["run", "ipu", "step"], kind="stable")
        programs = pd.Categorical(ordered["program"].astype(str)) \
            if not isinstance(ordered["program"].dtype, pd.CategoricalDtype) else ordered["program"].array
        types = pd.Categorical(ordered["program_type"].astype(str)) \
            if not isinstance(ordered["program_type"].dtype, pd.CategoricalDtype) else ordered["program_type"].array
        program_names = [name(c) for c in programs.categories]
        type_names = [name(c) for c in types.categories]
        ordered = ordered.assign(_p=np.asarray(programs.codes, dtype=np.int64), _t=np.asarray(types.codes, dtype=np.int64))
        for run_id, part in ordered.groupby("run", sort=True, observed=True):
            run_id = int(run_id)
            run_start = offset
            run_end_cycles = 0
            for ipu, mine in part.groupby("ipu", sort=True, observed=True):
                ipu = int(ipu)
                cycles = mine["cycles"].to_numpy(dtype=np.int64)
                known = mine["start_cycle"]
                if known.isna().any():  # unknown start: one step after another
                    start = np.concatenate([[0], np.cumsum(cycles)[:-1]])
                else:
                    start = known.to_numpy(dtype=np.int64)
                end = start + cycles
                if len(end):
                    run_end_cycles = max(run_end_cycles, int(end.max()))
                fallback = stage_of_ipu.get(ipu, "compute")
                _add_steps(trace, (step_tracks[ipu].uuid, stage_tracks[ipu].uuid), run_start, ns_per_cycle,
                           start, cycles, mine["_p"].to_numpy(), mine["_t"].to_numpy(), program_names, type_names,
                           fallback, k)
            span_ns = int(round(run_end_cycles * ns_per_cycle))
            wall = durations.get(run_id, float("nan"))
            call_ns = int(round(wall * 1e9)) if math.isfinite(wall) and wall > 0 else span_ns
            args: dict[str, int | str] = {"ipu_cycles": run_end_cycles}
            if math.isfinite(wall):
                args["wall_seconds"] = f"{wall:.6g}"
            if calls is not None:
                args["calls_recorded"] = int(calls)
            trace.slices.append(Slice(host.uuid, run_start, call_ns, run_names.get(run_id, f"run{run_id}"),
                                      "host", args))
            inputs_end = run_start
            for metric, title, at_end, nbytes in (("host_ipu_latency_seconds", "host→IPU inputs", False, in_bytes),
                                                  ("ipu_host_latency_seconds", "IPU→host outputs", True, out_bytes)):
                stat = stats.get(metric)
                value = stat.p50 if stat is not None and stat.p50 is not None else None
                if value is None or not math.isfinite(value) or value < 0:
                    continue
                dur = min(int(round(value * 1e9)), call_ns)
                t0 = run_start + call_ns - dur if at_end else run_start
                if at_end and t0 < inputs_end:  # the two never overlap on their track
                    t0, dur = inputs_end, max(0, run_start + call_ns - inputs_end)
                if not at_end:
                    inputs_end = t0 + dur
                trace.slices.append(Slice(transfers.uuid, t0, dur, title, "host",
                                          {"bytes_per_micro_batch": int(nbytes),
                                           "statistic": f"median of {stat.count} call(s) timed by the hooks"}))
            offset = run_start + max(call_ns, span_ns)
    return trace


def _add_steps(trace: Trace, tracks: tuple[int, int], origin_ns: int, ns_per_cycle: float, start: Any,
               cycles: Any, pcode: Any, tcode: Any, program_names: list[str], type_names: list[str],
               fallback: str, k: int) -> None:
    """One IPU's steps of one run as slices on its steps and stages ``tracks`` (merged ``k`` at a
    time when ``k > 1``: the steps' cycles per program type as arguments)."""
    import numpy as np

    n = len(cycles)
    if not n:
        return
    steps_track, stages_track = tracks
    end = start + cycles
    prev = np.concatenate([[0], np.maximum.accumulate(end)[:-1]])
    s = np.maximum(start, prev)  # steps of one IPU never overlap on its track
    e = np.maximum(end, s)
    compute = type_names.index(COMPUTE) if COMPUTE in type_names else -1
    labels = sorted({_stage_label(program_names[c], fallback) for c in np.unique(pcode[tcode == compute])})
    label_of = {c: labels.index(_stage_label(program_names[c], fallback))
                for c in np.unique(pcode[tcode == compute])}
    if k > 1:
        idx = np.arange(0, n, k)
        s, e = s[idx], np.maximum.reduceat(e, idx)
        counts = np.diff(np.append(idx, n))
        present = [int(t) for t in np.unique(tcode)]
        per_type = {t: np.add.reduceat(np.where(tcode == t, cycles, 0), idx) for t in present}
        stacked = np.stack([per_type[t] for t in present])
        top = [present[i] for i in np.argmax(stacked, axis=0)]
        if compute >= 0:
            lab = np.array([label_of.get(int(c), -1) for c in range(len(program_names))], dtype=np.int64)[pcode]
            masked = np.where(tcode == compute, lab, len(labels))
            lo_lab = np.minimum.reduceat(masked, idx)
            hi_lab = np.maximum.reduceat(np.where(tcode == compute, lab, -1), idx)
    ts = origin_ns + np.rint(s * ns_per_cycle).astype(np.int64)
    te = origin_ns + np.rint(e * ns_per_cycle).astype(np.int64)
    add = trace.slices.append
    for i in range(len(ts)):
        t0, dur = int(ts[i]), int(te[i] - ts[i])
        if k == 1:
            t, c = int(tcode[i]), int(cycles[i])
            program = program_names[int(pcode[i])]
            add(Slice(steps_track, t0, dur, program, type_names[t], {"cycles": c}))
            if t == compute:
                add(Slice(stages_track, t0, dur, labels[label_of[int(pcode[i])]], COMPUTE,
                          {"cycles": c, "program": program}))
            continue
        args: dict[str, int | str] = {"steps": int(counts[i])}
        args.update({f"cycles.{type_names[t]}": int(per_type[t][i]) for t in present if per_type[t][i]})
        add(Slice(steps_track, t0, dur, f"{int(counts[i])} steps: {type_names[top[i]]}", type_names[top[i]], args))
        if compute >= 0 and per_type.get(compute) is not None and per_type[compute][i]:
            first, last = labels[int(lo_lab[i])], labels[int(hi_lab[i])]
            add(Slice(stages_track, t0, dur, first if first == last else f"{first} … {last}", COMPUTE,
                      {"cycles": int(per_type[compute][i])}))


# ----------------------------------------------------------------------------- Chrome JSON

def to_chrome_json(trace: Trace) -> bytes:
    """The Trace Event Format: a ``traceEvents`` array of ``M`` (process and thread names, sort
    order) and ``X`` (complete: ``ts`` and ``dur`` in microseconds) events."""
    tid_of = {t.uuid: (t.pid, t.rank) for t in trace.tracks}
    events: list[dict[str, Any]] = []
    for p in trace.processes:
        events.append({"ph": "M", "name": "process_name", "pid": p.pid, "tid": 0, "args": {"name": p.name}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": p.pid, "tid": 0, "args": {"sort_index": p.pid}})
    for t in trace.tracks:
        events.append({"ph": "M", "name": "thread_name", "pid": t.pid, "tid": t.rank, "args": {"name": t.name}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": t.pid, "tid": t.rank,
                       "args": {"sort_index": t.rank}})
    for s in sorted(trace.slices, key=lambda s: (tid_of[s.track], s.start_ns)):
        pid, tid = tid_of[s.track]
        events.append({"ph": "X", "name": s.name, "cat": s.category, "pid": pid, "tid": tid,
                       "ts": s.start_ns / 1e3, "dur": s.dur_ns / 1e3, "args": s.args})
    doc = {"traceEvents": events, "displayTimeUnit": "ns",
           "otherData": {"producer": "popviz trace", "notes": trace.notes}}
    return (json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":")) + "\n").encode()


# ----------------------------------------------------------------------------- Perfetto protobuf

_SMALL = [bytes((i,)) for i in range(128)]


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 two's complement, as protobuf encodes negative int64
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _uint(field_no: int, n: int) -> bytes:
    return _varint(field_no << 3) + _varint(n)


def _bytes(field_no: int, payload: bytes) -> bytes:
    return _varint(field_no << 3 | 2) + _varint(len(payload)) + payload


def _str(field_no: int, text: str) -> bytes:
    return _bytes(field_no, text.encode("utf-8", "replace"))


def _packet(payload: bytes) -> bytes:
    return _bytes(_TRACE_PACKET, payload)


def to_perfetto(trace: Trace) -> bytes:
    """Perfetto's ``Trace`` protobuf: track descriptors (a process track per engine, its tracks
    ordered under it), then a ``TYPE_SLICE_BEGIN`` / ``TYPE_SLICE_END`` pair per slice on one
    packet sequence in time order, event names, categories and argument names interned in its
    first packet."""
    import heapq

    names: dict[str, int] = {}
    cats: dict[str, int] = {}
    arg_names: dict[str, int] = {}
    for sl in trace.slices:
        names.setdefault(sl.name, len(names) + 1)
        cats.setdefault(sl.category, len(cats) + 1)
        for k in sl.args:
            arg_names.setdefault(k, len(arg_names) + 1)
    interned = b"".join(_bytes(_ID_NAMES, _uint(1, i) + _str(2, n)) for n, i in names.items())
    interned += b"".join(_bytes(_ID_CATEGORIES, _uint(1, i) + _str(2, c)) for c, i in cats.items())
    interned += b"".join(_bytes(_ID_ANNOTATION_NAMES, _uint(1, i) + _str(2, k)) for k, i in arg_names.items())
    out = [_packet(_uint(_P_SEQ_ID, _SEQUENCE) + _uint(_P_SEQ_FLAGS, _SEQ_CLEARED) + _bytes(_P_INTERNED, interned))]
    for p in trace.processes:
        desc = (_uint(_TD_UUID, p.uuid) + _bytes(_TD_PROCESS, _uint(_PD_PID, p.pid) + _str(_PD_NAME, p.name))
                + _uint(_TD_CHILD_ORDERING, _ORDER_EXPLICIT))
        out.append(_packet(_uint(_P_SEQ_ID, _SEQUENCE) + _bytes(_P_TRACK_DESCRIPTOR, desc)))
    for t in trace.tracks:
        desc = (_uint(_TD_UUID, t.uuid) + _str(_TD_NAME, t.name) + _uint(_TD_PARENT, t.process)
                + _uint(_TD_RANK, t.rank))
        out.append(_packet(_uint(_P_SEQ_ID, _SEQUENCE) + _bytes(_P_TRACK_DESCRIPTOR, desc)))

    per_track: dict[int, list[Slice]] = {}
    for sl in trace.slices:
        per_track.setdefault(sl.track, []).append(sl)

    def track_events(slices: list[Slice]) -> list[tuple[int, bool, Slice]]:
        ordered = sorted(slices, key=lambda x: x.start_ns)  # stable: a track's slices never overlap
        return [e for x in ordered for e in ((x.start_ns, True, x), (x.start_ns + x.dur_ns, False, x))]

    # the parts that repeat, encoded once
    key_packet, key_ts = _varint(_TRACE_PACKET << 3 | 2), _varint(_P_TIMESTAMP << 3)
    key_event, key_debug = _varint(_P_TRACK_EVENT << 3 | 2), _varint(_TE_DEBUG << 3 | 2)
    key_int = _varint(_DA_INT << 3)
    head = _uint(_P_SEQ_ID, _SEQUENCE) + _uint(_P_SEQ_FLAGS, _SEQ_NEEDS_STATE)
    begins = {t: _uint(_TE_TYPE, _SLICE_BEGIN) + _uint(_TE_TRACK_UUID, t) for t in per_track}
    ends = {t: _bytes(_P_TRACK_EVENT, _uint(_TE_TYPE, _SLICE_END) + _uint(_TE_TRACK_UUID, t)) for t in per_track}
    name_part = {n: _uint(_TE_NAME_IID, i) for n, i in names.items()}
    cat_part = {c: _uint(_TE_CATEGORY_IIDS, i) for c, i in cats.items()}
    arg_part = {k: _uint(_DA_NAME_IID, i) for k, i in arg_names.items()}
    varint = _varint
    # each track's events in its own order (a begin, then its end), the tracks merged by time
    for ts, begin, sl in heapq.merge(*(track_events(v) for v in per_track.values()), key=lambda e: e[0]):
        if begin:
            parts = [begins[sl.track], name_part[sl.name], cat_part[sl.category]]
            for k, v in sl.args.items():
                value = _str(_DA_STRING, v) if isinstance(v, str) else key_int + varint(int(v))
                ann = arg_part[k] + value
                parts += (key_debug, varint(len(ann)), ann)
            ev = b"".join(parts)
            body = b"".join((key_ts, varint(ts), head, key_event, varint(len(ev)), ev))
        else:
            body = b"".join((key_ts, varint(ts), head, ends[sl.track]))
        out += (key_packet, varint(len(body)), body)
    return b"".join(out)


def format_for(path: str, chosen: str | None) -> str:
    """``chosen``, else by the file's name: ``.json`` Chrome JSON, anything else Perfetto's protobuf."""
    if chosen:
        return chosen
    return "json" if path.lower().endswith(".json") else "perfetto"
