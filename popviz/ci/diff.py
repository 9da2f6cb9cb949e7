"""Why a comparison regressed: what each side's layers, program types and memory categories cost,
the per-item diff between two sides, ranked by its effect on the regressed metric, and the
environment (Poplar SDK, popviz, PopTorch, torch, IPU architecture, host) each side ran in.

A side's *breakdown* is ``{"layers": {name: {cycles, memory_bytes, code_bytes}}, "program_types":
{type: {cycles}}, "memory_categories": {category: {memory_bytes}}}``, each part present only when
the report has the table behind it (the layer table, the execution table, per-category memory).
Baselines carry it (``popviz baseline save``); one saved by an older popviz has none, and the
comparison says so instead of showing an empty diff.
"""

from __future__ import annotations

import math
from typing import Any

KINDS = ("layers", "program_types", "memory_categories")
KIND_WORDS = {"layers": "layer", "program_types": "program type", "memory_categories": "memory category"}
FIELDS = {"layers": ("cycles", "memory_bytes", "code_bytes"), "program_types": ("cycles",),
          "memory_categories": ("memory_bytes",)}
FIELD_WORDS = {"cycles": "cycles", "memory_bytes": "memory", "code_bytes": "code"}
MIN_CHANGE_PCT = 1.0
"""An item is listed when one of its figures changed by more than this share of its base value
(or it is on one side only): cycles and bytes are deterministic, and the emulator's per-layer
cycles differ by a cycle or two between identical layers."""
MAX_ITEMS = 200
"""Items kept per engine and kind in a comparison (ranked: the first explain the most)."""
MAX_BREAKDOWN_ITEMS = 100_000
"""Items of one kind a baseline may hold (the check at the boundary)."""
ENVIRONMENT_FIELDS = {"poplar_sdk": "Poplar SDK", "popviz": "popviz", "poptorch": "PopTorch", "torch": "torch",
                      "python": "Python", "ipu_architecture": "IPU architecture", "host": "host"}
"""What an environment records, in the order shown, with the words shown."""


