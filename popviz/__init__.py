"""popviz: profile and analyse PopTorch models on Graphcore IPUs.

The notebook-facing surface. Importing popviz is cheap: heavy modules (pandas, pyarrow,
matplotlib, torch, pva) load only when a function needs them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from popviz.capture.api import CaptureRun
    from popviz.model import ReportSet


def load(path: str | os.PathLike[str]) -> ReportSet:
    """Every engine under ``path`` (report directory, engine directory or bundle) as a ReportSet.

    >>> reports = popviz.load("popviz-reports/run1")
    >>> reports["training"].memory.per_ipu()
    """
    from popviz.sources.discover import load as _load

    return _load(path)


def capture(report_dir: str | os.PathLike[str] | None = None, *, new_run: bool = False,
            run_count: int | None = None, pvti: bool = False) -> AbstractContextManager[CaptureRun]:
    """Profile the PopTorch executors created inside a ``with`` block.

    >>> with popviz.capture("reports/run1") as run:
    ...     model = poptorch.trainingModel(net, opts, optimizer)
    ...     for x, y in loader:
    ...         model(x, y)
    >>> run.load()["training"].config.stages

    Like ``popviz capture -o DIR``: ``report_dir`` (default ``popviz-reports/<timestamp>``) must
    be new or empty unless ``new_run=True`` (a timestamped run inside it). For the block,
    ``POPLAR_ENGINE_OPTIONS`` gets autoReport into the directory (your own keys win and are
    reported), and every executor created is wrapped as by :func:`wrap`; on exit the manifests
    are written and the environment restored. Executors must compile (first call) inside the
    block for Poplar to write their profile. Inside another capture (or a program run by
    ``popviz capture``) the block joins the running capture.
    """
    from popviz.capture.api import capture as _capture

    return _capture(report_dir, new_run=new_run, run_count=run_count, pvti=pvti)


def wrap(executor: Any, report_dir: str | os.PathLike[str] | None = None) -> Any:
    """Record a PopTorch executor's options, stages, host tensors and call timings.

    >>> model = popviz.wrap(poptorch.trainingModel(net, opts, optimizer))

    Writes ``<report_dir>/<engine>/popviz-model.json`` (beside Poplar's ``profile.pop``), which
    :func:`load` merges into the engine's Report. ``report_dir`` defaults to the running
    capture's directory, else Poplar's ``autoReport.directory``. Returns the same executor (its
    class becomes a recording subclass); wrapping twice is harmless.
    """
    from popviz.capture.api import wrap as _wrap

    return _wrap(executor, report_dir)


__all__ = ["__version__", "capture", "load", "wrap"]
