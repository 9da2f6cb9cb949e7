"""popviz: profile and analyse PopTorch models on Graphcore IPUs.

The notebook-facing surface. Importing popviz is cheap: heavy modules (pandas, pyarrow,
matplotlib, torch, pva) load only when a function needs them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from popviz.model import ReportSet


def load(path: str | os.PathLike[str]) -> ReportSet:
    """Every engine under ``path`` (report directory, engine directory or bundle) as a ReportSet.

    >>> reports = popviz.load("popviz-reports/run1")
    >>> reports["training"].memory.per_ipu()
    """
    from popviz.sources.discover import load as _load

    return _load(path)


__all__ = ["__version__", "load"]
