"""Compare two sides metric by metric, check budgets, and say what regressed.

A comparison matches engines by instance and name, lists engines found on one side only, shows
configuration changes first (they explain most metric changes), and gives each metric a verdict:
``regressed`` (worse by more than its threshold), ``improved`` (better by more than it), ``~``
(changed, within the threshold), ``=`` (unchanged), ``new``/``gone`` (on one side only).
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from typing import Any

from popviz.ci.baseline import EngineMetrics, no_metrics_reason, no_metrics_why
from popviz.ci.metrics import HIGHER_IS_WORSE, PLACEMENT_FIELD, definition, split_change
from popviz.ci.thresholds import UNIT_WORDS, Budget, Rule, check_unit_rules, threshold_for
from popviz.errors import UsageError

REGRESSED, IMPROVED, WITHIN, SAME, NEW, GONE, MOVED = "regressed", "improved", "~", "=", "new", "gone", "moved"
TRADED = "traded"
PLACED_METRIC = re.compile(r"^(pipeline\.stage\d+|memory\.ipu\d+)\.")
"""Figures of one stage or one IPU: not like for like when the split changed."""
FILL_METRICS = ("memory.max_used_pct", "memory.fullest_tile_pct")
"""The fullest IPU's and the fullest tile's fill: traded, not regressed, by a new split that is
faster and keeps them under the memory analysis's thresholds (:func:`_trade`)."""
SHARE_METRICS = ("pipeline.ramp_efficiency_pct", "pipeline.utilisation_pct", "host_io.stream_copy_pct")
"""Shares of a call's time: a faster call can have lower ones (it saved more busy time than idle
time), or a higher stream-copy share (its compute shrank, its host copies did not), so they do
not fail by default when the call itself got faster (verdict ``traded``)."""
SPEED_METRICS = ("pipeline.call_cycles_per_micro_batch", "throughput.samples_per_second")
"""The call's own speed: either improving beyond its threshold, with neither regressing, trades."""
HEADLINE_ITEMS = 6
"""Regressions named in the first line of the output (the table lists them all)."""


def _small(value: float, unit: str) -> str | None:
    """A change too small for two decimals (``-0.00%`` read as no change with a minus sign):
    ``-<0.01%``; None otherwise."""
    if 0 < abs(value) < 0.005:
        return f"{'+' if value > 0 else '-'}<0.01{unit}"
    return None


@dataclass
class Row:
    engine: str
    metric: str
    unit: str
    base: float | None
    new: float | None
    threshold: str
    verdict: str

    @property
    def change(self) -> str:
        if self.base is None or self.new is None:
            return ""
        delta = self.new - self.base
        if self.unit == "pct":
            return _small(delta, "pp") or f"{delta:+.2f}pp"
        if self.base == 0:  # no relative change from nothing
            return "from 0" if delta else "0%"
        relative = delta / abs(self.base) * 100
        # 100% or more: whole percents with separators (+31,663%), as the narrow console table has them
        return f"{relative:+,.0f}%" if abs(relative) >= 100 else (_small(relative, "%") or f"{relative:+.2f}%")

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "metric": self.metric, "unit": self.unit, "base": self.base, "new": self.new,
                "change": self.change or None, "threshold": self.threshold, "verdict": self.verdict}


