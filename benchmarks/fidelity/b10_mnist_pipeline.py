"""B10: the PopTorch pipelining tutorial's MNIST CNN over 4 IPUs (4 stages).

graphcore/tutorials tutorials/pytorch/pipelining: micro-batch 40 of 1x28x28 float32,
gradientAccumulation(10), deviceIterations(10), AdamW(lr 0.001) with its state off chip,
PipelinedExecution of one block per IPU.
"""

import poptorch
import torch
from _common import batch, train_one_call
from torch import nn

MB, G, D = 40, 10, 10


class Network(nn.Module):
    def __init__(self):
        super().__init__()
        self.b1 = nn.Sequential(nn.Conv2d(1, 10, 5), nn.MaxPool2d(2), nn.ReLU())
        self.b2 = nn.Sequential(nn.Conv2d(10, 20, 5), nn.MaxPool2d(2), nn.ReLU())
        self.b3 = nn.Sequential(nn.Linear(320, 256), nn.ReLU())
        self.b4 = nn.Linear(256, 10)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, labels):
        with poptorch.Block("B1"):
            x = self.b1(x)
        with poptorch.Block("B2"):
            x = self.b2(x)
        with poptorch.Block("B3"):
            x = self.b3(x.view(-1, 320))
        with poptorch.Block("B4"):
            x = self.b4(x)
            return x, self.loss(x, labels)


opts = poptorch.Options().deviceIterations(D)
opts.Training.gradientAccumulation(G)
opts.setExecutionStrategy(poptorch.PipelinedExecution(
    poptorch.Stage("B1").ipu(0), poptorch.Stage("B2").ipu(1), poptorch.Stage("B3").ipu(2),
    poptorch.Stage("B4").ipu(3)))
opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
model = Network()
total = MB * G * D
train_one_call(model, opts, poptorch.optim.AdamW(model.parameters(), lr=0.001),
               batch(1, 28, 28, total=total), batch(total=total, dtype=torch.int64, high=10))
