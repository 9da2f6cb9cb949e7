"""Issue 42, "figures that hold when acted on": `popviz plan`'s per-IPU memory, re-captured with the
split it proposes, in both directions — layers leaving the last stage (which PopART's Pipeline
recomputation does not recompute, so it stashes everything) for stages that recompute, and layers
moving onto it — within 5% on every IPU.

Before the stash was re-estimated for the new stage, the 1,1,1,5 -> 2,2,2,2 case predicted IPU1
at 100.5 MiB where the re-capture measured 81.4 MiB (+23%): layers.3, measured on the last stage,
carried its 5,255,168 stashed bytes to a stage at depth 5 that recomputes them instead."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import popviz
from popviz.analysis import layer_costs
from popviz.analysis.layer_plan import make_plan
from popviz.analysis.stash_modes import stash_modes

from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
ARGS = ("--layers", "8", "--hidden", "128", "--heads", "4", "--seq", "64", "--vocab", "2000")
"""A small BERT-style encoder with a classifier on the last IPU (no tied head: the last forward
stage is on the last IPU, so it is the stage PopART does not recompute)."""


def capture(tmp_path: Path, name: str, layers_per_ipu: str, split: str | None = None):
    out = tmp_path / name
    args = ["capture", "-o", str(out), "--emulate", "--calls", "1"]
    if split:
        args += ["--split", split]
    proc = run_cli(*args, "--", sys.executable, str(ROOT / "examples" / "bert_pipeline.py"), *ARGS,
                   "--layers-per-ipu", layers_per_ipu, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"},
                   timeout=900)  # a hang guard only: one capture takes seconds
    assert proc.returncode == 0, proc.stderr
    return popviz.load(out)["training"]


def measured_mib(report) -> list[float]:
    per = report.memory.per_ipu().sort_values("ipu")
    return [float(v) / 2**20 for v in per["total_bytes_including_gaps"]]


@pytest.mark.slow  # four emulated captures: about 40 CPU-seconds
@pytest.mark.parametrize("now, proposed", [("1,1,1,5", [2, 2, 2, 2]), ("5,1,1,1", [2, 2, 2, 2])],
                         ids=["off-the-last-stage", "onto-the-last-stage"])
def test_the_proposed_split_recaptured_is_within_5_percent_per_ipu(tmp_path, now, proposed):
    report = capture(tmp_path, "now", now)
    plan = make_plan(report)
    assert plan.proposed is not None and plan.proposed.layers_per_ipu == proposed
    predicted = [st.memory_bytes / 2**20 for st in plan.proposed.stages]
    split = plan.to_dict()["code"]["split_argument"]
    again = capture(tmp_path, "again", now, split=split)
    measured = measured_mib(again)
    assert len(measured) == len(predicted)
    errors = [abs(p - m) / m for p, m in zip(predicted, measured, strict=True)]
    assert max(errors) < 0.05, (predicted, measured)
    # the re-captured report's own plan models its split as the prediction did (same layers, same
    # stash: the code per IPU aside, which the plan takes as the smallest gap)
    back = make_plan(again)
    assert back.current is not None
    modelled = [st.memory_bytes for st in back.current.stages][1:]
    assert all(abs(a - b) <= 4096 for a, b in zip(modelled, [st.memory_bytes for st in plan.proposed.stages][1:],
                                                   strict=True)), modelled


def test_stash_modes_from_a_pipeline_table():
    """The table's figures in both kinds of stage: a layer measured in a recomputing stage stashes
    what it recomputed where nothing recomputes it, and one measured on the last stage (stashing
    everything) recomputes it where a stage does; a recomputing stage's first layer's stash is the
    stage's input, and a boundary the report did not have takes the nearest measured one."""
    from popviz.model import Layer, LayerTable

    table = LayerTable((
        Layer("emb", role="embeddings", stage=0, ipu=0, activation_bytes=10, recompute_bytes=500, recompute_group=0),
        Layer("l0", stage=0, ipu=0, activation_bytes=0, recompute_bytes=1_000, recompute_group=0),
        Layer("l1", stage=1, ipu=1, activation_bytes=100, recompute_bytes=1_000, recompute_group=0),
        Layer("l2", stage=2, ipu=2, activation_bytes=990),
        Layer("l3", stage=2, ipu=2, activation_bytes=1_000),
        Layer("head", role="head", stage=2, ipu=2, activation_bytes=7),
    ), recomputation="Pipeline")
    modes = stash_modes(table, table.recomputation)
    assert modes is not None
    assert (modes["l1"].stash_input_bytes, modes["l1"].recomputed_bytes, modes["l1"].plain_bytes) == (100, 0, 1_000)
    assert (modes["l0"].recomputed_bytes, modes["l0"].plain_bytes, modes["l0"].stage_input_bytes) == (0, 1_000, 100)
    assert (modes["l3"].recomputed_bytes, modes["l3"].recompute_bytes, modes["l3"].recompute_group) == (0, 1_000, 0)
    assert modes["l3"].stage_input_bytes == 100  # the nearest measured boundary (l1's)
    assert modes["emb"].stash_input_bytes == 0  # the first stage's input is the host's
    # another recomputation type, or inference: nothing re-estimated
    assert stash_modes(table, "RecomputeAll") is None
    costs = {c.name: c for c in layer_costs.layer_costs(table)}
    assert (costs["l3"].plain_activation_bytes, costs["l3"].recomputed_activation_bytes) == (1_000, 0)
    assert costs["l3"].stage_input_bytes == 100
