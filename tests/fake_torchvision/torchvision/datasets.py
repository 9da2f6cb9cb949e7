"""Datasets of random images with the real ones' shapes; ``download`` does nothing.

Sizes are small (``FAKE_TORCHVISION_SAMPLES`` samples for training, a quarter of that for
testing; 512 by default) so the scripts finish in seconds."""

from __future__ import annotations

import os

import torch


def _samples(train: bool) -> int:
    n = int(os.environ.get("FAKE_TORCHVISION_SAMPLES", "512"))
    return n if train else max(1, n // 4)


class _RandomImages(torch.utils.data.Dataset):
    shape: tuple[int, ...] = (3, 32, 32)
    classes = 10

    def __init__(self, root: str = ".", train: bool = True, download: bool = False, transform=None,
                 target_transform=None) -> None:
        n = _samples(train)
        g = torch.Generator().manual_seed(0 if train else 1)
        # uint8-like pixel values in [0, 1], as ToTensor() would give
        self.data = torch.rand((n, *self.shape), generator=g)
        self.targets = torch.randint(0, self.classes, (n,), generator=g).tolist()
        self.transform, self.target_transform = transform, target_transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        image, target = self.data[index], self.targets[index]
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


class CIFAR10(_RandomImages):
    shape = (3, 32, 32)


class MNIST(_RandomImages):
    shape = (1, 28, 28)


class FashionMNIST(MNIST):
    pass
