"""Measure one micro-batch of the model's forward pass: work per block, parameters, activations.

A ``TorchDispatchMode`` sees every ATen operation the forward runs on the CPU and attributes
it to the current block (:mod:`popviz.emulator.blocks`): FLOPs of matmul-like operations
(PyTorch's ``torch.utils.flop_counter`` formulas), bytes read and written, which parameters
it reads (a parameter belongs to the block that first reads it), and which tensors made in an
earlier block it reads (those cross the IPU boundaries in between). A ``saved_tensors_hooks``
pair counts the bytes autograd keeps for the backward pass (the activation stash), per block.

Blocks are grouped into *segments*, one per pipeline stage as PopTorch and PopART count them:
each block has a stage id (:mod:`popviz.emulator.strategy`; with the default
``AutoStage.SameAsIpu`` the stage id is the block's IPU, PopTorch's ``python/enums.py``), every
operation belongs to its block's stage however often the forward returns to it (a student and a
no-grad teacher run over the same IPUs share their stages), and consecutive stages on one IPU are
one stage (PopART's ``mergeConsecutivePipelineStages``, ``willow/src/transforms/pipeline.cpp``).
The operations are recorded per *visit* (a run of operations on one IPU, in trace order) and
mapped to their stages when the measurement ends (:func:`stage_order`). The result,
:class:`~popviz.emulator.cost_inputs.Measurement`, is plain data the cost model turns into cycles
and bytes.
"""

from __future__ import annotations

