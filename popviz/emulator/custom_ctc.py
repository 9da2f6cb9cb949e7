"""PopART's ``ai.graphcore::Ctc`` on the CPU: the CTC loss and its gradient, computed as PopART
computes them (graphcore/popart ``willow/src/op/ctc.cpp``, ``willow/src/popx/op/ctcx.cpp``).

Inputs: log-probabilities ``[T, N, C]``, targets ``[N, S]``, input lengths ``[N]``, target
lengths ``[N]``; attributes ``reduction`` (``"Sum"``, ``"Mean"``, ``"None"``), ``blank``,
``outDataType``. Outputs: the loss (a scalar, or ``[N]`` without reduction) and the gradient of
each sample's loss with respect to the log-probabilities, ``[T, N, C]``. PopLibs computes both in
the forward pass (``popnn::ctc::calcLossAndGradientLogProbabilities``); the backward pass only
scales the saved gradient by the reduction's factor (``Mean``: ``1/N`` and ``1/max(length, 1)``,
as the forward divides). Here the forward is the alpha-beta recursion over the time steps in
log space, written with fixed-shape operators so that fake tensors trace it (the estimate) and
the saved gradient is what autograd keeps, as PopART keeps it.
"""

from __future__ import annotations

from typing import Any

import torch

from popviz.emulator.errors import Error
from popviz.emulator.measure import hidden

_REDUCTIONS = ("Sum", "Mean", "None")


def _lse(*terms: torch.Tensor) -> torch.Tensor:
    return torch.logsumexp(torch.stack(terms), dim=0)


def loss_and_gradient(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
                      target_lengths: torch.Tensor, blank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sample's negative log-likelihood ``[N]`` and its gradient with respect to
    ``log_probs`` ``[T, N, C]`` (zero beyond a sample's input length)."""
    steps, batch, _classes = log_probs.shape
    lp = log_probs.float()
    labels = targets.long()
    ext_len = 2 * labels.shape[1] + 1
    ext = torch.full((batch, ext_len), blank, dtype=torch.long, device=lp.device)
    ext[:, 1::2] = labels
    neg = torch.tensor(float("-inf"), device=lp.device)
    lp_ext = lp.gather(2, ext.unsqueeze(0).expand(steps, batch, ext_len))  # [T, N, L]
    s = torch.arange(ext_len, device=lp.device)
    tl = target_lengths.long().view(batch, 1)
    il = input_lengths.long().view(batch, 1)
    valid = s.view(1, -1) <= 2 * tl  # states of the sample's own extended label
    skip = torch.zeros((batch, ext_len), dtype=torch.bool, device=lp.device)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])  # s - 2 -> s allowed
    skip_next = torch.zeros_like(skip)
    skip_next[:, :-2] = skip[:, 2:]  # s -> s + 2 allowed

    def shift(x: torch.Tensor, by: int) -> torch.Tensor:  # x[s - by], -inf where s < by
        pad = neg.expand(batch, by)
        return torch.cat([pad, x[:, :-by]], dim=1)

    def unshift(x: torch.Tensor, by: int) -> torch.Tensor:  # x[s + by], -inf past the end
        pad = neg.expand(batch, by)
        return torch.cat([x[:, by:], pad], dim=1)

    last = 2 * tl
    final = (s.view(1, -1) == last) | (s.view(1, -1) == last - 1)
    # The recursions go step by step; PopLibs runs them as one program looping over time, so the
    # measurement sees them as the whole-tensor operations below (stacking the steps' alphas and
    # betas, the occupancies and the gradient), not as 2T steps of small ones, each with its code.
    with hidden():
        alpha = torch.where((s.view(1, -1) <= 1) & valid, lp_ext[0], neg)
        alphas = [alpha]
        for t in range(1, steps):
            step = lp_ext[t] + _lse(alpha, shift(alpha, 1), torch.where(skip, shift(alpha, 2), neg))
            step = torch.where(valid, step, neg)
            alpha = torch.where(il > t, step, alpha)  # frozen past the input length
            alphas.append(alpha)
        beta = torch.full((batch, ext_len), float("-inf"), device=lp.device)
        betas = []
        for t in range(steps - 1, -1, -1):
            nxt = _lse(beta, unshift(beta, 1), torch.where(skip_next, unshift(beta, 2), neg))
            start = torch.where(final & valid, lp_ext[t], neg)
            inner = torch.where(il - 1 > t, torch.where(valid, lp_ext[t] + nxt, neg), neg)
            beta = torch.where(il - 1 == t, start, inner)
            betas.append(beta)
        betas.reverse()
    end = _lse(alpha.gather(1, last), torch.where(tl > 0, alpha.gather(1, (last - 1).clamp(min=0)), neg))
    nll = -end.view(batch)
    # alpha and beta both include step t's own probability: count it once
    gamma = torch.stack(alphas) + torch.stack(betas) - lp_ext + nll.view(1, batch, 1)
    occupancy = torch.where(torch.isfinite(gamma), gamma.exp(), torch.zeros_like(gamma))
    grad = torch.zeros_like(lp).scatter_add(2, ext.unsqueeze(0).expand(steps, batch, ext_len), -occupancy)
    finite = torch.isfinite(nll).view(1, batch, 1)
    return nll.to(log_probs.dtype), torch.where(finite, grad, torch.zeros_like(grad)).to(log_probs.dtype)


