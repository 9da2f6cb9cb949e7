"""The DataFrames behind popviz's figures, one function per figure (units in column names).

``Report.steps()``, ``Report.stage_cycles()``, ``Report.memory_by_ipu()``, ... call these, and
``popviz.plot`` draws them, so a figure and the table a notebook shows never disagree. Where an
analysis computes the figure (stage and IPU cycles, memory per IPU, output modes), the table is
built from that analysis's metrics, so the console and the plots agree too. The model does not
import the analyses (they sit above it): it calls ``popviz._hooks.analysis_metrics``, which the
package face sets to ``popviz.analysis``'s registry when popviz is imported. No matplotlib here.

Data a table needs and the report lacks raises :class:`MissingDataError`, one line naming the
engine, what is missing and why (an out-of-memory compile has no execution; an emulated report
has per-IPU memory only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from popviz.errors import PopvizError

if TYPE_CHECKING:
    import pandas as pd

    from popviz.model import Report


class MissingDataError(PopvizError):
    """The report lacks the data a table or figure needs."""


TIMELINE_CATEGORIES = ("forward", "backward", "weight update", "compute", "exchange", "host copy", "streaming memory",
                       "sync / idle", "other")
"""What a step is, as the timeline colours it (``steps()["category"]``)."""

SHARE_PARTS = ("compute", "exchange", "sync / idle", "host copy")
"""The parts of a call ``time_shares`` splits each IPU's cycles into (then ``other``)."""


def share_column(part: str) -> str:
    """``"sync / idle"`` -> ``"sync_idle_pct"``."""
    return part.replace(" / ", "_").replace(" ", "_") + "_pct"


def category(program: str, program_type: str) -> str:
    """The timeline category of a step, from its program type (and name, for compute)."""
    if program_type.startswith("StreamCopy"):
        return "host copy"
    if program_type == "Sync":
        return "sync / idle"
    if program_type in ("GlobalExchange", "DoExchange") or "exchange" in program_type.lower():
        return "exchange"
    if program_type == "OnTileExecute":
        name = program.lower()
        if "backward" in name or "grad" in name:
            return "backward"
        if "update" in name or "optimi" in name or "weight" in name:
            return "weight update"
        if "forward" in name:
            return "forward"
        return "compute"
    return "other"


def _oom(report: Report) -> bool:
    mem = report.memory
    return mem is not None and bool((mem.frame["overflow_bytes"] > 0).any())


NOT_REACHED = "not_reached"
"""``config.options`` key the reader sets on an engine the capture recorded with no call when the
run record says the script did not run to its end (``--calls N``, a failure): why."""


def no_call_recorded(report: Report) -> bool:
    """Only the capture hooks' record of an engine: no call, no compile (nor a failed one), no
    profile."""
    h = report.host_io
    return (report.provenance is not None and report.provenance.source == "capture" and report.execution is None
            and report.memory is None and h is not None and h.calls == 0 and h.compile_seconds is None
            and h.compile_error is None)


def not_reached(report: Report) -> str | None:
    """Why the script never got to call this engine, when its capture ended early (``--calls N``
    stopped it, or it failed): the script itself may call it later."""
    reason = report.config.options.get(NOT_REACHED) if report.config is not None else None
    return reason if no_call_recorded(report) and isinstance(reason, str) else None


def never_called(report: Report) -> bool:
    """The capture hooks' record of an engine the script built but never called or compiled
    although it ran to its end (e.g. its loop over an empty ``poptorch.DataLoader`` never ran):
    no compile, no profile, no call. On an IPU such an engine leaves no Poplar profile either."""
    return no_call_recorded(report) and not_reached(report) is None


def compile_failed(report: Report) -> str | None:
    """The error a compile raised (not out of memory: that leaves a memory profile), when nothing
    else of the engine exists."""
    h = report.host_io
    if report.execution is None and report.memory is None and h is not None and h.compile_error:
        return h.compile_error
    return None


