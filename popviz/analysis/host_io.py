"""Host-transfer overhead: stream-copy share of each IPU's cycles (waiting for the host vs
transferring), what the output mode returns per call and what the others would, and whether
device iterations are high enough for the call's duration.

Output counts follow PopART's definitions (docs/analyses.md): All returns D·G·R copies of every
output per call, EveryN(N) (D/N)·G·R, Final and Sum R. Host tensor sizes are per micro-batch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from popviz.analysis import host_streams as hs
from popviz.analysis._common import ceil_exact, nbytes, pct
from popviz.analysis.findings import AnalysisOutput, Collector
from popviz.analysis.thresholds import (
    CALL_DEVICE_SECONDS_MIN,
    CALL_DEVICE_SECONDS_TARGET,
    HOST_BYTE_BOUND_FRAC,
    HOST_LEVER_MIN_SHARE_FRAC,
    HOST_THREAD_INPUT_BYTES_PER_SECOND,
    HOST_WAIT_DOMINANT_FRAC,
    OUTPUT_BYTES_SAVED_INFO,
    OUTPUT_BYTES_SAVED_WARN,
    STREAM_COPY_WARN_FRAC,
)
from popviz.analysis.throughput import pessimistic_caution
from popviz.model import Report
from popviz.model.aggregate import cycle_totals
from popviz.model.frames import no_execution_reason, unrun_reason
from popviz.model.names import output_mode_label

NAME = "host_io"
WAIT_TYPES = ("StreamCopyBegin", "StreamCopyEnd")
TRANSFER_TYPES = ("StreamCopyMid",)
STREAM_COPY_PREFIX = "StreamCopy"
MODES = ("All", "EveryN", "Final", "Sum")


def empty_metrics() -> dict[str, Any]:
    return {
        "output_mode": None, "output_mode_set": None, "output_return_period": None,
        "device_iterations": None, "gradient_accumulation": None, "replication_factor": None,
        "outputs_per_call": None, "output_bytes_per_micro_batch": None, "output_bytes_per_call": None,
        "input_bytes_per_call": None, "alternatives": None,
        "stream_copy_frac": None, "host_wait_frac": None, "transfer_frac": None, "stream_copy_ipu": None,
        "ipus": [], "call_device_seconds": None, "recommended_device_iterations": None,
        "anchored_tensors": None, "anchored_bytes_per_call": None, "inferred": [],
        "remote_buffer_frac": None, "host_bytes_per_call": None, "host_bytes_basis": None,
        "host_bytes_per_second": None, "host_trace": None,
    }


INFERRED_KEYS = ("mode", "device_iterations", "gradient_accumulation", "replication_factor")
"""Configuration fields these metrics rest on that may have been inferred from the profile."""


def outputs_per_call(mode: str, d: int, g: int, r: int, period: int | None = None) -> int:
    """How many copies of each output one call returns (PopART's anchor return types)."""
    if mode == "All":
        return d * g * r
    if mode == "EveryN":
        return (d // (period or 1)) * g * r
    if mode in ("Final", "Sum"):
        return r
    raise ValueError(f"unknown output mode {mode!r}")


def recorded_option(report: Report, key: str):
    """The value of a PopTorch/PopART option named ``key`` anywhere in the recorded options
    (``opts._Popart.set(key, ...)`` values sit nested), or None when not recorded."""
    stack = [report.cfg.options] if report.has("config") else []
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if key in node and not isinstance(node[key], (dict, list)):
                return node[key]
            stack.extend(node.values())
    return None


def synthetic_data(report: Report) -> bool:
    """``opts.enableSyntheticData(True)`` recorded: no stream copies move input data."""
    mode = recorded_option(report, "syntheticDataMode")
    return bool(mode) or bool(recorded_option(report, "enable_synthetic_data"))


def analyse(report: Report) -> AnalysisOutput:
    o = Collector(NAME, empty_metrics())
    unrun = unrun_reason(report)
    if unrun is not None:
        o.skip("output mode, stream copies", unrun)
        return o.out
    captions = [_outputs(report, o)]
    captions.append(_stream_copies(report, o))
    from popviz.analysis import host_time

    traced = host_time.summary(report)
    o.out.metrics["host_trace"] = traced
    captions.append(host_time.line(traced))
    o.out.caption = "\n".join(c for c in captions if c) or None
    return o.out


# ----------------------------------------------------------------------------------------- outputs

def _outputs(report: Report, o: Collector) -> str | None:
    m = o.out.metrics
    if not report.has("config"):
        o.skip("output mode", "no configuration recorded (output mode, device iterations); record it "
               "by running under `popviz capture` or `popviz emulate`")
        return None
    cfg = report.cfg
    m["inferred"] = [k for k in INFERRED_KEYS if cfg.is_inferred(k)]
    mode = cfg.effective_output_mode
    training = cfg.mode == "training"
    d = cfg.device_iterations
    g = cfg.gradient_accumulation if training else 1
    r = cfg.replication_factor or (report.target.num_replicas if report.target else None)
    m.update(output_mode=mode, output_mode_set=cfg.output_mode, output_return_period=cfg.output_return_period,
             device_iterations=d, gradient_accumulation=g, replication_factor=r)
    if mode is None and cfg.inferred:
        o.skip("output mode", "no configuration recorded, and a profile does not show the output "
               "mode (what each call returns); record it with `popviz capture -- python train.py`")
        return None
    if mode is None:
        o.skip("output mode", "output mode not recorded" if cfg.output_mode is None else
               "output mode Default with unknown training/inference mode")
        return None
    if d is None or g is None or r is None or cfg.mode is None:
        missing = [n for n, v in (("device iterations", d), ("gradient accumulation", g),
                                  ("replication factor", r), ("mode", cfg.mode)) if v is None]
        o.skip("outputs per call", f"{', '.join(missing)} not recorded")
        return None
    period = cfg.output_return_period if mode == "EveryN" else None
    count = outputs_per_call(mode, d, g, r, period)
    m["outputs_per_call"] = count
    host = report.host_io
    out_bytes = sum(t.bytes for t in host.outputs) if host is not None and host.outputs else None
    in_bytes = sum(t.bytes for t in host.inputs) if host is not None and host.inputs else None
    if out_bytes is None and "stages_from" in cfg.options:  # recorded by popviz capture's hooks
        o.skip("output bytes per call", "output tensor sizes not recorded: no call of this engine "
               "returned while it was captured (`--calls N` stops the script at its N-th call, "
               "before the outputs exist); capture with a larger --calls, or without it, to record them")
    elif out_bytes is None:
        o.skip("output bytes per call", "output tensor sizes not recorded (run under `popviz capture` "
               "to record them)")
    m["output_bytes_per_micro_batch"] = out_bytes
    m["output_bytes_per_call"] = count * out_bytes if out_bytes is not None else None
    if synthetic_data(report):
        in_bytes = None
        o.skip("input bytes per call", "not meaningful: synthetic data is enabled "
               "(opts.enableSyntheticData), so no inputs are copied from the host")
    m["input_bytes_per_call"] = d * g * r * in_bytes if in_bytes is not None else None
    _anchored(report, o, mode, d, g, r)
    alternatives: dict[str, Any] = {}
    for alt in MODES:
        p = (period if mode == "EveryN" else d) if alt == "EveryN" else None
        if alt == "EveryN" and (p is None or p < 1 or (mode != "EveryN" and d < 2)):
            alternatives[alt] = None
            continue
        n_alt = outputs_per_call(alt, d, g, r, p)
        alternatives[alt] = {"outputs_per_call": n_alt, "return_period": p,
                             "output_bytes_per_call": n_alt * out_bytes if out_bytes is not None else None}
    m["alternatives"] = alternatives
    _output_finding(report, o, mode, count, out_bytes, d, g, r)
    label = output_mode_label(mode, period)
    set_note = " (Default)" if cfg.output_mode == "Default" else ""
    line = f"OutputMode.{label}{set_note}: {count:,} cop{'y' if count == 1 else 'ies'} of each output per call"
    if out_bytes is not None:
        line += f", {nbytes(count * out_bytes)}"
        final = alternatives["Final"]["output_bytes_per_call"]
        if mode in ("All", "EveryN") and count > r:
            line += f"; Final/Sum: {nbytes(final)}"
    if in_bytes is not None:
        line += f" · inputs {nbytes(d * g * r * in_bytes)} per call"
    if m.get("anchored_bytes_per_call"):
        line += f" · anchored tensors {nbytes(m['anchored_bytes_per_call'])} per call"
    return line


def _anchored(report: Report, o: Collector, mode: str, d: int, g: int, r: int) -> None:
    """Tensors returned with ``opts.anchorTensor(short, long, output_mode, period)``: each comes
    back with its own return mode (the engine's when none was given), on top of the outputs."""
    from popviz.model.names import output_mode_name

    anchors = recorded_option_dict(report, "anchored_tensors")
    if not anchors:
        return
    host = report.host_io
    # one whole copy each (older bundles: an output of the same name)
    sizes = {t.name: t.bytes for t in (host.outputs + host.anchors)} if host is not None else {}
    rows = []
    for short, spec in sorted(anchors.items()):
        if not isinstance(spec, list) or len(spec) < 4:
            continue
        _long, use_default, raw_mode, period = spec[:4]
        amode = mode if use_default else (output_mode_name(raw_mode) or mode)
        if amode == "Default":
            amode = report.cfg.effective_output_mode or mode
        p = int(period) if isinstance(period, int) and period >= 1 else 1
        copies = outputs_per_call(amode, d, g, r, p)
        size = sizes.get(short)
        rows.append({"name": short, "output_mode": amode, "return_period": p if amode == "EveryN" else None,
                     "copies_per_call": copies, "bytes_per_call": copies * size if size is not None else None})
    o.out.metrics["anchored_tensors"] = rows
    unsized = [row["name"] for row in rows if row["bytes_per_call"] is None]
    o.out.metrics["anchored_bytes_per_call"] = sum(row["bytes_per_call"] or 0 for row in rows) if rows else None
    if unsized:
        o.skip("anchored tensor bytes", f"the size of {len(unsized)} of {len(rows)} tensors anchored with "
               f"opts.anchorTensor is not recorded ({', '.join(unsized[:3])}{', …' if len(unsized) > 3 else ''}): "
               "not counted in anchored_bytes_per_call; their copies per call are in anchored_tensors"
               + (" (the emulator sizes parameters and their gradients only)" if report.provenance.estimated
                  else ""))


def recorded_option_dict(report: Report, key: str) -> dict | None:
    """Like ``recorded_option`` for an option whose value is a mapping."""
    stack = [report.cfg.options] if report.has("config") else []
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get(key), dict):
                return node[key]
            stack.extend(v for v in node.values() if isinstance(v, dict))
    return None


DOMINANT_OUTPUT_FRAC = 0.9
"""An output holding this share of the bytes returned per micro-batch is named by HIO002."""


def _dominant_output(report: Report) -> str:
    """`` Most of it is one output: ...`` when one of several outputs holds
    ``DOMINANT_OUTPUT_FRAC`` of the bytes per micro-batch (a hidden state returned beside the
    logits), else ``""``."""
    outs = [t for t in (report.host_io.outputs if report.host_io is not None else ()) if t.bytes]
    total = sum(t.bytes for t in outs)
    if len(outs) < 2 or not total:
        return ""
    top = max(outs, key=lambda t: t.bytes)
    if top.bytes < DOMINANT_OUTPUT_FRAC * total:
        return ""
    return (f" Most of it is one output: {top.name!r} ({'×'.join(map(str, top.shape))} {top.dtype}) is "
            f"{nbytes(top.bytes)} of the {nbytes(total)} returned per micro-batch; if the host does not use "
            "it, stop returning it from forward.")


def _output_finding(report: Report, o: Collector, mode: str, count: int, out_bytes: int | None,
                    d: int, g: int, r: int) -> None:
    if mode not in ("All", "EveryN") or count <= r:
        return
    training = report.cfg.mode == "training"
    saved = (count - r) * out_bytes if out_bytes is not None else None
    if training and (saved is None or saved >= OUTPUT_BYTES_SAVED_INFO):
        severity = "warning"  # training rarely needs every micro-batch's outputs
    elif training:
        severity = "info"  # a few KiB per call: worth knowing, not worth failing a CI gate
    elif saved is not None and saved >= OUTPUT_BYTES_SAVED_WARN:
        severity = "warning"
    elif saved is not None and saved >= OUTPUT_BYTES_SAVED_INFO:
        severity = "info"
    else:
        return
    label = output_mode_label(mode, report.cfg.output_return_period)
    formula = "D·G·R" if mode == "All" else "(D/N)·G·R"
    moved = f"{count:,} × {nbytes(out_bytes)} = {nbytes(count * out_bytes)}" if out_bytes is not None \
        else f"{count:,} copies (sizes not recorded)"
    evidence = (f"OutputMode.{label} returns {formula} = {count:,} copies of each output per call "
                f"(D = {d}, G = {g}, R = {r}): {moved}; Final or Sum would return {r:,}"
                + (f" ({nbytes(r * out_bytes)}), saving {nbytes(saved)} per call" if saved is not None
                   else ""))
    save = f", saving {nbytes(saved)} per call" if saved is not None else ""
    if training:
        title = (f"Training returns the outputs of one batch in {report.cfg.output_return_period}, {count:,} "
                 f"copies per call (OutputMode.{label})" if mode == "EveryN" else
                 f"Training returns every micro-batch's outputs (OutputMode.{label})")
        rec = (f"Set opts.outputMode(poptorch.OutputMode.Final) (the last micro-batch's values) or "
               f"opts.outputMode(poptorch.OutputMode.Sum) (summed over the call, for monitoring){save}.")
    else:
        title = f"OutputMode.{label} moves {nbytes(count * out_bytes)} per call"
        rec = (f"If only the last micro-batch or a total is needed, set opts.outputMode("
               f"poptorch.OutputMode.Final) or poptorch.OutputMode.Sum{save}; if every prediction is "
               "needed, return less per micro-batch (e.g. argmax or top-k computed on the IPU, float16)."
               + _dominant_output(report))
    o.find("HIO002", severity, title, evidence, rec)


# ----------------------------------------------------------------------------------- stream copies

def _stream_copies(report: Report, o: Collector) -> str | None:
    import pandas as pd

    m = o.out.metrics
    if report.execution is None:
        o.skip("stream-copy share, device time per call",
               f"no execution profile in this report ({no_execution_reason(report)})")
        return None
    totals = cycle_totals(report.execution)
    runs = totals.calls() or [int(r) for r in totals.runs]
    if not runs:
        o.skip("stream-copy share, device time per call", "no run in the execution profile has a step "
               "with cycles (every step of it counts 0)")
        return None
    part = totals.by_ipu_type(runs)
    types = part["program_type"].astype(str)
    per_ipu = part.groupby("ipu")["cycles"].sum()
    copy = part[types.str.startswith(STREAM_COPY_PREFIX)].groupby("ipu")["cycles"].sum()
    wait = part[types.isin(WAIT_TYPES)].groupby("ipu")["cycles"].sum()
    transfer = part[types.isin(TRANSFER_TYPES)].groupby("ipu")["cycles"].sum()
    rows = []
    dest = hs.split(report, runs)  # host copies only (remote-buffer ones are HIO004's)
    for ipu, total in per_ipu.items():
        c, w, x = (int(s.get(ipu, 0)) for s in (copy, wait, transfer))
        d = dest.get(int(ipu)) if dest is not None else None
        if d is not None:
            c, w, x = d["host"], d["host_wait"], d["host_transfer"]
        row = {"ipu": int(ipu), "total_cycles": int(total), "stream_copy_cycles": c,
               "stream_copy_frac": c / total if total else None,
               "host_wait_frac": w / total if total else None,
               "transfer_frac": x / total if total else None}
        if dest is not None:
            d = d or {"remote": 0, "mixed": 0, "unknown": 0, "remote_bytes": 0}
            row.update({f"{k}_frac": (d[v] / total if total else None) for k, v in
                        (("remote_buffer", "remote"), ("mixed", "mixed"), ("unknown_destination", "unknown"))})
            row["remote_buffer_bytes_per_call"] = (d["remote_bytes"] / len(runs)
                                                   if d["remote_bytes"] else None)
        rows.append(row)
    m["ipus"] = rows
    worst = max(rows, key=lambda r: r["stream_copy_frac"] or 0.0) if rows else None
    if worst is not None:
        m.update(stream_copy_frac=worst["stream_copy_frac"], host_wait_frac=worst["host_wait_frac"],
                 transfer_frac=worst["transfer_frac"], stream_copy_ipu=worst["ipu"])
        shown = [r for r in rows if r["stream_copy_cycles"] or r.get("remote_buffer_frac") or r.get("mixed_frac")]
        if shown:
            o.out.table = pd.DataFrame({
                "IPU": [r["ipu"] for r in shown],
                "host copy %" if dest is not None else "stream copy %":
                    [round(100 * (r["stream_copy_frac"] or 0), 1) for r in shown],
                "waiting %": [round(100 * (r["host_wait_frac"] or 0), 1) for r in shown],
                "transfer %": [round(100 * (r["transfer_frac"] or 0), 1) for r in shown],
            })
            for key, col in (("remote_buffer_frac", "remote buffer %"), ("mixed_frac", "mixed %")):
                if any(r.get(key) for r in shown):
                    o.out.table[col] = [round(100 * (r.get(key) or 0), 1) for r in shown]
        m["remote_buffer_frac"] = max((r.get("remote_buffer_frac") or 0.0 for r in rows), default=None) \
            if dest is not None else None
        hs.remote_finding(report, o, rows)
    seconds = _call_seconds(report, totals, runs)
    m["call_device_seconds"] = seconds
    rate = hs.bandwidth(report, runs, dest, seconds, m)
    if worst is not None and worst["stream_copy_frac"] and worst["stream_copy_frac"] >= STREAM_COPY_WARN_FRAC:
        _copy_finding(report, o, worst, m["output_mode"], seconds)
    if seconds is None:
        o.skip("device iterations", "no clock frequency (target) or run duration to turn cycles into time")
        return None
    _device_iterations(report, o, seconds)
    n = m.get("recommended_device_iterations")
    if n is not None:  # HIO001's lever with HIO003's figure
        o.out.findings[:] = [dataclasses.replace(f, recommendation=f.recommendation.replace(
            DEVICE_ITERATIONS_LEVER, f"raise opts.deviceIterations({n}) (HIO003)")) if f.code == "HIO001" else f
            for f in o.out.findings]
    quiet = [r["ipu"] for r in m["ipus"] if not r["stream_copy_cycles"]]
    unknown = max((r.get("unknown_destination_frac") or 0.0 for r in m["ipus"]), default=0.0)
    split = any(r.get("remote_buffer_frac") or r.get("mixed_frac") for r in m["ipus"])
    only = ""
    if split or unknown:
        only = (f" · host copies only ({hs.rules(report)}"
                + (f"; copies of unknown destination, up to {pct(unknown)} of an IPU's cycles, counted "
                   "as host" if unknown else "") + ")")
    return (f"one call keeps the IPUs busy {_ms(seconds)} (mean over {len(runs)} profiled call"
            f"{'s' if len(runs) != 1 else ''}) · waiting = StreamCopyBegin + End, transfer = StreamCopyMid"
            + only + (f" · {rate}" if rate else "")
            + (f" · no {'host' if split else 'stream'} copies on {', '.join(f'IPU{i}' for i in quiet)}"
               if quiet else ""))


def _ms(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:,.0f} µs"
    return f"{seconds * 1e3:,.1f} ms" if seconds < 1 else f"{seconds:,.2f} s"


def _call_seconds(report: Report, totals, runs: list[int]) -> float | None:
    """Mean device time of one call: the profile's run durations where known, else cycles / clock."""
    durations = report.execution.runs.set_index("run")["duration_seconds"].reindex(runs)
    if len(durations) and durations.notna().all():
        return float(durations.mean())
    if report.target is None:
        return None
    return report.target.cycles_to_seconds(totals.elapsed(runs)) / len(runs)


def waits_for_host(wait_frac: float | None, copy_frac: float | None) -> bool:
    """Whether an IPU's stream copies are mostly waiting for the host (Begin/End at least
    ``HOST_WAIT_DOMINANT_FRAC`` of them), not the transfer itself: HIO001's branch, and the
    plan's gain for it."""
    return bool(wait_frac and copy_frac) and wait_frac / copy_frac >= HOST_WAIT_DOMINANT_FRAC


def _fewer_input_bytes(report: Report) -> list[str]:
    """Levers that shrink the inputs, for the inputs carrying a real share of the bytes: float
    images (4 or more dimensions) as uint8 normalised on the IPU, other int64/float inputs
    narrower (with no inputs recorded, the narrower-dtypes lever without names)."""
    inputs = report.host_io.inputs if report.host_io is not None else ()
    total = sum(t.bytes for t in inputs)
    big = [t for t in inputs if t.bytes >= HOST_LEVER_MIN_SHARE_FRAC * total]
    images = [t for t in big if t.dtype.startswith("float") and len(t.shape) >= 4]
    wide = [t for t in big if t.dtype in ("int64", "float32", "float64") and t not in images]
    levers = []
    if images:
        levers.append(f"send {', '.join(t.name for t in images)} as uint8, normalised on the IPU")
    if wide or not inputs:  # never propose float16 inputs that already are
        levers.append("send inputs in narrower dtypes (int32 or float16 instead of int64 or float32"
                      + (f": {', '.join(t.name for t in wide)}" if wide else "") + ")")
    return levers


BYTE_BOUND_LEAD = "The host cannot hand over the inputs fast enough:"
DEVICE_ITERATIONS_LEVER = "raise opts.deviceIterations(...)"
"""HIO001's lever, given HIO003's figure when HIO003 fires too."""


def _byte_bound_levers(report: Report, in_b: int, seconds: float, threads: int) -> str:
    """HIO001's advice when the host cannot hand over the call's input bytes in time: fewer bytes,
    more host threads or processes."""
    levers = _fewer_input_bytes(report) or ["do preprocessing on the IPU so fewer bytes cross"]
    r = report.cfg.replication_factor or 1
    multi = threads > 1 or recorded_option(report, "streamCallbacks.multiThreadMode") in ("collaborative", "dedicated")
    if r > 1 and not multi:
        levers.append("serve the stream callbacks on more threads (engine options "
                      "{\"streamCallbacks.multiThreadMode\": \"collaborative\", "
                      "\"streamCallbacks.numWorkerThreads\": \"auto\"})")
    if r > 1:
        levers.append("split the replicas over more PopRun instances (each has its own host process)")
    joined = ", ".join(levers[:-1]) + ", or " + levers[-1] if len(levers) > 1 else levers[0]
    host = in_b / (HOST_THREAD_INPUT_BYTES_PER_SECOND * threads)
    who = "one host thread needs" if threads == 1 else f"{threads} host threads need"
    return (f"{BYTE_BOUND_LEAD} {who} ~{_ms(host)} to pass the call's "
            f"{nbytes(in_b)} of inputs to Poplar (~{HOST_THREAD_INPUT_BYTES_PER_SECOND / 1e9:.2f} GB/s "
            "per thread, docs/emulator.md), "
            + (f"{pct(host / seconds)} of" if host <= seconds else "longer than")
            + f" the {_ms(seconds)} the call keeps the IPUs busy (the IPU waits for the part its compute "
            "does not hide). That wait grows with the bytes: more device iterations or a deeper prefetch "
            f"do not shorten it. {joined[0].upper()}{joined[1:]}.")


def _copy_finding(report: Report, o: Collector, worst: dict[str, Any], mode: str | None,
                  seconds: float | None) -> None:
    k = worst["ipu"]
    c, w, x = worst["stream_copy_frac"], worst["host_wait_frac"], worst["transfer_frac"]
    evidence = (f"stream copies take {pct(c)} of IPU{k}'s cycles in a call: {pct(w)} waiting for the "
                f"host (StreamCopyBegin/End), {pct(x)} transferring (StreamCopyMid)")
    in_b = o.out.metrics.get("input_bytes_per_call")
    threads = recorded_option(report, "host_callback_threads")  # the emulator's (environment included)
    threads = threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else 1
    byte_bound = (bool(in_b) and seconds is not None and seconds > 0
                  and in_b / seconds >= HOST_BYTE_BOUND_FRAC * HOST_THREAD_INPUT_BYTES_PER_SECOND * threads)
    waiting = waits_for_host(w, c)
    if waiting:
        title = f"IPU{k} waits for the host: {pct(c)} of its cycles in stream copies"
    if waiting and byte_bound:
        rec = _byte_bound_levers(report, in_b, seconds, threads)
    elif waiting:
        steps = [f"{DEVICE_ITERATIONS_LEVER} so each call does more work per host round trip"]
        depth = recorded_option(report, "defaultPrefetchBufferingDepth")
        if not (isinstance(depth, (int, float)) and depth >= 3):  # never propose what is already set
            steps.append("prefetch deeper with opts._Popart.set(\"defaultPrefetchBufferingDepth\", 3)")
        steps.append("load data with poptorch.DataLoader(opts, ..., mode=poptorch.DataLoaderMode.Async) "
                     "if it is not already")
        rec = ("The host does not keep up: " + ", ".join(steps)
               + ("; opts.enableSyntheticData(True) measures the upper bound without host I/O."
                  if not synthetic_data(report) else "."))
    else:
        title = f"Host transfers take {pct(c)} of IPU{k}'s cycles"
        m = o.out.metrics
        in_b, outs_b = m.get("input_bytes_per_call"), m.get("output_bytes_per_call")
        anchored = m.get("anchored_bytes_per_call") or 0  # opts.anchorTensor's copies leave the IPU too
        out_b = (outs_b or 0) + anchored if anchored else outs_b
        moved = (in_b or 0) + (out_b or 0)
        # Shrink a direction only if it moves a real share of the bytes (unknown sizes: offer both).
        def matters(b: int | None) -> bool:
            return b is None or not moved or b >= HOST_LEVER_MIN_SHARE_FRAC * moved

        out_matters, in_matters = matters(outs_b), matters(in_b)
        output_levers = []
        if out_matters and mode in ("All", "EveryN"):
            output_levers.append("return fewer outputs (opts.outputMode(poptorch.OutputMode.Final) or Sum"
                                 + (", if the host does not need every prediction" if report.cfg.mode == "inference"
                                    else "") + ")")
        if anchored and matters(anchored):
            output_levers.append(_anchor_lever(m))
        if out_matters:
            output_levers.append("return outputs in float16")
        input_levers = _fewer_input_bytes(report) if in_matters else []
        if in_matters:
            input_levers.append("do preprocessing on the IPU")
        levers = (output_levers + input_levers if (out_b or 0) > (in_b or 0) else input_levers + output_levers)
        share = ""
        if in_b is not None and out_b is not None and moved:
            of_it = f", {nbytes(anchored)} of it anchored tensors" if anchored else ""
            share = (f" (per call {nbytes(in_b)} in, {nbytes(out_b)} out{of_it}: the "
                     f"{'outputs' if out_b > in_b else 'inputs'} are {pct(max(in_b, out_b) / moved)} of the bytes)")
        rec = (f"The transfers themselves take the time{share}: move fewer bytes — "
               + (", ".join(levers[:-1]) + ", or " + levers[-1] if len(levers) > 1 else levers[0]) + "."
               + (_dominant_output(report) if out_matters and (outs_b or 0) > (in_b or 0) else ""))
    o.find("HIO001", "warning", title, evidence, rec)


def _anchor_lever(m: dict[str, Any]) -> str:
    """HIO001's lever for anchored tensors moving a real share of the bytes: the largest ones,
    anchored less often or not at all."""
    rows = sorted((r for r in m["anchored_tensors"] or () if r["bytes_per_call"]),
                  key=lambda r: -r["bytes_per_call"])
    names = ", ".join(f"{r['name']} ({nbytes(r['bytes_per_call'])} in {r['copies_per_call']:,} "
                      f"cop{'y' if r['copies_per_call'] == 1 else 'ies'})" for r in rows[:3])
    often = any(r["output_mode"] in ("All", "EveryN") and r["copies_per_call"] > (m.get("replication_factor") or 1)
                for r in rows)
    return (f"anchor fewer tensors with opts.anchorTensor ({names}{', …' if len(rows) > 3 else ''} per call)"
            + (", or anchor them with poptorch.OutputMode.Final or EveryN(N) (its fourth argument a "
               "larger period)" if often else ""))


def _device_iterations(report: Report, o: Collector, seconds: float) -> None:
    m = o.out.metrics
    d = report.cfg.device_iterations
    if seconds >= CALL_DEVICE_SECONDS_MIN or seconds <= 0:
        return
    wall = report.host_io.stat("wall_seconds") if report.host_io is not None else None
    # An estimated report's wall time is the emulator running the model on the CPU, not the host.
    measured = (f"; measured wall time per call {_ms(wall.mean)}"
                if wall is not None and wall.count and not report.provenance.estimated else "")
    evidence = (f"one call keeps the IPUs busy for {_ms(seconds)}"
                + (f" with D = {d}" + (" (inferred)" if report.cfg.is_inferred("device_iterations") else "")
                   if d else "")
                + f", under {_ms(CALL_DEVICE_SECONDS_MIN)}: the fixed host cost of every call "
                f"(Python, PopTorch, host sync) weighs heavily{measured}")
    if d is not None:
        n = max(d + 1, ceil_exact(d * CALL_DEVICE_SECONDS_TARGET, seconds))
        period = report.cfg.output_return_period if report.cfg.output_mode == "EveryN" else None
        if isinstance(period, int) and period > 1:  # PopART refuses a return period that does not divide D
            n = -(-n // period) * period
        g = (report.cfg.gradient_accumulation or 1) if report.cfg.mode == "training" else 1
        r = report.cfg.replication_factor or 1
        m["recommended_device_iterations"] = n
        rec = (f"Set opts.deviceIterations({n}) (about {_ms(CALL_DEVICE_SECONDS_TARGET)} per call); "
               "poptorch.DataLoader built with the same options then yields batches "
               f"{n / d:.0f}× larger: its dataset must hold at least {n * g * r:,} micro-batches (D × G × R), "
               "or the loader yields no batch at all.")
    else:
        rec = ("Raise opts.deviceIterations(...) so one call runs for at least "
               f"{_ms(CALL_DEVICE_SECONDS_TARGET)}.")
    if any(f.code == "HIO001" and f.recommendation.startswith(BYTE_BOUND_LEAD) for f in o.out.findings):
        rec += (" This spreads each call's fixed cost over more samples; the wait for the input bytes "
                "(HIO001) stays the same per sample.")
    rec += pessimistic_caution(report, "calls are shorter on an IPU, so this is a lower bound")
    o.find("HIO003", "warning", "Device iterations too low for the step time", evidence, rec)
