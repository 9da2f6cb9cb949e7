"""Small real convolutional networks under torchvision's model names (not the real
architectures: two residual blocks, so a test trains them in seconds)."""

from __future__ import annotations

import torch


class _Residual(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(x + self.norm(self.conv(x)))


class _SmallResNet(torch.nn.Module):
    def __init__(self, num_classes: int = 1000, channels: int = 8) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False)
        self.blocks = torch.nn.Sequential(_Residual(channels), _Residual(channels))
        self.fc = torch.nn.Linear(channels, num_classes)

    def forward(self, x):
        x = self.blocks(torch.relu(self.stem(x)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def resnet18(num_classes: int = 1000, **_ignored) -> torch.nn.Module:
    return _SmallResNet(num_classes)


def resnet50(num_classes: int = 1000, **_ignored) -> torch.nn.Module:
    return _SmallResNet(num_classes, channels=16)
