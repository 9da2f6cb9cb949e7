"""Wrapping PopTorch executors and patching ``poptorch``: a wrapped executor's class becomes a
private recording subclass; ``trainingModel`` / ``inferenceModel`` are replaced, once poptorch
is imported, by factories that wrap what they return; :func:`install`, :func:`uninstall` and
:func:`install_from_env` (the bootstrap of ``popviz capture``) start and stop a capture in this
process."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from popviz.capture.block_tracing import BlockTracer
from popviz.capture.hooks import (
    ENV_DIR,
    ENV_INSTANCE,
    FACTORIES,
    RECORDER_ATTR,
    STATE,
    _set_instance,
    _warn,
    instance_from_env,
    recorder_of,
)
from popviz.capture.recorder import Recorder
from popviz.capture.snapshot import _positive_int


# ------------------------------------------------------------------------------ wrapping
def _recording_subclass(cls: type, recorder: Recorder) -> type:
    """A private subclass of the executor's class whose ``__call__`` and ``compile`` record."""
    call = cls.__call__
    perf_counter = time.perf_counter
    compile_ = getattr(cls, "compile", None)
    destroy = getattr(cls, "destroy", None)

    times = recorder.times  # the same list for the executor's life (on_due clears it in place)
    hot = recorder.hot

    def _call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if hot[0]:
            # The fast path: two clock reads and a list append; the rest only when due. With
            # caches cold after a device run, every bytecode here costs (see the benchmark).
            t0 = perf_counter()
            try:
                output = call(self, *args, **kwargs)
            except SystemExit as exc:  # the emulator's --calls stop: the call counts as done
                if getattr(exc, "popviz_call_completed", False):
                    times.append(perf_counter() - t0)
                raise
            t1 = perf_counter()
            times.append(t1 - t0)
            if t1 >= hot[1]:
                try:
                    recorder.on_due(self, args, kwargs, output, t1)
                except Exception as exc:
                    _disable(recorder, exc)
            return output
        rec = recorder
        if rec.disabled:
            return call(self, *args, **kwargs)
        if not _is_compiled(self):
            return _compile_and_run(self, rec, call, args, kwargs, record=True)
        rec.compiled = True  # compiled before it was wrapped
        return _call(self, *args, **kwargs)

    namespace: dict[str, Any] = {"__call__": _call, RECORDER_ATTR: recorder,
                                 "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                                 "__doc__": cls.__doc__}
    if callable(compile_):
        def _compile(self: Any, *args: Any, **kwargs: Any) -> Any:
            if recorder.disabled or recorder.compiled:
                return compile_(self, *args, **kwargs)
            return _compile_and_run(self, recorder, compile_, args, kwargs, record=False)

        namespace["compile"] = _compile
    if callable(destroy):
        def _destroy(self: Any, *args: Any, **kwargs: Any) -> Any:
            with contextlib.suppress(Exception):
                recorder.write(final=True)
            recorder.compiled = False
            return destroy(self, *args, **kwargs)

        namespace["destroy"] = _destroy
    return type(cls.__name__, (cls,), namespace)


def _is_compiled(executor: Any) -> bool:
    fn = getattr(type(executor), "isCompiled", None)
    if fn is None:
        return False
    try:
        return bool(fn(executor))
    except Exception:
        return False


def _compile_and_run(executor: Any, rec: Recorder, fn: Callable[..., Any], args: tuple,
                     kwargs: dict, record: bool) -> Any:
    """Run the call (or ``compile``) that compiles, watching blocks and timing it; count the
    model's FLOPs first (before the device has run, so reading the weights copies nothing back
    from it, and outside the compile's time)."""
    try:
        rec.on_compile_inputs(executor, args, kwargs)
    except KeyboardInterrupt:  # Ctrl-C while the model's forward ran for the count: the compile was under way
        with contextlib.suppress(Exception):
            rec.on_interrupted(executor, 0.0, None, False)
        raise
    except Exception as exc:
        _warn(f"could not count the model's FLOPs ({type(exc).__name__}: {exc}); your program continues")
    tracer = None
    try:
        poptorch = sys.modules.get("poptorch")
        tracer = BlockTracer(poptorch, rec.model).__enter__()
    except Exception:
        tracer = None
    t0 = time.perf_counter()
    try:
        output = fn(executor, *args, **kwargs)
    except BaseException as exc:
        if tracer is not None:
            tracer.__exit__(None, None, None)
            rec.traced_blocks = tracer.ordered()  # what was traced before the failure
            rec.first_layers = tracer.first_layers  # layers before the first block: on IPU 0
        if getattr(exc, "popviz_call_completed", False) and _is_compiled(executor):
            # the emulator's --calls stop right after compiling: compiled, and the call counts
            with contextlib.suppress(Exception):
                rec.on_compiled(executor, time.perf_counter() - t0, tracer)
                if record:
                    rec.on_call(executor, args, kwargs, None, None)
            raise
        with contextlib.suppress(Exception):
            if isinstance(exc, KeyboardInterrupt):  # Ctrl-C: not a failed compile
                rec.on_interrupted(executor, time.perf_counter() - t0, tracer, _is_compiled(executor))
            else:
                rec.on_compile_error(exc)
        raise
    seconds = time.perf_counter() - t0
    if tracer is not None:
        tracer.__exit__(None, None, None)
    try:
        rec.on_compiled(executor, seconds, tracer)
        if record:
            rec.on_call(executor, args, kwargs, output, None)
        else:
            rec.write()
    except Exception as exc:
        _disable(rec, exc)
    return output


def _disable(rec: Recorder, exc: BaseException) -> None:
    rec.disabled = True
    _warn(f"internal error while recording engine {rec.engine!r} ({type(exc).__name__}: {exc}); "
          "recording of this executor stopped, your program continues (please report this)")


def wrap_executor(executor: Any, mode: str | None = None, root: str | None = None) -> Any:
    """Wrap ``executor`` (idempotent) so its calls are recorded; return it.

    ``root`` is the report directory; None means the active capture's directory.
    """
    if recorder_of(executor) is not None:
        return executor
    if mode is None:
        training = getattr(executor, "__dict__", {}).get("_training")
        mode = None if training is None else ("training" if training else "inference")
    recorder = Recorder(executor, mode, root, instance=None)
    dist = recorder.opts["distributed"]
    instance = instance_from_env() if not STATE.instance_fixed else None
    if instance is None and _positive_int(dist.get("num_processes")) and dist["num_processes"] > 1:
        pid = dist.get("process_id")
        instance = f"instance-{pid}" if isinstance(pid, int) else None
    if root is not None:
        recorder.instance = instance
    elif instance is not None:
        _set_instance(instance)
    cls = type(executor)
    object.__setattr__(executor, "__class__", _recording_subclass(cls, recorder))
    with STATE.lock:
        STATE.recorders.append(recorder)
        engine_dir = recorder.engine_dir()
        if engine_dir is not None:
            file = os.path.join(engine_dir, "popviz-model.json")
            recorder.path = file
            STATE.executors_per_engine[file] = STATE.executors_per_engine.get(file, 0) + 1
            owner = STATE.engines.get(file)
            if owner is None or not owner.compiled:
                STATE.engines[file] = recorder  # else it takes over when it compiles
    _ensure_atexit()
    recorder.write()
    return executor


def flush(final: bool = False) -> None:
    """Write every recorder's manifest now."""
    for rec in list(STATE.recorders):
        with contextlib.suppress(Exception):
            rec.write(final=final)


def _ensure_atexit() -> None:
    if not STATE.atexit_registered:
        atexit.register(flush, True)
        STATE.atexit_registered = True
        _flush_on_sigterm()


def _flush_on_sigterm() -> None:
    """SIGTERM skips atexit: when the program leaves SIGTERM at its default, write the manifests
    (current call counts) first, then die of SIGTERM as before."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return

        def on_term(signo: int, _frame: Any) -> None:
            flush(True)
            signal.signal(signo, signal.SIG_DFL)
            os.kill(os.getpid(), signo)

        signal.signal(signal.SIGTERM, on_term)


# ------------------------------------------------------------------------------ patching

def _make_factory(original: Callable[..., Any], mode: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def factory(*args: Any, **kwargs: Any) -> Any:
        executor = original(*args, **kwargs)
        if STATE.root is not None:
            try:
                wrap_executor(executor, mode=mode)
            except Exception as exc:
                _warn(f"could not wrap the {mode} executor ({type(exc).__name__}: {exc}); "
                      "your program continues without popviz recording it")
        return executor

    factory.__popviz_original__ = original  # type: ignore[attr-defined]
    return factory


def patch_poptorch(module: Any) -> None:
    """Replace the module's executor factories by recording ones (idempotent)."""
    for name, mode in FACTORIES.items():
        current = getattr(module, name, None)
        if current is None or getattr(current, "__popviz_original__", None) is not None:
            continue
        with contextlib.suppress(Exception):
            setattr(module, name, _make_factory(current, mode))


def unpatch_poptorch(module: Any) -> None:
    for name in FACTORIES:
        current = getattr(module, name, None)
        original = getattr(current, "__popviz_original__", None)
        if original is not None:
            with contextlib.suppress(Exception):
                setattr(module, name, original)


class _PatchingLoader:
    """Runs the real loader, then patches the module (and hands the module its real loader)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        with contextlib.suppress(Exception):
            module.__loader__ = self.loader
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        if STATE.root is not None:
            patch_poptorch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


class PoptorchFinder:
    """Patches ``poptorch`` when the program imports it (a meta path hook: finds the module
    with the other finders, wraps its loader)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "poptorch":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            try:
                spec = finder.find_spec(fullname, path, target)
            except Exception:
                continue
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _PatchingLoader(spec.loader)
            return spec
        return None


def install(root: str, *, owner: str, instance: str | None = None,
            instance_fixed: bool = False) -> None:
    """Start capturing into ``root``: patch poptorch now if imported, else when it is."""
    with STATE.lock:
        STATE.root = root
        STATE.owner = owner
        STATE.instance = instance
        STATE.instance_fixed = instance_fixed
        if STATE.finder is None:
            STATE.finder = PoptorchFinder()
            sys.meta_path.insert(0, STATE.finder)
        module = sys.modules.get("poptorch")
        if module is not None:
            patch_poptorch(module)
        _ensure_atexit()


def uninstall() -> None:
    """Stop capturing new executors (wrapped ones keep recording and are flushed)."""
    with STATE.lock:
        flush(final=True)
        for rec in STATE.recorders:
            # Executors captured (not wrapped) that outlive the capture stop recording: they
            # would otherwise write into a later capture of the same process (e.g. the next
            # test's popviz_capture fixture).
            if rec.explicit_root is None:
                rec.disabled = True
        if STATE.finder is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(STATE.finder)
            STATE.finder = None
        module = sys.modules.get("poptorch")
        if module is not None:
            unpatch_poptorch(module)
        STATE.root = None
        STATE.owner = None
        STATE.instance = None
        STATE.instance_fixed = False


def install_from_env() -> bool:
    """Called by the bootstrap ``sitecustomize`` of a ``popviz capture`` child: capture into
    ``$POPVIZ_CAPTURE_DIR``. Returns False when that variable is not set."""
    root = os.environ.get(ENV_DIR)
    if not root:
        return False
    fixed = os.environ.get(ENV_INSTANCE) or None
    if fixed:
        install(root, owner="env", instance=fixed, instance_fixed=True)
        return True
    instance = instance_from_env()
    install(root, owner="env", instance=None)
    if instance is not None:
        _set_instance(instance)
    return True
