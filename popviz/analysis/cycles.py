"""Where the cycles of a call go: the elapsed cycles of every IPU split into useful stage work,
the weight update, waiting for the slowest stage (imbalance), waiting during ramp-up/ramp-down
and syncs, inter-IPU copies, host transfers and anything else.

Counted in IPU-cycles: the calls' elapsed cycles times the number of IPUs. Every IPU's own
cycles add up to the elapsed cycles (idle time is in its Sync steps), so the shares add up to
100%, and ``useful + weight update`` is the IPU utilisation the pipeline table shows.

Per IPU ``i`` (C = stage compute, b = the bottleneck IPU):

* ``useful``: OnTileExecute + DoExchange outside the weight update;
* ``weight_update``: OnTileExecute + DoExchange in programs named like a weight update
  (``weightUpdate``, ``optimizer``...; 0 when the profile names none);
* ``imbalance``: Sync cycles up to ``C_b - C_i``, the wait for the slowest stage;
* ``ramp``: the remaining Sync cycles: waiting while the pipeline fills and drains (a ramp cycle
  lasts as long as the stages working in it, so this is time, not a count of cycles);
* ``host``: StreamCopyBegin/Mid/End, and the Sync cycles (after the imbalance wait) up to the
  stream-copy cycles of the other IPUs: waiting while another IPU copies to or from the host;
* ``exchange``: GlobalExchange (inter-IPU copies) and the fixed cost of the syncs (number of
  Sync steps × the shortest one);
  ``other``: any other program type.

Ramp efficiency (time-weighted) is the bottleneck IPU's share of its stage-work-or-wait time
spent working: ``C_b / (C_b + ramp_b)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from popviz.analysis.thresholds import RAMP_EFFICIENCY_TARGET_FRAC
from popviz.model import STREAM_COPY_TYPES
from popviz.model.aggregate import cycle_totals

if TYPE_CHECKING:
    import pandas as pd

    from popviz.model import ExecutionTable

WORK_TYPES = ("OnTileExecute", "DoExchange")
PARTS = ("useful", "weight_update", "imbalance", "ramp", "exchange", "host", "remote", "other")
"""The shares, in the order they are shown."""
LABELS = {"useful": "useful work", "weight_update": "weight update", "imbalance": "imbalance wait",
          "ramp": "ramp wait", "exchange": "sync & inter-IPU copies",
          "host": "host transfers (incl. IPUs waiting on another's)",
          "remote": "streaming-memory copies",
          "other": "other"}


def weight_update_cycles(execution: ExecutionTable, runs: list[int]) -> dict[int, int]:
    """Per IPU, the work cycles of programs named like a weight update in the given runs (the
    program names are matched once per distinct name, not per step)."""
    return cycle_totals(execution).weight_update(runs)


def sync_floor_cycles(execution: ExecutionTable, runs: list[int]) -> dict[int, int]:
    """Per IPU, the fixed cost of its syncs: the number of Sync steps times the shortest one (a
    sync in which the IPU was the last to arrive costs only the sync itself)."""
    return {ipu: count * least for ipu, (count, _, least) in cycle_totals(execution).sync(runs).items()}


def decompose(by_type: pd.DataFrame, ipus: list[int], elapsed: int,
              weight_update: dict[int, int], sync_floor: dict[int, int] | None = None,
              remote: dict[int, int] | None = None) -> dict[str, Any] | None:
    """The shares of ``len(ipus) × elapsed`` IPU-cycles (``by_type``: cycles per IPU and program
    type over the calls, from ``RunCycles.by_ipu_type``). None when nothing elapsed. ``remote``:
    per IPU, the stream-copy cycles that move remote buffers (streaming memory, not the host):
    counted, with the waits for other IPUs' remote copies, as ``remote``."""
    if elapsed <= 0 or not ipus:
        return None
    part = by_type[by_type["ipu"].isin(ipus)]
    by = part.groupby(["ipu", "program_type"])["cycles"].sum()
    per: dict[int, dict[str, int]] = {i: {} for i in ipus}
    for (ipu, ptype), cycles in by.items():
        per[int(ipu)][str(ptype)] = int(cycles)
    work = {i: sum(per[i].get(t, 0) for t in WORK_TYPES) - weight_update.get(i, 0) for i in ipus}
    busiest = max(work.values())
    sums = dict.fromkeys(PARTS, 0)
    ramp_by_ipu = {}
    remote = {i: (remote or {}).get(i, 0) for i in ipus}
    copy_of = {i: sum(per[i].get(t, 0) for t in STREAM_COPY_TYPES) for i in ipus}
    all_copy, all_remote = sum(copy_of.values()), sum(remote.values())
    host_by_ipu = {}
    for i in ipus:
        cyc = per[i]
        sync = cyc.get("Sync", 0)
        host = copy_of[i] - remote[i]
        exchange = cyc.get("GlobalExchange", 0)
        known = sum(cyc.get(t, 0) for t in (*WORK_TYPES, "Sync", "GlobalExchange", *STREAM_COPY_TYPES))
        total = sum(cyc.values())
        # An IPU shorter than the call (no closing sync in the profile) waited for the rest.
        sync += max(0, elapsed - total)
        imbalance = min(sync, max(0, busiest - work[i]))
        # Waiting while another IPU copies (to or from the host, or a remote buffer) counts as
        # that copy's time: streaming memory first, up to the others' remote copies.
        copy_wait = min(sync - imbalance, all_copy - copy_of[i])
        remote_wait = min(copy_wait, all_remote - remote[i])
        host_wait = copy_wait - remote_wait
        fixed = min(sync - imbalance - copy_wait, (sync_floor or {}).get(i, 0))
        ramp_by_ipu[i] = sync - imbalance - copy_wait - fixed
        sums["useful"] += work[i]
        sums["weight_update"] += weight_update.get(i, 0)
        sums["imbalance"] += imbalance
        sums["ramp"] += ramp_by_ipu[i]
        sums["exchange"] += exchange + fixed
        sums["host"] += host + host_wait
        sums["remote"] += remote[i] + remote_wait
        host_by_ipu[i] = host + host_wait
        sums["other"] += total - known
    budget = sum(sums.values())  # = len(ipus) × elapsed unless an IPU ran longer than the call
    b = max(ipus, key=lambda i: work[i])
    ramp_eff = work[b] / (work[b] + ramp_by_ipu[b]) if work[b] + ramp_by_ipu[b] else None
    return {
        "elapsed_cycles": int(elapsed), "ipus": len(ipus), "ipu_cycles": int(budget),
        **{f"{p}_cycles": int(sums[p]) for p in PARTS},
        **{f"{p}_frac": sums[p] / budget for p in PARTS},
        "bottleneck_ipu": int(b), "ramp_efficiency_frac": ramp_eff,
        # the host time no IPU is free of (its copies, or its waits on another's): what a call
        # without host I/O could save at most, every IPU's other cycles staying
        "least_host_cycles": int(min(host_by_ipu.values())),
    }


