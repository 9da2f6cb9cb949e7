"""One plan per engine: the findings' actions reconciled and ranked.

Each analysis proposes values on its own (PIPE003 a ramp-efficiency target for D or G, HIO003 a
device-time target for D). Here the proposals for one option become one value with the reasons
behind it, respecting the other constraints (G and D at least the pipeline depth), and the
findings' recommendations are rewritten to that value, so no two of them disagree. Then every
finding becomes an action with its estimated gain (throughput, or bytes per call), ranked:
errors first (nothing runs until they are fixed), then by throughput gain, then by bytes.

A later planner (issue 14) may attach a ``plan`` hint to an action (``Action.hint``): this module
only reads the analyses' metrics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from popviz.analysis.findings import severity_rank
from popviz.analysis.host_io import waits_for_host

if TYPE_CHECKING:
    from popviz.analysis.findings import EngineResult, Finding

SETTERS = {"device_iterations": "opts.deviceIterations({})",
           "gradient_accumulation": "opts.Training.gradientAccumulation({})"}
"""The PopTorch call that sets each reconciled option (as the findings write it)."""


@dataclass
class Decision:
    """One option's reconciled value."""

    option: str
    value: int
    current: int | None
    reasons: list[str] = field(default_factory=list)
    """``CODE: why`` for each proposal that drove or bounded the value."""

    def to_dict(self) -> dict[str, Any]:
        return {"option": self.option, "value": self.value, "current": self.current,
                "reasons": list(self.reasons)}


@dataclass
class Action:
    """One finding as a ranked action with its estimated gain."""

    code: str
    severity: str
    title: str
    throughput_gain_frac: float | None = None
    bytes_saved_per_call: int | None = None
    hint: dict[str, Any] | None = None
    """Reserved for a planner's hint (issue 14); None until one is attached."""
    gain_estimated: bool = False
    """The throughput gain is an estimate of what the finding's change buys, not a bound it cannot
    exceed (\"about +N%\" rather than \"up to +N%\")."""
    caveat: str | None = None
    """Why the gain is out of reach of the finding's usual change (PIPE001 when no split of whole
    layers is faster), appended to :attr:`gain_text`."""

    @property
    def gain_text(self) -> str:
        text = self._gain_text()
        if self.hint is not None:
            text = f"{text}; {self.hint['text']}"
        return f"{text}; {self.caveat}" if self.caveat else text

    def _gain_text(self) -> str:
        from popviz.analysis._common import nbytes

        saved = f"{nbytes(self.bytes_saved_per_call)} less per call" if self.bytes_saved_per_call is not None else None
        if self.throughput_gain_frac is not None:
            g = self.throughput_gain_frac
            figure = f"+{100 * g:.{1 if g < 0.01 else 0}f}% throughput"
            text = ("under +0.1% throughput" if g < 0.001 else
                    f"about {figure} (estimated)" if self.gain_estimated else f"up to {figure}")
            return f"{text}, {saved}" if saved else text
        if saved:
            return saved
        if self.code in ("RUN001", "RUN002"):  # never called, or the compile failed
            return "nothing was measured"
        if self.severity == "error":
            return "needed to run"
        return "gain not estimated"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "title": self.title,
                "throughput_gain_frac": self.throughput_gain_frac,
                "bytes_saved_per_call": self.bytes_saved_per_call, "gain": self.gain_text,
                "gain_estimated": self.gain_estimated,
                "hint": self.hint}


@dataclass
class Plan:
    decisions: list[Decision] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"decisions": [d.to_dict() for d in self.decisions],
                "actions": [a.to_dict() for a in self.actions]}


def _proposals(engine: EngineResult) -> dict[str, list[tuple[str, int, str]]]:
    """Per option, (finding code, value, reason) of every finding proposing a value."""
    m = engine.metrics
    cfg = engine.report.cfg
    pipe, hio = m.get("pipeline", {}), m.get("host_io", {})
    codes = {f.code for f in engine.findings}
    out: dict[str, list[tuple[str, int, str]]] = {}
    training = cfg.mode == "training"
    ramp_option = "gradient_accumulation" if training else "device_iterations"
    target = pipe.get("micro_batches_for_target")
    if target is not None and codes & {"PIPE002", "PIPE003"}:
        code = "PIPE002" if "PIPE002" in codes else "PIPE003"
        out.setdefault(ramp_option, []).append(
            (code, int(target), f"ramp efficiency {100 * pipe['ramp_target_frac']:.0f}%"))
    if "PIPE002" in codes and pipe.get("pipeline_stages") and target is None:
        # (the ramp target, when known, is above the depth already: one value per finding)
        out.setdefault(ramp_option, []).append(
            ("PIPE002", int(pipe["pipeline_stages"]), "at least the pipeline depth S"))
    d = hio.get("recommended_device_iterations")
    if d is not None and "HIO003" in codes:
        out.setdefault("device_iterations", []).append(
            ("HIO003", int(d), "about 50 ms of device time per call"))
    return out


