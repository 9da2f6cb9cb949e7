"""Infer what a capture manifest would have recorded from a Poplar profile alone.

Raw autoReport directories (Lightning's ``IPUStrategy(autoreport=True)``, a hand-set
``POPLAR_ENGINE_OPTIONS``, old profiles opened in PopVision) have no ``popviz-model.json``: libpva
gives the target, memory and execution, not the PopTorch options. This module fills in the part of
the configuration the execution structure shows, and labels every value it fills in
(:attr:`popviz.model.ModelConfig.inferred` maps each field to the one-line assumption behind it):

* **stages**: one per IPU that executes on-tile compute in the executor calls. PopTorch places one
  stage per IPU unless several ``BeginBlock`` blocks share one (PopTorch's ``Stage`` / ``Block``
  docs: https://docs.graphcore.ai/projects/poptorch-user-guide/en/latest/overview.html); the
  per-IPU cycles then give the bottleneck and the imbalance.
* **execution strategy**: ``PipelinedExecution`` when the compute steps of different IPUs overlap
  in time (the steps' start cycles), ``ShardedExecution`` when they never do.
* **mode**: training when programs are named like a weight update or optimizer step (the names the
  cycle decomposition already uses), inference otherwise.
* **micro-batches per call**: how often the first stage's most repeated compute program runs in
  one call (PopART expands the repeat loops in the execution trace), checked against the input
  stream copies per call; in training, the weight-update programs per call split it into
  device iterations (weight updates per call) × gradient accumulation.
* **replicas**: the target's ``numReplicas``.

What the profile cannot show (the output mode; the D vs G split when no weight update is named)
stays unknown, and the analyses list it as not checked with the command that records it. Only
reports read from a profile (``provenance.source == "pva"``) without a recorded configuration
are inferred; a recorded configuration is never overwritten.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from popviz.model import ModelConfig, Report, Stage

if TYPE_CHECKING:
    import pandas as pd

CAPTURE_COMMAND = "popviz capture -- python train.py"
"""The command that records what cannot be inferred (quoted in not-checked reasons)."""
INPUT_COPY_TYPE = "StreamCopyMid"
"""The step that moves a stream's data (one per input copy; Begin/End are the host handshake)."""


def wants_inference(report: Report) -> bool:
    """True for a report read from a profile with no configuration recorded."""
    return report.provenance.source == "pva" and not report.has("config")


def infer_config(report: Report) -> Report:
    """``report`` with a :class:`ModelConfig` inferred from its target and execution (see the
    module docstring); unchanged when it has a recorded configuration or nothing to infer from."""
    if not wants_inference(report):
        return report
    fields: dict[str, Any] = {}
    why: dict[str, str] = {}
    if report.execution is not None:
        _from_execution(report, fields, why)
    if report.target is not None:
        r = report.target.num_replicas
        fields["replication_factor"] = r
        why["replication_factor"] = f"replicas from the target: {r} (numReplicas)"
    if not fields:
        return report
    return report.replace(config=ModelConfig(**fields, inferred=why))


def _ipu_list(ipus: list[int]) -> str:
    if len(ipus) > 2 and ipus == list(range(ipus[0], ipus[-1] + 1)):
        return f"IPU{ipus[0]}-IPU{ipus[-1]}"
    return ", ".join(f"IPU{i}" for i in ipus)


