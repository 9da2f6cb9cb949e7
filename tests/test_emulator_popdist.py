"""The emulator's ``popdist`` stand-in: the PopDist queries from the environment PopRun sets,
``popdist.poptorch.Options``, ``popdist.init()``, and a PopRun-style script run as two instances
under ``popviz capture --emulate`` (with the test torchvision stand-in on PYTHONPATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from popviz.emulator import popdist, popdist_poptorch

FAKE_TORCHVISION = Path(__file__).resolve().parent / "fake_torchvision"

POPRUN_ENV = {"POPDIST_NUM_TOTAL_REPLICAS": "4", "POPDIST_NUM_LOCAL_REPLICAS": "2",
              "POPDIST_NUM_IPUS_PER_REPLICA": "1", "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": "1",
              "OMPI_COMM_WORLD_SIZE": "2"}


@pytest.fixture
def clean_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("POPDIST_", "OMPI_COMM_WORLD", "PMI_")):
            monkeypatch.delenv(name)
    return monkeypatch


def test_without_poprun_one_instance_holds_every_replica(clean_env):
    assert not popdist.isPopdistEnvSet()
    assert (popdist.getInstanceIndex(), popdist.getNumInstances(), popdist.getNumTotalReplicas(),
            popdist.getNumLocalReplicas(), popdist.getReplicaIndexOffset()) == (0, 1, 1, 1, 0)


def test_queries_read_what_poprun_sets(clean_env):
    for k, v in {**POPRUN_ENV, "OMPI_COMM_WORLD_RANK": "1", "POPDIST_REPLICA_INDEX_OFFSET": "2"}.items():
        clean_env.setenv(k, v)
    assert popdist.isPopdistEnvSet()
    assert (popdist.getInstanceIndex(), popdist.getNumInstances(), popdist.getNumTotalReplicas(),
            popdist.getNumLocalReplicas(), popdist.getNumIpusPerReplica(),
            popdist.getReplicaIndexOffset()) == (1, 2, 4, 2, 1, 2)
    popdist.init()
    opts = popdist_poptorch.Options()
    assert (opts.replication_factor, opts.Distributed.processId, opts.Distributed.numProcesses) == (2, 1, 2)


def test_init_rejects_an_inconsistent_environment(clean_env):
    for k, v in {**POPRUN_ENV, "POPDIST_NUM_LOCAL_REPLICAS": "3", "OMPI_COMM_WORLD_RANK": "0"}.items():
        clean_env.setenv(k, v)
    with pytest.raises(RuntimeError, match=r"2 instance\(s\) × 3 local replica\(s\) is not the 4 total"):
        popdist.init()
    clean_env.setenv("POPDIST_NUM_LOCAL_REPLICAS", "two")
    with pytest.raises(RuntimeError, match="POPDIST_NUM_LOCAL_REPLICAS='two' is not an integer"):
        popdist.getNumLocalReplicas()


SCRIPT = textwrap.dedent('''
    import json, sys
    import torch, torchvision
    import poptorch, popdist, popdist.poptorch

    if popdist.isPopdistEnvSet():
        popdist.init()
        opts = popdist.poptorch.Options()
        opts.randomSeed(0)
    else:
        opts = poptorch.Options().replicationFactor(4)
    data = torchvision.datasets.CIFAR10(root=".", train=True, download=True,
                                        transform=torchvision.transforms.ToTensor())
    loader = poptorch.DataLoader(opts, data, batch_size=8, shuffle=True)

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torchvision.models.resnet18(num_classes=10)

        def forward(self, x, y):
            out = self.model(x)
            return out, poptorch.identity_loss(torch.nn.functional.cross_entropy(out, y), "none")

    model = poptorch.trainingModel(WithLoss(), opts, poptorch.optim.SGD(WithLoss().parameters(), lr=0.01))
    seen = 0
    for x, y in loader:
        model(x, y)
        seen += x.shape[0]
    print(json.dumps({"instance": popdist.getInstanceIndex(), "replicas": opts.replication_factor,
                      "samples": seen, "calls": len(loader)}))
''')


def test_two_instances_run_the_way_poprun_runs_them(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    procs = []
    for rank in (0, 1):
        env = {**os.environ, **POPRUN_ENV, "OMPI_COMM_WORLD_RANK": str(rank),
               "POPDIST_REPLICA_INDEX_OFFSET": str(2 * rank), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(FAKE_TORCHVISION), "FAKE_TORCHVISION_SAMPLES": "256"}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "popviz", "capture", "-o", "cap", "--emulate", "--", sys.executable,
             "train.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    # 256 samples: 128 per instance, 2 local replicas × batch 8 = 16 per call: 8 calls each
    assert results == [{"instance": r, "replicas": 2, "samples": 128, "calls": 8} for r in (0, 1)]
    for rank in (0, 1):
        doc = json.loads((tmp_path / "cap" / f"instance-{rank}" / "training" / "popviz-model.json").read_text())
        assert (doc["instance"], doc["options"]["replication_factor"], doc["process"]["rank"],
                doc["process"]["num_processes"]) == (f"instance-{rank}", 2, rank, 2)
