"""Compare the instances of a multi-instance run (PopRun / PopDist): every instance runs the
same program on its own data, so its configuration must match the others' and its figures
should too. An instance that differs is flagged on that instance's engine.

A cross-engine check: it takes the whole ReportSet (``check``) and returns, per engine label,
what to add to that engine's result. Single-instance report sets give nothing.

Compared per engine name across instances: the configuration (D, G, R, output mode and period,
strategy, stages), the median wall time of a call (capture hooks), the peak memory of an IPU and
the cycles of one execution profile run. Figures are compared with the median of the *other*
instances and only an instance above it is flagged (a slower or fuller instance holds the
others back at every gradient all-reduce; a faster one does not).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from popviz.analysis.findings import AnalysisOutput, Finding, NotChecked
from popviz.analysis.instance_layout import is_instance, run_of
from popviz.analysis.thresholds import CALL_TIME_SLOWER_FRAC, CYCLES_HIGHER_FRAC, MEMORY_HIGHER_FRAC
from popviz.model import Report, ReportSet

NAME = "instances"

CONFIG_FIELDS = ("device_iterations", "gradient_accumulation", "replication_factor",
                 "output_mode", "output_return_period", "execution_strategy", "stages")
_CONFIG_LABELS = {"device_iterations": "device iterations", "gradient_accumulation":
                  "gradient accumulation", "replication_factor": "replication factor",
                  "output_mode": "output mode", "output_return_period": "output return period",
                  "execution_strategy": "execution strategy", "stages": "stages"}


def _config_value(report: Report, name: str) -> Any:
    value = getattr(report.cfg, name)
    if name == "stages":
        return tuple((s.ipu, s.blocks) for s in value) or None
    return value


def _show(name: str, value: Any) -> str:
    if name == "stages" and value:
        return " | ".join(f"IPU{ipu}: {','.join(blocks) or '?'}" for ipu, blocks in value)
    return "unknown" if value is None else str(value)


def median_call_seconds(report: Report) -> float | None:
    stat = report.host_io.stat("wall_seconds") if report.host_io is not None else None
    return stat.p50 if stat is not None and stat.count else None


def peak_memory_bytes(report: Report) -> int | None:
    if report.memory is None or report.memory.frame.empty:
        return None
    per_ipu = report.memory.frame.groupby("ipu")["total_bytes_including_gaps"].sum()
    return int(per_ipu.max())


def cycles_per_run(report: Report) -> float | None:
    """Mean over the profile's runs of the longest IPU's cycles in the run."""
    if report.execution is None:
        return None
    from popviz.model.aggregate import cycle_totals

    return cycle_totals(report.execution).mean_longest()


FIGURES: dict[str, tuple[Callable[[Report], float | None], float, str]] = {
    "median_call_seconds": (median_call_seconds, CALL_TIME_SLOWER_FRAC, "median call wall time"),
    "peak_memory_bytes": (peak_memory_bytes, MEMORY_HIGHER_FRAC, "peak IPU memory"),
    "cycles_per_run": (cycles_per_run, CYCLES_HIGHER_FRAC, "cycles per profiled run"),
}
CODES = {"missing": "INST001", "config": "INST002", "median_call_seconds": "INST003",
         "peak_memory_bytes": "INST004", "cycles_per_run": "INST005"}


def _fmt(metric: str, value: float) -> str:
    if metric == "median_call_seconds":
        return f"{value * 1e3:,.2f} ms"
    if metric == "peak_memory_bytes":
        return f"{int(value):,} B"
    return f"{value:,.0f} cycles"


TRACE_HINT = "; popviz capture --pvti records host traces to compare"


def _with_trace(recommendation: str, traced: str) -> str:
    """INST003's advice with what the host traces show in place of the hint to record them."""
    return recommendation.replace(TRACE_HINT, "") + traced if traced else recommendation


