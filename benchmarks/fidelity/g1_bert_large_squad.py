"""G1: BERT-Large SQuAD fine-tuning, Graphcore's PyTorch configuration (Bow Pod16: 2 x 8 IPUs).

Not in the figures file: Graphcore's performance results (the Chinese mirror cited for P3 and
P6) list "BERT Large, Fine-Tuning (SL384 - SQuAD), Bow Pod16, PyTorch, batch size 256": 1,009
items/s on SDK 3.3 (989 on SDK 3.1). The configuration with that batch is graphcore/examples
nlp/bert/pytorch configs_squad.yml ``squad_large_384`` (SDK 3.3, @bf12eaa; its benchmark
``pytorch_bert_squad_large_pretrain_real_pod16`` runs run_squad.py with it): micro-batch 4,
seq 384, layers_per_ipu [2,3,3,3,3,3,3,4] (embeddings on IPU 0), G = 32, D = 2, replication 2
(4 x 32 x 2 = 256), FP16 with half partials, AdamW with float16 first-order momentum and its
state on chip, sharded over the replicas (replicated tensor sharding),
recompute_checkpoint_every_layer, matmul_proportion [0.08,0.25,0.32,0.32,0.36,0.38,0.4,0.32],
layer-norm epsilon 0.001, attention dropout 0.15 and Hugging Face's default hidden dropout 0.1.
Run with POPVIZ_EMULATOR_ARCH=Bow. A held-out check: nothing was fitted to it.
"""

import poptorch
import torch
from _common import batch, train_one_call
from models import BertSquad, place_layers

MB, SEQ, G, D, R = 4, 384, 32, 2, 2
SPLIT = [2, 3, 3, 3, 3, 3, 3, 4]
MATMUL_PROPORTION = [0.08, 0.25, 0.32, 0.32, 0.36, 0.38, 0.4, 0.32]


opts = poptorch.Options().replicationFactor(R).deviceIterations(D)
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({f"IPU{i}": p for i, p in enumerate(MATMUL_PROPORTION)})
opts.TensorLocations.setOptimizerLocation(
    poptorch.TensorLocationSettings().useOnChipStorage(True).useReplicatedTensorSharding(True))
model = BertSquad(eps=1e-3, dropout=0.1, attention_dropout=0.15)
place_layers(model.layers, SPLIT, checkpoint=True)
model.half()
n = MB * G * R * D
optimizer = poptorch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01,
                                 first_order_momentum_accum_type=torch.float16)
train_one_call(model, opts, optimizer,
               batch(SEQ, total=n, dtype=torch.int64, high=30522), batch(SEQ, total=n, dtype=torch.int64),
               batch(SEQ, total=n, dtype=torch.int64), batch(total=n, dtype=torch.int64, high=SEQ),
               batch(total=n, dtype=torch.int64, high=SEQ))
