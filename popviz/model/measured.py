"""Tables only a real run measures (or that a source derives from one): stream copies by
destination, Lightweight Profiling blocks and host-trace (``.pvti``) calls.

Each is an optional part of a :class:`~popviz.model.Report` (``streams``, ``blocks``,
``host_trace``); an analysis reads the table, never the source that filled it. Where a report
has no ``streams`` table, :func:`stream_copies` derives one from the execution table by program
name alone (the rule of :func:`classify_stream`), so estimated and bundled reports are read by
the same rule, labelled with the evidence it used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from popviz.model.tables import ModelError, _coerce, _frames_equal

if TYPE_CHECKING:
    import pandas as pd

    from popviz.model import ExecutionTable, Report

DESTINATIONS = ("host", "remote buffer", "mixed", "unknown")
"""Where a stream copy moves data: the host (inputs, outputs, weights from/to host), a remote
buffer in streaming memory (offloaded optimizer state, replicated tensor sharding, offloaded
weights), both in one program, or not known."""

REMOTE_OP_TYPES = frozenset({"RemoteLoad", "RemoteStore", "RemoteLoadInplace", "RemoteExchange",
                             "RemoteCodeLoad"})
"""PopART's remote-buffer (streaming memory) op types (graphcore/popart
``willow/include/popart/popx/op/exchange/remotex.hpp``: RemoteLoadOpx, RemoteStoreOpx,
RemoteLoadInplaceOpx; ``codecopyx.cpp``: code loaded from streaming memory)."""

HOST_OP_TYPES = frozenset({"HostLoad", "HostStore", "HostLoadInplace", "Init"})
"""PopART's host-exchange op types (graphcore/popart ``willow/src/popx/op/exchange/hostcopyx.cpp``:
HostLoadOpx, HostStoreOpx; ``exchangex.cpp`` lowers them to copies from/to host streams)."""

REMOTE_NAME = re.compile(r"(?:^|[^A-Za-z0-9])RB_\d+|remote", re.IGNORECASE)
"""A program name naming a remote buffer: PopART names each ``RB_<id>``
(``ExchangeBundle::getRemoteBufferName``, graphcore/popart ``willow/src/popx/exchangebundle.cpp``)
and its ops ``RemoteLoad`` / ``RemoteStore``."""

HOST_NAME = re.compile(r"host|anchor|h2d|d2h|infeed|outfeed|input|output", re.IGNORECASE)
"""A program name naming a host stream: PopART's ``fromHost`` / ``toHost`` streams, anchors
(outputs), ``weightsFromHost`` / ``weightsToHost``, HostLoad / HostStore; popviz's emulator
names its copies after the input or output."""

STREAM_COLUMNS: dict[str, str] = {
    "run": "int32", "ipu": "int32", "program": "str", "program_type": "str", "destination": "str",
    "rule": "str",
    "steps": "int64", "cycles": "int64", "data_in_bytes": "Int64", "data_out_bytes": "Int64",
}
"""The stream-copy table: per run, IPU and stream-copy program, its destination, the evidence
the program's type (StreamCopyBegin/Mid/End), the evidence the destination rests on (``rule``: ``debug context``, ``program name`` or ``none``), the steps
and cycles it took and the bytes it moved (``step.ipus[k].dataIn``/``dataOut``; null where the
profile does not give them)."""


def classify_stream(program: str, op_types: Iterable[str] = ()) -> tuple[str, str]:
    """(destination, rule) of one stream-copy program.

    1. The op types of the operations whose programs include it (PopTorch/PopART debug
       contexts): remote-buffer ops only -> ``remote buffer``; host-exchange ops only -> ``host``;
       both -> ``mixed`` (Poplar merges copies of one exchange into one program).
    2. Else its name: ``RB_<id>`` / ``remote`` -> remote buffer; a host-stream name -> host; both
       -> mixed.
    3. Else ``unknown``. libpva has no field for the destination: a program named neither way
       and without debug contexts cannot be placed (docs/sources.md says how this fails).
    """
    types = set(op_types)
    remote, host = bool(types & REMOTE_OP_TYPES), bool(types & HOST_OP_TYPES)
    if remote or host:
        return ("mixed" if remote and host else "remote buffer" if remote else "host"), "debug context"
    remote, host = bool(REMOTE_NAME.search(program)), bool(HOST_NAME.search(program))
    if remote or host:
        return ("mixed" if remote and host else "remote buffer" if remote else "host"), "program name"
    return "unknown", "none"


class StreamCopyTable:
    """Stream copies per run, IPU and program with their destination (:data:`STREAM_COLUMNS`)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = _coerce(frame, STREAM_COLUMNS, "stream-copy table",
                             optional=("data_in_bytes", "data_out_bytes"))
        bad = set(self.frame["destination"].unique().tolist()) - set(DESTINATIONS)
        if bad:
            raise ModelError(f"stream-copy table: unknown destination(s) {sorted(bad)}; "
                             f"destinations are {', '.join(DESTINATIONS)}")
        for col in ("steps", "cycles", "data_in_bytes", "data_out_bytes"):
            if bool((self.frame[col].fillna(0) < 0).any()):
                raise ModelError(f"stream-copy table column {col} has negative values")

    @property
    def measured_bytes(self) -> bool:
        """Whether the profile gave the bytes each copy moved."""
        return bool(self.frame["data_in_bytes"].notna().any() or self.frame["data_out_bytes"].notna().any())

    def by_destination(self, runs: Iterable[int] | None = None) -> pd.DataFrame:
        """Per IPU, destination and program type: cycles, steps and bytes in/out (null where not measured)."""
        f = self.frame
        if runs is not None:
            f = f[f["run"].isin(list(runs))]
        g = f.groupby(["ipu", "destination", "program_type"], sort=True)
        out = g[["steps", "cycles"]].sum()
        for col in ("data_in_bytes", "data_out_bytes"):
            out[col] = g[col].sum(min_count=1)
        return out.reset_index()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamCopyTable) and _frames_equal(self.frame, other.frame)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StreamCopyTable(rows={len(self.frame)})"


