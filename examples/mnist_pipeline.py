#!/usr/bin/env python3
"""Train an MNIST classifier pipelined over four IPUs, then run it for inference.

The model and the way it is split follow PopTorch's MNIST tutorial: four blocks B1-B4, one per
IPU, pipelined with ``PipelinedExecution(Stage("B1").ipu(0), ...)``, trained with AdamW using
gradient accumulation 10 and 10 device iterations, returning every micro-batch's output
(``OutputMode.All``). The data are synthetic and MNIST-shaped (1x28x28 images, 10 classes), so
nothing is downloaded.

    python examples/mnist_pipeline.py                    # with PopTorch, on 4 IPUs
    popviz emulate -- python examples/mnist_pipeline.py --profile-dir out   # anywhere, on the CPU
    popviz analyse out                                   # out/training and out/inference

``--profile-dir DIR`` switches on PopTorch's profiling (``Options.enableProfiling``): a real
PopTorch writes Poplar reports there, popviz's emulator writes estimated ones.
"""

from __future__ import annotations

import argparse

import poptorch
import torch
from torch import nn

IPUS = 4


class SyntheticMNIST(torch.utils.data.Dataset):
    """MNIST-shaped samples: each class is a fixed random image; a sample adds noise to it."""

    def __init__(self, size: int, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        prototypes = torch.rand(10, 1, 28, 28, generator=generator)
        self.labels = torch.randint(0, 10, (size,), generator=generator)
        noise = 3.0 * torch.randn(size, 1, 28, 28, generator=generator)
        self.images = ((prototypes[self.labels] + noise) - 0.5) / 0.5

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.images[index], self.labels[index]


class Network(nn.Module):
    """Four fully connected layers, each in its own block."""

    def __init__(self) -> None:
        super().__init__()
        self.layer1 = nn.Linear(784, 784)
        self.layer2 = nn.Linear(784, 784)
        self.layer3 = nn.Linear(784, 128)
        self.layer4 = nn.Linear(128, 10)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(-1, 784)
        with poptorch.Block("B1"):
            x = self.relu(self.layer1(x))
        with poptorch.Block("B2"):
            x = self.relu(self.layer2(x))
        with poptorch.Block("B3"):
            x = self.relu(self.layer3(x))
        with poptorch.Block("B4"):
            x = self.layer4(x)
        return x


class TrainingModelWithLoss(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.loss = nn.CrossEntropyLoss()

    def forward(self, images: torch.Tensor, labels: torch.Tensor | None = None):
        output = self.model(images)
        if labels is None:
            return output
        with poptorch.Block("B4"):
            loss = self.loss(output, labels)
        return output, loss


def pipeline() -> poptorch.PipelinedExecution:
    return poptorch.PipelinedExecution(*(poptorch.Stage(f"B{i + 1}").ipu(i) for i in range(IPUS)))


def options(args: argparse.Namespace, training: bool) -> poptorch.Options:
    opts = poptorch.Options().deviceIterations(args.device_iterations)
    opts.setExecutionStrategy(pipeline())
    if training:
        opts.Training.gradientAccumulation(args.gradient_accumulation)
        opts.outputMode(poptorch.OutputMode.All)
    if args.profile_dir:
        opts.enableProfiling(args.profile_dir)
    return opts


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return (logits.argmax(dim=1) == labels).float().mean().item() * 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8, help="micro-batch size (default 8)")
    parser.add_argument("--device-iterations", type=int, default=10)
    parser.add_argument("--gradient-accumulation", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="training steps (executor calls)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--profile-dir", help="write profiling reports (one per model) to this directory")
    args = parser.parse_args()
    torch.manual_seed(0)

    train_opts = options(args, training=True)
    per_call = args.batch_size * args.device_iterations * args.gradient_accumulation
    train_data = poptorch.DataLoader(train_opts, SyntheticMNIST(per_call * args.steps, seed=1),
                                     batch_size=args.batch_size, shuffle=True)
    model = Network()
    training_model = poptorch.trainingModel(TrainingModelWithLoss(model), train_opts,
                                            optimizer=poptorch.optim.AdamW(model.parameters(), lr=args.lr))
    for step, (images, labels) in enumerate(train_data, 1):
        logits, losses = training_model(images, labels)
        print(f"step {step}/{len(train_data)}: loss {losses.mean().item():.4f}, "
              f"accuracy {accuracy(logits, labels):.1f}%", flush=True)
    training_model.detachFromDevice()

    test_opts = options(args, training=False)
    test_data = poptorch.DataLoader(test_opts, SyntheticMNIST(args.batch_size * args.device_iterations * 4, seed=1),
                                    batch_size=args.batch_size)
    inference_model = poptorch.inferenceModel(model, test_opts)
    correct = [accuracy(inference_model(images), labels) for images, labels in test_data]
    print(f"inference: accuracy {sum(correct) / len(correct):.1f}% on {len(test_data.dataset)} images")


if __name__ == "__main__":
    main()
