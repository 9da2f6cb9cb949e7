"""B12: ViT-Base/16 fine-tuning (optimum-graphcore), one 4-IPU pipeline [3,3,3,3], micro-batch 1.

graphcore/tutorials tutorials/pytorch/vit_model_training (SDK 3.1): Hugging Face ViT-B/16
(hidden 768, 12 layers, 12 heads, ffn 3072, 224x224 patches of 16), 15 labels, FP16, G = 128,
D = 1, replication 1; IPUConfig Graphcore/vit-base-ipu (assumed here as its published values:
recompute_checkpoint_every_layer, matmul_proportion 0.3, half partials). Embeddings on IPU 0,
head on IPU 3.
"""

import poptorch
import torch
from _common import batch, train_one_call
from models import EncoderLayer, place_layers
from torch import nn

G = 128


class ViT(nn.Module):
    def __init__(self, hidden=768, layers=12, heads=12, ffn=3072, labels=15):
        super().__init__()
        self.patch = nn.Conv2d(3, hidden, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos = nn.Parameter(torch.zeros(1, 197, hidden))
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, pre_norm=True) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.classifier = nn.Linear(hidden, labels)

    def forward(self, pixels, labels):
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for layer in self.layers:
            x = layer(x)
        logits = self.classifier(self.norm(x[:, 0]))
        return logits, nn.functional.binary_cross_entropy_with_logits(logits.float(), labels)


opts = poptorch.Options()
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({f"IPU{i}": 0.3 for i in range(4)})
model = ViT()
place_layers(model.layers, [3, 3, 3, 3], checkpoint=True)
model.half()
train_one_call(model, opts, poptorch.optim.AdamW(model.parameters(), lr=2e-4),
               batch(3, 224, 224, total=G, dtype=torch.half), batch(15, total=G))