def _rewrite(f: Finding, option: str, value: int, current: int | None = None, keep: int | None = None) -> Finding:
    """The finding with every value it proposes for ``option`` replaced by ``value`` (but
    ``keep``: PIPE002's minimum, the pipeline depth, stays as it is)."""
    setter = SETTERS[option]
    pattern = re.escape(setter).replace(re.escape("{}"), r"(\d+)")
    rec = re.sub(pattern, lambda m: m.group(0) if keep is not None and int(m.group(1)) == keep
                 else setter.format(value), f.recommendation)
    if option == "device_iterations" and current:
        rec = re.sub(r"batches \d+× larger", f"batches {value / current:.0f}× larger", rec)
    letter = "G" if option == "gradient_accumulation" else "D"
    rec = re.sub(rf"\({letter} = \d+\)", f"({letter} = {value})", rec)
    return replace(f, recommendation=rec) if rec != f.recommendation else f


def reconcile(engine: EngineResult) -> Plan:
    """Reconcile the engine's proposals in place (findings rewritten) and rank its actions."""
    cfg = engine.report.cfg
    plan = Plan()
    for option, props in _proposals(engine).items():
        current = getattr(cfg, option)
        # Every proposal is a lower bound (the ramp target, the depth, the call time): the
        # smallest value meeting them all is their maximum.
        value = max(v for _c, v, _r in props)
        reasons = [f"{c}: {r} needs {'≥ ' if v < value else ''}{v}" for c, v, r in props]
        plan.decisions.append(Decision(option, value, current, reasons))
        codes = {c for c, _v, _r in props}
        if len({v for _c, v, _r in props}) > 1:
            depth = engine.metrics.get("pipeline", {}).get("pipeline_stages")
            note = (f" (one value for {' and '.join(sorted(codes))}: "
                    + "; ".join(reasons) + ")")
            for out in engine.outputs.values():
                out.findings[:] = [
                    _with_note(_rewrite(f, option, value, current,
                                        keep=depth if f.code == "PIPE002" else None), note)
                    if f.code in codes else f
                    for f in out.findings]
    pipe = engine.metrics.get("pipeline", {})
    hio = engine.metrics.get("host_io", {})
    _boundaries(engine)
    for f in engine.findings:
        a = Action(f.code, f.severity, f.title)
        if f.code == "PIPE001":
            # the whole call's gain where the profile times the calls (host copies and syncs stay)
            call = pipe.get("balanced_call_gain_frac")
            a.throughput_gain_frac = call if call is not None else pipe.get("balanced_gain_frac")
        elif f.code == "PIPE003":
            eff = pipe.get("ramp_efficiency_frac")
            if eff:  # at the ramp target: the value the finding sets may reach past it (an estimate)
                a.throughput_gain_frac = max(0.0, pipe["ramp_target_frac"] / eff - 1)
                a.gain_estimated = True
        elif f.code == "PIPE004" and pipe.get("pipelining_speedup_ratio"):
            a.throughput_gain_frac = pipe["pipelining_speedup_ratio"] - 1
        elif f.code == "HIO001":
            bound = host_bound(pipe)
            if bound is not None:  # no host I/O at all: every IPU's copies and waits on others' gone
                a.throughput_gain_frac = bound
            else:  # no breakdown of the call: the worst IPU's own share, an estimate
                w, c, x = hio.get("host_wait_frac"), hio.get("stream_copy_frac"), hio.get("transfer_frac")
                share = w if waits_for_host(w, c) else x
                if share is not None and 0 < share < 1:
                    a.throughput_gain_frac, a.gain_estimated = share / (1 - share), True
        elif f.code == "HIO002":
            alt = (hio.get("alternatives") or {}).get("Final") or {}
            now, final = hio.get("output_bytes_per_call"), alt.get("output_bytes_per_call")
            if now is not None and final is not None:
                a.bytes_saved_per_call = now - final
                a.throughput_gain_frac = _output_gain(hio, pipe, now - final)
                a.gain_estimated = a.throughput_gain_frac is not None
        plan.actions.append(a)
    _plan_hints(engine, plan)
    plan.actions.sort(key=lambda a: (-(a.severity == "error"), -(a.throughput_gain_frac or 0),
                                     -(a.bytes_saved_per_call or 0), -severity_rank(a.severity)))
    return plan