import dataclasses
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
        """The visits so far (runs of operations on one IPU in one stage, in trace order); the
        measurement's segments are their stages (:meth:`result`)."""
        self._visit_stage: list[int] = []
        """Per visit: its stage id (PopTorch's, from the block's placement)."""
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
        self.crossings: dict[tuple[int, int], list[int]] = {}
        """(tensor key, reading visit) -> [producing visit, bytes, read by an operation with a
        backward (0/1)]: tensors one visit made and another read (inter-IPU copies once the visits
        are mapped to stages)."""
        self.needs_grad: set[int] = set()
        """Keys of tensors made under ``torch.no_grad()`` from a trainable parameter or a tensor
        that needs a gradient: PopTorch's dispatcher ignores torch's grad mode and marks an
        output as needing a gradient when any floating-point input does
        (``poptorch/source/RequiresGrad.cpp``, ``fixRequiresGradFromDispatch``)."""
        self.saved: dict[tuple[int, int], int] = {}
        self.pool_indices: dict[int, torch.Tensor] = {}
        """Max pooling's indices (by key) -> its pooled values, which PopART stashes instead."""
        trace.listeners.append(self._on_block)
        self._trace = trace
        self._placement: BlockPlacement | None = trace.first  # first layers: IPU 0 (blocks.py)
        self._seen: dict[str, BlockPlacement] = {}
        self.recompute = CheckpointLog(self)
        """recomputationCheckpoint calls and each tensor's producing operation."""
        self.op_keys: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        """Per operation: the keys of its non-parameter inputs and of its outputs (which
        operations lead to the loss, :func:`towards_loss`)."""
        self.op_sources: list[tuple[int, ...]] = []
        """Per operation: the operations that made its non-parameter inputs."""

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
        """Visit of the operation about to be recorded: a new one when the current block's IPU
        or stage differs from the last visit's. -1 before the first block (its stage at the end)."""
        placement = self._placement
        if placement is None:
            return len(self.segments) - 1
        if (not self.segments or self.segments[-1].ipu != placement.ipu
                or self._visit_stage[-1] != placement.stage):
            self.segments.append(Segment(ipu=placement.ipu, blocks=[]))
            self._visit_stage.append(int(placement.stage))
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
        # which inputs need gradients: as autograd sees them, and under torch.no_grad() (a reentrant
        # torch.utils.checkpoint runs so) as PopTorch's dispatcher does, which ignores grad mode: an
        # input made from a trainable parameter or from a tensor that needs one (``needs_grad``)
        grad_mode = torch.is_grad_enabled()
        activation_grad = weight_grad = False
        crossing: list[tuple[int, int, int]] = []
        for t in inputs:
            nbytes = _nbytes(t)
            in_bytes += nbytes
            key = _key(t)
            name = self.param_keys.get(key) if key is not None else None
            if name is None:
                activation_grad = activation_grad or t.requires_grad or (
                    not grad_mode and key is not None and key in self.needs_grad)
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
            if produced is not None and produced != segment:
                crossing.append((key, produced, nbytes))
        differentiable = activation_grad or bool(weight_bytes and weight_grad)
        for key, produced, nbytes in crossing:
            seen = self.crossings.setdefault((key, segment), [produced, nbytes, 0])
            seen[2] = seen[2] or int(differentiable)
        if not grad_mode and (activation_grad or weight_grad):
            self.needs_grad.update(k for k in (_key(t) for t in outputs if t.is_floating_point())
                                   if k is not None and k not in self.param_keys)
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
        made_by = self.recompute.producer_op
        self.op_sources.append(tuple(sorted({made_by[k] for k in (_key(t) for t in inputs)
                                             if k is not None and k in made_by and k not in self.param_keys})))
        self.recompute.produced([_key(t) for t in outputs], len(self.ops) - 1)
        self.op_keys.append((tuple(k for k in (_key(t) for t in inputs) if k is not None and k not in self.param_keys),
                             tuple(k for k in (_key(t) for t in outputs) if k is not None)))
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

    def result(self, loss: torch.Tensor | None = None) -> Measurement:
        """The measurement; ``loss``: the final loss of a training forward (operations that do
        not lead to it grow no gradient, :func:`towards_loss`)."""
        self._alive.clear()
        self.pool_indices.clear()
        if not self.segments:
            first = next(iter(self._seen.values()), None)
            self.segments.append(Segment(ipu=first.ipu if first else 0, blocks=[]))
            self._visit_stage.append(first.stage if first else 0)
        reads: dict[int, set[int]] = {}
        for (_, reader), (producer, _, _) in self.crossings.items():
            reads.setdefault(max(reader, 0), set()).add(max(producer, 0))
        of, segments = stage_order([(v.ipu, stage) for v, stage in zip(self.segments, self._visit_stage, strict=True)],
                                   reads)
        for visit, index in zip(self.segments, of, strict=True):
            segments[index].blocks.extend(b for b in visit.blocks if b not in segments[index].blocks)
        for block, placement in self._seen.items():  # blocks that ran no operation
            if not any(block in s.blocks for s in segments):
                home = next((s for s in segments if s.ipu == placement.ipu), None)
                if home is not None:
                    home.blocks.append(block)

        def seg(visit: int) -> int:
            return of[max(visit, 0)]

        reaches = towards_loss(self.op_keys, _key(loss) if loss is not None else None)
        ops = [o.replace(segment=seg(o.segment)) if reach else
               o.replace(segment=seg(o.segment), activation_grad=False, weight_grad=False)
               for o, reach in zip(self.ops, reaches, strict=True)]
        params = {}
        for name, (size, numel, elem, trainable) in self._all_params.items():
            info = self.params.get(name)
            segment = of[0] if info is None else seg(info.segment)
            params[name] = ParamInfo(name, segment, size, numel, elem, trainable,
                                     block=info.block if info is not None else None)
        crossed: dict[tuple[int, int], tuple[int, int]] = {}
        for (key, reader), (producer, nbytes, differentiable) in self.crossings.items():
            lo, hi = sorted((seg(producer), seg(reader)))
            for b in range(lo, hi):  # PopART chains the copies through every stage between: once each
                seen = crossed.get((key, b))
                crossed[(key, b)] = (nbytes, differentiable or (seen[1] if seen else 0))
        boundary, grad_boundary = [0] * (len(segments) - 1), [0] * (len(segments) - 1)
        for (_, b), (nbytes, differentiable) in crossed.items():
            boundary[b] += nbytes
            grad_boundary[b] += nbytes if differentiable else 0
        merged: dict[tuple[int, str | None, int], list[int]] = {}
        for (visit, block, key), nbytes in self.saved.items():
            slot = merged.setdefault((seg(visit), block, key), [0, self.saved_ops[(visit, block, key)]])
            slot[0] = max(slot[0], nbytes)
            slot[1] = min(slot[1], self.saved_ops[(visit, block, key)])
        saved = [0] * len(segments)
        saved_by_block: dict[str, int] = {}
        for (segment, block, _), (nbytes, _) in merged.items():
            saved[segment] += nbytes
            if block is not None:
                saved_by_block[block] = saved_by_block.get(block, 0) + nbytes
        slots = [(segment, index, nbytes) for (segment, _, _), (nbytes, index) in merged.items()]
        checkpoints = [dataclasses.replace(c, segment=seg(c.segment)) for c in self.recompute.checkpoints]
        return Measurement(segments=segments, ops=ops, params=list(params.values()),
                           saved_bytes=saved, boundary_bytes=boundary, grad_boundary_bytes=grad_boundary,
                           saved_bytes_by_block=saved_by_block, param_ops=dict(self.param_ops),
                           saved_slots=slots, checkpoints=checkpoints,
                           saved_keys=[key for (_, _, key) in merged],
                           saved_producers=[self.recompute.producer_op.get(key) for (_, _, key) in merged],
                           overlap=dict(self._trace.overlap), op_sources=list(self.op_sources),
                           structure=self.units.structure if self.units is not None else None)


