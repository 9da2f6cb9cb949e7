"""Raw autoReport directories (no capture manifest) read through the libpva test double: what
the profile alone shows is inferred and labelled, what it cannot show is not checked."""

from __future__ import annotations

import json
import os
import sys

import pytest

from conftest import FAKE_PVA, run_cli

RAMP = {False: 192_000 / (192_000 + 23_200), True: 192_000 / (192_000 + 22_000)}
"""Time-weighted ramp efficiency of pipeline_profile() (docs/analyses.md): IPU2 works 2 calls ×
2 updates × 8 micro-batches × 6,000 = 192,000 cycles. Per weight update its syncs last 7,400
cycles of waiting (1,200 + 1,200 in pipeline cycles 0 and 1 while IPU0 copies and computes, 1,000
in cycle 3 while IPU3 runs forward and backward, 2,000 + 2,000 in cycles 12 and 13 while IPU1 and
IPU0 drain) plus 14 × 50 = 8,100, so 32,400 over the 4 updates; less the host-copy waits (IPU0's
32 × 200 = 6,400) and the fixed sync cost (56 syncs × 50 = 2,800): 23,200 cycles of ramp. The
flat shape has one run of every step, in which the weights copy from the host (400 cycles per
IPU) also counts: 1,200 more host wait, 22,000 of ramp."""
SHAPES = pytest.mark.parametrize("flat", [False, True], ids=["ipus-runs", "tiles-steps"])


@pytest.fixture
def fake_pva(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE_PVA))
    monkeypatch.delitem(sys.modules, "pva", raising=False)
    import pva

    return pva


def _analyse(tmp_path, pva, engine: str, data: dict):
    import popviz

    (tmp_path / engine).mkdir(parents=True)
    pva.write_data(tmp_path / engine / "profile.pop", data)
    result = popviz.analyse(popviz.load(tmp_path))
    return result.engines[0]


