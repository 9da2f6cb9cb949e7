"""Where the host time of an executor call went, from the System Analyser traces (``.pvti``)
the capture recorded (the report's ``host_trace``): inside the executor call, loading data
before it, and the rest of the time since the previous call returned (the Python loop, waiting).
Used by the host-I/O analysis (a caption and metrics) and by INST003 (which instance's host is
slow, and at what)."""

from __future__ import annotations

from typing import Any

from popviz.model import Report

PARTS = (("executor_seconds", "executor call"), ("data_loading_seconds", "data loading"),
         ("other_host_seconds", "other host"))


def summary(report: Report) -> dict[str, Any] | None:
    """Medians per call of each part and its share of the call-to-call time, over the calls
    that have a previous call (the first has no gap before it); None without a trace."""
    trace = report.host_trace
    if trace is None or trace.calls.empty:
        return None
    calls = trace.calls.dropna(subset=["data_loading_seconds", "other_host_seconds"])
    if calls.empty:
        return {"calls": len(trace.calls), "files": list(trace.files), **{k: None for k, _ in PARTS},
                "shares_frac": None, "threads": len(trace.threads)}
    med = {k: float(calls[k].median()) for k, _ in PARTS}
    total = calls[[k for k, _ in PARTS]].sum(axis=1)
    shares = {k: float((calls[k] / total).median()) if bool((total > 0).all()) else None for k, _ in PARTS}
    return {"calls": len(trace.calls), "files": list(trace.files), **med, "shares_frac": shares,
            "threads": len(trace.threads)}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def line(s: dict[str, Any] | None) -> str | None:
    """``host per call (trace): executor call 20.00 ms · data loading 6.00 ms · ...``."""
    if s is None or s["executor_seconds"] is None:
        return None
    parts = " · ".join(f"{label} {_ms(s[k])}" + (f" ({100 * s['shares_frac'][k]:.0f}%)" if s["shares_frac"]
                                                 and s["shares_frac"][k] is not None else "")
                       for k, label in PARTS)
    return (f"host time per call, measured by the host trace (median of {s['calls'] - 1:,} calls after the "
            f"first, {s['threads']} thread(s)): {parts}")