def unrun_reason(report: Report) -> str | None:
    """Why an engine has nothing to analyse: never called (RUN001), not reached, or its compile
    failed (RUN002); None when it ran (or left a profile)."""
    if never_called(report):
        return "the engine was never called (RUN001): nothing was traced, compiled or run"
    reason = not_reached(report)
    if reason is not None:
        return f"the engine was not reached ({reason}): nothing was traced, compiled or run"
    if compile_failed(report):
        return "its compile failed (RUN002): nothing ran"
    return None


def no_execution_reason(report: Report) -> str:
    """Why a report has no execution profile, as far as it tells."""
    if _oom(report):
        return "the compile ran out of memory, so the engine never ran"
    unrun = unrun_reason(report)
    if unrun is not None:
        return unrun
    if report.provenance.source == "capture":
        return "only the capture hooks' record was found, no Poplar profile"
    return "no execution profile was recorded: the engine did not run, or execution profiling was off"


def need_execution(report: Report):  # -> ExecutionTable
    if report.execution is None:
        raise MissingDataError(f"engine '{report.label}' has no execution table ({no_execution_reason(report)})")
    return report.execution


def need_memory(report: Report):  # -> MemoryTable
    if report.memory is None:
        raise MissingDataError(f"engine '{report.label}' has no memory table "
                               f"({unrun_reason(report) or 'the report has no memory figures'})")
    return report.memory


def analysis_metrics(report: Report, analysis: str) -> dict[str, Any]:
    from popviz import _hooks

    if _hooks.analysis_metrics is None:
        raise MissingDataError(f"engine '{report.label}': no analyses are installed to compute the "
                               f"{analysis} table (import popviz first)")
    return _hooks.analysis_metrics(report, analysis)


def call_run(report: Report) -> int:
    """The first run of the execution profile that is an executor call."""
    from popviz.model.aggregate import cycle_totals

    runs = cycle_totals(need_execution(report)).calls()
    if not runs:
        raise MissingDataError(f"engine '{report.label}' has no run with on-tile compute")
    return runs[0]


# ------------------------------------------------------------------------------------ the tables

