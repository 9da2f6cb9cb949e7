"""``Block``, ``BeginBlock`` and ``BlockFunction``: which block the model's operations belong to.

Outside an executor these do nothing (as in PopTorch on the CPU). While an executor runs the
model, a :class:`BlockTrace` is active: every block start resolves its stage and IPU through the
execution strategy (raising PopTorch's errors for unknown blocks), and the emulator's
measurement reads :attr:`BlockTrace.current` to attribute operations to blocks.

Attribution rule: an operation belongs to the most recently started block; leaving a ``with
Block(...)`` returns to the enclosing ``with`` block when there is one; with none, there is no
active block until the next one starts, and an operation there raises PopTorch's "No active
Block, all the ops must belong to a Block". Operations before the first block run on IPU 0, in
stage 0 (PopTorch's user guide, ``docs/user_guide/overview.rst``: "PopTorch places the first
layers on ipu_id 0 by default"; ``docs/user_guide/pipeline_simple.py`` relies on it), so a stem
followed by ``BeginBlock(..., ipu_id=1)`` is a pipeline over IPUs 0 and 1. They belong to no
named block (:attr:`BlockTrace.first` has ``block=None``).

Names: blocks keep PopTorch's ids while the model runs (``Stage("0")`` resolves the first block
without a ``user_id``); :class:`ModuleSpans` records which modules ran in which block, and
:func:`relabel` then gives the measurement the display names of :mod:`popviz.block_names`
(the ``user_id``, else the module paths, e.g. ``layers.0-2``), which every output shows.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from popviz.block_names import display_names
from popviz.emulator.errors import Error
from popviz.emulator.strategy import BlockPlacement, StageResolver


class BlockTrace:
    """Block bookkeeping for one run of the model's forward inside an executor."""

    def __init__(self, resolver: StageResolver, split: dict[str, int] | None = None) -> None:
        self.resolver = resolver
        self.split = split
        """Layer-level module path -> IPU when ``--split`` re-places the blocks
        (:mod:`popviz.emulator.split`): the script's own blocks are then ignored, and a block
        starts, on the layer's IPU, at each layer whose IPU differs from the current one."""
        self._split_stages = 0
        self.current: BlockPlacement | None = None
        self.first: BlockPlacement | None = None if split is not None else FIRST_LAYERS
        """Where operations before the first block run: IPU 0, stage 0, no block (with
        ``split`` the first layer's IPU decides, so None)."""
        self._stack: list[BlockPlacement] = []
        """Placements of the ``with Block`` statements currently open, innermost last."""
        self.placements: dict[str, BlockPlacement] = {}
        """Every block started, in order of first start."""
        self.automatic: set[str] = set()
        """Ids PopTorch (or ``--split``) made: blocks started without a ``user_id``."""
        self.listeners: list[Callable[[BlockPlacement], None]] = []
        self.cleared = False
        """True after a ``with Block`` ended with no enclosing one and before the next block
        starts: PopTorch then has no active block, and an operation there is an error."""
        self.overlap: dict[str, str] = {}
        """``"input"`` / ``"output"`` -> the least overlapping ``OverlapMode`` value given to
        ``set_overlap_for_input`` / ``set_overlap_for_output`` in this forward."""

    def place(self, layer: str) -> None:
        """A layer-level module starts (only with ``split``): move to its IPU if it differs."""
        ipu = self.split.get(layer) if self.split is not None else None
        if ipu is None or (self.current is not None and self.current.ipu == ipu):
            return
        placement = BlockPlacement(layer, self._split_stages, ipu)
        self._split_stages += 1
        self.placements.setdefault(placement.block, placement)
        self.automatic.add(placement.block)
        self.current = placement
        for listener in self.listeners:
            listener(placement)

    def begin(self, user_id: str | None, ipu_id: int | None, automatic: bool = False) -> None:
        """A block starts; ``automatic``: ``user_id`` is an id PopTorch gave (a BeginBlock
        without one keeps its first automatic id), not the user's."""
        if self.split is not None:
            return
        placement = self.resolver.begin(user_id, ipu_id)
        self.placements.setdefault(placement.block, placement)
        if automatic or user_id is None:
            self.automatic.add(placement.block)
        self.current = placement
        self.cleared = False
        for listener in self.listeners:
            listener(placement)

    def enter(self, user_id: str | None, ipu_id: int | None) -> None:
        if self.split is not None:
            return
        self.begin(user_id, ipu_id)
        self._stack.append(self.current)

    def enter_placement(self, stage: int, ipu: int) -> None:
        """``torch.ops.poptorch.begin_ipu_block(stage, phase, ipu)`` called directly: a block
        named ``stage<N>`` on that stage and IPU, ended by ``end_ipu_block`` (like ``exit``)."""
        if self.split is not None:
            return
        placement = BlockPlacement(f"stage{stage}", int(stage), int(ipu))
        self.placements.setdefault(placement.block, placement)
        self.automatic.add(placement.block)
        self.current = placement
        self.cleared = False
        self._stack.append(placement)
        for listener in self.listeners:
            listener(placement)

    def exit(self) -> None:
        """Leave a ``with Block``: the enclosing ``with`` block (if any) is current again."""
        if self.split is not None:
            return
        if self._stack:
            self._stack.pop()
        self.cleared = not self._stack
        if self._stack and self._stack[-1] is not self.current:
            self.current = self._stack[-1]
            for listener in self.listeners:
                listener(self.current)


