"""Functions the package face installs so that a lower layer can call an upper one without
importing it (docs/architecture.md). ``popviz/__init__.py`` sets them when popviz is imported,
which Python does before any popviz module runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

analysis_metrics: Callable[[Any, str], dict[str, Any]] | None = None
"""``(report, analysis name) -> that analysis's metrics of the report``: what the figure tables
of :mod:`popviz.model.frames` are built from, where an analysis computes the figure."""