def host_bound(pipe: dict[str, Any]) -> float | None:
    """The most any host-side change can raise throughput: the call without the host time no IPU
    is free of (its own stream copies, or its waits while another IPU copies: the breakdown's
    ``least_host_cycles``), every other cycle staying; None without that breakdown."""
    shares = pipe.get("cycle_shares") or {}
    elapsed, host = shares.get("elapsed_cycles"), shares.get("least_host_cycles")
    if not elapsed or host is None or not 0 <= host < elapsed:
        return None
    return elapsed / (elapsed - host) - 1


def _output_gain(hio: dict[str, Any], pipe: dict[str, Any], saved: int) -> float | None:
    """HIO002's gain, an estimate: the worst IPU's transfer share of the call
    (``transfer_frac``) times the share of the bytes moved per call that Final would not return
    (transfer time grows with the bytes), at most :func:`host_bound` (which counts the other
    IPUs' waits on the transfers too). None without stream copies or byte counts."""
    x = hio.get("transfer_frac")
    moved = sum(hio.get(k) or 0 for k in ("input_bytes_per_call", "output_bytes_per_call",
                                            "anchored_bytes_per_call"))
    if x is None or not moved or not 0 <= x < 1:
        return None
    share = x * min(1.0, saved / moved)
    bound = host_bound(pipe)
    return share / (1 - share) if bound is None else min(bound, share / (1 - share))


def _plan_hints(engine: EngineResult, plan: Plan) -> None:
    """Issue 14: the pipeline and memory findings name the gain of ``popviz plan``'s split."""
    from popviz.analysis.layer_plan import HINT_CODES, plan_outcome

    if engine.report.layers is None or not any(a.code in HINT_CODES for a in plan.actions):
        return
    hint, best_already = plan_outcome(engine.report)
    if best_already is not None and any(a.code == "PIPE001" for a in plan.actions):
        for a in plan.actions:
            if a.code == "PIPE001":
                a.caveat = "not by moving whole layers (`popviz plan` finds no faster split)"
        for out in engine.outputs.values():
            out.findings[:] = [_whole_layers_do_not_help(f, best_already) if f.code == "PIPE001" else f
                               for f in out.findings]
    if hint is None:
        return
    for a in plan.actions:
        if a.code in HINT_CODES:
            a.hint = hint
    note = f" {hint['text']}."
    for out in engine.outputs.values():
        out.findings[:] = [replace(f, recommendation=f.recommendation + note) if f.code in HINT_CODES
                           else f for f in out.findings]


def _boundaries(engine: EngineResult) -> None:
    """Stage boundaries: PIPE001 moves work towards an IPU; when the memory analysis finds that
    IPU under pressure (or the model does not fit), the balance advice says so, not silently
    contradicts the memory findings."""
    from popviz.analysis.thresholds import IPU_FULL_FRAC

    dst = engine.metrics.get("pipeline", {}).get("rebalance_to_ipu")
    mem = engine.metrics.get("memory", {})
    if dst is None or not mem:
        return
    row = next((r for r in mem.get("ipus") or [] if r["ipu"] == dst), None)
    codes = {f.code for f in engine.findings}
    if "MEM005" in codes:
        note = " (but the model does not fit its IPUs: fix memory first, MEM005)"
    elif row is not None and row["used_pct"] is not None and row["used_pct"] > 100 * IPU_FULL_FRAC:
        note = (f" (but IPU{dst} is already {row['used_pct']:.0f}% full: move only layers whose "
                "memory fits there)")
    else:
        return
    for out in engine.outputs.values():
        out.findings[:] = [_with_note(f, note) if f.code == "PIPE001" else f for f in out.findings]


def _whole_layers_do_not_help(f: Finding, best_already: str) -> Finding:
    """PIPE001 when no split of the report's layers is faster: its "move a layer" advice would
    contradict ``popviz plan``; it says what can still balance the stages instead."""
    _, sep, rest = f.recommendation.partition(" (optimum-graphcore: layers_per_ipu). ")
    if not sep:
        return _with_note(f, f"; {best_already}")
    return replace(f, recommendation=f"Moving whole layers does not help here: {best_already}. {rest}")


def _with_note(f: Finding, note: str) -> Finding:
    rec = f.recommendation
    rec = rec[:-1] + note + "." if rec.endswith(".") else rec + note
    return replace(f, recommendation=rec)
