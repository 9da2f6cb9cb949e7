"""Which reports are instances of one PopRun/PopDist run, and of which run (the layout
``popviz capture`` writes, or the ranks the options recorded): what the ``instances`` check
groups by and what other analyses and views ask of one report.
"""

from __future__ import annotations

from popviz.model import Report
from popviz.model.names import INSTANCE_DIR


def is_instance(report: Report) -> bool:
    """True when ``report`` is one instance of a multi-instance (PopRun) run: its directory follows
    the instance layout, or its capture recorded a rank among several processes. Other
    subdirectories (``popviz-reports/<run>``, ``sample_reports/<model>``) are separate runs."""
    if not report.instance:
        return False
    last = report.instance.rsplit("/", 1)[-1]
    return bool(INSTANCE_DIR.fullmatch(last)) or num_instances(report) is not None


def num_instances(report: Report) -> int | None:
    """The instances of the run this report's process belongs to, as its options recorded them
    (``Distributed.numProcesses``: popdist.poptorch.Options sets it), or None."""
    dist = report.cfg.options.get("distributed") if report.has("config") else None
    n = dist.get("num_processes") if isinstance(dist, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else None


def run_of(report: Report) -> str | None:
    """The run a report belongs to: its directory for a separate run, the parent of the instance
    directories for a PopRun instance (None for the root run)."""
    if not report.instance:
        return None
    if is_instance(report):
        head = report.instance.rsplit("/", 1)
        return head[0] if len(head) == 2 else None
    return report.instance


__all__ = ["INSTANCE_DIR", "is_instance", "num_instances", "run_of"]
