"""popviz: profile and analyse PopTorch models on Graphcore IPUs.

The notebook-facing surface. Importing popviz is cheap: heavy modules (pandas, pyarrow,
matplotlib, torch, pva) load only when a function needs them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

# ``popviz.capture`` is the capture package, callable as a context manager:
# ``with popviz.capture("dir"): ...`` (see popviz/capture/__init__.py).
from popviz import _hooks, capture
from popviz._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from popviz.analysis.findings import Result
    from popviz.model import Report, ReportSet


def load(path: str | os.PathLike[str]) -> ReportSet:
    """Every engine under ``path`` (report directory, engine directory or bundle) as a ReportSet.

    >>> reports = popviz.load("popviz-reports/run1")
    >>> reports["training"].memory.per_ipu()
    """
    from popviz.sources.discover import load as _load

    return _load(path)


def analyse(reports: Report | ReportSet | str | os.PathLike[str],
            only: Sequence[str] | None = None) -> Result:
    """Run the analyses (all, or those named in ``only``) on a Report, a ReportSet or the report
    directory a path names (loaded with :func:`load`).

    >>> result = popviz.analyse("sample_reports/mnist_pipeline")
    >>> result            # in Jupyter: summary, findings and figures
    """
    from popviz.analysis import analyse as _analyse
    from popviz.model import Report as _Report
    from popviz.model import ReportSet as _ReportSet

    if isinstance(reports, (str, os.PathLike)):
        reports = load(reports)
    if isinstance(reports, _Report):
        reports = _ReportSet([reports])
    if not isinstance(reports, _ReportSet):
        raise TypeError(f"popviz.analyse takes a Report, a ReportSet or a report directory's path, "
                        f"not {type(reports).__name__}")
    return _analyse(reports, only=only)


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


def _analysis_metrics(report: Report, analysis: str) -> dict[str, Any]:
    """The metrics of one analysis of ``report``: what the model's figure tables are built from."""
    from popviz.analysis import registry

    return registry()[analysis](report).metrics


# The model's figure tables (below the analyses) get their metrics through this hook, not by
# importing the analyses (docs/architecture.md).
_hooks.analysis_metrics = _analysis_metrics

__all__ = ["__version__", "analyse", "capture", "load", "wrap"]


def __dir__() -> list[str]:
    """Only the public API (``dir(popviz)``, tab completion)."""
    return sorted(__all__)


del annotations, TYPE_CHECKING
