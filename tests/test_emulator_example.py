"""examples/mnist_pipeline.py under `popviz emulate`: it trains, leaves estimated reports for both
engines, and `popviz analyse` reads them and says they are estimated."""

from __future__ import annotations

import json
import re
import sys

import popviz

from conftest import ROOT, run_cli


def test_mnist_pipeline_trains_and_leaves_estimated_reports(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("emulate", "--", sys.executable, str(ROOT / "examples" / "mnist_pipeline.py"),
                   "--profile-dir", str(out), "--steps", "5", cwd=tmp_path, env={"OMP_NUM_THREADS": "1"},
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    losses = [float(x) for x in re.findall(r"step \d+/5: loss ([0-9.]+)", proc.stdout)]
    assert len(losses) == 5 and losses[-1] < losses[0] * 0.8, losses
    assert re.search(r"inference: accuracy [0-9.]+% on 320 images", proc.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["inference", "training"]

    reports = popviz.load(out)
    training, inference = reports["training"], reports["inference"]
    assert training.config.execution_strategy == inference.config.execution_strategy == "PipelinedExecution"
    assert [(s.ipu, s.blocks) for s in training.config.stages] == [(i, (f"B{i + 1}",)) for i in range(4)]
    assert (training.config.gradient_accumulation, training.config.device_iterations) == (10, 10)
    assert training.config.output_mode == "All" and training.host_io.calls == 5
    assert training.config.options["optimizer"]["type"] == "AdamW"
    assert inference.config.effective_output_mode == "All" and inference.host_io.calls == 4

    text = run_cli("analyse", str(out))
    assert text.returncode == 0, text.stderr
    for engine in ("training", "inference"):
        assert re.search(engine + r"\s+\(estimated\)", text.stdout), engine
    assert text.stdout.count("ESTIMATED (emulator") == 2
    doc = json.loads(run_cli("analyse", str(out), "--json").stdout)
    assert [e["provenance"]["estimated"] for e in doc["engines"]] == [True, True]
    assert {e["provenance"]["source"] for e in doc["engines"]} == {"emulator"}
    # one value per option across an engine's findings; the cycle shares add up to 100% and
    # agree with the utilisation (issue 11)
    for e in doc["engines"]:
        values: dict[str, set[str]] = {}
        for f in e["findings"]:
            for setter, value in re.findall(r"(opts\.[A-Za-z_.]+)\((\d+)\)", f["recommendation"]):
                values.setdefault(setter, set()).add(value)
        assert all(len(v) == 1 for v in values.values()), (e["name"], values)
        p = e["metrics"]["pipeline"]
        sh = p["cycle_shares"]
        parts = ("useful", "weight_update", "imbalance", "ramp", "exchange", "host", "other")
        assert sum(sh[f"{k}_cycles"] for k in parts) == sh["ipus"] * sh["elapsed_cycles"]
        assert abs(sum(sh[f"{k}_frac"] for k in parts) - 1) < 1e-12
        assert abs(sh["useful_frac"] + sh["weight_update_frac"] - p["utilisation_frac"]) < 1e-12
        assert p["ramp_efficiency_basis"] == "time"


def test_committed_emulated_sample_loads_and_is_labelled_estimated():
    """sample_reports/mnist_pipeline is the example captured under the emulator
    (sample_reports/regenerate.py; tests/test_samples_captured.py checks it is up to date)."""
    reports = popviz.load(ROOT / "sample_reports" / "mnist_pipeline")
    assert sorted(reports.labels) == ["inference", "training"]
    for report in reports:
        assert report.provenance.source == "emulator" and report.provenance.estimated
        assert report.present == ["target", "memory", "execution", "config", "host_io"]
        assert report.memory.level == "ipu" and report.target.num_ipus == 4
        assert [s.blocks for s in report.config.stages] == [("B1",), ("B2",), ("B3",), ("B4",)]
    training = reports["training"]
    assert (training.config.gradient_accumulation, training.config.device_iterations) == (10, 10)
    assert training.config.output_mode == "All" and training.host_io.calls == 3