class ModuleSpans:
    """While the model runs under ``trace``: which blocks were current while each of its modules
    ran (a module entirely inside one block names it). Hooks are added after the model's own
    (a ``BeginBlock`` has started its block when the module is recorded) and removed on exit."""

    def __init__(self, model: torch.nn.Module, trace: BlockTrace) -> None:
        self._model = model
        self._trace = trace
        self.spans: dict[str, set[str | None]] = {}
        """Module path (``""``: the model) -> blocks current while it ran, in order of first run."""
        self._open: list[set[str | None]] = []
        self._handles: list[Any] = []

    def _on_block(self, placement: BlockPlacement) -> None:
        for blocks in self._open:
            blocks.add(placement.block)

    def _pre(self, path: str) -> Callable[..., None]:
        def pre(module: Any, inputs: Any) -> None:
            current = self._trace.current
            blocks = self.spans.setdefault(path, set())
            blocks.add(current.block if current is not None else None)
            self._open.append(blocks)
        return pre

    def _post(self, module: Any, inputs: Any, output: Any) -> None:
        if self._open:
            self._open.pop()

    def __enter__(self) -> ModuleSpans:
        for path, module in self._model.named_modules():
            self._handles.append(module.register_forward_pre_hook(self._pre(path)))
            self._handles.append(module.register_forward_hook(self._post, always_call=True))
        self._trace.listeners.append(self._on_block)
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._on_block in self._trace.listeners:
            self._trace.listeners.remove(self._on_block)

    def names(self) -> dict[str, str]:
        """Block id -> display name (:func:`popviz.block_names.display_names`)."""
        return display_names(list(self._trace.placements), self._trace.automatic, self.spans)


def relabel(measurement: Any, names: dict[str, str]) -> Any:
    """``measurement`` (:class:`popviz.emulator.cost_inputs.Measurement`) with its blocks called by
    their display names (ids not in ``names`` are kept)."""
    def name(block: str | None) -> str | None:
        return names.get(block, block) if block is not None else None

    for segment in measurement.segments:
        segment.blocks = [name(b) for b in segment.blocks]
    measurement.ops = [o if o.block is None else o.replace(block=name(o.block)) for o in measurement.ops]
    measurement.params = [p if p.block is None else dataclasses.replace(p, block=name(p.block))
                          for p in measurement.params]
    measurement.saved_bytes_by_block = {name(b): v for b, v in measurement.saved_bytes_by_block.items()}
    return measurement


FIRST_LAYERS = BlockPlacement(None, 0, 0)  # type: ignore[arg-type]
"""The placement of operations before the first block: PopTorch's default IPU 0."""

_active: list[BlockTrace] = []


def active_trace() -> BlockTrace | None:
    return _active[-1] if _active else None


class tracing:
    """Make ``trace`` the active block trace while the model runs."""

    def __init__(self, trace: BlockTrace) -> None:
        self.trace = trace

    def __enter__(self) -> BlockTrace:
        _active.append(self.trace)
        return self.trace

    def __exit__(self, *exc: object) -> None:
        _active.pop()


_OVERLAP_ORDER = ("no_overlap", "overlap_accumulation_loop", "overlap_device_iteration_loop")


