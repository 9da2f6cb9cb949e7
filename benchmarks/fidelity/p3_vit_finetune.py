"""P3: ViT-B/16 fine-tuning (ImageNet1k), Graphcore's configuration (Bow Pod16: 4 x 4 IPUs).

graphcore/examples vision/vit/pytorch configs.yml ``b16_imagenet1k`` (SDK 3.0): micro-batch 17,
layers_per_ipu [3,3,3,3] (embeddings on IPU 0, head on IPU 3), G = 30, D = 8, replication 4,
precision 16.16 (half partials), SGD momentum 0.9 with FP16 first-order state and replicated
tensor sharding, recompute_checkpoint_every_layer plus a mid-layer checkpoint in layers
1, 4, 7 and 10, matmul_proportion 0.3. Run with POPVIZ_EMULATOR_ARCH=Bow. Not used to fit the
cost model (a held-out check).
"""

import poptorch
import torch
from _common import batch, train_one_call
from models import EncoderLayer, place_layers
from torch import nn

MB, G, D, R = 17, 30, 8, 4
MID = {1, 4, 7, 10}


class ViT(nn.Module):
    def __init__(self, hidden=768, layers=12, heads=12, ffn=3072, labels=1000):
        super().__init__()
        self.patch = nn.Conv2d(3, hidden, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos = nn.Parameter(torch.zeros(1, 197, hidden))
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, pre_norm=True) for _ in range(layers))
        for i in MID:  # recompute_mid_layers: a checkpoint after the layer's attention output projection
            self.layers[i].out.register_forward_hook(lambda m, inp, out: poptorch.recomputationCheckpoint(out))
        self.norm = nn.LayerNorm(hidden)
        self.classifier = nn.Linear(hidden, labels)

    def forward(self, pixels, labels):
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for layer in self.layers:
            x = layer(x)
        logits = self.classifier(self.norm(x[:, 0]))
        return logits, nn.functional.cross_entropy(logits.float(), labels)


opts = poptorch.Options().deviceIterations(D).replicationFactor(R)
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({f"IPU{i}": 0.3 for i in range(4)})
opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useReplicatedTensorSharding(True))
model = ViT()
place_layers(model.layers, [3, 3, 3, 3], checkpoint=True)
model.half()
n = MB * G * D * R
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9, accum_type=torch.half,
                               velocity_accum_type=torch.half)
train_one_call(model, opts, optimizer, batch(3, 224, 224, total=n, dtype=torch.half),
               batch(total=n, dtype=torch.int64, high=1000))
