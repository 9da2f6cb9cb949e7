#!/usr/bin/env python3
"""A small CNN trained data-parallel over four replicas, then used for inference.

Each replica is one IPU holding the whole model; a call of the training model consumes
``device_iterations × gradient_accumulation × replicas`` micro-batches, and the gradients are
all-reduced across the replicas before each weight update. The inference model returns every
micro-batch's logits (``OutputMode.All``) at a high device-iteration count: the situation where
the output mode, not the model, sets how much data crosses to the host. The data are synthetic
and CIFAR-10-shaped (3x32x32 images, 10 classes), so nothing is downloaded.

    python examples/cnn_replicated.py                          # with PopTorch, on 4 IPUs
    popviz capture -o runs/cnn --emulate -- python examples/cnn_replicated.py
    popviz analyse runs/cnn
"""

from __future__ import annotations

import argparse

import poptorch
import torch
from torch import nn


class SyntheticCIFAR(torch.utils.data.Dataset):
    """CIFAR-shaped samples: each class is a fixed random image; a sample adds noise to it."""

    def __init__(self, size: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        prototypes = torch.rand(10, 3, 32, 32, generator=generator)
        self.labels = torch.randint(0, 10, (size,), generator=generator)
        self.images = prototypes[self.labels] + 0.5 * torch.randn(size, 3, 32, 32, generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.images[index], self.labels[index]


def conv_block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(), nn.MaxPool2d(2))


class Classifier(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(conv_block(3, width), conv_block(width, 2 * width),
                                      conv_block(2 * width, 4 * width))
        self.head = nn.Linear(4 * width * 4 * 4, 10)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None):
        logits = self.head(torch.flatten(self.features(images), 1))
        if labels is None:
            return logits
        return logits, self.loss(logits, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8, help="micro-batch size per replica (default 8)")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--device-iterations", type=int, default=4, help="for training (default 4)")
    parser.add_argument("--gradient-accumulation", type=int, default=4)
    parser.add_argument("--inference-device-iterations", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2, help="training steps (executor calls)")
    parser.add_argument("--width", type=int, default=32, help="channels of the first convolution")
    args = parser.parse_args()
    torch.manual_seed(0)

    model = Classifier(args.width)
    train_opts = poptorch.Options().deviceIterations(args.device_iterations)
    train_opts.replicationFactor(args.replicas)
    train_opts.Training.gradientAccumulation(args.gradient_accumulation)
    per_call = args.batch_size * args.device_iterations * args.gradient_accumulation * args.replicas
    train_data = poptorch.DataLoader(train_opts, SyntheticCIFAR(per_call * args.steps, seed=1),
                                     batch_size=args.batch_size, shuffle=True)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9)
    training_model = poptorch.trainingModel(model, train_opts, optimizer=optimizer)
    for step, (images, labels) in enumerate(train_data, 1):
        _, loss = training_model(images, labels)
        print(f"step {step}/{len(train_data)}: loss {loss.mean().item():.4f}", flush=True)
    training_model.detachFromDevice()

    infer_opts = poptorch.Options().deviceIterations(args.inference_device_iterations)
    infer_opts.replicationFactor(args.replicas)
    infer_opts.outputMode(poptorch.OutputMode.All)
    per_call = args.batch_size * args.inference_device_iterations * args.replicas
    test_data = poptorch.DataLoader(infer_opts, SyntheticCIFAR(per_call, seed=2), batch_size=args.batch_size)
    inference_model = poptorch.inferenceModel(model.eval(), infer_opts)
    correct = total = 0
    for images, labels in test_data:
        logits = inference_model(images)
        correct += int((logits.argmax(dim=1) == labels).sum())
        total += len(labels)
    print(f"inference: accuracy {100 * correct / total:.1f}% on {total} images")


if __name__ == "__main__":
    main()
