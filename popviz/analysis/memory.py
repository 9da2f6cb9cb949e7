"""Memory pressure per IPU: bytes used against capacity, the fullest tile, nearly full and
overflowing tiles, liveness, categories, the spread across IPUs, and the lever that fits.

"Used" is the total including gaps (what the tile's memory really holds, as Poplar's
out-of-memory check counts it). Capacity is ``target.bytes_per_ipu`` / ``bytes_per_tile``.
"""

from __future__ import annotations

from typing import Any

from popviz.analysis import memory_levers as ml
from popviz.analysis import planner
from popviz.analysis._common import mib, nbytes, pct
from popviz.analysis.findings import AnalysisOutput, Collector
from popviz.analysis.thresholds import (
    IPU_FULL_FRAC,
    MAX_MEMORY_LEVERS,
    MEMORY_SPREAD_WARN_FRAC,
    NOT_ALWAYS_LIVE_DOMINANT_FRAC,
    TILE_FULL_FRAC,
    VARIABLE_DOMINANT_FRAC,
)
from popviz.model import CATEGORY_PREFIX, CATEGORY_SUFFIX, Report
from popviz.model.frames import unrun_reason

RECOMPUTE_BACK_ON = ml.RECOMPUTE_BACK_ON
ENABLE_RECOMPUTATION = ml.ENABLE_RECOMPUTATION

NAME = "memory"
OVERFLOWING_TILES_NAMED = 8
"""Overflowing tiles named per IPU (in ``overflowing_tiles`` and MEM001); the rest are counted."""
TILE_CHECK = "fullest tile, tiles above 90%, overflowing tiles"


def empty_metrics() -> dict[str, Any]:
    return {"level": None, "bytes_per_tile": None, "capacity_bytes_per_ipu": None, "ipus": [],
            "fullest_ipu": None, "spread_pct": None, "total_used_bytes": None,
            "total_capacity_bytes": None, "total_over_bytes": None, "liveness": None}


def analyse(report: Report) -> AnalysisOutput:
    o = Collector(NAME, empty_metrics())
    m = o.out.metrics
    mem = report.memory
    if mem is None:
        o.skip("memory pressure", unrun_reason(report) or "no memory data in this report")
        return o.out
    t = report.target
    m["level"] = mem.level
    if t is None:
        o.skip("capacity, fullest tile", "no target in this report: tile and IPU capacity are unknown, "
               "so only bytes are reported")
    else:
        m["bytes_per_tile"] = t.bytes_per_tile
        m["capacity_bytes_per_ipu"] = t.bytes_per_ipu
    rows = _per_ipu(report)
    m["ipus"] = rows
    ignored = report.cfg.options.get("available_memory_proportion_ignored")
    if ignored:  # set by sources.validate
        o.skip("available memory proportion of unused IPUs",
               f"setAvailableMemoryProportion named {', '.join(sorted(ignored, key=lambda k: int(k[3:])))}, "
               "which this model does not use: ignored (the proportions of the IPUs it uses are kept)")
    if mem.level == "ipu":
        o.skip(TILE_CHECK, "the memory figures are per IPU only"
               + (" (an estimate)" if report.provenance.estimated else "")
               + ": how full single tiles get is unknown; confirm the fit with a real compile")
    fracs = {r["ipu"]: r["used_pct"] / 100 for r in rows if r["used_pct"] is not None}
    if fracs:
        full = max(fracs, key=lambda k: fracs[k])
        m["fullest_ipu"] = full
        m["spread_pct"] = 100 * (fracs[full] - min(fracs.values()))
    no_fit = _no_fit(report, o, rows)
    pressured = []
    for row in rows:
        if _ipu_findings(report, o, row, rows, no_fit):
            pressured.append(row)
    if not no_fit:
        _spread(report, o, pressured, rows)
    _table(report, o, rows)
    from popviz.analysis import memory_liveness

    memory_liveness.analyse(report, o)
    return o.out


# ---------------------------------------------------------------------------------------- figures

