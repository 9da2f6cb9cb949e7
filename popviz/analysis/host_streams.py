"""Stream copies split by destination for the host-I/O analysis: host copies (what HIO001
judges), remote-buffer copies (streaming memory: offloaded optimizer state, replicated tensor
sharding; HIO004, a memory/offload figure with its own lever), mixed and unknown, per IPU; and
the host bandwidth achieved per call, measured where the profile gives bytes, else estimated from
the tensor sizes the capture hooks recorded.

The destination comes from the report's stream-copy table (:mod:`popviz.model.measured`; the
rule and how it fails are in docs/sources.md). Copies of unknown destination are counted as host
copies, as popviz counted every stream copy before it could tell them apart, and the evidence
says how many there were.
"""

from __future__ import annotations

from typing import Any

from popviz.analysis._common import nbytes, pct
from popviz.analysis.findings import Collector
from popviz.analysis.thresholds import STREAM_COPY_WARN_FRAC
from popviz.model import Report
from popviz.model.measured import stream_copies

WAIT_TYPES = ("StreamCopyBegin", "StreamCopyEnd")
HOST_SIDE = ("host", "unknown")
"""Destinations the host-I/O findings count (unknown: as before the split, labelled)."""


def _known(value: Any) -> bool:
    import pandas as pd

    return value is not None and not pd.isna(value)


def split(report: Report, runs: list[int]) -> dict[int, dict[str, Any]] | None:
    """Per IPU, cycles by destination over ``runs``: ``host`` (host + unknown), ``host_wait``
    (their Begin/End), ``host_transfer`` (their Mid), ``remote``, ``mixed``, ``unknown`` and the
    bytes in/out of the host copies (None where not measured). None without a table."""
    table = stream_copies(report)
    if table is None:
        return None
    part = table.by_destination(runs)
    out: dict[int, dict[str, Any]] = {}
    for row in part.itertuples(index=False):
        d = out.setdefault(int(row.ipu), {"host": 0, "host_wait": 0, "host_transfer": 0, "remote": 0,
                                          "mixed": 0, "unknown": 0, "host_in_bytes": 0, "host_out_bytes": 0,
                                          "remote_bytes": 0})
        cycles = int(row.cycles)
        if row.destination in HOST_SIDE:
            d["host"] += cycles
            d["host_wait" if row.program_type in WAIT_TYPES else "host_transfer"] += cycles
            for key, value in (("host_in_bytes", row.data_in_bytes), ("host_out_bytes", row.data_out_bytes)):
                d[key] = d[key] + int(value) if d[key] is not None and _known(value) else None
        if row.destination == "unknown":
            d["unknown"] += cycles
        elif row.destination == "remote buffer":
            d["remote"] += cycles
            moved = (row.data_in_bytes, row.data_out_bytes)
            d["remote_bytes"] = (d["remote_bytes"] + int(moved[0]) + int(moved[1])
                                 if d["remote_bytes"] is not None and all(map(_known, moved)) else None)
        elif row.destination == "mixed":
            d["mixed"] += cycles
    return out


def rules(report: Report) -> str:
    """How the destinations were told apart (for the caption)."""
    table = stream_copies(report)
    if table is None or table.frame.empty:
        return ""
    used = sorted(set(table.frame["rule"].unique().tolist()) - {"none"})
    source = "the source's debug contexts and program names" if "debug context" in used else "program names"
    return f"destinations from {source}" if used else "no copy's destination could be told"


def bandwidth(report: Report, runs: list[int], split_rows: dict[int, dict[str, Any]] | None,
              seconds: float | None, metrics: dict[str, Any]) -> str | None:
    """Host bytes per second over a call: measured (profile bytes over run time) or estimated
    (the hooks' tensor sizes over the call's device time); sets the metrics; the caption part."""
    measured = None
    if split_rows:
        ins = [d["host_in_bytes"] for d in split_rows.values()]
        outs = [d["host_out_bytes"] for d in split_rows.values()]
        if all(v is not None for v in ins + outs) and sum(ins) + sum(outs) > 0:
            measured = (sum(ins) + sum(outs)) / len(runs)
    metrics["host_bytes_per_call"] = measured
    metrics["host_bytes_basis"] = "measured" if measured is not None else None
    if measured is None:
        in_b, out_b = metrics.get("input_bytes_per_call"), metrics.get("output_bytes_per_call")
        if in_b is not None or out_b is not None:
            metrics["host_bytes_per_call"] = (in_b or 0) + (out_b or 0)
            metrics["host_bytes_basis"] = "estimated"
    moved = metrics["host_bytes_per_call"]
    if not moved or not seconds:
        metrics["host_bytes_per_second"] = None
        return None
    metrics["host_bytes_per_second"] = moved / seconds
    label = ("measured: step dataIn/dataOut over the run's time" if metrics["host_bytes_basis"] == "measured"
             else "estimated from the recorded tensor sizes")
    return f"host I/O {nbytes(moved)} per call, {moved / seconds / 1e9:,.2f} GB/s ({label})"


def remote_finding(report: Report, o: Collector, rows: list[dict[str, Any]]) -> None:
    """HIO004: remote-buffer (streaming memory) copies take a real share of an IPU's cycles. Not
    host I/O: the lever is where the state lives and how often it moves."""
    worst = max(rows, key=lambda r: r.get("remote_buffer_frac") or 0.0, default=None)
    if worst is None or (worst.get("remote_buffer_frac") or 0) < STREAM_COPY_WARN_FRAC:
        return
    k, frac = worst["ipu"], worst["remote_buffer_frac"]
    cfg = report.cfg
    moved = worst.get("remote_buffer_bytes_per_call")
    evidence = (f"copies to and from remote buffers (streaming memory) take {pct(frac)} of IPU{k}'s cycles in "
                f"a call" + (f", {nbytes(moved)} per call (measured)" if moved else "")
                + "; they are not host I/O, so no host-side change (data loading, device iterations, "
                "output mode) shortens them")
    levers = []
    r = cfg.replication_factor or (report.target.num_replicas if report.target else None) or 1
    if r > 1:
        levers.append("shard the offloaded optimizer state over the replicas, so each moves 1/R of it: "
                      "opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings()"
                      ".useOnChipStorage(False).useReplicatedTensorSharding(True))")
    if cfg.mode == "training":
        g = cfg.gradient_accumulation
        levers.append("the state moves once per weight update: a larger opts.Training.gradientAccumulation"
                      + (f" (now {g})" if g else "") + " spreads it over more micro-batches")
    levers.append("where the memory analysis finds room on chip (no MEM001/MEM002/MEM005 for this IPU), "
                  "keep the state there: poptorch.TensorLocationSettings().useOnChipStorage(True)")
    rec = "; ".join(levers[:1]) + "".join(f"; or {lv}" for lv in levers[1:]) + "."
    o.find("HIO004", "info" if frac < 2 * STREAM_COPY_WARN_FRAC else "warning",
           f"Streaming-memory copies take {pct(frac)} of IPU{k}'s cycles (not host I/O)",
           evidence, rec[0].upper() + rec[1:])