@dataclass
class Comparison:
    rows: list[Row] = field(default_factory=list)
    config_changes: list[dict[str, Any]] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    budgets: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    """Findings at or above --fail-on (``check``), each with ``ignored`` true or false."""
    mixed: bool = False
    base_label: str | None = None
    """What the base side is when not one run (e.g. the median of a history's last runs)."""
    resplit: list[str] = field(default_factory=list)
    """Engines whose split (stages and their blocks) differs: their per-stage and per-IPU rows are ``moved``."""
    unknown_metrics: list[dict[str, str]] = field(default_factory=list)
    """``{engine, metric}`` for well-formed metric names this popviz does not define (from a newer
    popviz, or misspelt): not compared."""
    estimated: list[dict[str, Any]] = field(default_factory=list)
    """``{engine, base, new}`` (each side's ``estimated`` flag) for every engine compared with an
    estimated side: the output labels those numbers as estimates."""
    lost: list[str] = field(default_factory=list)
    """One sentence per engine that ran in BASE and no longer gives its figures in NEW (``engine
    training ran in BASE but has no metrics in NEW: never called (RUN001)``, ``... is missing from
    NEW``, ``... has no throughput.samples_per_second in NEW``): each fails the comparison."""
    missing: list[str] = field(default_factory=list)
    """Engines with metrics in BASE that are not in NEW (each also a sentence in ``lost``)."""
    no_metrics: list[tuple[str, str]] = field(default_factory=list)
    """``(side, why)`` for every engine on both sides that has no metric on one of them (e.g.
    never called: RUN001)."""
    not_fitting: list[str] = field(default_factory=list)
    """NEW's engines whose analysis says they do not fit their IPUs (MEM001 or MEM005, errors):
    said under the headline. It fails only as its figures do (a BASE that ran makes it ``lost``;
    two runs that both do not fit compare their memory as any other)."""

    breakdown: list[dict[str, Any]] = field(default_factory=list)
    """What changed per layer, program type and memory category (:func:`popviz.ci.diff.diff_items`),
    per engine ranked by the change of the figure behind its regressed metric (cycles, else memory)."""
    breakdown_notes: list[str] = field(default_factory=list)
    """Why a part of that diff is not shown (a side that does not record it: an older baseline)."""
    environment: list[dict[str, Any]] = field(default_factory=list)
    """``{field, label, base, new}`` for each of the Poplar SDK, popviz, PopTorch, torch, Python,
    IPU architecture and host that differs between the sides."""
    environment_notes: list[str] = field(default_factory=list)
    """Why the environment could not be compared (a side that does not record it)."""

    def explained(self, engine: str, most: int = 3) -> list[dict[str, Any]]:
        """The first ``most`` items of ``engine``'s diff that grew or were added (what explains a
        regression), in their rank."""
        from popviz.ci.diff import significant

        return [d for d in self.breakdown if d["engine"] == engine and significant(d) > 0][:most]

    def environment_line(self) -> str:
        """``environment changed: Poplar SDK 3.3.0 → 3.4.0, host a → b``, or ""."""
        return ("environment changed: " + ", ".join(
            f"{e['label']} {e['base'] or 'not recorded'} → {e['new'] or 'not recorded'}"
            for e in self.environment)) if self.environment else ""

    def not_fitting_line(self) -> str:
        """``NEW does not fit its IPUs (the compile runs out of memory): training``, or ""."""
        return ("NEW does not fit its IPUs (the compile runs out of memory): "
                + ", ".join(self.not_fitting)) if self.not_fitting else ""

    def estimated_line(self) -> str:
        """``estimated (emulator's cost model): training on both sides`` or, mixed, which side is."""
        alone = [e["engine"] for e in self.estimated if e["base"] is None]  # check: one run, no base
        both = [e["engine"] for e in self.estimated if e["base"] and e["new"]]
        one = [f"{e['engine']} on the {'base' if e['base'] else 'new'} side only" for e in self.estimated
               if e["base"] is not None and e["base"] != e["new"]]
        parts = ([", ".join(alone)] if alone else []) + ([f"{', '.join(both)} on both sides"] if both else []) + one
        return f"estimated by the emulator's cost model, not measured: {'; '.join(parts)}" if parts else ""

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == REGRESSED]

    @property
    def broken_budgets(self) -> list[dict[str, Any]]:
        return [b for b in self.budgets if not b["ok"]]

    @property
    def quiet_only_base(self) -> list[str]:
        """Engines only in BASE that no failure in :attr:`lost` names already (they had no metrics)."""
        return [e for e in self.only_base if e not in self.missing]

    @property
    def failing_findings(self) -> list[dict[str, Any]]:
        return [f for f in self.findings if not f["ignored"]]

    @property
    def failed(self) -> bool:
        return bool(self.regressions or self.broken_budgets or self.failing_findings or self.lost)

    def headline(self) -> str:
        """The first line of the output: what failed, or that nothing did."""
        parts = list(self.lost)
        if self.regressions:
            shown_ = self.regressions[:HEADLINE_ITEMS]
            more = len(self.regressions) - len(shown_)
            parts.append("regression in " + ", ".join(
                f"{r.engine} {r.metric} ({fmt(r.base, r.unit)} → {fmt(r.new, r.unit)}, {r.change})"
                for r in shown_) + (f" and {more} more" if more else ""))
        if self.broken_budgets:
            parts.append("budget broken: " + ", ".join(
                f"{b['engine']} {b['metric']} = {budget_value(b)} (budget {b['budget']})"
                for b in self.broken_budgets))
        if self.failing_findings:
            parts.append("findings: " + ", ".join(f"{f['engine']} {f['code']}" for f in self.failing_findings))
        if parts:
            return "popviz: FAIL: " + "; ".join(parts)
        from popviz.analysis.thresholds import IPU_FULL_FRAC

        improved = sum(r.verdict == IMPROVED for r in self.rows)
        shares = sum(r.verdict == TRADED and r.metric not in FILL_METRICS for r in self.rows)
        fills = sum(r.verdict == TRADED and r.metric in FILL_METRICS for r in self.rows)
        extra = (f", {improved} improved" if improved else "") + (
            f", {shares} time share(s) traded for a faster call" if shares else "") + (
            f", {fills} memory fill(s) under {IPU_FULL_FRAC:.0%} traded for a faster split" if fills else "")
        if not self.rows and self.budgets:
            return f"popviz: OK: {len(self.budgets)} budget(s) hold"
        if not self.rows and self.findings:  # check --fail-on without budgets: nothing was compared
            return f"popviz: OK: no failing finding ({len(self.findings)} ignored)"
        if not self.rows and self.base_label is None:
            return "popviz: OK: no finding at the --fail-on severity"
        held = f", {len(self.budgets)} budget(s) hold" if self.budgets else ""
        both = sum(r.base is not None and r.new is not None for r in self.rows)
        return f"popviz: OK: no regression ({both} metric(s) compared{extra}){held}"

    def to_dict(self) -> dict[str, Any]:
        return {"schema": 1, "failed": self.failed, "headline": self.headline(),
                "config_changes": self.config_changes, "only_base": self.only_base, "only_new": self.only_new,
                "metrics": [r.to_dict() for r in self.rows], "budgets": self.budgets, "findings": self.findings,
                "base_label": self.base_label, "resplit": self.resplit, "unknown_metrics": self.unknown_metrics,
                "estimated": self.estimated, "lost": self.lost, "not_fitting": self.not_fitting,
                "environment": self.environment, "environment_notes": self.environment_notes,
                "breakdown": self.breakdown, "breakdown_notes": self.breakdown_notes}