def _per_ipu(report: Report) -> list[dict[str, Any]]:
    """One dict per IPU (the JSON ``memory.ipus`` rows), computed with a few vectorised passes."""
    mem = report.memory
    t = report.target
    per = mem.per_ipu().set_index("ipu")
    cats = [c for c in per.columns if c.startswith(CATEGORY_PREFIX)]
    tile_stats = None
    if mem.level == "tile" and t is not None:
        f = mem.frame
        inc = f["total_bytes_including_gaps"]
        by_ipu = f["ipu"]
        over = (inc > TILE_FULL_FRAC * t.bytes_per_tile).groupby(by_ipu).sum()
        oom_mask = (f["overflow_bytes"] > 0) | (inc > t.bytes_per_tile)
        oom = oom_mask.groupby(by_ipu).sum()
        named = (f.loc[oom_mask, ["ipu", "tile"]].groupby("ipu")["tile"]
                 .apply(lambda tiles: [int(x) for x in tiles.iloc[:OVERFLOWING_TILES_NAMED]]))
        counts = by_ipu.value_counts()
        top = f.loc[inc.groupby(by_ipu).idxmax(), ["ipu", "tile", "total_bytes_including_gaps"]]
        tile_stats = {int(r.ipu): (int(r.tile), int(r.total_bytes_including_gaps), int(over[r.ipu]),
                                   int(oom[r.ipu]), int(counts[r.ipu]))
                      for r in top.itertuples(index=False)}
    rows = []
    for ipu, r in per.iterrows():
        used = int(r["total_bytes_including_gaps"])
        row: dict[str, Any] = {
            "ipu": int(ipu),
            "used_bytes": used,
            "capacity_bytes": t.bytes_per_ipu if t else None,
            "used_pct": 100 * used / t.bytes_per_ipu if t else None,
            "max_tile": None, "max_tile_bytes": None, "max_tile_pct": None,
            "tiles": None, "tiles_over_90pct": None, "tiles_overflowing": None,
            "overflowing_tiles": None,
            "overflow_bytes": int(r["overflow_bytes"]),
            "always_live_bytes": int(r["always_live_bytes"]),
            "not_always_live_bytes": int(r["not_always_live_bytes"]),
            "categories": {c[len(CATEGORY_PREFIX):-len(CATEGORY_SUFFIX)]: int(r[c]) for c in cats} or None,
        }
        if tile_stats is not None and int(ipu) in tile_stats:
            tile, tile_bytes, n_over, n_oom, n_tiles = tile_stats[int(ipu)]
            row.update(max_tile=tile, max_tile_bytes=tile_bytes,
                       max_tile_pct=100 * tile_bytes / t.bytes_per_tile, tiles=n_tiles,
                       tiles_over_90pct=n_over, tiles_overflowing=n_oom,
                       overflowing_tiles=named.get(int(ipu), []))
        rows.append(row)
    return rows


def _tile_names(row: dict[str, Any]) -> str:
    """``tile 3`` / ``tiles 1, 3`` / ``tiles 1, 3, ... (+N more)``: the overflowing tiles."""
    tiles = row["overflowing_tiles"] or []
    more = row["tiles_overflowing"] - len(tiles)
    return (f"tile{'s' if row['tiles_overflowing'] > 1 else ''} {', '.join(map(str, tiles))}"
            + (f" and {more:,} more" if more > 0 else ""))


def _shares(row: dict[str, Any]) -> tuple[float | None, float | None, str | None, float | None]:
    """(not-always-live share, variable share, largest category, its share) of the IPU's bytes."""
    live = row["always_live_bytes"] + row["not_always_live_bytes"]
    nal = row["not_always_live_bytes"] / live if live else None
    cats = row["categories"]
    if not cats:
        return nal, None, None, None
    total = sum(cats.values())
    if not total:
        return nal, None, None, None
    top = max(cats, key=lambda k: cats[k])
    return nal, cats.get("variable", 0) / total, top, cats[top] / total


# ---------------------------------------------------------------------------------------- findings

