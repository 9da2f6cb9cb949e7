"""The transforms Graphcore's examples use, for images that are already float tensors."""

from __future__ import annotations

import torch


class Compose:
    def __init__(self, transforms) -> None:
        self.transforms = list(transforms)

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class ToTensor:
    def __call__(self, x):
        return x if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float32)


class Normalize:
    def __init__(self, mean, std) -> None:
        self.mean = torch.tensor(mean).reshape(-1, 1, 1)
        self.std = torch.tensor(std).reshape(-1, 1, 1)

    def __call__(self, x):
        return (x - self.mean) / self.std


class Resize:
    """Bilinear resize of a (C, H, W) float tensor; an int size sets the shorter side."""

    def __init__(self, size) -> None:
        self.size = size

    def __call__(self, x):
        h, w = x.shape[-2:]
        if isinstance(self.size, int):
            scale = self.size / min(h, w)
            size = (round(h * scale), round(w * scale))
        else:
            size = tuple(self.size)
        return torch.nn.functional.interpolate(x.unsqueeze(0), size=size, mode="bilinear",
                                               align_corners=False).squeeze(0)


class ConvertImageDtype:
    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __call__(self, x):
        return x.to(self.dtype)
