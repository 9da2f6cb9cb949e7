"""optimum-graphcore 0.7.1 run unmodified under ``popviz capture --emulate --calls 1``: its
IPUTrainer (BERT, GPT-2, ViT, DeBERTa; T5 through IPUSeq2SeqTrainer) and the pipelined path
(``to_pipelined(...).parallelize()`` + ``poptorch.trainingModel``), tiny random-weight models on
synthetic data (tests/optimum_scripts/). Each capture is checked against the IPUConfig the script
built: IPUs, the stages optimum's ``parallelize`` places (a head tied to the embeddings returns
to IPU 0), G and D. Needs optimum-graphcore (docs/emulator.md, "Real clients tried": install it
in its own venv); skipped without it."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from conftest import run_cli

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("optimum") is None or importlib.util.find_spec("torch") is None
    or importlib.util.find_spec("optimum.graphcore") is None,
    reason="optimum-graphcore not installed (docs/emulator.md: Real clients tried)")

SCRIPTS = Path(__file__).resolve().parent / "optimum_scripts"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def captured(tmp_path: Path, *script: str) -> dict:
    out = tmp_path / "cap"
    proc = run_cli("capture", "-o", str(out), "--emulate", "--calls", "1", "--", sys.executable, *script,
                   cwd=tmp_path, env={**OFFLINE, "HOME": os.environ.get("HOME", str(tmp_path))}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    analysed = run_cli("analyse", str(out), "--json", cwd=tmp_path)
    assert analysed.returncode in (0, 1), analysed.stderr
    [engine] = json.loads(analysed.stdout)["engines"]
    return engine


# model -> IPU of each stage, as optimum's parallelize() places them on 2 IPUs (layers_per_ipu=[2, 2])
TRAINER_STAGES = {
    "bert": [0, 1, 0],      # Embedding+Encoder0-1 | Encoder2-3 | Pooler, Classifier back on IPU 0
    "gpt2": [0, 1, 0],      # embeddings+Layer0-1 | Layer2-3 | LM head (tied to wte) on IPU 0
    "vit": [0, 1],
    "deberta": [0, 1],      # its FastGatherLastDim custom op runs as zeros, costed (docs/emulator.md)
    "t5": [0, 1, 0],        # encoder | decoder | LM head on IPU 0 (IPUSeq2SeqTrainer)
}


@pytest.mark.parametrize("model", sorted(TRAINER_STAGES))
def test_ipu_trainer_runs_unmodified_and_the_capture_matches_the_ipu_config(tmp_path, model):
    engine = captured(tmp_path, str(SCRIPTS / "trainer.py"), model, "--ipus", "2", "--g", "16", "--d", "2")
    cfg = engine["config"]
    assert engine["name"] == "training" and cfg["mode"] == "training"
    assert (cfg["gradient_accumulation"], cfg["device_iterations"], cfg["replication_factor"]) == (16, 2, 1)
    assert cfg["execution_strategy"] == "PipelinedExecution"
    assert [s["ipu"] for s in cfg["stages"]] == TRAINER_STAGES[model]
    assert engine["target"]["ipus_per_replica"] == 2
    assert not [f for f in engine["findings"] if f["code"] == "PIPE002"]


def test_to_pipelined_parallelize_runs_unmodified_and_plan_keeps_the_ipus(tmp_path):
    engine = captured(tmp_path, str(SCRIPTS / "pipelined.py"))
    cfg = engine["config"]
    assert (cfg["gradient_accumulation"], cfg["device_iterations"]) == (16, 2)
    assert [(s["ipu"], s["blocks"]) for s in cfg["stages"]] == [
        (0, ["Embedding", "Encoder0"]), (1, ["Encoder1"]), (2, ["Encoder2"]), (3, ["Encoder3", "Classifier Output"])]
    assert engine["target"]["ipus_per_replica"] == 4
    plan = run_cli("plan", str(tmp_path / "cap"), "--json", cwd=tmp_path)
    assert plan.returncode in (0, 1), plan.stderr
    assert '"ipus": 4' in plan.stdout
