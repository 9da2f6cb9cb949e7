"""Throughput: samples per second per replica and for the whole system, time per call and per
micro-batch (the figure users hold against Graphcore's performance tables).

One call processes ``micro-batch × D × G × R`` samples (device iterations D, gradient
accumulation G in training, replicas R; a host tensor's first dimension is the micro-batch). The
call's time is the profile's run duration where known, else the slowest IPU's cycles over the
clock. All replicas run in parallel, so the system's rate is R times one replica's. For an
emulated report every figure is the cost model's estimate (``estimated`` is true).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from popviz.analysis.findings import AnalysisOutput, Finding, NotChecked
from popviz.model import Report
from popviz.model.numbers import finite_float

NAME = "throughput"

PESSIMISTIC_SHARE = 0.5
"""An emulated estimate is called likely pessimistic when small matmuls and convolutions hold at
least this share of its operation cycles (the emulator records the share only then; its
calibration: ``popviz.emulator.hardware.SMALL_PRODUCT_ELEMENTS`` and docs/emulator.md); a recorded
share below it is not one the emulator writes, and is ignored."""


@dataclass(frozen=True)
class Throughput:
    samples_per_second: float
    """The whole system (all replicas)."""
    samples_per_second_per_replica: float
    call_seconds: float
    """Mean time of one call."""
    micro_batch_seconds: float
    """One replica's time per micro-batch (call time / (D × G))."""
    samples_per_call: int
    micro_batch_size: int
    micro_batches_per_call: int
    """Per replica: D × G."""
    replicas: int
    estimated: bool
    host_seconds_between_calls: float | None = None
    """The script's own host work between calls, measured (emulated reports run with ``--calls N``
    > 1), else None."""
    loop_samples_per_second: float | None = None
    """The whole system's rate as the script's loop runs it: samples per call over (call time +
    host work between calls); None when that host work was not measured."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def empty_metrics() -> dict[str, Any]:
    return {k: None for k in ("samples_per_second", "samples_per_second_per_replica", "call_seconds",
                              "micro_batch_seconds", "samples_per_call", "micro_batch_size",
                              "micro_batches_per_call", "replicas", "estimated",
                              "host_seconds_between_calls", "loop_samples_per_second")}


def micro_batch_size(report: Report) -> int | None:
    """The micro-batch: the first dimension of the first host input (None when unknown)."""
    if report.layers is not None and report.layers.micro_batch_size:
        return int(report.layers.micro_batch_size)
    inputs = report.host_io.inputs if report.host_io is not None else ()
    for t in inputs:
        if t.shape:
            return int(t.shape[0])
    return None


def call_seconds(report: Report) -> float | None:
    """Mean time of one call: run durations where every one is known, else the slowest IPU's
    cycles per run over the clock."""
    ex = report.execution
    if ex is None or not len(ex.runs):
        return None
    durations = ex.runs["duration_seconds"]
    if len(durations) and durations.notna().all() and (durations > 0).all():
        return float(durations.mean())
    if report.target is None or not report.target.clock_hz:
        return None
    from popviz.model.aggregate import cycle_totals

    mean = cycle_totals(ex).mean_longest()  # per run its longest IPU, over every run with steps
    if mean is None:
        return None
    seconds = mean / report.target.clock_hz
    return seconds if seconds > 0 else None


def throughput(report: Report) -> Throughput | None:
    """The report's throughput, or None when its micro-batch, batching or call time is unknown."""
    cfg = report.cfg
    micro = micro_batch_size(report)
    seconds = call_seconds(report)
    if micro is None or seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return None
    d = cfg.device_iterations or 1
    g = (cfg.gradient_accumulation or 1) if cfg.mode == "training" else 1
    r = cfg.replication_factor or (report.target.num_replicas if report.target is not None else 1) or 1
    per_call = micro * d * g * r
    gap = host_seconds_between_calls(report)
    return Throughput(
        samples_per_second=per_call / seconds, samples_per_second_per_replica=per_call / r / seconds,
        call_seconds=seconds, micro_batch_seconds=seconds / (d * g), samples_per_call=per_call,
        micro_batch_size=micro, micro_batches_per_call=d * g, replicas=r,
        estimated=bool(report.provenance.estimated) if report.provenance is not None else False,
        host_seconds_between_calls=gap,
        loop_samples_per_second=per_call / (seconds + gap) if gap is not None else None)


