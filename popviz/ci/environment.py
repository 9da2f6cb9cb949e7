"""What a run ran on — Poplar SDK, popviz, PopTorch, torch, IPU architecture, host — as a small
``{field: value}`` table a history keeps beside each engine's metrics, so ``history show`` can
mark the runs where it changed (a new SDK explains a step as often as a code change does).

Read from what the report already says: its provenance's versions (the capture hooks' manifest,
libpva's Poplar version), its target, and the capture's run record (``popviz-run.json``) for the
host. A field nothing recorded is left out: unknown is not a change."""

from __future__ import annotations

from typing import Any

FIELDS = {"poplar_sdk": "Poplar SDK", "popviz": "popviz", "poptorch": "PopTorch", "torch": "torch",
          "ipu": "IPU", "host": "host"}
"""Field -> how a message names it, in the order it lists them."""


def of_report(report: Any) -> dict[str, str]:
    """The environment of one engine's report (fields nothing recorded are left out)."""
    versions = dict(getattr(report.provenance, "versions", {}) or {})
    out: dict[str, str] = {}
    sdk = versions.get("poplar_sdk") or versions.get("poplar")
    for key, value in (("poplar_sdk", sdk), ("popviz", versions.get("popviz")),
                       ("poptorch", versions.get("poptorch")), ("torch", versions.get("torch"))):
        if value:
            out[key] = str(value)[:200]
    target = getattr(report, "target", None)
    if target is not None and getattr(target, "architecture", None):
        out["ipu"] = str(target.architecture)[:200]
    host = _host(getattr(report, "path", None))
    if host:
        out["host"] = host[:200]
    return out


def _host(path: str | None) -> str | None:
    if not path:
        return None
    from popviz.sources.runrecord import record_of

    try:
        doc = record_of(path)
    except (OSError, ValueError):
        return None
    host = doc.get("hostname") if doc else None
    return host if isinstance(host, str) and host else None


def changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """``Poplar SDK 3.2.0 → 3.3.0`` for every field both runs recorded and that differs."""
    return [f"{label} {before[k]} → {after[k]}" for k, label in FIELDS.items()
            if k in before and k in after and before[k] != after[k]]
