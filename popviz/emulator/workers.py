"""Host cost of an estimate: DataLoader workers capped, and the script's processes ended when
the emulator stops it.

An estimate-only run (``--calls N``, ``POPVIZ_EMULATOR_CALLS``) needs N batches per executor,
yet a script's DataLoaders start 16-64 worker processes that each build ``prefetch_factor`` (2)
full D·G·R batches ahead. In an emulated process (the ``poptorch`` shim calls :func:`install`)
every ``torch.utils.data.DataLoader`` made while a call limit is set, ``poptorch.DataLoader``
included, is capped: with ``--calls 1`` it loads in the script's own process (``num_workers``
0: the one batch the first call needs is built when the script asks for it, nothing ahead);
with ``--calls N`` it keeps at most N workers, one batch ahead each. One line on stderr says
so. A loader with no more workers than that is left as it is. (With no worker processes a
``worker_init_fn`` is not called and ``get_worker_info()`` is None, as in any single-process
DataLoader.)

When the emulator stops the script (:func:`end_descendants`, called as the last allowed call is
estimated) every process the script started and that still runs, DataLoader workers and
anything else, gets SIGTERM, then SIGKILL after :data:`GRACE_SECONDS`: none is left behind
holding memory or the capture's output pipe.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import time
from typing import Any

from popviz.emulator.progress import line

GRACE_SECONDS = 2.0
"""How long the script's processes have to exit after SIGTERM before SIGKILL."""

_state: dict[str, Any] = {"installed": False, "said": False, "armed": False}


def worker_cap(limit: int) -> int:
    """Most DataLoader workers an estimate of ``limit`` calls keeps."""
    return 0 if limit <= 1 else limit


def _capped_init(original: Any) -> Any:
    signature = inspect.signature(original)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        from popviz.emulator import calls

        most = calls.limit()
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            return original(self, *args, **kwargs)  # torch's own error for the bad arguments
        requested = bound.arguments.get("num_workers", 0)
        if most is None or not isinstance(requested, int) or requested <= worker_cap(most):
            return original(self, *args, **kwargs)
        cap = worker_cap(most)
        bound.arguments["num_workers"] = cap
        if cap == 0:
            for name in ("prefetch_factor", "multiprocessing_context"):
                if name in bound.arguments:
                    bound.arguments[name] = None
            if "persistent_workers" in bound.arguments:
                bound.arguments["persistent_workers"] = False
        else:
            bound.arguments["prefetch_factor"] = 1
        if not _state["said"]:
            _state["said"] = True
            where = ("loads in the script's process (num_workers 0)" if cap == 0 else
                     f"keeps {cap} worker(s), one batch ahead each")
            line(f"--calls {most}: a DataLoader with num_workers={requested} {where}: an estimate needs "
                 f"{most} batch(es); later DataLoaders likewise")
        original(*bound.args, **bound.kwargs)

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    __init__.__doc__ = original.__doc__
    return __init__


def install() -> None:
    """Cap DataLoader workers in this process while a call limit is set (once)."""
    if _state["installed"]:
        return
    import torch.utils.data

    _state["installed"] = True
    _state["armed"] = True
    cls = torch.utils.data.DataLoader
    _state["original"] = cls.__init__
    cls.__init__ = _capped_init(cls.__init__)  # type: ignore[method-assign]


def uninstall() -> None:
    """Put back torch's DataLoader (tests)."""
    if not _state["installed"]:
        return
    import torch.utils.data

    torch.utils.data.DataLoader.__init__ = _state.pop("original")  # type: ignore[method-assign]
    _state.update(installed=False, said=False, armed=False)


def descendants(pid: int | None = None) -> list[int]:
    """Every living process below ``pid`` (this process by default), children first; empty
    where ``/proc`` cannot be read."""
    root = os.getpid() if pid is None else pid
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) < 2 or fields[0] == b"Z":
            continue  # a zombie holds nothing
        parents.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(0), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def end_descendants(grace: float = GRACE_SECONDS) -> list[int]:
    """SIGTERM every process this one started (and theirs), SIGKILL those still there after
    ``grace`` seconds; returns the pids signalled. Only in an emulated process (after
    :func:`install`): a script run in-process by a test is left alone."""
    if not _state["armed"]:
        return []
    pids = descendants()
    if not pids:
        return []
    # torch's SIGCHLD handler would turn a worker ended here into "DataLoader worker (pid X)
    # exited unexpectedly" in the script, which is stopping anyway
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not [p for p in pids if _alive(p)]:
            break
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    line(f"ended {len(pids)} process(es) the script started (DataLoader workers and the like), so none "
         "is left running")
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] != b"Z"  # a zombie is reaped by its parent's join


__all__ = ["GRACE_SECONDS", "descendants", "end_descendants", "install", "uninstall", "worker_cap"]
