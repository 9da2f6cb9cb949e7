"""H5: ViT-B/16 pre-training on ImageNet-1k with LAMB, Graphcore's configuration (Bow Pod64: PopRun,
8 instances x 2 replicas x 4 IPUs).

Held out, not in the figures file: Graphcore's performance results (https://www.graphcore.cn/
performance-results/, the mirror cited for P3 and P6) list "ViT, Pre-Training, Bow Pod64, SDK 3.0,
PyTorch, ImageNet1k, batch size 65,536, 16.16": 27,868 items/s (the same table's Bow Pod16 row,
7,615, is G2). graphcore/examples vision/vit/pytorch @ 8ae588c (SDK 3.0): benchmarks.yml
``pytorch_vit_lamb_pretrain_gen_pod64`` runs ``poprun --ipus-per-replica=4 --num-ilds=8
--num-replicas=16 --num-instances=8 python3 pretrain.py --config b16_in1k_pretrain_lamb --dataset
generated --byteio true --iterations 10 --gradient-accumulation 512 --epochs 1
--dataloader-workers 32`` (unlike the Pod16 benchmark it does not pass
``--optimizer-state-offchip false``; the config's default is already on chip).

configs.yml ``b16_in1k_pretrain_lamb`` (with the defaults): micro-batch 8, layers_per_ipu
[3,3,3,3], G 512 (command line), D 1, 16 replicas (8 x 512 x 16 = 65,536), precision 16.16
(model .half(), half partials, stochastic rounding), matmul_proportion 0.3 on each IPU,
prefetch_depth 2, LAMB (betas 0.9/0.999, eps 1e-6, bias correction, fp32 accumulators and
moments, loss scaling 1024, weight decay 0.01 and max_weight_norm 65535 on matrices, 0 and 0 on
vectors) with its state on chip and sharded over the replicas (enable_rts), a recomputation
checkpoint on every encoder layer's output and one after the attention residual of layers 1, 4,
7 and 10 (recompute_mid_layers), hidden and attention dropout 0.1, drop_path 0, a 768-wide tanh
representation layer, reduction_type sum, output mode All, auto stage SameAsIpu, mixup on (its
coefficient is one input per micro-batch), byteio (uint8 images normalised on the IPU in float32,
then cast to half), PopART options as ipu_options.py sets them. models/modules.py
VisionTransformer: embeddings on IPU 0, the final layer norm on all tokens after the last layer
(IPU 3), representation and head on IPU 3; the loss is mixup's lam x CE(y) + (1 - lam) x
CE(rolled y) (CrossEntropyLoss, mean). The figure is pretrain.py's rate summed over the
instances: each instance's images per step over the step's time (its data loading and
setOptimizer included). Under a PopDist environment this script builds its options with
``popdist.poptorch.Options()`` as ipu_options.py does; run.py estimates instance 0 of 8.
Run with POPVIZ_EMULATOR_ARCH=Bow.
"""

import popart
import popdist
import poptorch
import torch
from _common import batch, train_one_call
from models import EncoderLayer, ViTClassifier
from torch import nn
from torch.nn import functional as F

MB, G, D, R = 8, 512, 1, 16
MID_CHECKPOINTS = {1, 4, 7, 10}
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # normalization_parameters (ImageNet)


class Block(EncoderLayer):
    """models/modules.py ``Block``: pre-LN, dropout after the attention projection, after the
    MLP's activation and after its second matmul; optionally a checkpoint mid-layer."""

    def __init__(self, mid_checkpoint: bool):
        super().__init__(768, 12, 3072, eps=1e-6, pre_norm=True, dropout=0.1, attention_dropout=0.1)
        self.mid_checkpoint = mid_checkpoint

    def forward(self, x, mask=None):
        x = x + self._attention(self.norm1(x), None)
        if self.mid_checkpoint:
            x = poptorch.recomputationCheckpoint(x)
        return x + self.drop(self.fc2(self.drop(F.gelu(self.fc1(self.norm2(x))))))