class _Ctc(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
                target_lengths: torch.Tensor, blank: int, reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            nll, grad = loss_and_gradient(log_probs, targets, input_lengths, target_lengths, blank)
        lengths = target_lengths.clamp(min=1).to(nll.dtype)
        if reduction == "Sum":
            loss = nll.sum()
        elif reduction == "Mean":
            loss = (nll / lengths).sum() / nll.shape[0]
        else:
            loss = nll
        ctx.save_for_backward(grad, lengths)
        ctx.reduction = reduction
        ctx.mark_non_differentiable(grad)
        return loss, grad

    @staticmethod
    def backward(ctx: Any, loss_grad: torch.Tensor, _grad_grad: torch.Tensor) -> tuple[Any, ...]:
        grad, lengths = ctx.saved_tensors
        if ctx.reduction == "Sum":
            per_sample = loss_grad.expand(grad.shape[1])
        elif ctx.reduction == "Mean":
            per_sample = loss_grad / grad.shape[1] / lengths
        else:
            per_sample = loss_grad
        return grad * per_sample.view(1, -1, 1).to(grad.dtype), None, None, None, None, None


def ctc(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
        target_lengths: torch.Tensor, reduction: str = "Mean", blank: int = 0, outDataType: str = "UNDEFINED",
        **_ignored: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``ai.graphcore::Ctc`` (see the module docstring); ``enableReducedClassesInLabel`` and
    other PopLibs planning attributes do not change the result."""
    if log_probs.dim() != 3:
        raise Error(f"Ctc: the log-probabilities must have rank 3 [T, N, C], got shape {tuple(log_probs.shape)}")
    if targets.dim() != 2 or targets.shape[0] != log_probs.shape[1]:
        raise Error(f"Ctc: the targets must be [N, S] with N = {log_probs.shape[1]}, got {tuple(targets.shape)}")
    if reduction not in _REDUCTIONS:
        raise Error(f"Ctc: reduction {reduction!r} is not one of {', '.join(_REDUCTIONS)}")
    loss, grad = _Ctc.apply(log_probs, targets, input_lengths, target_lengths, int(blank), reduction)
    out_type = {"FLOAT": torch.float32, "FLOAT16": torch.float16}.get(str(outDataType).upper())
    if out_type is not None:
        loss, grad = loss.to(out_type), grad.to(out_type)
    return loss, grad


__all__ = ["ctc", "loss_and_gradient"]
