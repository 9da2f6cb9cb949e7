"""B15: BERT-Large SQuAD fine-tuning (optimum-graphcore intro notebook), 4 replicas x 4 IPUs.

Graphcore/bert-large-ipu IPUConfig as printed: layers_per_ipu [3,7,7,7] (embeddings on IPU 0),
micro-batch 1, seq 384, G = 64, replication 4, FP16, half partials,
recompute_checkpoint_every_layer, matmul_proportion [0.15, 0.18, 0.2, 0.25]; AdamW with its state
off chip (optimizer_state_offchip in Graphcore/bert-large-ipu; assumed, not printed).
"""

import sys

import poptorch
import torch
from _common import batch, train_one_call
from models import BertSquad, place_layers

SEQ, G, R = 384, 64, 4
SPLIT = [int(n) for n in sys.argv[1].split(",")] if len(sys.argv) > 1 else [3, 7, 7, 7]


opts = poptorch.Options().replicationFactor(R)
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({f"IPU{i}": p for i, p in enumerate([0.15, 0.18, 0.2, 0.25])})
opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
model = BertSquad()
place_layers(model.layers, SPLIT, checkpoint=True)
model.half()
n = G * R
train_one_call(model, opts, poptorch.optim.AdamW(model.parameters(), lr=3e-5),
               batch(SEQ, total=n, dtype=torch.int64, high=30522), batch(SEQ, total=n, dtype=torch.int64),
               batch(SEQ, total=n, dtype=torch.int64), batch(total=n, dtype=torch.int64, high=SEQ),
               batch(total=n, dtype=torch.int64, high=SEQ))
