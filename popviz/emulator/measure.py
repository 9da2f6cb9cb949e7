"""Measure one micro-batch of the model's forward pass: work per block, parameters, activations.

A ``TorchDispatchMode`` sees every ATen operation the forward runs on the CPU and attributes
it to the current block (:mod:`popviz.emulator.blocks`): FLOPs of matmul-like operations
(PyTorch's ``torch.utils.flop_counter`` formulas), bytes read and written, which parameters
it reads (a parameter belongs to the block that first reads it), and which tensors made in an
earlier block it reads (those cross the IPU boundaries in between). A ``saved_tensors_hooks``
pair counts the bytes autograd keeps for the backward pass (the activation stash), per block.

Blocks are grouped into *segments*: consecutive blocks on the same IPU, which is how PopTorch
forms pipeline stages (a new stage each time the IPU changes). The result,
:class:`~popviz.emulator.cost_inputs.Measurement`, is plain data the cost model turns into cycles
and bytes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from popviz.emulator.blocks import BlockTrace
from popviz.emulator.cost_inputs import Measurement, OpCost, ParamInfo, Segment
from popviz.emulator.recompute import CheckpointLog, _key, _nbytes, tracking
from popviz.emulator.strategy import BlockPlacement

_aten = torch.ops.aten
_FLOPS = dict(flop_registry)
if hasattr(_aten, "_scaled_dot_product_flash_attention_for_cpu"):
    # CPU flavour of fused attention: same leading (query, key, value) arguments as the fused one.
    _FLOPS[_aten._scaled_dot_product_flash_attention_for_cpu] = flop_registry[
        _aten._scaled_dot_product_flash_attention]
_FREE_OPS = {_aten.detach.default, _aten.lift_fresh.default, _aten.alias.default,
             # a fake tensor's ``.device`` and ``.layout`` are dispatched (a real one's are not)
             torch.ops.prim.device.default, torch.ops.prim.layout.default}


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


_PRODUCTS = {"mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2)}
_CONVOLUTIONS = {"convolution", "_convolution", "conv1d", "conv2d", "conv3d"}


def product_dims(name: str, args: tuple, out: Any) -> tuple[int, ...]:
    """A product's or convolution's shape as PopLibs plans it (PopLibs lowers a matmul to a
    convolution: rows are its positions, the contraction its input channels, the columns its
    output channels, a batched product's batch its groups): ``(groups, positions, in channels per
    group, out channels per group, kernel elements)``; empty when the arguments are not the
    expected tensors."""
    try:
        if name in _PRODUCTS:
            a, b = (args[i] for i in _PRODUCTS[name])
            if a.dim() == 2 and b.dim() == 2:
                return (1, int(a.shape[0]), int(a.shape[1]), int(b.shape[1]), 1)
            if a.dim() == 3 and b.dim() == 3:
                return (int(a.shape[0]), int(a.shape[1]), int(a.shape[2]), int(b.shape[2]), 1)
            return ()
        if name in _CONVOLUTIONS:
            weight, result = args[1], out if isinstance(out, torch.Tensor) else None
            if result is None or weight.dim() < 3:
                return ()
            groups = int(args[8]) if len(args) > 8 and name in ("convolution", "_convolution") else (
                int(args[6]) if len(args) > 6 else 1)
            transposed = bool(args[6]) if len(args) > 6 and name in ("convolution", "_convolution") else False
            kernel = 1
            for k in weight.shape[2:]:
                kernel *= int(k)
            positions = int(result.shape[0])
            for d in result.shape[2:]:
                positions *= int(d)
            out_channels = int(result.shape[1]) // max(groups, 1)
            in_channels = (int(weight.shape[0]) // max(groups, 1)) if transposed else int(weight.shape[1])
            return (groups, positions, in_channels, out_channels, kernel)
    except (AttributeError, IndexError, TypeError, ValueError):
        return ()
    return ()


class Recorder:
    """Collects a :class:`Measurement` while one forward pass runs."""

    def __init__(self, model: torch.nn.Module, trace: BlockTrace, units: Any = None) -> None:
        self.units = units
        """A :class:`popviz.emulator.layers.UnitTracker` (its ``current`` layer-level module is
        recorded with each operation), or None."""
        self.param_ops: dict[str, int] = {}
        self.saved_ops: dict[tuple[int, str | None, int], int] = {}
        self.segments: list[Segment] = []
        self.ops: list[OpCost] = []
        self.param_keys: dict[int, str] = {}
        self.params: dict[str, ParamInfo] = {}
        named = list(model.named_parameters()) + [(f"buffer:{n}", b) for n, b in model.named_buffers()]
        self._all_params = {}
        for name, p in named:
            key = _key(p)
            if key is not None and key not in self.param_keys:
                self.param_keys[key] = name
                self._all_params[name] = (_nbytes(p), p.numel(), p.element_size(), p.requires_grad)
        self.producers: dict[int, int] = {}
        self._alive: list[torch.Tensor] = []
        """Every tensor an operation produced, kept until the measurement ends: tensors are keyed
        by their storage's address, and a freed address reused by a later tensor would otherwise
        inherit the old tensor's producer (counting bytes as crossing stages, run to run
        differently as the allocator reuses memory)."""
        self.crossed: set[tuple[int, int]] = set()
        self.boundary_bytes: list[int] = []
        self.saved: dict[tuple[int, int], int] = {}
        self.pool_indices: dict[int, torch.Tensor] = {}
        """Max pooling's indices (by key) -> its pooled values, which PopART stashes instead."""
        trace.listeners.append(self._on_block)
        self._trace = trace
        self._placement: BlockPlacement | None = trace.first  # first layers: IPU 0 (blocks.py)
        self._seen: dict[str, BlockPlacement] = {}
        self.recompute = CheckpointLog(self)
        """recomputationCheckpoint calls and each tensor's producing operation."""

    # -- blocks and segments
    def _block(self) -> str | None:
        return self._placement.block if self._placement is not None else None

    def _on_block(self, placement: BlockPlacement) -> None:
        self._placement = placement
        self._seen.setdefault(placement.block, placement)
        # the block's stage exists even if it records no operation (only views: x.view(-1)), as the
        # report's configuration lists it; else the target would count one IPU too few
        _ = self.segment

    @property
    def segment(self) -> int:
        """Segment of the operation about to be recorded: a new one when the current block's IPU
        differs from the last segment's. -1 before the first block (segment 0 at the end)."""
        placement = self._placement
        if placement is None:
            return len(self.segments) - 1
        if not self.segments or self.segments[-1].ipu != placement.ipu:
            self.segments.append(Segment(ipu=placement.ipu, blocks=[]))
            if len(self.segments) > 1:
                self.boundary_bytes.append(0)
        blocks = self.segments[-1].blocks
        if placement.block is not None and placement.block not in blocks:
            blocks.append(placement.block)
        return len(self.segments) - 1

    # -- operations
    def op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if getattr(func, "is_view", False) or func in _FREE_OPS:
            return
        if self._trace.cleared:
            from popviz.emulator.errors import CPP_ERROR, Error

            raise Error("No active Block, all the ops must belong to a Block", type=CPP_ERROR)
        packet = getattr(func, "_overloadpacket", func)
        current = self.segment
        segment = max(current, 0)
        inputs = _tensors((args, kwargs))
        outputs = _tensors(out)
        if "with_indices" in str(packet) and len(outputs) == 2 and not outputs[1].is_floating_point():
            # max pooling: autograd keeps the int64 indices, PopART's MaxPoolGrad the pooled output
            self.pool_indices[_key(outputs[1])] = outputs[0]
        in_bytes = weight_bytes = 0
        # which inputs need gradients, as autograd sees them; under torch.no_grad() (a reentrant
        # torch.utils.checkpoint runs so) that says nothing of what PopART differentiates: unknown,
        # so the operation keeps its whole backward
        known = torch.is_grad_enabled()
        activation_grad = weight_grad = not known
        for t in inputs:
            nbytes = _nbytes(t)
            in_bytes += nbytes
            key = _key(t)
            name = self.param_keys.get(key) if key is not None else None
            if name is None:
                activation_grad = activation_grad or t.requires_grad
            else:
                weight_grad = weight_grad or t.requires_grad
            if key is None:
                continue
            if name is not None:
                weight_bytes += nbytes
                if name not in self.params:
                    self.param_ops[name] = len(self.ops)
                    size, numel, elem, trainable = self._all_params[name]
                    self.params[name] = ParamInfo(name, current, size, numel, elem, trainable,
                                                  block=self._block())
                continue
            produced = self.producers.get(key)
            if produced is not None and produced < segment:
                for boundary in range(produced, segment):
                    if (key, boundary) not in self.crossed:
                        self.crossed.add((key, boundary))
                        self.boundary_bytes[boundary] += nbytes
        out_bytes = sum(_nbytes(t) for t in outputs)
        flops = 0.0
        formula = _FLOPS.get(packet) or _FLOPS.get(func)
        if formula is not None:
            try:
                flops = float(formula(*args, **kwargs, out_val=out))
            except Exception:  # a shape the formula does not know: count bytes only
                flops = 0.0
        ref = outputs[0] if outputs else (inputs[0] if inputs else None)
        elem = ref.element_size() if ref is not None and ref.is_floating_point() else 4
        name = str(packet).replace("aten.", "")
        self.ops.append(OpCost(segment=current, name=name,
                               flops=flops, element_bytes=elem, in_bytes=in_bytes, out_bytes=out_bytes,
                               matmul=formula is not None, weight_bytes=weight_bytes, block=self._block(),
                               module=self.units.current if self.units is not None else None,
                               activation_grad=activation_grad, weight_grad=weight_grad,
                               dims=product_dims(name, args, out) if formula is not None else ()))
        self.recompute.produced([_key(t) for t in outputs], len(self.ops) - 1)
        for t in outputs:
            key = _key(t)
            if key is not None and key not in self.producers and key not in self.param_keys:
                self.producers[key] = segment
                self._alive.append(t)

    # -- autograd's saved tensors (the activation stash)
    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _key(t)
        pooled = self.pool_indices.get(key) if key is not None else None
        if pooled is not None:  # stashed as PopART does: the pooled values, not autograd's int64 indices
            t, key = pooled, _key(pooled)
        if key is not None and key not in self.param_keys:
            slot = (max(self.segment, 0), self._block(), key)
            self.saved[slot] = max(self.saved.get(slot, 0), _nbytes(t))
            self.saved_ops.setdefault(slot, len(self.ops))
        return t

    def result(self) -> Measurement:
        self._alive.clear()
        self.pool_indices.clear()
        if not self.segments:
            first = next(iter(self._seen.values()), None)
            self.segments.append(Segment(ipu=first.ipu if first else 0, blocks=[]))
        for block, placement in self._seen.items():  # blocks that ran no operation
            if not any(block in s.blocks for s in self.segments):
                home = next((s for s in self.segments if s.ipu == placement.ipu), None)
                if home is not None:
                    home.blocks.append(block)
        ops = [o if o.segment >= 0 else o.replace(segment=0) for o in self.ops]
        params = {}
        for name, (size, numel, elem, trainable) in self._all_params.items():
            info = self.params.get(name)
            segment = 0 if info is None or info.segment < 0 else info.segment
            params[name] = ParamInfo(name, segment, size, numel, elem, trainable,
                                     block=info.block if info is not None else None)
        saved = [0] * len(self.segments)
        saved_by_block: dict[str, int] = {}
        for (segment, block, _), nbytes in self.saved.items():
            saved[segment] += nbytes
            if block is not None:
                saved_by_block[block] = saved_by_block.get(block, 0) + nbytes
        slots = [(segment, self.saved_ops[(segment, block, key)], nbytes)
                 for (segment, block, key), nbytes in self.saved.items()]
        return Measurement(segments=list(self.segments), ops=ops, params=list(params.values()),
                           saved_bytes=saved, boundary_bytes=list(self.boundary_bytes),
                           saved_bytes_by_block=saved_by_block, param_ops=dict(self.param_ops),
                           saved_slots=slots, checkpoints=list(self.recompute.checkpoints),
                           saved_keys=[key for (_, _, key) in self.saved],
                           saved_producers=[self.recompute.producer_op.get(key) for (_, _, key) in self.saved],
                           structure=self.units.structure if self.units is not None else None)


