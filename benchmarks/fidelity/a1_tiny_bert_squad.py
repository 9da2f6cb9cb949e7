"""A1/A2: BERT 'demo_tiny_128' SQuAD fine-tuning, one IPU, compile profile (PopTorch).

graphcore/examples nlp/bert/pytorch run_squad.py --config demo_tiny_128 --layers-per-ipu 3
--ipus-per-replica 1: vocab 30522, hidden 64, 3 layers, 8 heads, intermediate 256, seq 128,
micro-batch 1, G = 16, FP16 model, half partials, AdamW with its state off chip, a recomputation
checkpoint after every layer but the last (autoRecomputation not set: one IPU, so PopTorch does
not recompute), matmul available memory proportion 0.6.
"""

import poptorch
import torch
from _common import batch, train_one_call
from models import BertEmbeddings, EncoderLayer, extended_mask
from torch import nn

SEQ, G = 128, 16


class BertSquad(nn.Module):
    def __init__(self, vocab=30522, hidden=64, layers=3, heads=8, ffn=256):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, eps=1e-3)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, eps=1e-3) for _ in range(layers))
        self.qa_outputs = nn.Linear(hidden, 2)

    def forward(self, ids, types, mask, start, end):
        x = self.embeddings(ids, types)
        m = extended_mask(mask, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, m)
            if i != len(self.layers) - 1:
                x = poptorch.recomputationCheckpoint(x)
        start_logits, end_logits = self.qa_outputs(x).float().split(1, dim=-1)
        loss = poptorch.identity_loss((nn.functional.cross_entropy(start_logits.squeeze(-1), start)
                                       + nn.functional.cross_entropy(end_logits.squeeze(-1), end)) / 2,
                                      reduction="none")
        return start_logits, end_logits, loss


opts = poptorch.Options()
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({"IPU0": 0.6})
opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
model = BertSquad().half()
optimizer = poptorch.optim.AdamW(model.parameters(), lr=1e-4)
train_one_call(model, opts, optimizer, batch(SEQ, total=G, dtype=torch.int64, high=30522),
               batch(SEQ, total=G, dtype=torch.int64), batch(SEQ, total=G, dtype=torch.int64),
               batch(total=G, dtype=torch.int64, high=SEQ), batch(total=G, dtype=torch.int64, high=SEQ))