def host_seconds_between_calls(report: Report) -> float | None:
    """The script's host work between calls as the emulator measured it
    (``config.options.emulator.host_seconds_between_calls``), or None."""
    seconds = _emulator_number(report, "host_seconds_between_calls")
    return seconds if seconds is not None and seconds >= 0 else None


def small_products_share(report: Report) -> float | None:
    """Share of an emulated estimate's cycles in small matmuls and convolutions, which the
    emulator records (``config.options.emulator.small_products_share``) only when it is large
    enough to make the estimate pessimistic (``PESSIMISTIC_SHARE`` to 1; docs/emulator.md, T1 and
    B10); else None."""
    share = _emulator_number(report, "small_products_share")
    return share if share is not None and PESSIMISTIC_SHARE <= share <= 1 else None


def _emulator_number(report: Report, key: str) -> float | None:
    """``config.options.emulator[key]`` when it is a finite number (a bundle is untrusted), else None."""
    emulator = report.cfg.options.get("emulator") if report.cfg.options else None
    return finite_float(emulator.get(key)) if isinstance(emulator, dict) else None


def pessimistic_caution(report: Report, consequence: str) -> str:
    """" The estimate is likely pessimistic (see throughput): <consequence>." for a finding built on
    an estimate :func:`small_products_share` flags; "" otherwise."""
    if report.provenance is None or not report.provenance.estimated or small_products_share(report) is None:
        return ""
    return f" The estimate is likely pessimistic (see throughput): {consequence}."


def analyse(report: Report) -> AnalysisOutput:
    """``metrics.throughput`` and a one-row table with its caption (nothing to find: throughput
    is reported, and compared by ``compare``/``history``, not judged)."""
    import pandas as pd

    from popviz.model.frames import compile_failed, never_called, no_execution_reason, not_reached

    if never_called(report):
        return AnalysisOutput(metrics=empty_metrics(), findings=[never_called_finding(report)])
    if compile_failed(report):
        return AnalysisOutput(metrics=empty_metrics(), findings=[compile_failed_finding(report)])
    reason = not_reached(report)
    if reason is not None:
        return AnalysisOutput(metrics=empty_metrics(), not_checked=[NotChecked(
            NAME, "samples per second", f"the engine was not reached: {reason}")])
    t = throughput(report)
    if t is None:
        reason = (no_execution_reason(report) if report.execution is None
                  else "the micro-batch size or the call's time is unknown")
        return AnalysisOutput(metrics=empty_metrics(), not_checked=[NotChecked(NAME, "samples per second", reason)])
    table = pd.DataFrame([{"samples/s": round(t.samples_per_second, 1),
                           "samples/s per replica": round(t.samples_per_second_per_replica, 1),
                           "call ms": t.call_seconds * 1e3, "micro-batch ms": t.micro_batch_seconds * 1e3}])
    if t.loop_samples_per_second is not None:
        table["host ms between calls"] = t.host_seconds_between_calls * 1e3
        table["loop samples/s"] = round(t.loop_samples_per_second, 1)
    label = "estimated by the emulator's cost model: " if t.estimated else ""
    from popviz.analysis.instance_layout import is_instance, num_instances

    scope = "for the whole system"
    if is_instance(report):
        n_inst = num_instances(report)
        scope = "for this PopRun instance" + (f" (one of {n_inst}: the instances analysis adds up the run)"
                                              if n_inst else "")
    caption = (f"{label}{t.samples_per_second:,.1f} samples/s {scope}"
               + (f" ({t.replicas} replicas × {t.samples_per_second_per_replica:,.1f})" if t.replicas > 1 else "")
               + f" · one call: {t.samples_per_call:,} samples (micro-batch {t.micro_batch_size} × "
               f"{t.micro_batches_per_call:,} micro-batches × {t.replicas} replica{'s' if t.replicas != 1 else ''}) "
               f"in {_seconds(t.call_seconds)}, {_seconds(t.micro_batch_seconds)} per micro-batch")
    if t.loop_samples_per_second is not None:
        caption += (f" · as the script's loop runs it: {t.loop_samples_per_second:,.1f} samples/s (each call plus "
                    f"{_seconds(t.host_seconds_between_calls)} of the script's own host work between calls, "
                    "measured on the machine that ran it)")
    share = small_products_share(report) if t.estimated else None
    if share is not None:
        caption += (f" · likely pessimistic: {share:.0%} of the estimated operation cycles are small matmuls or "
                    "convolutions, which public hardware traces ran several times faster than the cost model "
                    "charges (docs/emulator.md, T1 and B10)")
    return AnalysisOutput(metrics=t.as_dict(), table=table, caption=caption)


