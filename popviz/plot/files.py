"""A report's figures drawn into files (``popviz plot``), on as many processes as there are
figures and usable cores: matplotlib draws on one core, and a POD64 report's seven figures are
seconds of drawing and PNG encoding, against the report's load.

Worker processes are forked once the report is read, so they share its tables with the parent
(copy on write) and read nothing again; each draws whole figures and writes each file as
``popviz.fileio.write_output`` does (complete, then linked into place). Workers are used on Linux
only: elsewhere (macOS's system libraries are not safe to use after a fork; Windows has none), and
with ``jobs=1``, the figures are drawn in this process, in order.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from popviz.plot._style import PlotDataError

if TYPE_CHECKING:
    from popviz.model import Report

MAX_JOBS = 4
"""At most this many drawing processes (each holds a figure's canvas; more rarely pays)."""

COST = {"timeline": 4, "tiles": 3, "stages": 3, "memory": 3, "breakdown": 2, "liveness": 1, "host_io": 1}
"""Rough relative drawing cost of each figure at POD scale (the longest are started first)."""

_JOB: dict[str, Any] = {}


def usable_cores() -> int:
    """Cores this process may run on (its affinity, where the OS says)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_jobs(n_figures: int) -> int:
    """Processes for ``n_figures`` figures: one per usable core, at most MAX_JOBS and the figures."""
    return max(1, min(usable_cores(), MAX_JOBS, n_figures))


def _draw_one(report: Report, name: str, target: Path, fmt: str, dpi: int, force: bool) -> PlotDataError | None:
    from popviz.fileio import write_output
    from popviz.plot import _DRAW

    try:
        fig = _DRAW[name](report)
    except PlotDataError as exc:
        return exc
    write_output(target, lambda fh: fig.savefig(fh, format=fmt, dpi=dpi), force)
    return None


def _worker_start() -> None:
    """In each forked worker: Ctrl-C is the parent's to handle (it stops the workers), and a
    worker whose parent is killed is ended too (Linux's parent-death signal). SIGTERM ends a
    worker through an exception, so the file it was writing removes its temporary file."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != _JOB.get("parent"):  # the parent died before the signal was set
            os._exit(1)
    except (OSError, AttributeError):
        pass


def _worker_draw(name: str) -> PlotDataError | None:
    try:
        return _draw_one(_JOB["report"], name, _JOB["targets"][name], _JOB["fmt"], _JOB["dpi"], _JOB["force"])
    except SystemExit as stop:  # SIGTERM: the temporary file is gone already; end here, not in the pool's loop
        os._exit(stop.code if isinstance(stop.code, int) else 1)


def write_figures(report: Report, targets: Mapping[str, Path], *, fmt: str = "png", dpi: int = 110,
                  force: bool = False, jobs: int | None = None,
                  on_done: Callable[[str, PlotDataError | None], None] | None = None
                  ) -> list[tuple[str, PlotDataError | None]]:
    """Draw figure ``name`` of ``report`` into ``targets[name]`` for each (in that order), on
    ``jobs`` processes (None: :func:`default_jobs`). Returns, in the order of ``targets``, each
    name with None (written) or the PlotDataError saying why it was not drawn; ``on_done`` is
    called the same way as soon as each result is known in that order. A failure to write (a full
    disk, a file that appeared meanwhile) is raised once every other figure has finished, so the
    files that were written are all reported first."""
    names = list(targets)
    jobs = default_jobs(len(names)) if jobs is None else max(1, min(jobs, len(names) or 1))
    results: list[tuple[str, PlotDataError | None]] = []

    def done(name: str, result: PlotDataError | None) -> None:
        results.append((name, result))
        if on_done is not None:
            on_done(name, result)

    if jobs == 1 or not sys.platform.startswith("linux"):  # fork is unsafe on macOS; no fork on Windows
        for name in names:
            done(name, _draw_one(report, name, Path(targets[name]), fmt, dpi, force))
        return results
    _forked(report, {n: Path(targets[n]) for n in names}, fmt, dpi, force, jobs, done)
    return results


def _forked(report: Report, targets: dict[str, Path], fmt: str, dpi: int, force: bool, jobs: int,
            done: Callable[[str, PlotDataError | None], None]) -> None:
    import concurrent.futures
    import multiprocessing

    import matplotlib.figure  # noqa: F401 - imported once, before the fork, for every worker
    from matplotlib.backends import backend_agg  # noqa: F401

    _JOB.update(report=report, targets=targets, fmt=fmt, dpi=dpi, force=force, parent=os.getpid())
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"),
                                                  initializer=_worker_start)
    failure: BaseException | None = None
    try:
        order = sorted(targets, key=lambda n: -COST.get(n, 1))
        futures = {name: pool.submit(_worker_draw, name) for name in order}
        for name in targets:  # results in the caller's order
            try:
                result = futures[name].result()
            except concurrent.futures.process.BrokenProcessPool:
                from popviz.errors import UsageError

                raise UsageError(f"the process drawing the {name} figure ended without a result "
                                   "(out of memory?); rerun with --jobs 1") from None
            except Exception as exc:  # a write failure: raised after the others finish
                failure = failure or exc
                continue
            done(name, result)
    except BaseException:
        for process in list(getattr(pool, "_processes", {}).values()):
            process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        _JOB.clear()
    pool.shutdown(wait=True)
    if failure is not None:
        raise failure