def _traced(metric: str, report: Report, group: list[Report]) -> str:
    """INST003 with host traces: where this instance's call-to-call time goes against the other
    instances' (popviz.analysis.host_time), instead of asking to compare traces by hand."""
    if metric != "median_call_seconds":
        return ""
    from popviz.analysis import host_time

    mine = host_time.summary(report)
    others = [host_time.summary(r) for r in group if r is not report]
    others = [s for s in others if s is not None and s["executor_seconds"] is not None]
    if mine is None or mine["executor_seconds"] is None or not others:
        return ""
    parts = []
    for key, label in host_time.PARTS:
        ref = statistics.median(s[key] for s in others)
        parts.append((mine[key] - ref, label, mine[key], ref))
    worst = max(parts)
    return (f" The host traces show where: {worst[1]} takes {worst[2] * 1e3:,.2f} ms per call here against "
            f"{worst[3] * 1e3:,.2f} ms on the other instances (median), the largest difference of executor call, "
            "data loading and other host time.")


def _recommendation(metric: str) -> str:
    if metric == "median_call_seconds":
        return ("Look at this instance's host: data loading (more DataLoader workers, "
                "poptorch.DataLoaderMode.Async), CPU/NUMA placement (poprun --numa-aware 1) and "
                "other load on the machine; popviz capture --pvti records host traces to compare.")
    return ("The instances did not compile the same program: build the model and poptorch.Options "
            "the same way on every rank (no rank-dependent shapes or options), then capture again.")


def check(reports: ReportSet) -> dict[str, AnalysisOutput]:
    """Per engine label, the findings of comparing its instance with the other instances of the
    same run. Separate runs in one directory are not instances of each other: never compared."""
    import pandas as pd

    outputs: dict[str, AnalysisOutput] = {}
    runs: dict[tuple[str | None, str], list[Report]] = {}
    for r in reports:
        if is_instance(r):
            runs.setdefault((run_of(r), r.name), []).append(r)
    for (run, name), group in runs.items():
        instances = list(dict.fromkeys(r.instance for r in reports if is_instance(r) and run_of(r) == run))
        if len(instances) < 2:
            continue
        _check_group(name, group, instances, outputs, pd)
    return outputs


def _check_group(name: str, group: list[Report], instances: list, outputs: dict[str, AnalysisOutput],
                 pd) -> None:  # pd: pandas, imported by check
    group.sort(key=lambda r: _instance_key(r.instance or ""))
    outs = {r.label: outputs.setdefault(r.label, AnalysisOutput()) for r in group}
    first = outs[group[0].label]
    absent = [i for i in instances if i not in {r.instance for r in group}]
    if absent:
        first.findings.append(Finding(
            CODES["missing"], "warning", NAME, f"Engine {name!r} is missing on {len(absent)} instance(s)",
            f"{name} found on {', '.join(r.instance or '' for r in group)}; not on {', '.join(absent)}",
            "Check those instances' capture.log: the process may have failed before compiling, or "
            "written its reports elsewhere (autoReport.directory per instance)."))
    _compare_config(name, group, outs)
    rows: dict[str, dict[str, Any]] = {r.instance or "": {"instance": r.instance} for r in group}
    estimated = [r.provenance is not None and r.provenance.estimated for r in group]
    for metric, (get, threshold, label) in FIGURES.items():
        values = {r.label: get(r) for r in group}
        for r in group:
            rows[r.instance or ""][metric] = values[r.label]
        known = {k: v for k, v in values.items() if v is not None}
        if metric == "median_call_seconds" and any(estimated):
            # an estimate's calls ran on the emulator's CPU (or were only estimated): their wall time
            # says how long this machine took, not how an IPU instance kept up
            first.not_checked.append(NotChecked(
                NAME, f"{label} across instances",
                "estimated by the emulator: its call wall times are this machine's CPU running (or "
                "skipping) the model, not the IPUs'"))
            continue
        if len(known) < 2:
            first.not_checked.append(NotChecked(
                NAME, f"{label} across instances",
                f"known for {len(known)} of {len(group)} instances of {name}"))
            continue
        for r in group:
            value = known.get(r.label)
            if value is None:
                continue
            others = [v for k, v in known.items() if k != r.label]
            ref = statistics.median(others)
            if ref > 0 and value > ref * (1 + threshold):
                outs[r.label].findings.append(Finding(
                    CODES[metric], "warning", NAME,
                    f"{r.instance}: {label} {_above(value, ref)} the other instances",
                    f"{label} of {name} on {r.instance}: {_fmt(metric, value)}; median of the other "
                    f"{len(others)} instance(s): {_fmt(metric, ref)} (flagged above "
                    f"{100 * threshold:.0f}%)",
                    _with_trace(_recommendation(metric), _traced(metric, r, group))))
    table = pd.DataFrame(list(rows.values()))
    if "median_call_seconds" in table:
        # an estimate's calls ran on the emulator's CPU: their wall time is not the IPUs' (throughput's call ms)
        table["median call ms (emulator's CPU)" if all(estimated) else "median_call_ms"] = (
            table.pop("median_call_seconds") * 1e3)
    first.table = table.dropna(axis=1, how="all")
    run_rate, first.caption = _run_total(name, group, instances)
    for r in group:
        outs[r.label].metrics = {k: v for k, v in rows[r.instance or ""].items() if k != "instance"}
        outs[r.label].metrics["instances"] = len(group)
        if run_rate is not None:
            outs[r.label].metrics["run_samples_per_second"] = run_rate


