"""H1-H4: BERT-Large pre-training on packed sequences, Graphcore's PyTorch configuration (Bow Pods).

    python h_bert_large_packed.py PHASE POD      # PHASE 128 or 512, POD pod16 or pod64

Held out, not in the figures file: Graphcore's performance results (https://www.graphcore.cn/
performance-results/, the mirror cited for P3 and P6), "BERT Large, Ph1 Pre-Training (SL128) -
Packed" and "Ph2 Pre-Training (SL512) - Packed", PyTorch, 16.16:

    H1  SL128  Bow Pod16  SDK 3.3  batch 56,064  5,600 items/s
    H2  SL512  Bow Pod16  SDK 3.3  batch  8,192  1,973 items/s
    H3  SL128  Bow Pod64  SDK 3.2  batch 56,064 18,442 items/s
    H4  SL512  Bow Pod64  SDK 3.2  batch  8,192  6,543 items/s

Configuration: graphcore/examples nlp/bert/pytorch @ bf12eaa (SDK 3.3; configs_pretraining.yml,
args.py, ipu_options.py, modeling.py, optimization.py, run_pretraining.py are unchanged from
2d8b565, SDK 3.2). benchmarks.yml ``pytorch_bert_large_packed_pretrain_real_pod16`` runs
``run_pretraining.py --config pretrain_large_{phase} --packed-data`` and
``pytorch_bert_large_packed_pretrain_real_pod64`` ``--config pretrain_large_{phase}_POD64
--packed-data``: one process each (no PopRun), 4 IPUs per replica.

- pretrain_large_128: micro-batch 8, seq 128, 20 masked tokens, G 2048, replication 4,
  layers_per_ipu [3,7,7,7], matmul_proportion [0.15,0.25,0.25,0.25], loss scaling 4096;
  _POD64: replication 16, G 512, matmul_proportion [0.14,0.19,0.19,0.19], loss scaling 32768.
- pretrain_large_512: micro-batch 2, seq 512, 76 masked tokens, G 2048, matmul_proportion
  [0.10,0.15,0.15,0.15], loss scaling 8192; _POD64: replication 16, G 512, [0.13,0.19,0.19,0.19],
  loss scaling 16384.
- --packed-data (args.py): G := ceil(G / packing_factor) with packing_factor {128: 1.17, 512: 2.0}
  (2048 -> 1751 / 1024; 512 -> 438 / 256), so a micro-batch is mb packs; mask_tokens +=
  max_sequences_per_pack - 1 (= 3 - 1). Global batch in packs: 8 x 1751 x 4 = 56,032 (the table
  says 56,064, which is the Pod64 figure 8 x 438 x 16), 2 x 1024 x 4 = 8,192, 8 x 438 x 16 =
  56,064, 2 x 256 x 16 = 8,192.
- defaults: hidden 1024, 24 layers, 16 heads, FFN 4096, vocab 30522, layer_norm_eps 0.001,
  attention dropout 0.0 (hidden dropout: Hugging Face's default 0.1), FP16 model with half
  partials and stochastic rounding, embedding_serialization_factor 2 (the tied MLM decoder is a
  serialized matmul, 2 slices over output channels), recompute_checkpoint_every_layer (every
  layer's output, the last one's too), LAMB with bias correction, fp16 gradient accumulators,
  fp32 first and second moments, optimizer state off chip and sharded over the replicas
  (replicated_tensor_sharding: True), auto stage AutoIncrement, output mode Sum, reduction Mean,
  PopART options as ipu_options.py sets them.
- PipelinedPackedBertForPretraining (modeling.py): fused QKV attention; embeddings, pooler and
  heads on IPU 0; the [B, S, S] attention mask built on the IPU from the pack's sequence ids;
  the masked positions gathered by a one-hot matmul; pooler + NSP on each of the pack's last 3
  tokens; MLM and masked NSP losses, both accuracies and the packing ratio as outputs.

The table's items are sequences: run_pretraining.py's throughput is packs/s x the measured
packing ratio (mean sequences per pack). This script's samples are packs, so the figure in
packs/s is the table's value / packing ratio; the config's packing_factor (1.17 / 2.0) is the
ratio the configuration assumes (the measured one is not published). Left out: the
residual_add_inplace_pattern custom-op workaround. Run with POPVIZ_EMULATOR_ARCH=Bow.
"""

import math
import sys

import popart
import poptorch
import torch
from _common import batch, train_one_call
from models import BertEmbeddings, EncoderLayer
from torch import nn
from torch.nn import functional as F

