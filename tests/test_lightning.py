"""PyTorch Lightning's IPUStrategy (lightning-graphcore) under ``popviz capture --emulate``: fit,
validate and predict a LightningModule pipelined with ``with poptorch.Block``, then check the
analysis shows the strategy's D, G and stages. Needs the ``lightning`` test extra
(``pip install -e '.[lightning]'``); skipped when it is not installed."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from conftest import ROOT, run_cli

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("lightning_graphcore") is None or importlib.util.find_spec("torch") is None,
    reason="lightning-graphcore not installed (pip install -e '.[lightning]')")

EXAMPLE = ROOT / "examples" / "lightning" / "block_pipeline_predict.py"


@pytest.fixture(scope="module")
def lightning_capture(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lightning")
    proc = run_cli("capture", "-o", "cap", "--emulate", "--", sys.executable, str(EXAMPLE),
                   "--samples", "640", cwd=tmp, env={"OMP_NUM_THREADS": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tmp, proc


def test_fit_validate_predict_run_unmodified(lightning_capture):
    _, proc = lightning_capture
    # 640 samples, batches of 4, D = 20: 8 prediction calls of 80 samples
    assert "predicted 640 samples in 8 batches" in proc.stdout
    summary = " ".join(proc.stderr.split())  # capture's summary lines wrap at the terminal's width
    assert "inference popviz bundle · inference, PipelinedExecution, 4 stage(s) · D=20 G=1 R=1, " \
           "output All · 8 call(s)" in summary
    # 640 samples per training call (4 × D 20 × G 8): one call
    assert "training popviz bundle · training, PipelinedExecution, 4 stage(s) · D=20 G=8 R=1, " \
           "output All · 1 call(s)" in summary


def test_analysis_reflects_the_strategy(lightning_capture):
    tmp, _ = lightning_capture
    proc = run_cli("analyse", "cap", "--json", cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    engines = {e["name"]: e for e in json.loads(proc.stdout)["engines"]}
    assert sorted(engines) == ["inference", "training"]
    train, infer = engines["training"]["config"], engines["inference"]["config"]
    assert (train["mode"], train["device_iterations"], train["gradient_accumulation"],
            train["replication_factor"], train["output_mode"]) == ("training", 20, 8, 1, "All")
    assert (infer["mode"], infer["device_iterations"], infer["gradient_accumulation"]) == ("inference", 20, 1)
    for config in (train, infer):
        assert config["execution_strategy"] == "PipelinedExecution"
        # the steps' own block on IPU3 (the loss, the argmax) joins the last stage; blocks
        # without a user_id are named by the module they run (not Lightning's wrapper's path),
        # the steps' block by PopTorch's id
        assert [(s["ipu"], s["blocks"]) for s in config["stages"]] == [
            (0, ["layer1"]), (1, ["layer2"]), (2, ["layer3"]), (3, ["layer4", "block 4"])]
    codes = {f["code"] for f in engines["training"]["findings"]}
    assert "PIPE002" not in codes  # no false "too few micro-batches" from blocks counted per micro-batch