def derive_streams(execution: ExecutionTable) -> StreamCopyTable:
    """The stream-copy table of an execution table, each program placed by its name alone (no
    debug contexts, no bytes): the stream-copy groups the one pass over the rows collects
    (:meth:`popviz.model.aggregate.RunCycles.copy_groups`)."""
    import pandas as pd

    from popviz.model.aggregate import cycle_totals

    g = cycle_totals(execution).copy_groups()
    if g.empty:
        return StreamCopyTable(pd.DataFrame({c: [] for c in STREAM_COLUMNS}))
    names = g["program"].cat.categories
    placed = [classify_stream(str(n)) for n in names]
    codes = g["program"].cat.codes.to_numpy()
    return StreamCopyTable(pd.DataFrame({
        "run": g["run"], "ipu": g["ipu"], "program": g["program"].astype("str"),
        "program_type": g["program_type"].astype("str"),
        "destination": [placed[c][0] if c >= 0 else "unknown" for c in codes],
        "rule": [placed[c][1] if c >= 0 else "none" for c in codes],
        "steps": g["steps"], "cycles": g["cycles"]}))


def stream_copies(report: Report) -> StreamCopyTable | None:
    """The report's stream-copy table (its source's, else derived from its execution by program
    name), or None without an execution profile."""
    table = getattr(report, "streams", None)
    if table is not None:
        return table
    if report.execution is None:
        return None
    cached = report.execution.__dict__.get("_popviz_streams")
    if cached is None:
        cached = derive_streams(report.execution)
        report.execution.__dict__["_popviz_streams"] = cached
    return cached


BLOCK_COLUMNS: dict[str, str] = {"ipu": "int32", "tile": "int32", "program": "str", "kind": "str",
                                 "start_cycle": "int64", "end_cycle": "int64"}
