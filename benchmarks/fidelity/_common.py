"""Shared by the fidelity cases: synthetic inputs for one call and the call itself."""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def batch(*shape: int, total: int, dtype: torch.dtype = torch.float32, high: int = 2) -> torch.Tensor:
    """One call's inputs: ``total`` samples of ``shape``, as a zero-stride view of one sample
    (synthetic data: the values do not matter, and the whole call's batch is never allocated)."""
    if dtype.is_floating_point:
        one = torch.randn(1, *shape).to(dtype)
    else:
        one = torch.randint(0, high, (1, *shape), dtype=dtype)
    return one.expand(total, *shape)


def train_one_call(model: torch.nn.Module, opts, optimizer, *inputs: torch.Tensor) -> None:
    """Wrap for training and run one call (under ``--calls 1`` the emulator estimates it)."""
    import poptorch

    poptorch.trainingModel(model, opts, optimizer=optimizer)(*inputs)
