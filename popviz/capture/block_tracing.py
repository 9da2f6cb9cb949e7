"""Which blocks the forward pass of a captured executor enters (``Block``, ``Block.start``,
``BeginBlock``), with the parameters of the modules run inside each: the stages of a model whose
Options do not list them."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from popviz.capture.snapshot import _attr, _begin_block_hook, _hook_is_automatic, _params_of


class BlockTracer:
    """While the executor compiles: which blocks the forward pass enters, in order, and which
    parameters the modules run inside each own. Watches ``poptorch.Block`` (context manager and
    ``Block.start``) and BeginBlock markers through a global module forward pre-hook."""

    active = 0
    """Tracers entered and not yet exited in this process (a compile inside a call's compile)."""

    def __init__(self, poptorch: Any, root_model: Any) -> None:
        self.poptorch = poptorch
        self.root = root_model
        self.blocks: dict[str, dict[str, Any]] = {}
        self.automatic: set[str] = set()
        """Ids PopTorch made (blocks without a user_id): named by their modules."""
        self.spans: dict[str, set[str | None]] = {}
        """Module path -> the blocks current while it ran (:mod:`popviz.block_names`)."""
        self._open: list[set[str | None]] = []
        self._paths: dict[int, str] = {}
        self.current: str | None = None
        self.auto_id = 0
        self.seen_params: set[int] = set()
        self.first_layers = False
        """Whether a leaf module (or one with its own parameters) ran before the first block of
        a pass: PopTorch places those first layers on IPU 0 (user guide, overview.rst)."""
        self.entered = False
        self.in_enter = False
        self.depth = 0
        """Module forwards running now: 0 between passes. Each pass (the emulator runs one per
        micro-batch) restarts the numbering of unnamed blocks, so a block is recorded once."""
        self._undo: list[Callable[[], None]] = []

    def _enter(self, user_id: Any, ipu_id: Any, automatic: bool = False) -> None:
        if user_id is None:
            user_id = str(self.auto_id)
            self.auto_id += 1
            automatic = True
        name = str(user_id)
        if automatic:
            self.automatic.add(name)
        for blocks in self._open:
            blocks.add(name)
        block = self.blocks.setdefault(name, {"name": name, "ipu": None, "parameters": 0,
                                              "parameter_bytes": 0, "modules": 0})
        if isinstance(ipu_id, int) and block["ipu"] is None:
            block["ipu"] = ipu_id
        self.current = name
        self.entered = True

    def _post_hook(self, _module: Any, _inputs: Any, _output: Any) -> None:
        self.depth = max(0, self.depth - 1)
        if self._open:
            self._open.pop()

    def _span(self, module: Any) -> None:
        """Record that ``module`` runs now, in the current block (its own BeginBlock started)."""
        path = self._paths.get(id(module))
        blocks = self.spans.setdefault(path, set()) if path is not None else set()
        blocks.add(self.current)
        self._open.append(blocks)

    def _pre_hook(self, module: Any, _inputs: Any) -> None:
        top = self.depth == 0
        self.depth += 1
        if top:
            self._open.clear()
        spanned = len(self._open)
        try:
            if module is self.root or top:
                self.auto_id = 0
                self.current = None
                self.entered = False
            hook = _begin_block_hook(module)
            if hook is not None:
                user_id = getattr(hook, "_user_id", None)
                self._enter(user_id, getattr(hook, "_ipu_id", None),
                            automatic=user_id is not None and _hook_is_automatic(hook))
            self._span(module)
            if self.current is None:
                if not self.entered and module is not self.root and not top and (
                        next(module.children(), None) is None
                        or next(module.parameters(recurse=False), None) is not None):
                    self.first_layers = True
                return
            block = self.blocks[self.current]
            # the emulator's fake-tensor trace runs with fakes of the parameters: count the real one
            fresh = [p for p in module.parameters(recurse=False)
                     if id(getattr(p, "popviz_real_tensor", p)) not in self.seen_params]
            if fresh:
                self.seen_params.update(id(getattr(p, "popviz_real_tensor", p)) for p in fresh)
                n, b = _params_of(fresh)
                block["parameters"] += n
                block["parameter_bytes"] += b
                block["modules"] += 1
        except Exception:  # never disturb the trace
            if len(self._open) == spanned:
                self._open.append(set())

    def _patch_block_class(self, block_cls: type) -> None:
        tracer = self
        original_start = block_cls.__dict__.get("start")
        if isinstance(original_start, (staticmethod, classmethod)):
            func = original_start.__func__
            is_static = isinstance(original_start, staticmethod)

            def start_body(call: Callable[[], Any], user_id: Any, ipu_id: Any) -> Any:
                if not tracer.in_enter:
                    tracer._enter(user_id, ipu_id)
                return call()

            if is_static:
                def start(user_id: Any = None, ipu_id: Any = None, *a: Any, **k: Any) -> Any:
                    return start_body(lambda: func(user_id, ipu_id, *a, **k), user_id, ipu_id)
                block_cls.start = staticmethod(start)
            else:
                def start_cm(cls: type, user_id: Any = None, ipu_id: Any = None, *a: Any,
                             **k: Any) -> Any:
                    return start_body(lambda: func(cls, user_id, ipu_id, *a, **k), user_id, ipu_id)
                block_cls.start = classmethod(start_cm)
            self._undo.append(lambda: setattr(block_cls, "start", original_start))
        original_enter = block_cls.__dict__.get("__enter__")
        if callable(original_enter):
            def enter(block_self: Any, *a: Any, **k: Any) -> Any:
                user_id = getattr(block_self, "_user_id", getattr(block_self, "user_id", None))
                ipu_id = getattr(block_self, "_ipu_id", getattr(block_self, "ipu_id", None))
                tracer._enter(user_id, ipu_id)
                tracer.in_enter = True
                try:
                    return original_enter(block_self, *a, **k)
                finally:
                    tracer.in_enter = False

            block_cls.__enter__ = enter
            self._undo.append(lambda: setattr(block_cls, "__enter__", original_enter))
        original_exit = block_cls.__dict__.get("__exit__")
        if callable(original_exit):
            def exit_(block_self: Any, *a: Any, **k: Any) -> Any:
                tracer.current = None
                return original_exit(block_self, *a, **k)

            block_cls.__exit__ = exit_
            self._undo.append(lambda: setattr(block_cls, "__exit__", original_exit))

    def __enter__(self) -> BlockTracer:
        BlockTracer.active += 1
        self._undo.append(self._leave)
        try:
            return self._watch()
        except BaseException:  # nothing stays patched, and the count of tracers stays right
            self.__exit__(None, None, None)
            raise

    def _watch(self) -> BlockTracer:
        with contextlib.suppress(Exception):
            self._paths = {id(m): path for path, m in self.root.named_modules()}
        block_cls = getattr(self.poptorch, "Block", None)
        if isinstance(block_cls, type):
            self._patch_block_class(block_cls)
        torch = sys.modules.get("torch")
        register = _attr(torch, "nn", "modules", "module", "register_module_forward_pre_hook")
        register_post = _attr(torch, "nn", "modules", "module", "register_module_forward_hook")
        if register is not None and register_post is not None:
            try:
                post = register_post(self._post_hook, always_call=True)
            except TypeError:  # torch without always_call
                post = register_post(self._post_hook)
            self._undo.append(post.remove)
            handle = register(self._pre_hook)
            self._undo.append(handle.remove)
        return self

    @staticmethod
    def _leave() -> None:
        BlockTracer.active = max(0, BlockTracer.active - 1)

    def __exit__(self, *exc: Any) -> None:
        for undo in reversed(self._undo):
            with contextlib.suppress(Exception):
                undo()
        self._undo.clear()

    def ordered(self) -> list[dict[str, Any]]:
        """The blocks in order of first start: ``name`` (the display name: the user_id, else the
        modules, e.g. ``layers.0-2``) and, where it differs, ``id`` (PopTorch's automatic id,
        what ``Stage(...)`` names)."""
        from popviz.block_names import display_names

        names = display_names(list(self.blocks), self.automatic, self.spans)
        return [{**b, "name": names[k], **({"id": k} if names[k] != k else {})}
                for k, b in self.blocks.items()]