def steps(report: Report, run: int | None = None) -> pd.DataFrame:
    """One executor call's steps in time order per IPU: ``ipu``, ``program``, ``program_type``,
    ``cycles``, ``start_cycle``, ``end_cycle`` (steps without a recorded start follow the previous
    step on their IPU) and the timeline ``category`` (categorical, in TIMELINE_CATEGORIES order).
    ``run`` defaults to the first call."""
    import numpy as np
    import pandas as pd

    execution = need_execution(report)
    if run is None:
        run = call_run(report)
    s = execution.read(runs=[run])  # one run's rows (a table out of core reads only their row groups)
    if s.empty:
        from popviz.model.aggregate import cycle_totals

        runs = cycle_totals(execution).runs_with_steps()
        shown = ", ".join(map(str, runs[:10])) + (f" ... ({len(runs)} runs)" if len(runs) > 10 else "")
        raise MissingDataError(f"engine '{report.label}' has no steps in run {run}; its runs: {shown or 'none'}")
    s = s.sort_values(["ipu", "step"], kind="stable")
    cycles = s["cycles"].to_numpy(dtype="int64")
    start = s["start_cycle"].to_numpy(dtype="float64", na_value=np.nan)
    if np.isnan(start).any():  # lay out steps without a start one after another per IPU
        ipu = s["ipu"].to_numpy()
        cum = np.cumsum(cycles)
        first = np.r_[True, ipu[1:] != ipu[:-1]]
        base = np.maximum.accumulate(np.where(first, np.arange(len(ipu)), 0))
        offset = cum - cycles - (cum[base] - cycles[base])
        start = np.where(np.isnan(start), offset, start)
    # The category of each distinct (program, type) pair, spread by code: no per-row Python.
    pcodes = s["program"].cat.codes.to_numpy().astype("int64")
    tcodes = s["program_type"].cat.codes.to_numpy().astype("int64")
    ntypes = max(1, len(s["program_type"].cat.categories))
    pairs, inverse = np.unique(pcodes * ntypes + tcodes, return_inverse=True)
    programs = s["program"].cat.categories
    types = s["program_type"].cat.categories
    from popviz.model.measured import stream_copies

    streams = stream_copies(report)  # copies to remote buffers are streaming memory, not host
    remote = (set(streams.frame.loc[streams.frame["destination"] == "remote buffer", "program"])
              if streams is not None else set())
    pair_category = np.array([TIMELINE_CATEGORIES.index(
        "streaming memory" if str(programs[k // ntypes]) in remote and str(types[k % ntypes]).startswith("StreamCopy")
        else category(str(programs[k // ntypes]), str(types[k % ntypes]))) for k in pairs], dtype="int8")
    out = s[["ipu", "program", "program_type", "cycles"]].copy()
    out["start_cycle"] = start.astype("int64")
    out["end_cycle"] = out["start_cycle"] + cycles
    out["category"] = pd.Categorical.from_codes(pair_category[inverse.ravel()], categories=list(TIMELINE_CATEGORIES))
    return out.reset_index(drop=True)


def _cycle_types(frame: pd.DataFrame) -> pd.DataFrame:
    """Cycles are whole numbers (per micro-batch rounded to the nearest cycle; null when
    unknown); ``idle_pct`` a float."""
    frame["cycles_per_micro_batch"] = frame["cycles_per_micro_batch"].astype("float64").round().astype("Int64")
    frame["idle_pct"] = frame["idle_pct"].astype("float64")
    frame["total_cycles"] = frame["total_cycles"].astype("Int64")
    return frame


def stage_cycles(report: Report) -> pd.DataFrame:
    """Per pipeline stage: ``stage``, ``ipu``, ``blocks``, ``cycles_per_micro_batch`` (whole
    cycles, rounded; null when the batching is unknown), ``total_cycles`` (over the calls counted), ``idle_pct`` and
    ``bottleneck`` (every stage tied for the most cycles; none when all are equal). Empty when the
    report has no stages; MissingDataError when it has stages but no execution profile (an
    out-of-memory compile). When stages share an IPU the profile cannot split that IPU's cycles
    between them: their cycles are null, ``bottleneck`` marks every stage on the busiest IPU, and
    :func:`ipu_cycles` has the per-IPU figures."""
    import pandas as pd

    m = analysis_metrics(report, "pipeline")
    if m["stages"]:
        need_execution(report)  # an out-of-memory compile has stages but no cycles: say why, not rows of nulls
    per_ipu = m.get("balance_basis") == "ipu"
    rows = [{"stage": s["index"], "ipu": s["ipu"], "blocks": ", ".join(s["blocks"]),
             "cycles_per_micro_batch": s.get("cycles"), "total_cycles": s.get("total_cycles"),
             "idle_pct": None if s.get("idle_frac") is None else 100 * s["idle_frac"],
             "bottleneck": (s["ipu"] == m["bottleneck_ipu"]) if per_ipu else s["index"] == m["bottleneck_stage"]}
            for s in m["stages"]]
    columns = ["stage", "ipu", "blocks", "cycles_per_micro_batch", "total_cycles", "idle_pct", "bottleneck"]
    frame = pd.DataFrame(rows, columns=columns)
    if not per_ipu:
        frame["bottleneck"] = _slowest(frame)
    return _cycle_types(frame)


def _slowest(frame: pd.DataFrame) -> list[bool]:
    """Every row whose cycles equal the largest (stages tied for slowest are all the bottleneck);
    none when every row is as slow (a balanced pipeline has no bottleneck) or the cycles are unknown."""
    from popviz.model.numbers import tied_for_most

    cycles = frame["total_cycles"]
    if len(frame) < 2 or cycles.isna().any():  # the analysis' choice stands
        return [bool(b) for b in frame["bottleneck"]]
    return tied_for_most([float(c) for c in cycles])


def ipu_cycles(report: Report) -> pd.DataFrame:
    """Per IPU that runs pipeline stages: ``ipu``, ``stages`` (their indices, comma-separated),
    ``blocks``, ``cycles_per_micro_batch``, ``total_cycles``, ``idle_pct`` and ``bottleneck``.
    Filled when stages share an IPU (balance is then measured per IPU); otherwise the same figures
    as :func:`stage_cycles`, one row per stage's IPU. Empty when the report has no stage cycles."""
    import pandas as pd

    m = analysis_metrics(report, "pipeline")
    if m["stages"]:
        need_execution(report)
    blocks: dict[int, list[str]] = {}
    for s in m["stages"]:
        blocks.setdefault(s["ipu"], []).extend(s["blocks"])
    if m.get("balance_basis") == "ipu":
        source = [(r["ipu"], r["stages"], r["cycles"], r["total_cycles"], r["idle_frac"]) for r in m["ipus"]]
    else:
        source = [(s["ipu"], [s["index"]], s.get("cycles"), s.get("total_cycles"), s.get("idle_frac"))
                  for s in m["stages"] if s.get("total_cycles") is not None]
    rows = [{"ipu": ipu, "stages": ", ".join(map(str, st)), "blocks": ", ".join(blocks.get(ipu, [])),
             "cycles_per_micro_batch": c, "total_cycles": t,
             "idle_pct": None if f is None else 100 * f, "bottleneck": ipu == m.get("bottleneck_ipu")}
            for ipu, st, c, t, f in source]
    columns = ["ipu", "stages", "blocks", "cycles_per_micro_batch", "total_cycles", "idle_pct", "bottleneck"]
    frame = pd.DataFrame(rows, columns=columns)
    frame["bottleneck"] = _slowest(frame)
    return _cycle_types(frame)


def memory_by_ipu(report: Report) -> pd.DataFrame:
    """Per IPU: ``used_bytes`` (including gaps), ``capacity_bytes``, ``used_pct``,
    ``gaps_bytes`` (used minus the bytes the categories account for), the tile counts where known
    (``tiles_over_90pct``, ``tiles_overflowing``) and one ``<category>_bytes`` column per memory
    category."""
    import pandas as pd

    need_memory(report)
    m = analysis_metrics(report, "memory")
    rows = []
    for r in m["ipus"]:
        cats = r.get("categories") or {}
        row = {"ipu": r["ipu"], "used_bytes": r["used_bytes"], "capacity_bytes": r["capacity_bytes"],
               "used_pct": r["used_pct"], "gaps_bytes": max(0, r["used_bytes"] - sum(cats.values())) if cats else 0,
               "tiles_over_90pct": r.get("tiles_over_90pct"), "tiles_overflowing": r.get("tiles_overflowing")}
        row.update({f"{k}_bytes" if f"{k}_bytes" not in row else f"cat_{k}_bytes": v for k, v in cats.items()})
        rows.append(row)
    frame = pd.DataFrame(rows)
    for col in ("capacity_bytes", "tiles_over_90pct", "tiles_overflowing"):
        frame[col] = frame[col].astype("Int64")
    frame["used_pct"] = frame["used_pct"].astype("float64")
    return frame


def category_columns(frame: pd.DataFrame) -> list[str]:
    """The memory category columns of a ``memory_by_ipu`` frame."""
    fixed = {"used_bytes", "capacity_bytes", "gaps_bytes"}
    return [c for c in frame.columns if c.endswith("_bytes") and c not in fixed]


def tile_memory(report: Report) -> pd.DataFrame:
    """Per tile: ``ipu``, ``tile``, ``used_bytes`` (including gaps), ``used_pct`` of the tile's
    capacity (NaN without a target) and ``overflowing``."""
    mem = need_memory(report)
    if mem.level != "tile":
        why = ("the emulator does not estimate single tiles" if report.provenance.estimated
               else "its source gives no per-tile figures")
        raise MissingDataError(f"engine '{report.label}' has per-IPU memory only ({why})")
    f = mem.frame
    per_tile = report.target.bytes_per_tile if report.target else None
    out = f[["ipu", "tile"]].copy()
    out["used_bytes"] = f["total_bytes_including_gaps"]
    out["used_pct"] = 100.0 * out["used_bytes"] / per_tile if per_tile else float("nan")
    out["overflowing"] = f["overflow_bytes"] > 0
    return out


def time_shares(report: Report) -> pd.DataFrame:
    """Per IPU, the share (%) of the executor calls' cycles in compute, exchange, sync/idle and
    host copy, and other (``compute_pct``, ``exchange_pct``, ``sync_idle_pct``, ``host_copy_pct``,
    ``other_pct``: they add up to 100)."""
    import pandas as pd

    from popviz.model.aggregate import cycle_totals

    totals = cycle_totals(need_execution(report))
    runs = totals.calls()
    if not runs:
        raise MissingDataError(f"engine '{report.label}' has no run with on-tile compute")
    agg = totals.by_ipu_type(runs)
    compute = ("compute", "forward", "backward", "weight update")
    parts = {t: ("compute" if category("", t) in compute else category("", t))
             for t in agg["program_type"].unique()}
    table = agg.assign(part=agg["program_type"].map(parts)).pivot_table(
        index="ipu", columns="part", values="cycles", aggfunc="sum", fill_value=0)
    for p in SHARE_PARTS:
        if p not in table:
            table[p] = 0
    other = [c for c in table.columns if c not in SHARE_PARTS]
    total = table.sum(axis=1)
    out = pd.DataFrame({"ipu": table.index.astype(int)})
    for p in SHARE_PARTS:
        out[share_column(p)] = (100.0 * table[p] / total).to_numpy()
    out["other_pct"] = (100.0 * table[other].sum(axis=1) / total).to_numpy() if other else 0.0
    return out.reset_index(drop=True)


def output_modes(report: Report) -> pd.DataFrame:
    """Per output mode PopTorch offers for this model: ``output_mode``, ``return_period`` (EveryN's
    N: the model's own, or D for the alternative that returns once per call; null for the others),
    ``outputs_per_call``, ``output_bytes_per_call`` (null when tensor sizes were not recorded) and
    ``current``."""
    import pandas as pd

    m = analysis_metrics(report, "host_io")
    alternatives = {k: v for k, v in (m.get("alternatives") or {}).items() if v}
    if not alternatives:
        unrun = unrun_reason(report)
        if unrun:  # its batching may be recorded: what is missing is what its outputs weigh
            raise MissingDataError(f"engine '{report.label}' has no output sizes per output mode ({unrun})")
        raise MissingDataError(f"engine '{report.label}' has no recorded output mode and batching (record them "
                               "by running under popviz capture)")
    current = m.get("output_mode")
    rows = [{"output_mode": mode, "return_period": a.get("return_period"),
             "outputs_per_call": a.get("outputs_per_call"),
             "output_bytes_per_call": a.get("output_bytes_per_call"), "current": mode == current}
            for mode, a in alternatives.items()]
    frame = pd.DataFrame(rows)
    frame["return_period"] = frame["return_period"].astype("Int64")
    frame["output_bytes_per_call"] = frame["output_bytes_per_call"].astype("Int64")
    return frame


__all__ = ["SHARE_PARTS", "TIMELINE_CATEGORIES", "MissingDataError", "category", "memory_by_ipu",
           "output_modes", "share_column", "stage_cycles", "steps", "tile_memory", "time_shares"]