def budget_value(b: dict[str, Any]) -> str:
    """A budget row's value as shown: the figure, or that the run lacks it."""
    return fmt(b["value"], b["unit"]) if b["value"] is not None else "missing from this run"


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "bytes":
        return f"{value:,.0f} B"
    if unit == "pct":
        return f"{value:.2f}%"
    if unit == "seconds":
        return f"{value:.3g} s"
    if unit in ("cycles", "count"):
        return f"{value:,.0f}"
    if unit == "samples_per_second":  # compact (tables fit 80 columns); --json has the exact value
        return f"{value / 1e3:,.1f}k/s" if value >= 1e4 else f"{value:,.1f}/s"
    return f"{value:.4g}"


def verdict(name: str, base: float, new: float, rules: list[Rule]) -> tuple[str, str]:
    t = threshold_for(name, rules)
    if base == new:
        return SAME, t.spec
    worse = (new > base) if definition(name).direction == HIGHER_IS_WORSE else (new < base)
    if not t.exceeded(base, new):
        return WITHIN, t.spec
    return (REGRESSED if worse else IMPROVED), t.spec


def _key(e: EngineMetrics) -> tuple[str, str]:
    return (e.instance or "", e.name)


def compare(base: list[EngineMetrics], new: list[EngineMetrics], rules: list[Rule], *,
            allow_mixed: bool = False) -> Comparison:
    out = Comparison()
    b, n = {_key(e): e for e in base}, {_key(e): e for e in new}
    out.only_base = [b[k].label for k in b if k not in n]
    out.only_new = [n[k].label for k in n if k not in b]
    for k in [k for k in b if k in n]:
        eb, en = b[k], n[k]
        if eb.estimated != en.estimated and eb.metrics and en.metrics:  # a side with no metrics ran nothing
            out.mixed = True
            if not allow_mixed:
                which = lambda e: "estimated" if e.estimated else "measured"  # noqa: E731
                raise UsageError(f"engine {eb.label} is {which(eb)} on one side and {which(en)} on the other: "
                                 "the numbers are not comparable; pass --allow-mixed to compare anyway")
        if any(f.get("code") in ("MEM001", "MEM005") and f.get("severity") == "error" for f in en.findings):
            out.not_fitting.append(en.label)
        for side, e in (("base", eb), ("new", en)):
            if not e.metrics:
                out.no_metrics.append((side, no_metrics_reason(e)))
        if eb.metrics and not en.metrics:  # it no longer runs: a failure, not a list of "gone" rows
            out.lost.append(f"engine {en.label} ran in BASE but has no metrics in NEW{no_metrics_why(en)}")
            continue
        if eb.estimated or en.estimated:
            out.estimated.append({"engine": eb.label, "base": eb.estimated, "new": en.estimated})
        changes, resplit = config_changes(eb.label, eb.config, en.config)
        out.config_changes += changes
        rebatched = {c["field"] for c in changes} & BATCHING_FIELDS and not any(
            c["field"] == "output_mode" for c in changes)
        if resplit:
            out.resplit.append(eb.label)
        for name in dict.fromkeys((*eb.unknown_metrics, *en.unknown_metrics)):
            out.unknown_metrics.append({"engine": eb.label, "metric": name})
        for name in sorted(set(eb.metrics) | set(en.metrics), key=_metric_order):
            try:
                d = definition(name)
            except KeyError:  # a metric this popviz does not know (a newer baseline): not compared, said so
                if {"engine": eb.label, "metric": name} not in out.unknown_metrics:
                    out.unknown_metrics.append({"engine": eb.label, "metric": name})
                continue
            vb, vn = eb.metrics.get(name), en.metrics.get(name)
            if vb is None or vn is None:
                out.rows.append(Row(eb.label, name, d.unit, vb, vn, "", NEW if vb is None else GONE))
                continue
            v, spec = verdict(name, vb, vn, rules)
            if resplit and v in (REGRESSED, IMPROVED) and PLACED_METRIC.match(name):
                v = MOVED
            if rebatched and v in (REGRESSED, IMPROVED) and name in PER_CALL_METRICS:
                v = MOVED
            out.rows.append(Row(eb.label, name, d.unit, vb, vn, spec, v))
        gone = [r.metric for r in out.rows if r.engine == eb.label and r.verdict == GONE and r.metric in HEADLINE_METRICS]
        if gone:  # the figures the gate is about, no longer produced (an out-of-memory compile): never a pass
            out.lost.append(f"engine {eb.label} has no {', '.join(gone)} in NEW")
        _trade(out.rows, eb.label, rules, resplit=resplit)
        _explain(out, eb, en)
    if any(k in n for k in b):  # with nothing matched at all, check_gate says so (exit 2)
        for k in b:
            if k not in n and b[k].metrics:  # it no longer runs, or not under this name: never a pass
                out.missing.append(b[k].label)
                twins = [n[j].label for j in n if j not in b and n[j].config == b[k].config]
                out.lost.append(f"engine {b[k].label} ran in BASE and is missing from NEW"
                                + (f" (renamed {twins[0]}? the same configuration is there)" if len(twins) == 1 else ""))
    check_unit_rules(rules, {r.metric for r in out.rows})
    return out