def _kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _no_fit(report: Report, o: Collector, rows: list[dict[str, Any]]) -> bool:
    """The model's bytes against the capacity of all its IPUs, first: when the total is over, no
    split of the model fits and moving blocks cannot help (MEM005). True in that case."""
    t = report.target
    if t is None or not rows:
        return False
    m = o.out.metrics
    total = sum(r["used_bytes"] for r in rows)
    capacity = t.bytes_per_ipu * len(rows)
    m.update(total_used_bytes=total, total_capacity_bytes=capacity, total_over_bytes=max(0, total - capacity))
    if total <= capacity:
        return False
    over = total - capacity
    n = len(rows)
    levers = _model_levers(report, rows)
    est = " (estimated)" if report.provenance.estimated else ""
    o.find("MEM005", "error", f"The model does not fit on {n} IPU{'s' if n != 1 else ''}: no split of it can",
           (f"the {n} IPUs hold {nbytes(capacity)}" if n != 1 else f"the IPU holds {nbytes(capacity)}")
           + f"; the model needs {nbytes(total)}{est}, "
           f"{pct(total / capacity)} of {'them combined' if n != 1 else 'it'}, {nbytes(over)} over; per IPU "
           + ", ".join(f"IPU{r['ipu']} {pct(r['used_pct'] / 100, 0)}" for r in rows)
           + ": moving blocks between these IPUs cannot make it fit",
           f"Free about {nbytes(over)} in total{_more_ipus(report, total)}. Levers, largest saving first: "
           + "; ".join(f"({i}) {text}" for i, (text, _change, _sure) in enumerate(levers, 1)) + "."
           + _closing(report, rows, levers, over))
    return True


_pipelined = ml.pipelined


