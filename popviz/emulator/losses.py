"""Which tensor is the loss of a training model, found the way PopTorch finds it.

PopTorch treats the result of every PyTorch loss function and of ``poptorch.identity_loss`` as a
loss; the *final* loss is the one no other loss depends on. No loss at all, or more than one
independent loss, is an error (wrap a combination in ``identity_loss``). The emulator records
losses with a ``TorchFunctionMode`` while the model runs, and decides dependence from the
autograd graph.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from popviz.emulator.errors import CPP_ERROR, Error

LOSS_FUNCTIONS = frozenset(getattr(F, name) for name in (
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss", "cross_entropy",
    "ctc_loss", "gaussian_nll_loss", "hinge_embedding_loss", "huber_loss", "kl_div", "l1_loss",
    "margin_ranking_loss", "mse_loss", "multi_margin_loss", "multilabel_margin_loss",
    "multilabel_soft_margin_loss", "nll_loss", "poisson_nll_loss", "smooth_l1_loss", "soft_margin_loss",
    "triplet_margin_loss", "triplet_margin_with_distance_loss") if hasattr(F, name))
"""PyTorch loss functions whose results count as losses (PopTorch's loss handlers cover these)."""

_collectors: list[LossCollector] = []


class LossCollector(TorchFunctionMode):
    """Records every loss computed while it is active (in call order)."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in LOSS_FUNCTIONS and isinstance(out, torch.Tensor):
            self.losses.append(out)
        return out

    def __enter__(self) -> LossCollector:
        _collectors.append(self)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        _collectors.pop()
        super().__exit__(*exc)


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Mark ``x`` as (part of) the loss, reduced like PyTorch losses: "sum", "mean" or "none"."""
    if reduction == "sum":
        out = x.sum()
    elif reduction == "mean":
        out = x.mean()
    else:
        assert reduction == "none", "Unsupported reduction type!"
        out = x.view_as(x)
    if _collectors:
        _collectors[-1].losses.append(out)
    return out


def _reachable(start: Any) -> set[int]:
    """ids of the autograd nodes reachable from ``start`` (excluding ``start`` itself)."""
    seen: set[int] = set()
    stack = [fn for fn, _ in getattr(start, "next_functions", ()) if fn is not None]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        stack.extend(f for f, _ in getattr(fn, "next_functions", ()) if f is not None)
    return seen


def final_loss(losses: list[torch.Tensor]) -> torch.Tensor:
    """The one loss no other loss depends on, or PopTorch's error."""
    if not losses:
        raise Error("Couldn't find a loss in graph!", type=CPP_ERROR)
    unique = list({id(t): t for t in losses}.values())
    if len(unique) == 1:
        return unique[0]
    used: set[int] = set()
    for loss in unique:
        if loss.grad_fn is not None:
            used |= _reachable(loss.grad_fn)
    independent = [t for t in unique if t.grad_fn is None or id(t.grad_fn) not in used]
    if len(independent) != 1:
        raise Error("Multiple independent losses found in graph. Graph must have one final loss. "
                    "Wrap final graph loss in poptorch.identity_loss.", type=CPP_ERROR)
    return independent[0]


__all__ = ["LOSS_FUNCTIONS", "LossCollector", "final_loss", "identity_loss"]
