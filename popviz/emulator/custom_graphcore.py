"""CPU implementations of the custom ops Graphcore's applications and tutorials use, each
written from the op's C++ (the files named below) so its outputs are the IPU's, and computed
with PyTorch's operators so the emulator's measurement costs them like any other work.

====================================  =========================================================
``ai.graphcore::RemapCE``             a copy into a new tile layout: the values are the input's
                                      (``remap_tensor_ce.cpp`` in speech/conformer, vision/swin,
                                      vision/mae, nlp/gpt2: ``poplar::program::Copy(src, out)``)
``ai.graphcore::CopyTensor``          a copy (vision/yolo_v4 ``copy_custom_op.cpp``)
``com.acme::ExpMovAvg``               the teacher's exponential moving average, in place:
                                      ``k = f·k + (1 − f)·q`` for inputs ``(q, k, f)``; the output
                                      is ``k`` (vision/dino ``exp_avg_custom_op.cpp``, a PopART
                                      ``AccumulateOp`` of type ``MovingAverage``, whose update is
                                      ``accumulatex.cpp``'s ``f·accum + (1 − f)·updater``)
``custom.ops::LeakyRelu``             ``x < 0 ? alpha·x : x``, ``alpha`` 0.01 by default (the
                                      PopTorch custom-op tutorial, ``leaky_relu_custom_op.cpp``)
``com.acme::Cube``                    ``x³`` (the tutorials' ``cube_fn_custom_op.cpp``)
``poptorch.custom_ops::FastGatherLastDim``  ``gather(data, -1, index)`` (PopTorch's
                                      ``FastGatherLastDim.cpp``; optimum-graphcore's DeBERTa)
``ai.graphcore::Nms``                 multi-class non-maximum suppression (vision/yolo_v4
                                      ``nms.cpp``, ``codelet.cpp``): see :func:`nms`
``ai.graphcore::Ctc``                 PopART's CTC loss: :mod:`popviz.emulator.custom_ctc`
====================================  =========================================================

What the measurement sees: CTC's recursions over time as a few whole-tensor operations
(:mod:`popviz.emulator.custom_ctc`), NMS's loop as one iteration of its body (the IPU program's
loop: its code once; its cycles are then one iteration's, fewer than the ``numDetections``
iterations the IPU runs).

The emulator's forward runs once per micro-batch, so ``ExpMovAvg`` moves the teacher once per
micro-batch; PopART runs it once per weight update (its ``AccumulateOuterFragment``), so with
gradient accumulation G a fully emulated run moves the teacher G times per step. The estimate
(one micro-batch) is not affected.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from popviz.emulator.custom_ctc import ctc
from popviz.emulator.errors import Error
from popviz.emulator.measure import hidden


def copy(x: torch.Tensor, **_layout: Any) -> torch.Tensor:
    """RemapCE / CopyTensor: the values of ``x`` in a new tensor (layout attributes such as
    ``fwd_grain_size`` or ``grain_size`` choose the IPU's tile mapping only)."""
    return x.clone()


def exp_mov_avg(updater: torch.Tensor, accumulator: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        f = factor.to(accumulator.dtype)
        accumulator.mul_(f).add_(updater.to(accumulator.dtype) * (1 - f))
    return accumulator


def leaky_relu(x: torch.Tensor, alpha: float = 1e-2) -> torch.Tensor:
    return torch.where(x < 0, x * alpha, x)


def cube(x: torch.Tensor) -> torch.Tensor:
    return x * x * x


def fast_gather_last_dim(data: torch.Tensor, index: torch.Tensor, **_debug: Any) -> torch.Tensor:
    if data.dim() != index.dim() or tuple(data.shape[:-1]) != tuple(index.shape[:-1]):
        raise Error("FastGatherLastDim: the index must have the input's dimensions except the last, got "
                    f"{tuple(index.shape)} for {tuple(data.shape)}")
    return torch.gather(data, -1, index.long())


def _iou(boxes: torch.Tensor, best: torch.Tensor) -> torch.Tensor:
    """IoU of each box ``[B, N, 4]`` with the best box ``[B, 4]`` (x1, y1, x2, y2), as
    ``computeIOU`` in codelet.cpp."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    bx1, by1, bx2, by2 = (v.unsqueeze(1) for v in best.unbind(-1))
    area = (x2 - x1) * (y2 - y1)
    best_area = (bx2 - bx1) * (by2 - by1)
    w = (torch.minimum(x2, bx2) - torch.maximum(x1, bx1)).clamp(min=0)
    h = (torch.minimum(y2, by2) - torch.maximum(y1, by1)).clamp(min=0)
    inter = w * h
    return inter / (area + best_area - inter)


def nms(scores: torch.Tensor, boxes: torch.Tensor, threshold: float = 0.5, scoreThreshold: float | None = None,
        numDetections: int = 100, sigma: float = 0.0, useGather: int = 0,
        **_ignored: Any) -> list[torch.Tensor]:
    """``ai.graphcore::Nms`` on scores ``[B, N, C]`` and boxes ``[B, N, 4]``: up to
    ``numDetections`` times, take the highest score over boxes and classes; if it beats
    ``scoreThreshold`` record its box index, score, box and class; remove it, and remove (or, with
    ``sigma`` > 0, scale by ``exp(−iou²/sigma)``) the scores of that class on every box whose IoU
    with it exceeds ``threshold``. The loop stops for the whole batch once any image has no score
    left above the threshold (``ConditionVertex``). Outputs: indices (−1 where empty), scores (0),
    boxes (0), classes (INT32_MAX), and the number of detections per image, as nms.cpp
    initialises them. Fixed shapes throughout, so fake tensors trace it."""
    if scores.dim() != 3 or boxes.dim() != 3 or boxes.shape[-1] != 4:
        raise Error(f"Nms: expected scores [B, N, C] and boxes [B, N, 4], got {tuple(scores.shape)} and "
                    f"{tuple(boxes.shape)}")
    k = int(numDetections)
    batch, n, classes = scores.shape
    if not 0 < k <= n:
        raise Error(f"Nms: numDetections must be between 1 and the number of boxes ({n}), got {k}")
    low = torch.finfo(scores.dtype).min
    st = -torch.finfo(torch.float32).max if scoreThreshold is None else float(scoreThreshold)
    work = scores.detach().clone().reshape(batch, n * classes)
    top_indices = torch.full((batch, k), -1, dtype=torch.int32)
    top_scores = torch.zeros((batch, k), dtype=scores.dtype)
    top_boxes = torch.zeros((batch, k, 4), dtype=boxes.dtype)
    top_classes = torch.full((batch, k), torch.iinfo(torch.int32).max, dtype=torch.int32)
    lengths = torch.full((batch,), k, dtype=torch.int32)
    running = torch.ones((), dtype=torch.bool)
    rows = torch.arange(batch)
    with contextlib.ExitStack() as quiet:
        for i in range(k):
            if i == 1:  # the measurement records the loop's body once (see the module docstring)
                quiet.enter_context(hidden())
            best_score, best = work.max(dim=1)
            box_index, cls = best // classes, best % classes
            best_box = boxes[rows, box_index]
            keep = running & (best_score > st)
            top_indices[:, i] = torch.where(keep, box_index.to(torch.int32), top_indices[:, i])
            top_scores[:, i] = torch.where(keep, best_score, top_scores[:, i])
            top_classes[:, i] = torch.where(keep, cls.to(torch.int32), top_classes[:, i])
            top_boxes[:, i] = torch.where(keep.unsqueeze(1), best_box, top_boxes[:, i])
            lengths = torch.where(running & ~keep & (lengths == k), torch.full_like(lengths, i), lengths)
            work = work.scatter(1, best.unsqueeze(1), torch.full((batch, 1), low, dtype=work.dtype))
            per_class = work.view(batch, n, classes)
            column = per_class.gather(2, cls.view(batch, 1, 1).expand(batch, n, 1)).squeeze(2)
            iou = _iou(boxes, best_box)
            live = column > st
            if sigma == 0.0:
                column = torch.where(live & (iou > threshold), torch.full_like(column, low), column)
            else:
                column = torch.where(live, column * torch.exp(-(iou * iou) / sigma).to(column.dtype), column)
            work = per_class.scatter(2, cls.view(batch, 1, 1).expand(batch, n, 1), column.unsqueeze(2)).reshape(
                batch, n * classes)
            running = running & (best_score > st).all()
    return [top_indices, top_scores, top_boxes, top_classes, lengths]


BUILTIN: dict[tuple[str, str], Callable[..., Any]] = {
    ("ai.graphcore", "RemapCE"): copy,
    ("ai.graphcore", "CopyTensor"): copy,
    ("com.acme", "ExpMovAvg"): exp_mov_avg,
    ("custom.ops", "LeakyRelu"): leaky_relu,
    ("com.acme", "Cube"): cube,
    ("poptorch.custom_ops", "FastGatherLastDim"): fast_gather_last_dim,
    ("ai.graphcore", "Nms"): nms,
    ("ai.graphcore", "Ctc"): ctc,
}
"""``(domain, name)`` -> the op's CPU implementation, called ``fn(*inputs, **attributes)``."""

__all__ = ["BUILTIN", "copy", "cube", "exp_mov_avg", "fast_gather_last_dim", "leaky_relu", "nms"]