def _more_ipus(report: Report, total: int) -> str:
    """How many IPUs the model needs: ``popviz plan``'s verdict when the report has layers (a split
    must fit every IPU, at layer granularity), else a lower bound from the total bytes."""
    assert report.target is not None
    verdict = ml.fewest_ipus(report)
    if verdict is None:
        need = -(-total // report.target.bytes_per_ipu)
        return (f", or spread the model over at least {need} IPUs (more pipeline stages; a lower bound "
                "from the total bytes: each IPU's share must fit too)")
    k, why = verdict
    if k is not None:
        return f", or spread it over {k} IPUs: `popviz plan --ipus {k}` finds a split that fits"
    return f"; more IPUs alone cannot make it fit: {why}"


def _closing(report: Report, rows: list[dict[str, Any]], levers: list[Lever], over: int) -> str:
    """`` (1) alone closes the gap.`` / `` (1) to (k) together close it.`` / that they do not,
    counting what the levers save together (they overlap: not the sum of their savings) and only
    what the report sizes for certain (not an upper bound)."""
    cats = ml.rows_of(rows)
    changes = [change if sure else None for _text, change, sure in levers]
    if not cats or not any(changes):
        return ""
    k, together = ml.closing(cats, changes, over)
    if k == 1:
        return " (1) alone closes the gap."
    if k is not None:
        return f" (1) to ({k}) together close the gap."
    which = "All of them" if all(changes) else "Those it can size (not the upper bounds)"
    return (f" {which} together save about {nbytes(together)} (not the sum: they overlap), "
            f"{pct(together / over, 0)} of the {nbytes(over)} over: not enough.")


def _half_text(report: Report, temps_shrink: bool) -> str:
    """The ``model.half()`` lever's words (MEM005's and each IPU's): what it halves and what stays
    float32, conditional when the report does not record the model's precision."""
    training = report.cfg.mode == "training"
    kept = ("; the optimizer state and gradient accumulators stay float32 (PopTorch's accum types)"
            if training and ml.accumulators_typed(report) else
            "; the optimizer state stays float32" if training else "")
    cond = ("the model runs in float32: " if ml.precision(report) == "float32" else
            "if the model runs in float32 (the report does not say): ")
    return (f"{cond}model.half() with float16 inputs halves the weights"
            + (", activation stash and temporaries" if temps_shrink else " and activation stash")
            + kept)


Lever = tuple[str, "ml.Change | None", bool]
"""(text, what it changes in the categories, whether its saving is certain rather than an upper bound)."""


def _model_levers(report: Report, rows: list[dict[str, Any]]) -> list[Lever]:
    """Whole-model levers with what each changes (sized from the memory categories), largest
    saving first."""
    cfg = report.cfg
    training = cfg.mode == "training"
    cats: dict[str, int] = {}
    for r in rows:
        for k, v in (r["categories"] or {}).items():
            cats[k] = cats.get(k, 0) + v
    per_ipu = ml.rows_of(rows)
    stash, temps = cats.get("activationStash"), cats.get("temporaries")
    out: list[Lever] = []
    if training and cfg.optimizer_state_on_chip and cats.get("optimizerState"):
        change = ml.offload_optimizer(report)
        streamed = ml.streamed_state(report)
        saved = ml.apply(per_ipu, [change])
        held = ("(each IPU's largest tensor's state stays on chip while its update runs: up to "
                f"{nbytes(max(streamed.values(), default=0))})" if streamed else
                "(less each IPU's largest tensor's state, on chip while its update runs)")
        out.append((f"optimizer state off chip saves {'about' if streamed else 'up to'} {nbytes(saved)} {held}: "
                    "opts.TensorLocations.setOptimizerLocation("
                    "poptorch.TensorLocationSettings().useOnChipStorage(False))", change, streamed is not None))
    if training and cats.get("gradientAccumulators"):
        out.append((f"gradient accumulators off chip save {nbytes(cats['gradientAccumulators'])}: "
                    "opts.TensorLocations.setAccumulatorLocation("
                    "poptorch.TensorLocationSettings().useOnChipStorage(False))", ml.offload_accumulators, True))
    # already recomputing by the report's layers (checkpoints or PopTorch's pipeline default):
    # nothing more to gain this way, as popviz plan has it
    recomputing = report.layers is not None and planner.recomputes(report.layers)
    if training and stash and ml.recomputation_turned_off(report):
        out.append((f"recomputation saves up to about {nbytes(stash // 2)} of the {nbytes(stash)} "
                    f"activation stash: {RECOMPUTE_BACK_ON}", ml.recompute, True))
    elif training and stash and not recomputing and not _pipelined(cfg):
        out.append((f"recomputation saves up to about {nbytes(stash // 2)} of the {nbytes(stash)} "
                    f"activation stash: {ENABLE_RECOMPUTATION}", ml.recompute, True))
    elif training and stash and not recomputing:
        out.append((f"recomputation saves up to about {nbytes(stash // 2)} of the {nbytes(stash)} "
                    "activation stash: poptorch.recomputationCheckpoint(x) on each layer's output "
                    "(optimum-graphcore: recompute_checkpoint_every_layer)", ml.recompute, True))
    if stash or temps:
        change = ml.halve_micro_batch(report)
        what = ("of stash and temporaries" if ml.temporaries_shrink(report, per_ipu) else
                "of activation stash (the temporaries hold the largest tensor's optimizer state, which "
                "does not shrink with the micro-batch)")
        out.append((f"halving the micro-batch size ({ml.keep_batch_text(training)}) saves about "
                    f"{nbytes(ml.apply(per_ipu, [change]))} {what}", change, True))
    prec = ml.precision(report)
    if per_ipu and prec != "float16":
        change = ml.to_float16(report)
        out.append((f"{_half_text(report, ml.temporaries_shrink(report, per_ipu))}: "
                    f"{'about' if prec == 'float32' else 'up to'} "
                    f"{nbytes(ml.apply(per_ipu, [change]))}", change, prec == "float32"))
    out.sort(key=lambda lev: -(ml.apply(per_ipu, [lev[1]]) if lev[1] else 0))
    if not out:
        out.append(("offload the optimizer state, recompute activations, lower the micro-batch "
                    "size or use float16 (the report has no memory categories to size each)", None, False))
    return out


def _ipu_findings(report: Report, o: Collector, row: dict[str, Any], rows: list[dict[str, Any]],
                  no_fit: bool = False) -> bool:
    """Findings for one IPU; True when it is under pressure."""
    t = report.target
    k = row["ipu"]
    mem_level = report.memory.level
    nal, _var, top, top_share = _shares(row)
    liveness = (f"{pct(1 - nal, 0)} always-live / {pct(nal, 0)} not-always-live" if nal is not None
                else "liveness unknown")
    cat = f"; largest category {top} ({pct(top_share, 0)})" if top else ""
    used = (f"IPU{k} is {pct(row['used_pct'] / 100)} full overall ({_mib(row['used_bytes'])} of "
            f"{_mib(t.bytes_per_ipu)})" if t else f"IPU{k} uses {nbytes(row['used_bytes'])}")
    if mem_level == "tile" and t is not None:
        if row["tiles_overflowing"]:
            o.find("MEM001", "error", f"IPU{k} is out of memory: {row['tiles_overflowing']:,} tiles overflow",
                   f"{row['tiles_overflowing']:,} of {row['tiles']:,} tiles on IPU{k} "
                   f"({_tile_names(row)}) exceed their "
                   f"{_kib(t.bytes_per_tile)}, by {nbytes(row['overflow_bytes'])} in total; "
                   f"fullest tile {row['max_tile']} holds {nbytes(row['max_tile_bytes'])}, "
                   f"{pct(row['max_tile_pct'] / 100)} of its capacity; {used}; {liveness}{cat}",
                   _recommend(report, row, rows, no_fit))
            return True
        if row["tiles_over_90pct"]:
            o.find("MEM002", "warning",
                   f"IPU{k} is nearly full: fullest tile at {pct(row['max_tile_pct'] / 100)}",
                   f"fullest tile {row['max_tile']} holds {nbytes(row['max_tile_bytes'])}, "
                   f"{pct(row['max_tile_pct'] / 100)} of its {_kib(t.bytes_per_tile)}; "
                   f"{row['tiles_over_90pct']:,} of {row['tiles']:,} tiles are above "
                   f"{pct(TILE_FULL_FRAC, 0)}; {used}; {liveness}{cat}",
                   _recommend(report, row, rows, no_fit))
            return True
        return False
    if row["overflow_bytes"]:
        o.find("MEM001", "error", f"IPU{k} is out of memory",
               f"IPU{k} needs {nbytes(row['used_bytes'])}, {nbytes(row['overflow_bytes'])} more than "
               f"its capacity{' (per-IPU estimate)' if report.provenance.estimated else ''}; "
               f"{liveness}{cat}", _recommend(report, row, rows, no_fit))
        return True
    if t is not None and row["used_pct"] / 100 > IPU_FULL_FRAC:
        o.find("MEM003", "warning", f"IPU{k} is {pct(row['used_pct'] / 100, 0)} full",
               f"{used} (per-IPU figures: single tiles are fuller than the mean and may not fit); "
               f"{liveness}{cat}", _recommend(report, row, rows, no_fit))
        return True
    return False


def _spread(report: Report, o: Collector, pressured: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    if not pressured or report.target is None or len(rows) < 2:
        return
    full = max(pressured, key=lambda r: r["used_pct"])
    empty = min(rows, key=lambda r: r["used_pct"])
    gap = (full["used_pct"] - empty["used_pct"]) / 100
    if gap < MEMORY_SPREAD_WARN_FRAC:
        return
    cap = report.target.bytes_per_ipu
    # Never onto an IPU that would then be full, nor through one (boundaries shift stage by stage).
    excess = max(0, full["used_bytes"] - int(IPU_FULL_FRAC * cap))
    if empty["used_bytes"] + excess > cap:
        return
    order = [s.ipu for s in report.cfg.stages]
    if full["ipu"] in order and empty["ipu"] in order:
        a, b = sorted((order.index(full["ipu"]), order.index(empty["ipu"])))
        if any(r["ipu"] in order[a + 1:b] for r in pressured):
            return
    free = cap - empty["used_bytes"]
    o.find("MEM004", "warning",
           f"Memory unevenly spread: IPU{full['ipu']} is under pressure, IPU{empty['ipu']} is not",
           f"IPU{full['ipu']} uses {pct(full['used_pct'] / 100)} of its memory, IPU{empty['ipu']} "
           f"{pct(empty['used_pct'] / 100)} ({100 * gap:.1f} points less, {nbytes(free)} free)",
           f"Move blocks from IPU{full['ipu']} towards IPU{empty['ipu']}: "
           f"{_move_hint(report, full['ipu'], empty['ipu'])} (then re-check pipeline balance: "
           "moving layers moves cycles too).")


def _move_hint(report: Report, src: int, dst: int) -> str:
    stages = report.cfg.stages
    on_src = [s for s in stages if s.ipu == src]
    if not on_src:
        return "change the ipu_id of poptorch.BeginBlock / poptorch.Block (optimum-graphcore: layers_per_ipu)"
    blocks = ", ".join(b for s in on_src for b in s.blocks) or f"stage {on_src[0].index}"
    return (f"IPU{src} holds {blocks}; shift the poptorch.BeginBlock(layer, ipu_id=...) boundary so "
            "that its first or last layers run on the neighbouring stage (optimum-graphcore: "
            "layers_per_ipu)")


def _recommend(report: Report, row: dict[str, Any], rows: list[dict[str, Any]], no_fit: bool = False) -> str:
    levers, verdict = _levers(report, row, rows, no_fit)
    if len(levers) == 1:
        return levers[0][0].upper() + levers[0][1:] + (f": {verdict}" if verdict else "") + "."
    head = f"Levers ({verdict})" if verdict else "Levers"
    return head + ": " + "; ".join(f"({i}) {lev}" for i, lev in enumerate(levers, 1)) + "."


def _levers(report: Report, row: dict[str, Any], rows: list[dict[str, Any]], no_fit: bool = False
            ) -> tuple[list[str], str]:
    """The levers that fit this IPU's evidence and can help, and whether they close its gap (a
    phrase, empty when the report cannot size them all). Where the memory categories size them
    (the emulator's), ranked by the bytes they save and as many as close the gap to
    ``IPU_FULL_FRAC`` (at most MAX_MEMORY_LEVERS); otherwise in a fixed order of fit."""
    cfg = report.cfg
    k = row["ipu"]
    nal, var, _top, _share = _shares(row)
    cats = row["categories"] or {}
    stash, temps = cats.get("activationStash"), cats.get("temporaries")
    nal_bytes = row["not_always_live_bytes"]
    # Known split of the not-always-live bytes: the available memory proportion governs the
    # temporaries of matmuls/convolutions, not the activation stash (nor an offloaded optimizer
    # state's largest tensor, on chip while its update runs).
    op_temps = temps if ml.temporaries_shrink(report, [(k, dict(cats))]) else 0
    temps_dominate = temps is None or (nal_bytes > 0 and op_temps >= NOT_ALWAYS_LIVE_DOMINANT_FRAC * nal_bytes)
    stash_dominates = stash is not None and nal_bytes > 0 and stash >= NOT_ALWAYS_LIVE_DOMINANT_FRAC * nal_bytes
    changes: dict[str, ml.Change | None] = {}
    training = cfg.mode == "training"
    pipelined = _pipelined(cfg)
    stages = [s for s in cfg.stages if s.ipu == k]
    out = []
    opt_bytes = cats.get("optimizerState")
    acc_bytes = cats.get("gradientAccumulators")
    total_cat = sum(cats.values())
    offload = ("offload it with opts.TensorLocations.setOptimizerLocation("
               "poptorch.TensorLocationSettings().useOnChipStorage(False))")
    if opt_bytes and total_cat and training and cfg.optimizer_state_on_chip and \
            opt_bytes >= VARIABLE_DOMINANT_FRAC / 2 * total_cat:
        out.append(f"the optimizer state is {pct(opt_bytes / total_cat, 0)} of IPU{k}'s bytes and on chip: {offload}")
        changes[out[-1]] = ml.offload_optimizer(report)
    elif training and cfg.optimizer_state_on_chip and var is not None and var >= VARIABLE_DOMINANT_FRAC:
        out.append(f"variables are {pct(var, 0)} of IPU{k}'s bytes and the optimizer state is on chip: {offload}")
        changes[out[-1]] = ml.offload_optimizer(report) if opt_bytes else None
    if acc_bytes and total_cat and training and acc_bytes >= VARIABLE_DOMINANT_FRAC / 2 * total_cat:
        out.append(f"the gradient accumulators are {pct(acc_bytes / total_cat, 0)} of IPU{k}'s bytes: keep "
                   "them off chip with opts.TensorLocations.setAccumulatorLocation("
                   "poptorch.TensorLocationSettings().useOnChipStorage(False))")
        changes[out[-1]] = ml.offload_accumulators
    cap = report.target.bytes_per_ipu if report.target is not None else None
    if row["used_pct"] is not None and cap and not no_fit:
        excess = max(0, row["used_bytes"] - int(IPU_FULL_FRAC * cap))
        # only onto an IPU that can take the excess without exceeding its capacity
        roomy = [r for r in rows if r["used_pct"] is not None
                 and r["used_pct"] <= row["used_pct"] - 100 * MEMORY_SPREAD_WARN_FRAC
                 and r["used_bytes"] + excess <= cap]
        if roomy:
            order = [s.ipu for s in cfg.stages]
            if k in order:  # prefer the IPU of a neighbouring stage
                pos = order.index(k)
                near = {order[p] for p in (pos - 1, pos + 1) if 0 <= p < len(order)}
                roomy = [r for r in roomy if r["ipu"] in near] or roomy
            dst = min(roomy, key=lambda r: r["used_pct"])
            out.append(f"move blocks off IPU{k} to IPU{dst['ipu']} ({pct(dst['used_pct'] / 100, 0)} used)")
            changes[out[-1]] = ml.moved(excess) if excess else None
    if nal is not None and nal >= NOT_ALWAYS_LIVE_DOMINANT_FRAC and temps_dominate:
        cur, new, now = ml.lower_proportion(report, k)
        if new < cur:
            out.append(f"not-always-live memory is {pct(nal, 0)}: lower the available memory proportion "
                       f"({now}) with opts.setAvailableMemoryProportion({{\"IPU{k}\": {new:g}}})")
            changes[out[-1]] = (lambda _ipu, c: {**c, "temporaries": c["temporaries"] - c["temporaries"] // 2}
                                ) if temps else None
    if any("embed" in b.lower() for s in stages for b in s.blocks):
        out.append(f"serialize the embedding on IPU{k} (optimum-graphcore: "
                   "embedding_serialization_factor; PopTorch: poptorch.serializedMatMul for the "
                   "vocabulary projection)")
    if training and ((nal is not None and nal >= NOT_ALWAYS_LIVE_DOMINANT_FRAC) or stash_dominates):
        if ml.recomputation_turned_off(report):
            out.append(RECOMPUTE_BACK_ON)
        elif pipelined:
            out.append("recompute more: PopTorch already recomputes each pipeline stage; add "
                       "poptorch.recomputationCheckpoint(x) on layer outputs inside "
                       f"the stage{'s' if len(stages) != 1 else ''} on IPU{k}")
        else:
            out.append(ENABLE_RECOMPUTATION)
        changes[out[-1]] = ml.recompute if stash else None
    if training and pipelined and stages and min(s.index for s in stages) < cfg.num_stages - 1:
        i = min(s.index for s in stages)
        out.append(f"fewer micro-batches in flight: stage {i} stashes activations of about "
                   f"{2 * (cfg.num_stages - i) - 1} micro-batches; halve the micro-batch size and "
                   "double gradientAccumulation to keep the global batch")
        changes[out[-1]] = ml.halve_micro_batch(report) if (stash or op_temps) else None
    elif not pipelined and (stash or op_temps) and ((nal is not None and nal >= NOT_ALWAYS_LIVE_DOMINANT_FRAC)
                                                    or stash_dominates):
        out.append(f"halve the micro-batch size ({ml.keep_batch_text(cfg.mode == 'training')}): the activation stash"
                   + (" and the temporaries" if op_temps else "") + " shrink with it")
        changes[out[-1]] = ml.halve_micro_batch(report)
    if cats and ml.precision(report) == "float32":  # as MEM005 offers it (sized only when certain)
        out.append(_half_text(report, bool(op_temps)))
        changes[out[-1]] = ml.to_float16(report)
    if not out:
        out.append(_fallback(report, row, nal, no_fit))
    mine = [(k, dict(cats))] if cats else []
    saving = {lev: (ml.apply(mine, [c]) if c is not None and mine else 0) for lev, c in changes.items()}
    if not any(saving.get(lev) for lev in out):
        return out[:MAX_MEMORY_LEVERS], ""
    need = max(0, row["used_bytes"] - int(IPU_FULL_FRAC * cap)) if cap else 0
    # the levers the report sizes, largest saving first, as many as close the gap; then every one
    # it cannot size (never dropped for one it can: it may be the one that helps)
    sized = sorted((lev for lev in out if saving.get(lev)), key=lambda lev: -saving[lev])  # stable
    unsized = [lev for lev in out if not saving.get(lev)]
    shown: list[str] = []
    for lev in sized[:MAX_MEMORY_LEVERS]:
        shown.append(lev)
        if need and ml.apply(mine, [changes[x] for x in shown]) >= need:
            break
    n = len(shown)
    text = [lev + f" (saves about {nbytes(saving[lev])})" for lev in shown] + unsized
    if not (need and mine):
        return text, ""
    together = ml.apply(mine, [changes[x] for x in shown])
    goal = f"IPU{k} under {pct(IPU_FULL_FRAC, 0)} of its memory"
    rest = (f"; ({n + 1}) cannot be sized" if len(unsized) == 1 else
            f"; ({n + 1}) to ({len(text)}) cannot be sized" if unsized else "")
    if together >= need:
        if len(text) == 1:
            return text, ""
        return text, ("(1) alone gets " if ml.apply(mine, [changes[shown[0]]]) >= need else
                      f"(1) to ({n}) together get ") + goal
    if n == 1 and not unsized:
        return text, f"not enough: IPU{k} must shed {nbytes(need)} to be under {pct(IPU_FULL_FRAC, 0)} of its memory"
    which = "none enough alone, nor all together" if n > 1 else "(1) is not enough"
    return text, (f"{which}: {'they save' if n > 1 else 'it saves'} {nbytes(together)} of the "
                  f"{nbytes(need)} that would get {goal}{rest}")


def _fallback(report: Report, row: dict[str, Any], nal: float | None, no_fit: bool) -> str:
    """When no lever matches the evidence: the generic ones where they can help; when the IPU's
    bytes are mostly always live (known), neither a lower proportion nor moving blocks within a
    model that does not fit does, and the finding says what holds the bytes instead."""
    k = row["ipu"]
    if nal is None or nal >= NOT_ALWAYS_LIVE_DOMINANT_FRAC or not row["categories"]:
        return ("lower the available memory proportion (opts.setAvailableMemoryProportion) or "
                f"move blocks off IPU{k} (poptorch.BeginBlock ipu_id)")
    _nal, _var, top, share = _shares(row)
    held = f"{pct(1 - nal, 0)} of IPU{k}'s bytes are always live (largest category {top}, {pct(share, 0)})"
    if no_fit:
        return (f"{held}, which neither a lower available memory proportion nor recomputation frees, and "
                "the model does not fit its IPUs at all: apply the levers of MEM005")
    return (f"{held}, which neither a lower available memory proportion nor recomputation frees: move "
            f"blocks off IPU{k} (poptorch.BeginBlock ipu_id)")


# ------------------------------------------------------------------------------------------- table

def _table(report: Report, o: Collector, rows: list[dict[str, Any]]) -> None:
    import pandas as pd

    if not rows:
        return
    tile = report.memory.level == "tile"
    data: dict[str, Any] = {
        "IPU": [r["ipu"] for r in rows],
        "used %": [None if r["used_pct"] is None else round(r["used_pct"], 1) for r in rows],
    }
    if tile:
        data["max tile %"] = [None if r["max_tile_pct"] is None else round(r["max_tile_pct"], 1)
                              for r in rows]
        data["tiles >90%"] = pd.array([r["tiles_over_90pct"] for r in rows], dtype="Int64")
        data["OOM tiles"] = pd.array([r["tiles_overflowing"] for r in rows], dtype="Int64")
    data["always live %"] = [None if s[0] is None else round(100 * (1 - s[0]), 1)
                             for s in map(_shares, rows)]
    if any(r["categories"] for r in rows):
        data["top category"] = [f"{s[2]} {pct(s[3], 0)}" if s[2] else "–" for s in map(_shares, rows)]
    frame = pd.DataFrame(data)
    for col in ("used %", "max tile %", "always live %"):
        if col in frame:
            frame[col] = frame[col].astype("float64")
    o.out.table = frame
    t = report.target
    lines = []
    if t is not None:
        lines.append(f"capacity {mib(t.bytes_per_ipu):,.1f} MiB per IPU ({t.tiles_per_ipu:,} tiles × "
                     f"{t.bytes_per_tile / 1024:,.1f} KiB); used = bytes including gaps, % of capacity; "
                     "always live and top category: % of the IPU's used bytes")
    if not tile:
        lines.append("per-IPU figures only" + (" (estimated)" if report.provenance.estimated else "")
                     + ": tile columns unknown")
    staged = {s.ipu for s in report.cfg.stages}
    idle = [f"IPU{r['ipu']}" for r in rows if staged and r["ipu"] not in staged]
    if idle:
        lines.append(f"{', '.join(idle)} run{'s' if len(idle) == 1 else ''} no stage: PopTorch attaches every IPU "
                     "up to the highest a stage uses, rounded up to a power of two (autoRoundNumIPUs), and "
                     f"{'it holds' if len(idle) == 1 else 'they hold'} only the runtime's code and buffers")
    o.out.caption = "\n".join(lines) or None