def breakdown(report: Any) -> dict[str, dict[str, dict[str, float]]]:
    """What ``report``'s layers, program types and memory categories cost (parts the report has
    no table for are left out). Layer cycles are forward plus backward (recomputation included)
    per micro-batch; layer memory is its weights, optimizer state, accumulators, stash per
    micro-batch and peak temporaries on its IPU; program-type cycles are summed over the IPUs per
    execution run (one call of the engine); category bytes are summed over the IPUs."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    if report.layers is not None and len(report.layers):
        out["layers"] = {x.name: {"cycles": float(x.fwd_cycles + x.bwd_cycles),
                                  "memory_bytes": float(x.weight_bytes + x.optimizer_bytes + x.accumulator_bytes
                                                        + x.activation_bytes + x.temporary_bytes),
                                  "code_bytes": float(x.code_bytes)} for x in report.layers}
    ex = report.execution
    if ex is not None and len(ex.steps):
        runs = max(1, int(ex.steps["run"].nunique()))
        totals = ex.steps.groupby("program_type", observed=True)["cycles"].sum()
        out["program_types"] = {str(k): {"cycles": float(v) / runs} for k, v in totals.items() if v > 0}
    mem = report.memory
    if mem is not None and mem.categories:
        frame = mem.frame
        out["memory_categories"] = {c: {"memory_bytes": float(frame[f"cat_{c}_bytes"].sum())}
                                    for c in mem.categories}
    return out


def environment(report: Any, record: dict[str, Any] | None) -> dict[str, str]:
    """The versions and machine behind ``report``: from its provenance (Poplar's own report says
    its SDK; the emulator its popviz) and the capture's run record (``popviz-run.json``: the
    hostname and the versions the capture saw), each field only where known."""
    prov = report.provenance
    versions = {k: v for k, v in dict(prov.versions).items() if v and v != "emulated"}
    if record:
        for k, v in (record.get("versions") or {}).items():
            if isinstance(k, str) and isinstance(v, str) and v:
                versions.setdefault(k, v)
    out: dict[str, str] = {}
    sdk = versions.get("poplar") or versions.get("poplar_sdk")
    if not sdk and prov.tool.startswith("Poplar SDK "):
        sdk = prov.tool[len("Poplar SDK "):]
    if sdk:
        out["poplar_sdk"] = sdk
    for key in ("popviz", "poptorch", "torch", "python"):
        if versions.get(key):
            out[key] = versions[key]
    if report.target is not None and report.target.architecture:
        out["ipu_architecture"] = str(report.target.architecture)
    host = record.get("hostname") if record else None
    if isinstance(host, str) and host:
        out["host"] = host
    return {k: str(out[k])[:200] for k in ENVIRONMENT_FIELDS if k in out}


def environment_changes(base: dict[str, str] | None, new: dict[str, str] | None) -> list[dict[str, Any]]:
    """``{field, label, base, new}`` for every environment field that differs (None: not
    recorded on that side); nothing when either side recorded no environment at all."""
    if not base or not new:
        return []
    return [{"field": k, "label": label, "base": base.get(k), "new": new.get(k)}
            for k, label in ENVIRONMENT_FIELDS.items()
            if (k in base or k in new) and base.get(k) != new.get(k)]


def _changed(b: float, n: float) -> bool:
    if b == n:
        return False
    return b == 0 or abs(n - b) / abs(b) * 100 > MIN_CHANGE_PCT


def diff_items(engine: str, kind: str, base: dict[str, dict[str, float]], new: dict[str, dict[str, float]],
               measure: str) -> list[dict[str, Any]]:
    """The items of ``kind`` added, removed, grown or shrunk from ``base`` to ``new``, ranked by
    the change of ``measure`` (the figure behind the regressed metric: ``cycles``,
    ``memory_bytes`` or ``code_bytes``), the largest increase first; at most MAX_ITEMS."""
    fields = FIELDS[kind]
    if measure not in fields:
        measure = fields[0]
    out = []
    for name in dict.fromkeys([*base, *new]):
        b, n = base.get(name), new.get(name)
        if b is not None and n is not None:
            moved = [f for f in (measure, *fields) if _changed(b.get(f, 0.0), n.get(f, 0.0))]
            if not moved:
                continue
            first = moved[0]
            status = "grown" if n.get(first, 0.0) > b.get(first, 0.0) else "shrunk"
        else:
            status = "added" if b is None else "removed"
        delta = (n or {}).get(measure, 0.0) - (b or {}).get(measure, 0.0)
        base_value = (b or {}).get(measure)
        pct = delta / base_value * 100 if base_value else None
        out.append({"engine": engine, "kind": KIND_WORDS[kind], "name": name, "status": status,
                    "base": b, "new": n, "measure": measure, "delta": delta, "change_pct": pct})
    # ranked by the measure's change where it is one (a layer listed for its memory whose cycles
    # moved by two ranks as unchanged in cycles)
    out.sort(key=lambda d: (-significant(d), -_other_change(d), d["name"]))
    return out[:MAX_ITEMS]


def significant(item: dict[str, Any]) -> float:
    """The change of the item's measure, or 0 when it is within MIN_CHANGE_PCT (listed for another figure)."""
    b, n = item["base"], item["new"]
    if b is None or n is None:
        return item["delta"]
    m = item["measure"]
    return item["delta"] if _changed(b.get(m, 0.0), n.get(m, 0.0)) else 0.0


def _other_change(item: dict[str, Any]) -> float:
    """The largest change of the item's other figures (ranks items listed for them, not for the measure)."""
    b, n = item["base"] or {}, item["new"] or {}
    return max((abs(n.get(f, 0.0) - b.get(f, 0.0)) for f in (*b, *n) if f != item["measure"]), default=0.0)


MEMORY_METRIC_PREFIX = "memory."


