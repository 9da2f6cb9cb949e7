"""What a run ran on — Poplar SDK, popviz, PopTorch, torch, Python, IPU architecture, host — as a
small ``{field: value}`` table that baselines, compare and the history keep beside each engine's
metrics, so ``compare`` can say what changed beside its verdict and ``history show`` can mark the
runs where it changed (a new SDK explains a step as often as a code change does).

One definition for all of them: :func:`popviz.ci.diff.environment` reads it from the report's
provenance and target and from the capture's run record (``popviz-run.json``: the host). A field
nothing recorded is left out: unknown is not a change."""

from __future__ import annotations

from typing import Any

from popviz.ci.diff import ENVIRONMENT_FIELDS as FIELDS

__all__ = ["FIELDS", "changes", "of_report"]


def of_report(report: Any) -> dict[str, str]:
    """The environment of one engine's report (fields nothing recorded are left out)."""
    from popviz.ci.diff import environment

    record = None
    if getattr(report, "path", None):
        from popviz.sources.runrecord import record_of

        try:
            record = record_of(report.path)
        except (OSError, ValueError):
            record = None
    return environment(report, record)


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """``Poplar SDK 3.2.0 → 3.3.0`` for every field both runs recorded and that differs."""
    return [f"{label} {before[k]} → {after[k]}" for k, label in FIELDS.items()
            if k in before and k in after and before[k] != after[k]]
