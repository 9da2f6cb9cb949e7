"""T1: the MNIST MLP of TensorFlow 1's pipelining tutorial, one IPU, as its execution trace ran.

graphcore/tutorials tutorials/tensorflow1/pipelining (SDK 2.6, commit 2610c082): step1_single_ipu.py
flattens 28x28 float32 images and runs Dense(256), Dense(128), Dense(64), Dense(32) (each with
ReLU), Dense(10) logits, sparse softmax cross-entropy and its mean; plain SGD (lr 0.01) wrapped in
GradientAccumulationOptimizerV2 over 16 mini-batches of 32. Its execution trace
(images/step1_single_ipu_execution_trace.png) was captured by scripts/profile.sh: synthetic data
(no host I/O), ``--batches-to-accumulate 16 --repeat-count 1`` (rounded up to 16 mini-batches,
one weight update). Rebuilt here with PopTorch's Linear layers: the products are the same PopLibs
matmuls; TensorFlow's XLA fuses the bias and ReLU into fewer compute sets than PopART does.
"""

import poptorch
import torch
from _common import batch, train_one_call
from torch import nn

MB, ACCUMULATE = 32, 16


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
            nn.Linear(32, 10))
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, labels):
        logits = self.layers(x)
        return logits, self.loss(logits, labels)


opts = poptorch.Options().enableSyntheticData(True)
opts.Training.gradientAccumulation(ACCUMULATE)
model = MLP()
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.01)
total = MB * ACCUMULATE
train_one_call(model, opts, optimizer, batch(28, 28, total=total), batch(total=total, dtype=torch.int64, high=10))
