"""B17: the optimum-graphcore external-model notebook's GPT-style LM, 4 replicas x 4 IPUs.

nn.Embedding(50257, 768) + positions, 12 pre-LN causal encoder layers (768, 12 heads, 3072),
lm_head tied to the word embeddings; layers_per_ipu [0,4,4,4] (embeddings and the tied head on
IPU 0), micro-batch 1, seq 128, G = 64, replication 4, FP16, half partials,
recompute_checkpoint_every_layer, matmul_proportion 0.25; AdamW.
"""

import poptorch
import torch
from _common import batch, train_one_call
from models import EncoderLayer, place_layers
from torch import nn

SEQ, G, R = 128, 64, 4


class GPT(nn.Module):
    def __init__(self, vocab=50257, hidden=768, layers=12, heads=12, ffn=3072):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(SEQ, hidden)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, pre_norm=True) for _ in range(layers))
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.word.weight

    def forward(self, ids):
        with poptorch.Block("embeddings", ipu_id=0):
            x = self.word(ids) + self.position(torch.arange(SEQ).unsqueeze(0))
            mask = torch.full((SEQ, SEQ), -10000.0, dtype=x.dtype).triu(1)
        for layer in self.layers:
            x = layer(x, mask)
        with poptorch.Block("lm_head", ipu_id=0):
            logits = self.lm_head(x).float()
            loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        return loss


opts = poptorch.Options().replicationFactor(R)
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({f"IPU{i}": 0.25 for i in range(4)})
model = GPT()
place_layers(model.layers, [0, 4, 4, 4], checkpoint=True)
model.half()
train_one_call(model, opts, poptorch.optim.AdamW(model.parameters(), lr=1e-4),
               batch(SEQ, total=G * R, dtype=torch.int64, high=50257))
