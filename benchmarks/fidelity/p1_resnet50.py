"""P1: ResNet-50 v1.5 training, Graphcore's configuration (Bow Pod16: 16 replicas of one IPU).

graphcore/examples vision/cnns/pytorch/train/configs.yml ``resnet50`` (SDK 3.0): micro-batch 18,
G = 57, replication 16, precision 16.16 (FP16 model, half partials), 8-bit input images
normalised on the IPU, SGD momentum 0.9, available memory proportion 0.16,
recompute_mode manual: ``autoRecomputation = RecomputeAll`` with ``explicitRecomputation`` and
recomputation checkpoints after the residual adds listed in ``recompute_checkpoints`` and after
every convolution and norm of layer4 (utils/ipu_settings.py, models/models.py). Run with
POPVIZ_EMULATOR_ARCH=Bow. The figure's benchmark (``pytorch_resnet50_train_real_pod16``) runs 8
PopRun instances of 2 replicas each: under a PopDist environment this script builds its options
with ``popdist.poptorch.Options()`` as Graphcore's ``train.py`` does, and ``run.py`` runs
instance 0 of 8 (every instance runs the same engine).
"""

import popdist
import poptorch
import torch
from _common import batch, train_one_call
from models import ResNet50
from torch import nn

MB, G, R = 18, 57, 16
ADDS = {0, 1, 2, 3, 5, 6, 7, 9, 11, 12, 13, 14, 15}  # configs.yml: add, add_1, ... add_15


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = ResNet50()
        blocks = [b for layer in (self.net.layer1, self.net.layer2, self.net.layer3, self.net.layer4) for b in layer]
        for i, block in enumerate(blocks):
            if i in ADDS:
                block.register_forward_hook(lambda m, inp, out: poptorch.recomputationCheckpoint(out))
        for module in self.net.layer4.modules():
            if isinstance(module, (nn.Conv2d, nn.BatchNorm2d)):
                module.register_forward_hook(lambda m, inp, out: poptorch.recomputationCheckpoint(out))
        self.loss = nn.CrossEntropyLoss(label_smoothing=0.1)

    def forward(self, images, labels):
        x = (images.half() / 255.0 - 0.45) / 0.225  # normalisation on the IPU (eight_bit_io)
        logits = self.net(x)
        return logits, self.loss(logits.float(), labels)


if popdist.isPopdistEnvSet():  # this instance's replicas (PopRun --num-instances)
    import popdist.poptorch

    opts = popdist.poptorch.Options()
    R = popdist.getNumLocalReplicas()
else:
    opts = poptorch.Options().replicationFactor(R)
opts.Training.gradientAccumulation(G)
opts.Precision.setPartialsType(torch.half)
opts.setAvailableMemoryProportion({"IPU0": 0.16})
opts._Popart.set("explicitRecomputation", True)
opts._Popart.set("autoRecomputation", 4)  # int(popart.RecomputationType.RecomputeAll)
model = Checkpointed().half()
total = MB * G * R
train_one_call(model, opts, poptorch.optim.SGD(model.parameters(), lr=2.0, momentum=0.9),
               batch(3, 224, 224, total=total, dtype=torch.uint8, high=255),
               batch(total=total, dtype=torch.int64, high=1000))