def towards_loss(op_keys: list[tuple[tuple[int, ...], tuple[int, ...]]], loss: int | None) -> list[bool]:
    """Per operation (inputs' and outputs' tensor keys, in trace order): whether the loss is made
    from its output. PopART's autodiff grows gradient operations backwards from the final loss
    only (``willow/src/transforms/autodiff``), so an operation off that path — an update of a
    teacher's weights from the student's (DINO's EMA), a metric, an output the loss does not
    read — has no backward, whatever its inputs need. All True when the loss is not known or no
    recorded operation made it (nothing to walk back from)."""
    if loss is None or not any(loss in outs for _, outs in op_keys):
        return [True] * len(op_keys)
    needed = {loss}
    out = [False] * len(op_keys)
    for j in range(len(op_keys) - 1, -1, -1):
        ins, outs = op_keys[j]
        if any(k in needed for k in outs):
            out[j] = True
            needed.update(ins)
    return out


def stage_order(visits: list[tuple[int, int]], reads: dict[int, set[int]] | None = None
                ) -> tuple[list[int], list[Segment]]:
    """The pipeline stages of the visits ``(ipu, stage id)`` in trace order: per visit its
    segment, and the segments (no blocks yet), in order of first use.

    A visit belongs to the stage its stage id names on its IPU (a stage is one stage id on one
    IPU: PopART's ``Ir::verifyPipelineSettings``, "All ops with the same pipeline stage must also
    have the same virtual graph id"), however late in the trace it comes; a stage that starts on
    the IPU of the stage before it is that stage (PopART's ``mergeConsecutivePipelineStages``,
    ``willow/src/transforms/pipeline.cpp``). A visit that reads a tensor made in a later stage than
    its stage id's (``reads``: visit -> the visits whose tensors it reads; a tied head back on
    IPU 0 under ``AutoStage.SameAsIpu``) cannot run in it — PopART rejects a tensor "consumed in
    an earlier pipeline stage than it is produced" (``transforms/inferpipelinestages.cpp``) — and
    is estimated as the next stage, as ``AutoStage.AutoIncrement`` (which Graphcore's BERT sets
    for that head) numbers it."""
    reads = reads or {}
    segments: list[Segment] = []
    home: dict[tuple[int, int], int] = {}
    of: list[int] = []
    for visit, (ipu, stage) in enumerate(visits):
        latest = max((of[v] for v in reads.get(visit, ()) if v < visit), default=-1)
        index = home.get((stage, ipu))
        if index is None or index < latest:
            if not segments or segments[-1].ipu != ipu:
                segments.append(Segment(ipu=ipu, blocks=[]))
            index = len(segments) - 1
            home.setdefault((stage, ipu), index)
        of.append(index)
    return of, segments


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


__all__ = ["Recorder", "measuring", "stage_order", "towards_loss"]