@SHAPES
def test_pipelined_training_ipu2_twice_the_work(tmp_path, fake_pva, flat):
    e = _analyse(tmp_path, fake_pva, "training", fake_pva.pipeline_profile(flat=flat))
    cfg = e.report.config
    assert [(s.index, s.ipu) for s in cfg.stages] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert (cfg.mode, cfg.execution_strategy) == ("training", "PipelinedExecution")
    # 16 forward programs and input copies per call on IPU0, 2 weight updates per call; without
    # runs (flat), the two calls are one run of every step: 32 and 4
    calls = 1 if flat else 2
    assert (cfg.gradient_accumulation, cfg.device_iterations, cfg.replication_factor) == (
        8, 4 // calls, 1)
    assert cfg.output_mode is None
    assert list(cfg.inferred) == ["stages", "execution_strategy", "mode", "gradient_accumulation",
                                  "device_iterations", "replication_factor"]
    assert cfg.inferred["stages"] == "stages inferred: one per computing IPU (IPU0-IPU3)"
    p = e.metrics["pipeline"]
    # per IPU over 2 calls: 2 × 2 × 8 micro-batches × (w + 2w) + 2 × 2 weight updates × w/2
    assert [s["total_cycles"] for s in p["stages"]] == [98_000, 98_000, 196_000, 98_000]
    assert [s["cycles"] for s in p["stages"]] == [3062.5, 3062.5, 6125.0, 3062.5]
    assert p["bottleneck_stage"] == 2 and p["stages"][2]["ipu"] == 2
    # twice the others' work is 2.0× each other stage and 196,000 / 122,500 = 1.6× the mean
    assert p["imbalance_ratio"] == 1.6
    assert p["pipeline_stages"] == 7 and p["micro_batches_per_call"] == 32 // calls
    assert p["ramp_efficiency_count_frac"] == 8 / 14
    assert p["ramp_efficiency_basis"] == "time"
    assert p["ramp_efficiency_frac"] == pytest.approx(RAMP[flat], rel=1e-12)
    assert p["inferred"] == ["mode", "execution_strategy", "stages", "gradient_accumulation",
                             "device_iterations"]
    pipe = [f for f in e.findings if f.code == "PIPE001"]
    assert len(pipe) == 1
    assert pipe[0].title == "Unbalanced pipeline: stage 2 (IPU2) is the bottleneck"
    assert ("stages inferred: one per computing IPU (IPU0-IPU3), as no capture manifest records "
            "them") in pipe[0].evidence
    assert "1.60× the mean over 4 stages" in pipe[0].evidence
    reasons = {n.check: n.reason for n in e.not_checked}
    assert "popviz capture -- python train.py" in reasons["output mode"]
    assert e.metrics["host_io"]["inferred"] == ["mode", "device_iterations", "gradient_accumulation",
                                                "replication_factor"]
    # IPU0 copies 32 inputs × 200 cycles of its 230,400 cycles in the two calls
    assert e.metrics["host_io"]["stream_copy_ipu"] == 0


def test_console_states_each_assumption(tmp_path, fake_pva):
    from popviz.render import console

    e = _analyse(tmp_path, fake_pva, "training", fake_pva.pipeline_profile())
    import io

    from popviz.analysis.findings import Result

    buf = io.StringIO()
    console.render(Result(root=str(tmp_path), engines=[e], analyses=list(e.outputs)), file=buf, width=200)
    out = buf.getvalue()
    for line in ("stages inferred: one per computing IPU (IPU0-IPU3)",
                 "strategy inferred: PipelinedExecution (IPUs compute at the same time for 54% of "
                 "the compute cycles)",
                 "mode inferred: training (programs named like a weight update run in the calls)",
                 "replicas from the target: 1 (numReplicas)",
                 "training, PipelinedExecution, 4 stages (inferred from the profile)",
                 "device iterations 2 (inferred) · gradient accumulation 8 (inferred)"):
        assert line in out, line


def test_training_without_a_split_of_its_micro_batches(tmp_path, fake_pva):
    """A weight-update program that runs a number of times per call that does not divide the
    micro-batches per call: D vs G is not split, and the ramp is not checked."""
    data = fake_pva.pipeline_profile()
    for run in data["runs"][1:]:
        extra = dict(run["steps"][-1])
        run["steps"].append({**extra, "name": "stage3/weightUpdate"})
    e = _analyse(tmp_path, fake_pva, "training", data)
    cfg = e.report.config
    assert (cfg.mode, cfg.gradient_accumulation, cfg.device_iterations) == ("training", None, None)
    reasons = {n.check: n.reason for n in e.not_checked}
    assert "popviz capture -- python train.py" in reasons["D vs G split"]
    assert reasons["ramp efficiency"] == ("gradient accumulation not recorded nor inferable from "
                                          "the profile")
    assert e.metrics["pipeline"]["bottleneck_stage"] == 2


@SHAPES
def test_out_of_memory_names_the_overflowing_tiles(tmp_path, fake_pva, flat):
    e = _analyse(tmp_path, fake_pva, "training", fake_pva.out_of_memory(flat=flat))
    assert e.report.execution is None
    assert list(e.report.config.inferred) == ["replication_factor"]
    ipus = e.metrics["memory"]["ipus"]
    assert [r["overflowing_tiles"] for r in ipus] == [[], [1, 3]]
    assert [r["overflow_bytes"] for r in ipus] == [0, 15_000]
    mem = [f for f in e.findings if f.code == "MEM001"]
    assert [f.title for f in mem] == ["IPU1 is out of memory: 2 tiles overflow"]
    assert mem[0].evidence.startswith("2 of 4 tiles on IPU1 (tiles 1, 3) exceed their 624.0 KiB, "
                                      "by 15,000 B (14.6 KiB) in total")
    reasons = {n.check: n.reason for n in e.not_checked}
    assert reasons["stage balance, ramp efficiency"] == (
        "no configuration recorded, and the profile has no execution to infer the stages from "
        "(out-of-memory compile?); record it with `popviz capture -- python train.py`")


@SHAPES
def test_single_ipu_inference_stream_copy_share(tmp_path, fake_pva, flat):
    e = _analyse(tmp_path, fake_pva, "inference", fake_pva.single_ipu_inference(flat=flat))
    cfg = e.report.config
    # 4 micro-batches per call; without runs (flat), the 3 calls are one run of 12
    assert (cfg.mode, cfg.device_iterations, cfg.execution_strategy) == (
        "inference", 12 if flat else 4, None)
    h = e.metrics["host_io"]
    # per micro-batch 300 + 500 + 100 + 100 of 5,000 cycles are stream copies
    assert (h["stream_copy_frac"], h["host_wait_frac"], h["transfer_frac"]) == (0.2, 0.08, 0.12)
    assert h["ipus"] == [{"ipu": 0, "total_cycles": 60_000, "stream_copy_cycles": 12_000,
                          "stream_copy_frac": 0.2, "host_wait_frac": 0.08, "transfer_frac": 0.12,
                          # every copy is named after an input or output: all host copies
                          "remote_buffer_frac": 0.0, "mixed_frac": 0.0, "unknown_destination_frac": 0.0,
                          "remote_buffer_bytes_per_call": None}]
    assert (h["remote_buffer_frac"], h["host_bytes_basis"]) == (0.0, None)  # no bytes in this profile
    assert [f.code for f in e.findings] == ["HIO001", "HIO003"]
    reasons = {n.check: n.reason for n in e.not_checked}
    assert "popviz capture -- python train.py" in reasons["output mode"]
    assert "no stages to balance" in reasons["pipeline checks"]


def _strip_paths(doc: dict) -> dict:
    doc = dict(doc, root=None)
    doc["engines"] = [dict(e, path=None) for e in doc["engines"]]
    return doc


def test_export_then_analyse_gives_identical_json_in_both_shapes(tmp_path, fake_pva_env):
    sys.path.insert(0, str(FAKE_PVA))
    try:
        import pva
    finally:
        sys.path.remove(str(FAKE_PVA))
    docs = {}
    for shape, flat in (("nested", False), ("flat", True)):
        for engine, data in (("training", pva.pipeline_profile(flat=flat)),
                             ("inference", pva.single_ipu_inference(flat=flat)),
                             ("oom", pva.out_of_memory(flat=flat))):
            (tmp_path / shape / engine).mkdir(parents=True)
            pva.write_data(tmp_path / shape / engine / "profile.pop", data)
            # the same modification time, so the provenance (captured_at) is the same
            os.utime(tmp_path / shape / engine / "profile.pop", (1.7e9, 1.7e9))
        proc = run_cli("analyse", str(tmp_path / shape), "--json", env=fake_pva_env)
        assert proc.returncode == 0, proc.stderr
        docs[shape] = json.loads(proc.stdout)
    proc = run_cli("export", str(tmp_path / "nested"), "-o", str(tmp_path / "bundle"), env=fake_pva_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # progress only at a terminal
    proc = run_cli("analyse", str(tmp_path / "bundle"), "--json")  # no libpva needed
    assert proc.returncode == 0, proc.stderr
    docs["bundle"] = json.loads(proc.stdout)
    import jsonschema

    from popviz.render.json import schema

    for doc in docs.values():
        jsonschema.Draft202012Validator(schema()).validate(doc)
    raw = _strip_paths(docs["nested"])
    assert [e["name"] for e in raw["engines"]] == ["inference", "oom", "training"]
    assert raw["engines"][2]["config"]["inferred"]["stages"] == (
        "stages inferred: one per computing IPU (IPU0-IPU3)")
    assert raw["engines"][2]["metrics"]["pipeline"]["imbalance_ratio"] == 1.6
    assert _strip_paths(docs["bundle"]) == raw
    flat = _strip_paths(docs["flat"])
    # the flat shape has no runs: every step is one run named "all steps", so the weights copy
    # is part of the one call; everything the inference and the findings rest on is the same
    for a, b in zip(flat["engines"], raw["engines"], strict=True):
        for key in ("stages", "mode", "execution_strategy", "gradient_accumulation"):
            assert a["config"][key] == b["config"][key]
        assert a["metrics"]["memory"] == b["metrics"]["memory"]
        for key in ("stages", "bottleneck_stage", "imbalance_ratio"):
            assert a["metrics"]["pipeline"][key] == b["metrics"]["pipeline"][key]
        assert [f["code"] for f in a["findings"]] == [f["code"] for f in b["findings"]]


def test_layers_from_debug_contexts(tmp_path, fake_pva, fake_pva_env):
    """With debug.cbor beside the profile, PopTorch's debug contexts attribute cycles and weight
    bytes to layers (Report.layers, source debug_context); without it there are none."""
    import popviz

    for name, debug in (("with", True), ("without", False)):
        (tmp_path / name / "training").mkdir(parents=True)
        fake_pva.write_data(tmp_path / name / "training" / "profile.pop", fake_pva.pipeline_profile())
        if debug:
            (tmp_path / name / "training" / "debug.cbor").write_bytes(b"\xa0")
    assert popviz.load(tmp_path / "without")[0].layers is None
    layers = popviz.load(tmp_path / "with")[0].layers
    assert layers.source == "debug_context"
    frame = layers.frame()
    assert frame["name"].tolist() == ["layers.0", "layers.1", "layers.2", "layers.3"]
    # per micro-batch: 32 micro-batches ran in the 2 calls (inferred D·G = 16 per call)
    assert frame["fwd_cycles"].tolist() == [1000, 1000, 2000, 1000]
    assert frame["bwd_cycles"].tolist() == [2000, 2000, 4000, 2000]
    assert frame["weight_bytes"].tolist() == [100_000, 100_000, 200_000, 100_000]
    assert frame["stage"].tolist() == [0, 1, 2, 3] and frame["ipu"].tolist() == [0, 1, 2, 3]
    assert "32 micro-batches (inferred D·G)" in layers.notes[0]
    proc = run_cli("export", str(tmp_path / "with"), "-o", str(tmp_path / "bundle"), env=fake_pva_env)
    assert proc.returncode == 0, proc.stderr
    assert popviz.load(tmp_path / "bundle")[0].layers == layers
