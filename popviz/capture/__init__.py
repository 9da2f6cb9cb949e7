"""Capture: run a PopTorch program with profiling on and record what Poplar's profile does not say.

``popviz.capture`` is this package, and it is callable: ``with popviz.capture(dir): ...``
captures the executors created in the block (see :meth:`CaptureModule.__call__`).

* :mod:`popviz.capture.launcher` — ``popviz capture -- CMD``: the child process, its output and
  log, the run's summary; :mod:`popviz.capture.childenv` its environment (engine options,
  bootstrap); :mod:`popviz.capture.rundir` the run directory and manifest ``popviz-run.json``;
* :mod:`popviz.capture.patching` — wraps ``poptorch.trainingModel`` / ``inferenceModel``
  executors; :mod:`popviz.capture.recorder` writes each engine's ``popviz-model.json`` from what
  :mod:`~popviz.capture.snapshot` and :mod:`~popviz.capture.block_tracing` record;
  :mod:`popviz.capture.hooks` holds what they share (capture state, per-call statistics);
* :mod:`popviz.capture.api` — what ``popviz.capture(dir)`` and ``popviz.wrap(executor)`` run.

Importing this package imports nothing else: the bootstrap of every captured Python process
goes through it.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import os
    from contextlib import AbstractContextManager

    from popviz.capture.api import CaptureRun


class CaptureModule(types.ModuleType):
    """The ``popviz.capture`` package, callable as the capture context manager (a package and a
    function cannot share the name ``popviz.capture`` otherwise)."""

    def __call__(self, report_dir: str | os.PathLike[str] | None = None, *, new_run: bool = False,
                 run_count: int | None = None, pvti: bool = False) -> AbstractContextManager[CaptureRun]:
        """Profile the PopTorch executors created inside a ``with`` block.

        >>> with popviz.capture("reports/run1") as run:
        ...     model = poptorch.trainingModel(net, opts, optimizer)
        ...     for x, y in loader:
        ...         model(x, y)
        >>> run.load()["training"].config.stages

        Like ``popviz capture -o DIR``: ``report_dir`` (default ``popviz-reports/<timestamp>``)
        must be new or empty unless ``new_run=True`` (a timestamped run inside it). For the
        block, ``POPLAR_ENGINE_OPTIONS`` gets autoReport into the directory (your own keys win
        and are reported), and every executor created is wrapped as by :func:`popviz.wrap`; on
        exit the manifests are written and the environment restored. Executors must compile
        (first call) inside the block for Poplar to write their profile. Inside another capture
        (or a program run by ``popviz capture``) the block joins the running capture.
        """
        from popviz.capture.api import capture

        return capture(report_dir, new_run=new_run, run_count=run_count, pvti=pvti)

    def __repr__(self) -> str:
        return "<popviz.capture: module and context manager popviz.capture(report_dir)>"


sys.modules[__name__].__class__ = CaptureModule