class _CostMode(TorchDispatchMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        # Under torch.inference_mode() (Lightning's predict/validate/test) the autograd key that
        # decomposes composite ops is off, so aten.linear / conv2d / matmul / layer_norm reach this
        # mode whole: decompose them here, as every other mode sees them (addmm, convolution, ...),
        # so that their FLOPs are counted (PopTorch lowers the same decompositions).
        if torch.is_inference_mode_enabled() and torch._C._dispatch_has_kernel_for_dispatch_key(
                func.name(), torch._C.DispatchKey.CompositeImplicitAutograd):
            with self:  # the decomposition's own ops come back through this mode and are recorded
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        out = func(*args, **kwargs)
        if not _hidden[0]:
            self.recorder.op(func, args, kwargs, out)
        return out


_hidden = [0]


class hidden:
    """Operations run inside are not recorded: a CPU implementation's step-by-step loop whose
    work it records itself as the few whole-tensor operations the IPU program amounts to
    (:mod:`popviz.emulator.custom_ctc`)."""

    def __enter__(self) -> None:
        _hidden[0] += 1

    def __exit__(self, *exc: Any) -> None:
        _hidden[0] -= 1


class measuring:
    """Record the costs of the forward pass run inside it."""

    def __init__(self, model: torch.nn.Module, trace: BlockTrace, training: bool, units: Any = None) -> None:
        self.recorder = Recorder(model, trace, units)
        self.training = training
        self._mode = _CostMode(self.recorder)
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.recorder.pack, lambda t: t)
        self._checkpoints = tracking(self.recorder.recompute)

    def __enter__(self) -> Recorder:
        if self.training:
            self._hooks.__enter__()
        self._checkpoints.__enter__()
        self._mode.__enter__()
        return self.recorder

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        self._checkpoints.__exit__(*exc)
        if self.training:
            self._hooks.__exit__(*exc)


__all__ = ["Recorder", "measuring"]
