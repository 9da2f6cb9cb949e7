"""P6: BERT-Base pre-training phase 1 (SL128), Graphcore's configuration (Bow Pod16: 4 x 4 IPUs).

graphcore/examples nlp/bert/pytorch configs_pretraining.yml ``pretrain_base_128`` (SDK 3.3):
micro-batch 32, seq 128 with 20 masked tokens, layers_per_ipu [0,4,4,4] (IPU 0 holds the
embeddings and the tied masked-LM projection), G = 512, replication 4, FP16 with half partials,
LAMB with its state off chip, recompute_checkpoint_every_layer, matmul_proportion 0.25. As
Graphcore's model does, the masked-LM head projects only the masked positions. Run with
POPVIZ_EMULATOR_ARCH=Bow.
"""

import poptorch
import torch
from _common import batch, train_one_call
from models import BertEmbeddings, EncoderLayer, extended_mask, place_layers
from torch import nn

MB, SEQ, MASKED, G, R = 32, 128, 20, 512, 4


class BertPretraining(nn.Module):
    def __init__(self, vocab=30522, hidden=768, layers=12, heads=12, ffn=3072):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, eps=1e-3)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, eps=1e-3) for _ in range(layers))
        self.transform = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=1e-3))
        self.decoder = nn.Linear(hidden, vocab)
        self.decoder.weight = self.embeddings.word.weight
        self.pooler = nn.Linear(hidden, hidden)
        self.nsp = nn.Linear(hidden, 2)

    def forward(self, ids, types, mask, positions, mlm_labels, nsp_labels):
        with poptorch.Block("embeddings", ipu_id=0):
            x = self.embeddings(ids, types)
            m = extended_mask(mask, x.dtype)
        for layer in self.layers:
            x = layer(x, m)
        with poptorch.Block("heads", ipu_id=0):
            masked = torch.gather(x, 1, positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))
            mlm = self.decoder(self.transform(masked)).float()
            nsp = self.nsp(torch.tanh(self.pooler(x[:, 0]))).float()
            loss = poptorch.identity_loss(
                nn.functional.cross_entropy(mlm.reshape(-1, mlm.shape[-1]), mlm_labels.reshape(-1))
                + nn.functional.cross_entropy(nsp, nsp_labels), reduction="none")
        return loss


opts = poptorch.Options().replicationFactor(R)
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({f"IPU{i}": 0.25 for i in range(4)})
opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
model = BertPretraining()
place_layers(model.layers, [0, 4, 4, 4], checkpoint=True)
model.half()
n = MB * G * R
train_one_call(model, opts, poptorch.optim.LAMB(model.parameters(), lr=0.006),
               batch(SEQ, total=n, dtype=torch.int64, high=30522), batch(SEQ, total=n, dtype=torch.int64),
               batch(SEQ, total=n, dtype=torch.int64), batch(MASKED, total=n, dtype=torch.int64, high=SEQ),
               batch(MASKED, total=n, dtype=torch.int64, high=30522), batch(total=n, dtype=torch.int64))