def shares_line(shares: dict[str, Any], sharded: bool = False) -> str:
    """``where the cycles go: useful work 61.9% · imbalance wait 22.0% · ...`` (non-zero parts).
    Sharded stages run one after another: their wait is for the other stages, not a ramp."""
    labels = {**LABELS, "ramp": "wait for other stages"} if sharded else LABELS
    parts = [f"{labels[p]} {100 * shares[f'{p}_frac']:.1f}%" for p in PARTS if shares[f"{p}_cycles"]]
    return "where the cycles go: " + " · ".join(parts)


def ramp_hidden_by_host(m: dict[str, Any]) -> bool:
    """The time-weighted ramp efficiency is high only because the bottleneck's waits while the
    pipeline fills coincide with the other IPUs' host copies, which the breakdown counts as host
    time (the count bound is below the target)."""
    shares = m.get("cycle_shares") or {}
    return (m.get("ramp_efficiency_basis") == "time" and m.get("ramp_efficiency_frac") is not None
            and m["ramp_efficiency_frac"] >= RAMP_EFFICIENCY_TARGET_FRAC
            and (m.get("ramp_efficiency_count_frac") or 1.0) < RAMP_EFFICIENCY_TARGET_FRAC
            and not shares.get("ramp_cycles") and bool(shares.get("host_cycles") or shares.get("remote_cycles")))
