"""G2: ViT-B/16 pre-training on ImageNet-1k with LAMB, Graphcore's configuration (Bow Pod16: 4 x 4 IPUs).

Not in the figures file: Graphcore's performance results (the Chinese mirror cited for P3 and
P6) list "ViT, Pre-Training, Bow Pod16, SDK 3.0, PyTorch, batch size 65,536": 7,615 items/s.
The configuration with that batch is graphcore/examples vision/vit/pytorch configs.yml
``b16_in1k_pretrain_lamb`` (@8ae588c8, SDK 3.0; benchmark ``pytorch_vit_lamb_pretrain_gen_pod16``:
``--optimizer-state-offchip false --byteio true --dataset generated``): micro-batch 8,
layers_per_ipu [3,3,3,3], G = 2048, D = 1, replication 4 (8 x 2048 x 4 = 65,536), float16 with
half partials, LAMB with its state on chip and sharded over the replicas, a recomputation
checkpoint on every encoder layer's output, hidden and attention dropout 0.1,
matmul_proportion 0.3, a 768-wide pre-logits layer (representation_size), uint8 images cast on
the IPU (byteio), ``prefetch_depth: 2``. Left out: the extra checkpoints inside layers 1, 4, 7
and 10 (``recompute_mid_layers``) and mixup. Run with POPVIZ_EMULATOR_ARCH=Bow. A held-out check:
nothing was fitted to it.
"""

import poptorch
import torch
from _common import batch, train_one_call
from models import EncoderLayer, place_layers
from torch import nn

MB, G, D, R = 8, 2048, 1, 4
DROPOUT = 0.1


class ViTPretraining(nn.Module):
    def __init__(self, hidden=768, layers=12, heads=12, ffn=3072, labels=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, hidden, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos = nn.Parameter(torch.zeros(1, 197, hidden))
        self.drop = nn.Dropout(DROPOUT)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, eps=1e-6, pre_norm=True, dropout=DROPOUT,
                                                 attention_dropout=DROPOUT) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden, eps=1e-6)
        self.pre_logits = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.classifier = nn.Linear(hidden, labels)

    def forward(self, pixels, labels):
        x = self.patch(pixels.half()).flatten(2).transpose(1, 2)
        x = self.drop(torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos)
        for layer in self.layers:
            x = layer(x)
        with poptorch.Block("head", ipu_id=3):
            logits = self.classifier(self.pre_logits(self.norm(x[:, 0])))
            return nn.functional.cross_entropy(logits.float(), labels, reduction="sum"), logits


opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({f"IPU{i}": 0.3 for i in range(4)})
opts._Popart.set("defaultPrefetchBufferingDepth", 2)  # configs.yml prefetch_depth: 2
opts.TensorLocations.setOptimizerLocation(
    poptorch.TensorLocationSettings().useOnChipStorage(True).useReplicatedTensorSharding(True))
model = ViTPretraining()
place_layers(model.layers, [3, 3, 3, 3], checkpoint=False)
for layer in model.layers:  # recompute_checkpoint_every_layer: every layer's output, the last one's too
    layer.register_forward_hook(lambda m, inp, out: poptorch.recomputationCheckpoint(out))
model.half()
n = MB * G * D * R
train_one_call(model, opts, poptorch.optim.LAMB(model.parameters(), lr=0.001, loss_scaling=128),
               batch(3, 224, 224, total=n, dtype=torch.uint8, high=255), batch(total=n, dtype=torch.int64, high=1000))