def _run_total(name: str, group: list[Report], instances: list) -> tuple[float | None, str | None]:
    """The whole run's samples/s of this engine and a sentence saying so: each PopRun instance is
    one process feeding its own replicas, so the run's rate is the sum of its instances' (None when
    one is unknown or an instance is missing)."""
    from popviz.analysis.throughput import throughput

    rates = [throughput(r) for r in group]
    if len(group) < len(instances) or any(t is None for t in rates):
        return None, None
    total = round(sum(t.samples_per_second for t in rates), 1)  # type: ignore[union-attr]
    replicas = sum(t.replicas for t in rates)  # type: ignore[union-attr]
    label = "estimated: " if any(t.estimated for t in rates) else ""  # type: ignore[union-attr]
    return total, (f"{label}the whole run ({name}): {total:,.1f} samples/s over {len(group)} instances and "
                   f"{replicas} replicas (the sum of the instances' samples/s: each instance feeds its own "
                   "replicas; metric instances.run_samples_per_second)")


def _above(value: float, ref: float) -> str:
    """``35% above`` or, from twice on, ``1,520× that of``."""
    ratio = value / ref
    return f"{100 * (ratio - 1):.0f}% above" if ratio < 2 else f"{ratio:,.1f}× that of"


def _instance_key(instance: str) -> tuple[int, str]:
    tail = instance.rsplit("-", 1)[-1]
    return (int(tail), instance) if tail.isdigit() else (1 << 30, instance)


def _compare_config(name: str, group: list[Report], outs: dict[str, AnalysisOutput]) -> None:
    for field in CONFIG_FIELDS:
        values = {r.label: _config_value(r, field) for r in group}
        distinct = list(dict.fromkeys(v for v in values.values() if v is not None))
        if len(distinct) < 2:
            continue
        counts = {v: sum(1 for x in values.values() if x == v) for v in distinct}
        reference = max(distinct, key=lambda v: counts[v])  # ties: the lowest instance's value
        holders = [r.instance for r in group if values[r.label] == reference]
        for r in group:
            value = values[r.label]
            if value is None or value == reference:
                continue
            label = _CONFIG_LABELS[field]
            outs[r.label].findings.append(Finding(
                CODES["config"], "warning", NAME,
                f"{r.instance} runs {name} with a different {label}",
                f"{label} on {r.instance}: {_show(field, value)}; on {', '.join(map(str, holders))}: "
                f"{_show(field, reference)}",
                "Instances of one data-parallel run must run the same program: build poptorch.Options "
                "the same way on every rank (e.g. popdist.poptorch.Options()) and avoid rank-dependent "
                "settings."))
