"""Stream copies by destination from a ``profile.pop`` (read through libpva by
:mod:`popviz.sources.pva`, which calls :func:`collect` for each stream-copy step while it reads
the execution).

libpva has no field saying where a stream copy goes. The destination is inferred by
:func:`popviz.model.measured.classify_stream`: first from the op types in the debug contexts of
the operations that run the program (``pva.OperationAnalysis(report).operations``,
``op.programs()``, ``op.debugContext.json``), else from the program's name. Bytes moved are
``step.ipus[k].dataIn`` / ``dataOut`` (Graphcore's ``reptil`` libpva helper, its
``IO.Bandwidth._calculate_bandwidth``, sums them over StreamCopyMid steps); every name is
optional.
"""

from __future__ import annotations

import json
from itertools import compress
from typing import Any

from popviz.model.measured import StreamCopyTable, classify_stream


def collect(copies: dict, run: int, program: tuple[str, str], ipus: Any, cycles: list[int]) -> None:
    """Add one stream-copy step (its IPUs' cycles, and bytes where libpva gives them) to
    ``copies``: ``{(run, ipu, (program, type)): [steps, cycles, bytes_in, bytes_out]}``; a byte count
    libpva lacks makes that entry's bytes None."""
    for k, ipu_step in compress(enumerate(ipus), cycles):
        entry = copies.get((run, k, program))
        if entry is None:
            entry = copies[(run, k, program)] = [0, 0, 0, 0]
        entry[0] += 1
        entry[1] += int(cycles[k])
        for slot, name in ((2, "dataIn"), (3, "dataOut")):
            value = getattr(ipu_step, name, None)
            if entry[slot] is None or not isinstance(value, (int, float)) or value < 0:
                entry[slot] = None
            else:
                entry[slot] += int(value)


def _op_types(pva: Any, pva_report: Any, programs: set[str]) -> dict[str, set[str]]:
    """Op types (PopTorch/PopART debug contexts) of the operations that run each program in
    ``programs``; empty without ``OperationAnalysis`` or debug contexts."""
    analysis = getattr(pva, "OperationAnalysis", None)
    out: dict[str, set[str]] = {}
    if analysis is None or not programs:
        return out
    try:
        operations = list(analysis(pva_report).operations)
    except Exception:  # libpva's own exception types: the debug contexts are optional
        return out
    for op in operations:
        context = getattr(getattr(op, "debugContext", None), "json", None)
        try:
            doc = json.loads(context) if isinstance(context, (str, bytes)) else dict(context or {})
            names = [str(p.name) for p in op.programs()]
        except (ValueError, TypeError, AttributeError):
            continue
        op_type = doc.get("op_type") if isinstance(doc, dict) else None
        if not isinstance(op_type, str):
            continue
        for name in names:
            if name in programs:
                out.setdefault(name, set()).add(op_type)
    return out


def stream_table(pva: Any, pva_report: Any, copies: dict) -> StreamCopyTable:
    """The stream-copy table from what :func:`collect` gathered."""
    import pandas as pd

    programs = {key[2][0] for key in copies}
    types = _op_types(pva, pva_report, programs)
    placed = {p: classify_stream(p, types.get(p, ())) for p in programs}
    placed = {key[2]: placed[key[2][0]] for key in copies}
    keys = sorted(copies)
    rows = [copies[k] for k in keys]
    return StreamCopyTable(pd.DataFrame({
        "run": [k[0] for k in keys], "ipu": [k[1] for k in keys], "program": [k[2][0] for k in keys],
        "program_type": [k[2][1] for k in keys],
        "destination": [placed[k[2]][0] for k in keys], "rule": [placed[k[2]][1] for k in keys],
        "steps": [r[0] for r in rows], "cycles": [r[1] for r in rows],
        "data_in_bytes": pd.array([r[2] for r in rows], dtype="Int64"),
        "data_out_bytes": pd.array([r[3] for r in rows], dtype="Int64")}))


def note(table: StreamCopyTable | None) -> str | None:
    """What the profile did not give about its stream copies (a provenance note), or None."""
    if table is None or table.frame.empty:
        return None
    missing = []
    if not table.measured_bytes:
        missing.append("bytes per copy (step.ipus[k].dataIn/dataOut)")
    unknown = table.frame.loc[table.frame["destination"] == "unknown", "program"].nunique()
    if unknown:
        missing.append(f"the destination of {unknown} stream-copy program(s) (neither debug contexts "
                       "nor names tell host from remote buffer)")
    return ("not in this profile: " + "; ".join(missing)) if missing else None