def _from_execution(report: Report, fields: dict[str, Any], why: dict[str, str]) -> None:
    from popviz.model.aggregate import cycle_totals

    totals = cycle_totals(report.execution)
    runs = totals.calls()
    if not runs:
        return
    agg = totals.by_ipu_type(runs)
    compute = agg[agg["program_type"] == "OnTileExecute"]
    per_ipu = compute.groupby("ipu")["cycles"].sum()
    ipus = sorted(int(i) for i, c in per_ipu.items() if c > 0)
    if not ipus:
        return
    fields["stages"] = tuple(Stage(k, ipu) for k, ipu in enumerate(ipus))
    why["stages"] = f"stages inferred: one per computing IPU ({_ipu_list(ipus)})"
    steps = report.execution.steps
    in_calls = steps["run"].isin(runs).to_numpy()
    compute_steps = steps[in_calls & (steps["program_type"] == "OnTileExecute").to_numpy()]
    if len(ipus) > 1:
        overlap = _overlap_frac(compute_steps)
        if overlap is None:
            fields["execution_strategy"] = "PipelinedExecution"
            why["execution_strategy"] = ("strategy inferred: PipelinedExecution (more than one IPU "
                                         "computes; the profile has no start cycles to confirm it)")
        else:
            from popviz.model.thresholds import INFER_PIPELINED_OVERLAP_FRAC

            pipelined = overlap >= INFER_PIPELINED_OVERLAP_FRAC
            fields["execution_strategy"] = "PipelinedExecution" if pipelined else "ShardedExecution"
            why["execution_strategy"] = (
                f"strategy inferred: {fields['execution_strategy']} (IPUs compute at the same time "
                f"for {100 * overlap:.0f}% of the compute cycles"
                + ("" if pipelined else ": the IPUs compute one after another") + ")")
    from popviz.model.names import WEIGHT_UPDATE_PROGRAM

    names = [str(c) for c in steps["program"].cat.categories]
    update_names = [n for n in names if WEIGHT_UPDATE_PROGRAM.search(n)]
    update_mask = compute_steps["program"].isin(update_names).to_numpy()
    training = bool(update_mask.any())
    fields["mode"] = "training" if training else "inference"
    why["mode"] = ("mode inferred: training (programs named like a weight update run in the calls)"
                   if training else
                   "mode inferred: inference (no program named like a weight update or optimizer "
                   "step)")
    first = compute_steps[compute_steps["ipu"].to_numpy() == ipus[0]]
    repeats = _per_call(first[~first["program"].isin(update_names).to_numpy()], runs)
    if not repeats:
        return
    copies = _per_call(steps[in_calls & (steps["ipu"] == ipus[0]).to_numpy()
                             & (steps["program_type"] == INPUT_COPY_TYPE).to_numpy()], runs)
    per_call = repeats
    basis = f"IPU{ipus[0]}'s most repeated compute program runs {repeats} times per call"
    if copies and copies != repeats:
        if repeats % copies:
            return  # the two counts disagree: leave the batching unknown
        per_call = copies
        basis = (f"an input stream copy runs {copies} times per call on IPU{ipus[0]}, whose compute programs "
                 f"repeat {repeats} times ({repeats // copies} per micro-batch)")
    elif copies:
        basis += ", as often as its input stream copy"
    if not training:
        fields["device_iterations"] = per_call
        why["device_iterations"] = (f"device iterations inferred: {per_call} micro-batches per call "
                                    f"({basis})")
        return
    updates = _per_call(compute_steps[update_mask], runs, max_over_ipus=True)
    if not updates or per_call % updates:
        return
    g = per_call // updates
    fields["gradient_accumulation"] = g
    fields["device_iterations"] = updates
    why["gradient_accumulation"] = (f"gradient accumulation inferred: {g} micro-batches per weight "
                                    f"update ({per_call} per call: {basis}; {updates} weight "
                                    f"update{'s' if updates != 1 else ''} per call)")
    why["device_iterations"] = (f"device iterations inferred: {updates} (weight updates per call, "
                                "from the runs of the weight-update programs)")


def _per_call(frame: pd.DataFrame, runs: list[int], max_over_ipus: bool = False) -> int | None:
    """How often one call runs the most repeated program of ``frame`` (on any one IPU with
    ``max_over_ipus``); None unless every call run gives the same positive count."""
    if frame.empty:
        return None
    keys = ["run", "ipu", "program"] if max_over_ipus else ["run", "program"]
    counts = frame.groupby(keys, observed=True).size().groupby(level="run").max()
    counts = counts.reindex(runs)
    if counts.isna().any() or counts.nunique() != 1:
        return None
    value = int(counts.iloc[0])
    return value if value > 0 else None


def _overlap_frac(compute: pd.DataFrame) -> float | None:
    """Share of compute cycles during which another IPU's compute step also ran (start cycles
    are relative to each run); None when the start cycles are unknown."""
    import numpy as np

    start = compute["start_cycle"]
    if start.isna().any() or compute.empty:
        return None
    run = compute["run"].to_numpy().astype("int64")
    begin = start.to_numpy(dtype="int64")
    end = begin + compute["cycles"].to_numpy()
    span = int(end.max()) + 1
    if (int(run.max()) + 1) * span >= 2**62:
        return None
    # One key per run, so a run's intervals never overlap the previous run's.
    offset = (run - run.min()) * span
    order = np.lexsort((begin, run))
    b, e = (begin + offset)[order], (end + offset)[order]
    reach = np.maximum.accumulate(e)
    before = np.concatenate(([b[0]], reach[:-1]))  # furthest end of every earlier step
    covered = np.clip(np.minimum(e, before) - b, 0, None)
    # Steps of one IPU run one after another, so any covered cycle is another IPU's compute.
    total = int(compute["cycles"].sum())
    return float(covered.sum()) / total if total else None