def _explain(out: Comparison, eb: EngineMetrics, en: EngineMetrics) -> None:
    """Add the per-layer, per-program-type and per-category diff of one engine, and the
    environment's changes, to ``out`` (or say which side does not record them)."""
    from popviz.ci.diff import KIND_WORDS, KINDS, diff_items, environment_changes, measure_for

    missing = [side for side, e in (("BASE", eb), ("NEW", en)) if e.breakdown is None]
    if missing:
        note = (f"{' and '.join(missing)} does not record what each layer and program type costs (a "
                "baseline saved by an older popviz, or a history's median): no per-layer diff; "
                "popviz baseline save records it")
        if note not in out.breakdown_notes:
            out.breakdown_notes.append(note)
    else:
        assert eb.breakdown is not None and en.breakdown is not None
        regressed = [r.metric for r in out.rows if r.engine == eb.label and r.verdict == REGRESSED]
        measure = measure_for(regressed)
        for kind in KINDS:
            if kind in eb.breakdown and kind in en.breakdown:
                out.breakdown += diff_items(eb.label, kind, eb.breakdown[kind], en.breakdown[kind], measure)
            elif kind in eb.breakdown or kind in en.breakdown:
                only = "BASE" if kind in eb.breakdown else "NEW"
                out.breakdown_notes.append(f"{eb.label}: {KIND_WORDS[kind]}s not compared: only {only} "
                                           f"has a {KIND_WORDS[kind]} table")
    env_missing = [side for side, e in (("BASE", eb), ("NEW", en)) if not e.environment]
    if env_missing:
        note = (f"{' and '.join(env_missing)} does not record its environment (Poplar SDK, popviz, "
                "PopTorch, torch, IPU architecture, host): an older baseline, or a history's median")
        if note not in out.environment_notes:
            out.environment_notes.append(note)
        return
    for change in environment_changes(eb.environment, en.environment):
        if change not in out.environment:
            out.environment.append(change)