def record_overlap(kind: str, mode: Any) -> None:
    """``set_overlap_for_input`` (``kind`` "input") or ``_output`` ran with ``mode`` (an
    ``OverlapMode`` or its value) while the model runs: the cost model overlaps those host
    transfers with compute when the IPU has I/O tiles."""
    trace = active_trace()
    value = str(getattr(mode, "value", mode))
    if trace is None or value not in _OVERLAP_ORDER:
        return
    seen = trace.overlap.get(kind)
    if seen is None or _OVERLAP_ORDER.index(value) < _OVERLAP_ORDER.index(seen):
        trace.overlap[kind] = value


def _valid_id(name: str, value: Any, expected: type) -> None:
    assert value is None or isinstance(value, expected) or (isinstance(value, int) and value >= 0), (
        f"{name} must be either a positive integer or a {expected.__name__}")


class Block(torch.nn.Module):
    """Context manager: the operations inside belong to block ``user_id`` on IPU ``ipu_id``."""

    @staticmethod
    def useAutoId() -> None:
        """Restart automatic block ids ("0", "1", ...) for blocks without a user_id."""
        trace = active_trace()
        if trace is not None:
            trace.resolver.reset_auto_id()

    @staticmethod
    def start(user_id: str | None = None, ipu_id: int | None = None) -> None:
        """Start a new block here; it lasts until the next block starts."""
        trace = active_trace()
        if trace is not None:
            trace.begin(user_id, ipu_id)

    def __init__(self, user_id: str | None = None, ipu_id: int | None = None) -> None:
        super().__init__()
        _valid_id("user_id", user_id, str)
        _valid_id("ipu_id", ipu_id, int)
        self._user_id = user_id
        self._ipu_id = ipu_id

    def __enter__(self) -> None:
        trace = active_trace()
        if trace is not None:
            trace.enter(self._user_id, self._ipu_id)

    def __exit__(self, *exc: object) -> None:
        trace = active_trace()
        if trace is not None:
            trace.exit()


class _BlockHook:
    """Forward pre-hook that starts a block when its module runs (what BeginBlock installs)."""

    def __init__(self, user_id: str | None, ipu_id: int | None) -> None:
        self._user_id = user_id
        self._ipu_id = ipu_id
        self._automatic = user_id is None

    def __call__(self, module: torch.nn.Module, inputs: Any) -> None:
        trace = active_trace()
        if trace is not None:
            if self._user_id is None:
                self._user_id = trace.resolver.next_auto_id()
            trace.begin(self._user_id, self._ipu_id, automatic=self._automatic)

    def __repr__(self) -> str:
        return f"BeginBlock(user_id={self._user_id}, ipu_id={self._ipu_id})"


class LegacyBeginBlockFn(torch.nn.Module):
    """BeginBlock applied to a plain callable: calling it starts the block, then calls it."""

    def __init__(self, layer_to_call: Callable, user_id: str | None = None, ipu_id: int | None = None) -> None:
        super().__init__()
        self._layer_to_call = layer_to_call
        self._hook = _BlockHook(user_id, ipu_id)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._hook(self, args)
        return self._layer_to_call(*args, **kwargs)


def BeginBlock(layer_to_call: torch.nn.Module, user_id: str | None = None,
               ipu_id: int | None = None) -> torch.nn.Module:
    """Start block ``user_id`` (on IPU ``ipu_id``) whenever ``layer_to_call`` runs; the layer
    is returned (modified in place)."""
    if not isinstance(layer_to_call, torch.nn.Module):
        if callable(layer_to_call):
            return LegacyBeginBlockFn(layer_to_call, user_id, ipu_id)
        raise Error("module is not an instance of torch.nn.Module or function.")
    if any(isinstance(h, _BlockHook) for h in layer_to_call._forward_pre_hooks.values()):
        raise Error("module has already been assigned to a block.")
    layer_to_call.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return layer_to_call


def BlockFunction(user_id: str | None = None, ipu_id: int | None = None):
    """Decorator: the decorated function's operations belong to the block."""

    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with Block(user_id, ipu_id):
                return func(*args, **kwargs)

        return wrapper

    return decorator


def removeBlocks(module: torch.nn.Module) -> None:
    """Remove every BeginBlock annotation from ``module`` and its submodules."""
    assert isinstance(module, torch.nn.Module)
    for m in module.modules():
        m._forward_pre_hooks = OrderedDict(
            (k, h) for k, h in m._forward_pre_hooks.items() if not isinstance(h, _BlockHook))


__all__ = ["BeginBlock", "Block", "BlockFunction", "BlockTrace", "ModuleSpans", "active_trace", "record_overlap",
           "relabel", "removeBlocks", "tracing"]