def measure_for(regressed_metrics: list[str]) -> str:
    """The figure whose change explains the regressed metrics: cycles when a cycle, speed or
    share metric regressed (or none did), memory bytes when only memory metrics did."""
    if regressed_metrics and all(m.startswith(MEMORY_METRIC_PREFIX) for m in regressed_metrics):
        return "memory_bytes"
    return "cycles"


def describe(item: dict[str, Any]) -> str:
    """``layer layers.5 cycles +50.0% (+442,096)``, ``program type Sync added (1,200 cycles)``."""
    from popviz.units import fmt_bytes

    measure = item["measure"]

    def value(v: float) -> str:
        return f"{v:,.0f} cycles" if measure == "cycles" else fmt_bytes(v)

    head = f"{item['kind']} {item['name']}"
    if item["status"] in ("added", "removed"):
        side = item["new"] if item["status"] == "added" else item["base"]
        return f"{head} {item['status']} ({value(side.get(measure, 0.0))})"
    delta = item["delta"]
    sign = "+" if delta >= 0 else "-"
    amount = f"{abs(delta):,.0f}" if measure == "cycles" else fmt_bytes(abs(delta))
    pct = item["change_pct"]
    rel = f"{pct:+.1f}% " if pct is not None and math.isfinite(pct) else ""
    if significant(item) == 0:  # listed for another figure (its code grew, its cycles did not)
        other = next(f for f in FIELDS_ORDER if _changed((item["base"] or {}).get(f, 0.0),
                                                          (item["new"] or {}).get(f, 0.0)))
        b, n = item["base"].get(other, 0.0), item["new"].get(other, 0.0)
        shown = (lambda v: f"{v:,.0f}") if other == "cycles" else fmt_bytes
        return f"{head} {FIELD_WORDS[other]} {shown(b)} → {shown(n)}"
    return f"{head} {FIELD_WORDS[measure]} {rel}({sign}{amount})"


FIELDS_ORDER = ("cycles", "memory_bytes", "code_bytes")


def check_breakdown(doc: Any, fail: Any, where: str) -> dict[str, dict[str, dict[str, float]]] | None:
    """A breakdown read from a baseline, checked at the boundary: known kinds, names, and
    figures that are finite, non-negative numbers (None when the baseline has none)."""
    from popviz.ci.validate import MAX_VALUE, name
    from popviz.errors import brief

    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise fail(f"has a breakdown that is not an object in {where}")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind, items in doc.items():
        if kind not in KINDS:
            continue  # a newer popviz's part: not compared
        if not isinstance(items, dict) or len(items) > MAX_BREAKDOWN_ITEMS:
            raise fail(f"has an invalid breakdown.{kind} in {where} (expected a table of at most "
                       f"{MAX_BREAKDOWN_ITEMS:,} items)")
        part: dict[str, dict[str, float]] = {}
        for item, figures in items.items():
            name(item, fail, f"{KIND_WORDS[kind]} name in {where}")
            if not isinstance(figures, dict):
                raise fail(f"has invalid figures for {KIND_WORDS[kind]} {brief(item)} in {where}")
            checked = {}
            for f in FIELDS[kind]:
                v = figures.get(f, 0.0)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)) \
                        or not 0 <= float(v) <= MAX_VALUE:
                    raise fail(f"has an impossible {f} for {KIND_WORDS[kind]} {brief(item)} in {where} "
                               f"({brief(v)}; expected a non-negative number)")
                checked[f] = float(v)
            part[item] = checked
        out[kind] = part
    return out


def check_environment(doc: Any, fail: Any, where: str) -> dict[str, str] | None:
    """An environment read from a baseline: known fields as short strings (None: none saved)."""
    from popviz.errors import brief

    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise fail(f"has an environment that is not an object in {where}")
    out = {}
    for k, v in doc.items():
        if k not in ENVIRONMENT_FIELDS:
            continue
        if not isinstance(v, str) or not v or len(v) > 200:
            raise fail(f"has an invalid environment field {k} in {where} ({brief(v)}; expected a version or name)")
        out[k] = v
    return out
