"""B10: the PopTorch pipelining tutorial's MNIST CNN over 4 IPUs (4 stages), run as its loop runs.

graphcore/tutorials tutorials/pytorch/pipelining (walkthrough.py, SDK 3.0): micro-batch 40 of
1x28x28 float32, gradientAccumulation(10), deviceIterations(10), AdamW(lr 0.001) with its state
off chip, PipelinedExecution of one block per IPU, ``outputMode(All)``. The figure is tqdm's rate
over an epoch of the training loop, so the loop is rebuilt too: a map-style dataset of 60,000
MNIST-shaped images doing torchvision's per-sample work (``MNIST.__getitem__``: a uint8 28x28
array made a PIL image, then ``ToTensor`` and ``Normalize((0.1307,), (0.3081,))``) on synthetic
pixels (no download), ``poptorch.DataLoader(batch_size=40, shuffle=True, mode=Async,
num_workers=16)``, and per step the mean loss and the accuracy on the host. tqdm itself is left
out (not installed here; its per-step cost is microseconds).

Run it with ``popviz capture --emulate --calls 31``: 2 epochs of 15 calls run on the CPU (their
host work between calls is measured), the 31st is estimated.

``b10_mnist_pipeline.py trace`` is instead the configuration of the PopVision execution trace in
the tutorial's README (``static/pipeline-figure.png``, added with SDK 2.5): ``mnist_pipeline.py
--profile`` at its defaults, i.e. the same network, micro-batch, G and D, AdamW with its state on
chip (``--offload-optimiser`` unset), the default output mode (Final for training) and
``defaultPrefetchBufferingDepth`` 3; one call, estimated.
"""

import sys

import numpy as np
import poptorch
import torch
from PIL import Image
from torch import nn

MB, G, D = 40, 10, 10
EPOCHS = 3
MEAN, STD = 0.1307, 0.3081


class SyntheticMNIST(torch.utils.data.Dataset):
    """60,000 28x28 uint8 images and labels, each sample made as torchvision's MNIST makes it."""

    def __init__(self, n: int = 60_000):
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        self.targets = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        img = Image.fromarray(self.data[index].numpy(), mode="L")
        # ToTensor: the PIL image's bytes as a float tensor in [0, 1], channels first
        x = torch.from_numpy(np.array(img, np.uint8, copy=True)).view(28, 28, 1).permute(2, 0, 1)
        x = x.float().div(255)
        return (x - MEAN) / STD, int(self.targets[index])  # Normalize


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


def accuracy(predictions, labels):
    _, ind = torch.max(predictions, 1)
    labels = labels[-predictions.size()[0]:]
    return torch.sum(torch.eq(ind, labels)).item() / labels.size()[0] * 100.0


def pipelined_options():
    """D device iterations, G-step accumulation, one block per IPU: what both runs share."""
    opts = poptorch.Options().deviceIterations(D)
    opts.Training.gradientAccumulation(G)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(
        poptorch.Stage("B1").ipu(0), poptorch.Stage("B2").ipu(1), poptorch.Stage("B3").ipu(2),
        poptorch.Stage("B4").ipu(3)))
    return opts


def trace_call():
    """One call in the configuration of the README's execution trace (``mnist_pipeline.py``)."""
    opts = pipelined_options()
    opts._Popart.set("defaultPrefetchBufferingDepth", 3)
    model = Network()
    training = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.AdamW(model.parameters(), lr=0.001))
    n = MB * G * D
    training(torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,)))


def main():
    torch.set_num_threads(1)
    if sys.argv[1:] == ["trace"]:
        trace_call()
        return
    opts = pipelined_options()
    opts.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
    opts.outputMode(poptorch.OutputMode.All)
    data = poptorch.DataLoader(opts, SyntheticMNIST(), batch_size=MB, shuffle=True,
                               mode=poptorch.DataLoaderMode.Async, num_workers=16)
    model = Network()
    training = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.AdamW(model.parameters(), lr=0.001))
    for _epoch in range(EPOCHS):
        for x, labels in data:
            preds, losses = training(x, labels)
            mean_loss = torch.mean(losses).item()
            acc = accuracy(preds, labels)
            _description = f"Loss:{mean_loss:0.4f} | Accuracy:{acc:0.2f}%"


if __name__ == "__main__":  # the DataLoader's workers import this file
    main()