PHASE = int(sys.argv[1]) if len(sys.argv) > 1 else 128
POD = sys.argv[2] if len(sys.argv) > 2 else "pod16"
# (micro-batch, G before packing, replication, matmul_proportion, mask_tokens, loss scaling)
CONFIGS = {
    (128, "pod16"): (8, 2048, 4, [0.15, 0.25, 0.25, 0.25], 20, 4096.0),
    (128, "pod64"): (8, 512, 16, [0.14, 0.19, 0.19, 0.19], 20, 32768.0),
    (512, "pod16"): (2, 2048, 4, [0.10, 0.15, 0.15, 0.15], 76, 8192.0),
    (512, "pod64"): (2, 512, 16, [0.13, 0.19, 0.19, 0.19], 76, 16384.0),
}
PACKING_FACTOR = {128: 1.17, 512: 2.0}
MAX_PER_PACK = 3
MB, G_UNPACKED, R, MATMUL_PROPORTION, MASKED, LOSS_SCALING = CONFIGS[(PHASE, POD)]
G = math.ceil(G_UNPACKED / PACKING_FACTOR[PHASE])
MASKED += MAX_PER_PACK - 1
VOCAB, HIDDEN, LAYERS, HEADS, FFN, EPS = 30522, 1024, 24, 16, 4096, 1e-3
SPLIT = [3, 7, 7, 7]


class FusedEncoderLayer(EncoderLayer):
    """BertFusedSelfAttention (bert_fused_attention.py): one matmul with the concatenated Q, K, V
    weights, the scores scaled by a reciprocal multiply."""

    def _attention(self, x, mask):
        b, s, h = x.shape
        d = h // self.heads
        weight = torch.cat((self.query.weight, self.key.weight, self.value.weight), dim=0)
        bias = torch.cat((self.query.bias, self.key.bias, self.value.bias), dim=0)
        q, k, v = ((x @ weight.t()) + bias).split(h, dim=-1)

        def split(t):
            return t.view(b, s, self.heads, d).permute(0, 2, 1, 3)

        scores = (split(q) @ split(k).transpose(-1, -2)) * (1.0 / math.sqrt(d))
        ctx = self.attention_drop(torch.softmax(scores + mask, dim=-1)) @ split(v)
        return self.drop(self.out(ctx.permute(0, 2, 1, 3).reshape(b, s, h)))


class PackedEmbeddings(BertEmbeddings):
    """Hugging Face's BertEmbeddings given position_ids (each packed sequence starts at 0)."""

    def __init__(self):
        super().__init__(VOCAB, HIDDEN, eps=EPS)
        self.dropout = nn.Dropout(0.1)

    def forward(self, ids, types, positions):
        return self.dropout(self.norm(self.word(ids) + self.token_type(types) + self.position(positions)))