class ViTPretraining(ViTClassifier):
    def __init__(self):
        super().__init__(dropout=0.1, attention_dropout=0.1, representation=True)
        self.layers = nn.ModuleList(Block(i in MID_CHECKPOINTS) for i in range(12))
        self.register_buffer("mul", (1.0 / torch.tensor(STD)).view(-1, 1, 1))
        self.register_buffer("sub", (torch.tensor(MEAN) / torch.tensor(STD)).view(-1, 1, 1))

    def forward(self, images, labels, lam):
        with poptorch.Block("Embedding", ipu_id=0):
            x = ((images.float() / 255.0) * self.mul.float() - self.sub.float()).half()  # NormalizeToTensor
            x = lam * x + (1.0 - lam) * torch.roll(x, shifts=1, dims=0)  # mixup
            x = self.patch(x).flatten(2).transpose(1, 2)
            x = self.drop(torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)  # the encoder's final layer norm, on every token, with the last layer
        with poptorch.Block("Head", ipu_id=3):
            logits = self.classifier(self.pre_logits(x[:, 0]))
            labels_b = torch.roll(labels, shifts=1, dims=0)
            loss = poptorch.identity_loss(lam * F.cross_entropy(logits, labels)
                                          + (1.0 - lam) * F.cross_entropy(logits, labels_b), reduction="none")
            preds = torch.argmax(logits, dim=-1)
            acc = (lam * (preds == labels).float().mean() + (1.0 - lam) * (preds == labels_b).float().mean())
        return loss, acc


if popdist.isPopdistEnvSet():  # this instance's replicas (PopRun --num-instances)
    import popdist.poptorch

    opts = popdist.poptorch.Options()
    R = popdist.getNumLocalReplicas()
else:
    opts = poptorch.Options().replicationFactor(R)
opts.autoRoundNumIPUs(True)
opts.deviceIterations(D)
opts.Training.gradientAccumulation(G)
opts.Training.accumulationAndReplicationReductionType(poptorch.ReductionType.Sum)
opts.outputMode(poptorch.OutputMode.All)
opts.randomSeed(42)
opts.TensorLocations.setOptimizerLocation(
    poptorch.TensorLocationSettings().useOnChipStorage(True).useReplicatedTensorSharding(True))
opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
opts.setAvailableMemoryProportion({f"IPU{i}": 0.3 for i in range(4)})
opts.Precision.enableStochasticRounding(True)
opts.Precision.setPartialsType(torch.half)
opts._Popart.set("disableGradAccumulationTensorStreams", True)
opts._Popart.set("accumulateOuterFragmentSettings.schedule",
                 int(popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized))
opts._Popart.set("defaultPrefetchBufferingDepth", 2)
opts._Popart.set("engineOptions", {"opt.useAutoloader": "true", "target.syncReplicasIndependently": "true"})
opts._Popart.set("accumulateOuterFragmentSettings.excludedVirtualGraphs", ["0"])
opts._Popart.set("subgraphCopyingStrategy", int(popart.SubgraphCopyingStrategy.JustInTime))
opts._Popart.set("scheduleNonWeightUpdateGradientConsumersEarly", True)

model = ViTPretraining()
ipu_of = [ipu for ipu, n in enumerate([3, 3, 3, 3]) for _ in range(n)]
for i, layer in enumerate(model.layers):  # recompute_checkpoint_every_layer: every layer's output
    layer.register_forward_hook(lambda m, inp, out: poptorch.recomputationCheckpoint(out))
    model.layers[i] = poptorch.BeginBlock(layer, f"Encoder{i}", ipu_id=ipu_of[i])
model.half()
matrices = [p for p in model.parameters() if p.dim() > 1]
vectors = [p for p in model.parameters() if p.dim() == 1]
optimizer = poptorch.optim.LAMB(
    [{"params": matrices, "weight_decay": 0.01, "max_weight_norm": 65535},
     {"params": vectors, "weight_decay": 0, "max_weight_norm": 0}],
    lr=0.006, betas=(0.9, 0.999), weight_decay=0.01, eps=1e-6, loss_scaling=1024, max_weight_norm=None,
    accum_type=torch.float32, first_order_momentum_accum_type=torch.float32,
    second_order_momentum_accum_type=torch.float32, bias_correction=True)
n = MB * G * D * R
train_one_call(model, opts, optimizer, batch(3, 224, 224, total=n, dtype=torch.uint8, high=255),
               batch(total=n, dtype=torch.int64, high=1000), batch(total=n // MB, dtype=torch.float16))