"""Lightweight Profiling blocks: per block execution, the IPU and tile that measured it, the
program (block) name, its kind (``common``, ``stream copy``, ``flush``, ``overflow``) and its
start and end cycles (the tile's counter, as libpva gives them)."""

BLOCK_KINDS = ("common", "stream copy", "flush", "overflow")


class BlockTable:
    """Measured start/end cycles of Block programs (Poplar's Lightweight Profiling)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = _coerce(frame, BLOCK_COLUMNS, "block table")
        bad = set(self.frame["kind"]) - set(BLOCK_KINDS)
        if bad:
            raise ModelError(f"block table: unknown kind(s) {sorted(bad)}")
        if bool((self.frame["end_cycle"] < self.frame["start_cycle"]).any()):
            raise ModelError("block table: a block ends before it starts")

    def per_micro_batch(self) -> dict[int, tuple[float, int]]:
        """Per IPU: (cycles of its top-level common blocks per execution of its most executed
        block, that count). Nested blocks (inside another block on the same tile) are not counted
        twice. A stage's programs run once per micro-batch, so this is its measured cycles per
        micro-batch."""
        import numpy as np

        out: dict[int, tuple[float, int]] = {}
        f = self.frame[self.frame["kind"] == "common"]
        for (ipu, _tile), part in f.groupby(["ipu", "tile"], sort=True):
            part = part.sort_values(["start_cycle", "end_cycle"], ascending=[True, False])
            start, end = part["start_cycle"].to_numpy(), part["end_cycle"].to_numpy()
            reach = np.maximum.accumulate(end)
            top = np.ones(len(part), dtype=bool)
            top[1:] = end[1:] > reach[:-1]  # not contained in an earlier block
            cycles = int((end[top] - start[top]).sum())
            count = int(part["program"][top].value_counts().max()) if top.any() else 0
            if count and ipu not in out:
                out[int(ipu)] = (cycles / count, count)
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlockTable) and _frames_equal(self.frame, other.frame)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"BlockTable(rows={len(self.frame)})"


HOST_CALL_COLUMNS: dict[str, str] = {
    "instance": "str", "pid": "int64", "tid": "int64", "call": "int32", "start_seconds": "float64",
    "executor_seconds": "float64", "data_loading_seconds": "float64", "other_host_seconds": "float64",
}
"""Host trace (``.pvti``), one row per executor call: the process (and its PopRun instance),
thread, call index, start (seconds from the trace's first event), and where the host time went:
inside the executor call (PopTorch's ``modelExecution`` tracepoint), loading data before it
(``dataset`` / ``poptorch.DataLoader`` channels) and the rest of the time since the previous
call returned (the Python loop, waiting). The first call has no previous call: its data loading
and other time are null."""

HOST_THREAD_COLUMNS: dict[str, str] = {"instance": "str", "pid": "int64", "tid": "int64",
                                       "events": "int64", "busy_seconds": "float64",
                                       "data_loading_seconds": "float64",
                                       "executor_seconds": "float64"}
"""Host trace per thread: top-level events, the time they cover, and how much of it was data
loading and executor calls."""


class HostTrace:
    """Per-call and per-thread host time from System Analyser traces (``.pvti``)."""

    def __init__(self, calls: pd.DataFrame, threads: pd.DataFrame, files: tuple[str, ...] = ()) -> None:
        self.calls = _coerce(calls, HOST_CALL_COLUMNS, "host-trace calls table")
        self.threads = _coerce(threads, HOST_THREAD_COLUMNS, "host-trace threads table")
        self.files = tuple(files)
        for frame, what in ((self.calls, "calls"), (self.threads, "threads")):
            for col in frame.columns:
                if col.endswith("_seconds") and bool((frame[col].fillna(0) < 0).any()):
                    raise ModelError(f"host-trace {what} table column {col} has negative values")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, HostTrace) and _frames_equal(self.calls, other.calls)
                and _frames_equal(self.threads, other.threads))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"HostTrace(calls={len(self.calls)}, threads={len(self.threads)})"