def never_called_finding(report: Report) -> Finding:
    """RUN001: the script built the engine but never called or compiled it, so there is nothing to
    analyse (on an IPU it would leave no profile either); the likeliest cause is a loop over a
    ``poptorch.DataLoader`` too small for one call."""
    c = report.config
    mode = c.mode if c is not None and c.mode else "PopTorch"
    factors = []
    if c is not None:
        for name, value in (("device iterations", c.device_iterations),
                            ("gradient accumulation", c.gradient_accumulation if c.mode == "training" else None),
                            ("replicas", c.replication_factor)):
            if value is not None:
                factors.append((name, value))
    per_call = math.prod(value for _, value in factors)
    takes = (f"{per_call:,} micro-batch{'es' if per_call != 1 else ''} "
             f"({' × '.join(f'{n} {v:,}' for n, v in factors)}) of the batch size"
             if factors else "one call's micro-batches")
    return Finding(
        "RUN001", "error", NAME, "The engine was never called",
        f"the script built this {mode} engine but never called it or compiled it: 0 calls, no compile, so "
        "popviz capture recorded its options only and there is no memory, execution or throughput to analyse "
        "(on an IPU it would leave no profile either)",
        "Make the script call the model at least once. A loop over a poptorch.DataLoader yields no batch when "
        f"the dataset holds fewer samples than one call takes: {takes}; check len(loader) > 0, lower "
        + ("opts.deviceIterations or opts.Training.gradientAccumulation" if c is not None and c.mode == "training"
           else "opts.deviceIterations") + " or give it more data. Or the code that calls it was never reached: "
        "Lightning's fit stops before validating when its training loader yields no batch, so check the "
        "other engines' RUN001 first.")


def compile_failed_finding(report: Report) -> Finding:
    """RUN002: the engine's compile (its first call, or ``compile()``) raised, so nothing ran; on
    an IPU the script stops there too."""
    from popviz.model.frames import compile_failed

    error = " ".join((compile_failed(report) or "").split())
    error = error if len(error) <= 300 else error[:297].rsplit(" ", 1)[0] + " ..."
    error = error.rstrip(".") or "an error"  # the sentence goes on after it
    return Finding(
        "RUN002", "error", NAME, "The compile failed",
        f"the first call (or compile()) raised: {error}; nothing ran, so there is no memory, execution or "
        "throughput to analyse",
        "Fix what the error names (the capture's log has the whole traceback). Two of PopTorch's common "
        "compile errors are explained in docs/findings.md: too few micro-batches for the stages (PIPE002) and "
        "a number of IPUs that is not a power of two (PIPE005).")


def _seconds(value: float) -> str:
    if value < 1e-3:
        return f"{value * 1e6:,.1f} µs"
    return f"{value * 1e3:,.2f} ms" if value < 1 else f"{value:,.2f} s"


def metrics(report: Report) -> dict[str, Any]:
    """``metrics.throughput`` of the analysis result (every value None when unknown)."""
    t = throughput(report)
    return t.as_dict() if t is not None else empty_metrics()


__all__ = ["NAME", "Throughput", "analyse", "call_seconds", "empty_metrics", "host_seconds_between_calls", "metrics",
           "micro_batch_size", "pessimistic_caution", "small_products_share", "throughput"]