HEADLINE_METRICS = ("pipeline.cycles_per_micro_batch", "pipeline.call_cycles_per_micro_batch",
                    "throughput.samples_per_second", "memory.max_used_pct")
"""Figures whose disappearance from NEW fails a comparison (an engine that no longer runs to the
end); the others are listed as gone."""
PER_CALL_METRICS = ("host_io.input_bytes_per_call", "host_io.output_bytes_per_call")
"""What one call carries: it scales with the samples a call takes, so with a new D, G, R or
micro-batch (and the same output mode) its change is marked moved, and the speed decides."""
BATCHING_FIELDS = {"device_iterations", "gradient_accumulation", "replication_factor", "inputs"}

OPTIONAL_FIELDS = ("inputs", "trainable_parameters")
"""Configuration fields older baselines and histories lack: compared only when both sides have them."""


def _names(layers: dict[str, Any], most: int = 4) -> str:
    names = list(layers)
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def config_changes(engine: str, base: dict[str, Any], new: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The configuration changes between two sides of ``engine`` as a comparison lists them
    (``{engine, field, base, new}``, the layers that moved last), and whether the split changed.
    Blocks renamed with the same layers on the same IPUs are no change."""
    resplit, moved = split_change(base, new)
    renamed_only = not resplit and _same_ipus(base, new)
    out = []
    for key in sorted(set(base) | set(new)):
        if key == "stages" and renamed_only:
            continue  # the same layers on the same IPUs, in blocks named otherwise: no change
        if key in OPTIONAL_FIELDS and (key not in base or key not in new):
            continue  # recorded by a newer popviz only: not a change
        if key != PLACEMENT_FIELD and base.get(key) != new.get(key):
            out.append({"engine": engine, "field": key, "base": base.get(key), "new": new.get(key)})
    la, lb = base.get(PLACEMENT_FIELD), new.get(PLACEMENT_FIELD)
    if isinstance(la, dict) and isinstance(lb, dict) and la and lb:
        if not la.keys() & lb.keys():
            out.append({"engine": engine, "field": "layers (none in common: another model?)",
                        "base": _names(la), "new": _names(lb)})
        elif la.keys() != lb.keys():  # layers removed or added explain the cycles that changed
            out.append({"engine": engine, "field": "layers (only in base → only in new)",
                        "base": _names({k: 0 for k in la if k not in lb}) or "none",
                        "new": _names({k: 0 for k in lb if k not in la}) or "none"})
    if moved:
        out.append({"engine": engine, "field": "layers moved",
                    "base": {k: a for k, a, _ in moved}, "new": {k: b for k, _, b in moved}})
    return out, resplit


def _trade(rows: list[Row], engine: str, rules: list[Rule], resplit: bool = False) -> None:
    """An engine's regressed time shares become ``traded`` when its call got faster beyond the
    threshold (and no speed figure regressed), unless a configuration or ``--fail`` rule names
    the share: then it gates as asked. So do the fullest IPU's and the fullest tile's fill when
    the split changed and they stay under ``IPU_FULL_FRAC`` / ``TILE_FULL_FRAC`` (where ``popviz
    analyse`` warns and ``popviz plan``'s budget ends): a faster split moves layers, and their
    memory, onto emptier IPUs on purpose."""
    from popviz.analysis.thresholds import IPU_FULL_FRAC, TILE_FULL_FRAC

    mine = {r.metric: r for r in rows if r.engine == engine}
    speed = [mine[m].verdict for m in SPEED_METRICS if m in mine]
    if IMPROVED not in speed or REGRESSED in speed:
        return
    names = [*SHARE_METRICS]
    if resplit:  # slowest / mean over another set of stages (8 IPUs instead of 4): the speed decides
        names.append("pipeline.imbalance_ratio")
    for name, limit in zip(FILL_METRICS, (IPU_FULL_FRAC, TILE_FULL_FRAC), strict=True):
        fill = mine.get(name)
        if resplit and fill is not None and fill.new is not None and fill.new <= 100 * limit:
            names.append(name)
    for name in names:
        row = mine.get(name)
        if row is not None and row.verdict == REGRESSED and not any(fnmatch.fnmatchcase(name, r.pattern)
                                                                    for r in rules):
            row.verdict = TRADED


def _same_ipus(base: dict[str, Any], new: dict[str, Any]) -> bool:
    """Both sides record each layer's IPU, the same ones, and their stages run on the same IPUs
    in the same order (only the block names can differ, as under the emulator's --split)."""
    a, b = base.get(PLACEMENT_FIELD), new.get(PLACEMENT_FIELD)
    if not (isinstance(a, dict) and isinstance(b, dict) and a == b):
        return False
    ipus = [[str(s).split(":", 1)[0] for s in c.get("stages") or []] for c in (base, new)]
    return ipus[0] == ipus[1]


def _metric_order(name: str) -> tuple[int, str]:
    from popviz.ci.metrics import DEFINITIONS

    try:
        generic = definition(name).name
        return ([d.name for d in DEFINITIONS].index(generic), name)
    except KeyError:
        return (len(DEFINITIONS), name)


def check_budgets(engines: list[EngineMetrics], budgets: list[Budget]) -> list[dict[str, Any]]:
    """Every (engine, metric) a budget matches, with whether it holds. A budget that matches no
    metric of any engine, or that no value of a metric it matches could break (``<= 100`` on a
    share of time), checks nothing: UsageError, never a silent pass."""
    from popviz.ci.thresholds import cannot_fail, cannot_pass
    from popviz.ci.validate import MAX_VALUE, metric_range

    out = []
    for budget in budgets:
        hits = 0
        other_units: set[str] = set()
        for e in engines:
            matched = [m for m in sorted(e.metrics, key=_metric_order) if fnmatch.fnmatchcase(m, budget.pattern)]
            for m in matched:
                try:
                    unit = definition(m).unit
                except KeyError:
                    continue  # a metric this popviz does not know: not checked
                if budget.unit is not None and budget.unit != unit:
                    if any(c in budget.pattern for c in "*?["):
                        other_units.add(unit)
                        continue  # a glob's limit in bytes gates its byte metrics only
                    raise UsageError(f"budget {budget.pattern} = \"{budget.text}\" is in "
                                     f"{UNIT_WORDS.get(budget.unit, budget.unit)} but {m} is in "
                                     f"{UNIT_WORDS.get(unit, unit)}: write the limit in its unit, or as a bare number")
                if cannot_fail(budget, m):
                    raise UsageError(f"budget {budget.pattern} = \"{budget.text}\" cannot fail for {m} (its values "
                                     "never break it): a gate that cannot fail is not a gate; tighten the limit")
                if cannot_pass(budget, m):
                    lo, hi = metric_range(m)
                    unit_text = "%" if unit == "pct" else f" {unit}"
                    span = f"{lo:g} to {hi:g}{unit_text}" if hi < MAX_VALUE else f"{lo:g}{unit_text} or more"
                    raise UsageError(f"budget {budget.pattern} = \"{budget.text}\" cannot pass for {m} (its values "
                                     f"are {span}): no run can meet it; fix the limit")
                value = e.metrics[m]
                hits += 1
                out.append({"engine": e.label, "metric": m, "unit": unit, "value": value,
                            "budget": budget.text, "ok": bool(math.isfinite(value) and budget.holds(value))})
        if not hits and other_units:  # "memory.*_pct" = "<= 30MiB": a typo, not a metric the run lacks
            words = ", ".join(sorted(UNIT_WORDS.get(u, u) for u in other_units))
            raise UsageError(f"budget {budget.pattern} = \"{budget.text}\" is in "
                             f"{UNIT_WORDS.get(budget.unit or '', budget.unit)} but the metrics it matches are in "
                             f"{words}: write the limit in their unit, or as a bare number")
        if not hits and _names_a_metric(budget.pattern):
            # a real metric the run lacks (an out-of-memory compile has no cycles): the gate fails
            for e in engines:
                out.append({"engine": e.label, "metric": budget.pattern, "unit": "", "value": None,
                            "budget": budget.text, "ok": False,
                            "why": "not in this run: the engine did not run, or the report lacks it"})
            continue
        if not hits:
            names = sorted({m for e in engines for m in e.metrics})
            raise UsageError(f"budget {budget.pattern} matches no metric of the run (it has "
                             f"{', '.join(names[:4]) or 'none'}{', ...' if len(names) > 4 else ''}); "
                             "docs/ci.md lists the names")
    return out


def _names_a_metric(pattern: str) -> bool:
    """Whether ``pattern`` matches a metric this popviz defines (``{i}``/``{k}`` read as 0)."""
    from popviz.ci.metrics import DEFINITIONS

    names = [d.name.replace("{i}", "0").replace("{k}", "0") for d in DEFINITIONS]
    return any(fnmatch.fnmatchcase(n, pattern) for n in names)


def check_gate(c: Comparison, rules: list[Rule]) -> None:
    """A comparison that compared nothing, or a ``--fail`` rule that matches no metric compared,
    is a gate that cannot fail: UsageError naming it (never "OK: no regression")."""
    if not any(r.base is not None and r.new is not None for r in c.rows) and not c.budgets and not c.lost:
        if not c.rows and (c.only_base or c.only_new):
            raise UsageError(f"no engine is on both sides (base: {', '.join(c.only_base) or 'none'}; new: "
                             f"{', '.join(c.only_new) or 'none'}): nothing was compared; compare matches engines "
                             "by name, so pass two captures of the same script")
        empty = "; ".join(f"{side}: {reason}" for side, reason in c.no_metrics)
        raise UsageError("no metric is on both sides: nothing was compared" + (f" ({empty})" if empty else ""))
    names = {r.metric for r in c.rows}
    for rule in rules:
        if rule.origin == "--fail" and not any(fnmatch.fnmatchcase(n, rule.pattern) for n in names):
            raise UsageError(f"--fail {rule.pattern}:{rule.threshold.spec} matches no metric compared; "
                             "docs/ci.md lists the names")
