"""The ``--json`` view: a documented, versioned interface (docs/json.md).

Schema 1 promises: the keys documented there keep their meaning; new keys may appear; a change
that removes or redefines a key bumps ``schema``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from popviz._version import __version__
from popviz.analysis.findings import EngineResult, Result

SCHEMA = 1
SCHEMA_FILE = "schema_v1.json"
"""JSON Schema of the document (beside this module; ``schema()`` loads it)."""


def schema() -> dict[str, Any]:
    """The JSON Schema that ``popviz analyse --json`` output validates against."""
    from importlib.resources import files

    return json.loads(files("popviz.render").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become null, tuples lists, numpy scalars Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def engine_to_dict(engine: EngineResult) -> dict[str, Any]:
    r = engine.report
    return {
        "name": r.name,
        "instance": r.instance,
        "path": r.path,
        "provenance": r.provenance.to_dict(),
        "target": r.target.to_dict() if r.target else None,
        "config": r.config.to_dict() if r.config is not None else None,
        "present": r.present,
        "missing": r.missing,
        "memory_level": r.memory.level if r.memory is not None else None,
        "metrics": engine.metrics,
        "findings": [f.to_dict() for f in engine.findings],
        "not_checked": [n.to_dict() for n in engine.not_checked],
        "plan": engine.plan.to_dict() if engine.plan is not None else None,
    }


def result_to_dict(result: Result) -> dict[str, Any]:
    return _clean({
        "schema": SCHEMA,
        "popviz_version": __version__,
        "root": result.root,
        "analyses": result.analyses,
        "engines": [engine_to_dict(e) for e in result.engines],
        "warnings": list(result.warnings),
    })


def render(result: Result) -> str:
    return json.dumps(result_to_dict(result), indent=2, allow_nan=False)