class PackedBertForPretraining(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = PackedEmbeddings()
        self.layers = nn.ModuleList(FusedEncoderLayer(HIDDEN, HEADS, FFN, eps=EPS, dropout=0.1)
                                    for _ in range(LAYERS))
        self.pooler = nn.Linear(HIDDEN, HIDDEN)
        self.transform = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.LayerNorm(HIDDEN, eps=EPS))
        self.decoder_bias = nn.Parameter(torch.zeros(VOCAB))  # tied decoder: word embeddings + bias
        self.seq_relationship = nn.Linear(HIDDEN, 2)

    def forward(self, ids, pack_mask, types, positions, mlm_positions, mlm_ids, mlm_mask, nsp_labels, nsp_mask):
        with poptorch.Block("Embedding", ipu_id=0):
            x = self.embeddings(ids, types, positions)
            s = pack_mask.shape[1]
            same = pack_mask[:, None, :].repeat(1, s, 1)
            same = same == same.transpose(1, 2)
            mask = (1.0 - same[:, None, :, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, mask)
        with poptorch.Block("Pooler", ipu_id=0):
            pooled = [torch.tanh(self.pooler(x[:, -MAX_PER_PACK + i])) for i in range(MAX_PER_PACK)]
            one_hot = F.one_hot(mlm_positions, s).to(x.dtype).detach()
            masked = one_hot @ x  # OnehotGather
        with poptorch.Block("Classifier", ipu_id=0):
            h = self.transform(masked)
            scores = poptorch.serializedMatMul(h, self.embeddings.word.weight.t(),
                                               poptorch.MatMulSerializationMode.OutputChannels, 2)
            scores = scores + self.decoder_bias
            nsp = torch.stack([self.seq_relationship(p) for p in pooled], dim=1)
            mlm_loss = F.cross_entropy(scores.view(-1, VOCAB), mlm_ids.reshape(-1), ignore_index=0).float()
            nsp_loss = F.cross_entropy(nsp.transpose(1, 2), nsp_labels, reduction="none").float()
            nsp_loss = (nsp_loss * nsp_mask).sum() / nsp_mask.sum()
            loss = poptorch.identity_loss(mlm_loss + nsp_loss, reduction="none")
            nsp_acc = (nsp.transpose(1, 2).argmax(dim=-2) == nsp_labels).float() * nsp_mask
            nsp_acc = nsp_acc.sum() / nsp_mask.sum()
            unmasked = (mlm_ids != 0).float()
            mlm_acc = ((scores.view(-1, MASKED, VOCAB).argmax(dim=-1) == mlm_ids).float().mul(unmasked)
                       .div(unmasked.sum(1).unsqueeze(1)).sum(1).mean())
            packing_ratio = torch.mean(torch.sum(nsp_mask, 1))
        return loss, mlm_loss, nsp_loss, mlm_acc, nsp_acc, packing_ratio


opts = poptorch.Options().replicationFactor(R).autoRoundNumIPUs(True).deviceIterations(1)
opts.Training.gradientAccumulation(G)
opts.Training.accumulationAndReplicationReductionType(poptorch.ReductionType.Mean)
opts.outputMode(poptorch.OutputMode.Sum)
opts.randomSeed(5)
opts.TensorLocations.setOptimizerLocation(
    poptorch.TensorLocationSettings().useOnChipStorage(False).useReplicatedTensorSharding(True))
opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
opts.setAvailableMemoryProportion({f"IPU{i}": p for i, p in enumerate(MATMUL_PROPORTION)})
opts.Precision.enableStochasticRounding(True)
opts.Precision.setPartialsType(torch.float16)
opts._Popart.set("disableGradAccumulationTensorStreams", True)
opts._Popart.set("accumulateOuterFragmentSettings.schedule",
                 int(popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized))
opts._Popart.set("accumulateOuterFragmentSettings.excludedVirtualGraphs", ["0"])
opts._Popart.set("subgraphCopyingStrategy", int(popart.SubgraphCopyingStrategy.JustInTime))
opts._Popart.set("scheduleNonWeightUpdateGradientConsumersEarly", True)
opts._Popart.setPatterns({"TiedGather": True, "TiedGatherAccumulate": True, "UpdateInplacePrioritiesForIpu": True})
opts._Popart.set("engineOptions", {"opt.useAutoloader": "true", "target.syncReplicasIndependently": "true"})

model = PackedBertForPretraining()
ipu_of = [ipu for ipu, n in enumerate(SPLIT) for _ in range(n)]
for i, layer in enumerate(model.layers):  # recompute_checkpoint_every_layer: the last layer's output too
    layer.register_forward_hook(lambda m, inp, out: poptorch.recomputationCheckpoint(out))
    model.layers[i] = poptorch.BeginBlock(layer, f"Encoder{i}", ipu_id=ipu_of[i])
model.half()

# optimization.py: no weight decay and no LAMB trust ratio (max_weight_norm 0) on biases
biases = [p for n, p in model.named_parameters() if "bias" in n]
norms = [p for n, p in model.named_parameters() if "bias" not in n and p.dim() == 1]
weights = [p for n, p in model.named_parameters() if "bias" not in n and p.dim() > 1]
optimizer = poptorch.optim.LAMB(
    [{"params": biases, "weight_decay": 0, "max_weight_norm": 0}, {"params": norms, "weight_decay": 0},
     {"params": weights, "weight_decay": 0.01}],
    lr=0.006 if PHASE == 128 else 0.002828, weight_decay=0, eps=1e-6, loss_scaling=LOSS_SCALING,
    max_weight_norm=None, accum_type=torch.float16, first_order_momentum_accum_type=torch.float32,
    second_order_momentum_accum_type=torch.float32, bias_correction=True)
n = MB * G * R
i64 = torch.int64  # the two masks are float, as pretraining_data.py's generated packs are
train_one_call(model, opts, optimizer,
               batch(PHASE, total=n, dtype=i64, high=VOCAB), batch(PHASE, total=n, dtype=i64, high=MAX_PER_PACK + 1),
               batch(PHASE, total=n, dtype=i64), batch(PHASE, total=n, dtype=i64, high=PHASE),
               batch(MASKED, total=n, dtype=i64, high=PHASE), batch(MASKED, total=n, dtype=i64, high=VOCAB),
               batch(MASKED, total=n, dtype=torch.float32), batch(MAX_PER_PACK, total=n, dtype=i64),
               batch(MAX_PER_PACK, total=n, dtype=torch.float32))
