"""The plan file: a pipeline split written by ``popviz plan --write`` and read by ``--split``.

    {"format": "popviz-plan", "format_version": 1, "engine": NAME, "ipus": N,
     "layers_per_ipu": [int, ...], "placements": [{"layer": MODULE_PATH, "ipu": int}, ...]}

``layers_per_ipu`` counts the repeated layers (role ``layer``) on each IPU, as optimum-graphcore's
``IPUConfig(layers_per_ipu=...)`` does; ``placements`` gives every layer of the model (embeddings,
heads and the loss included) its IPU, in execution order. docs/plan.md describes it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "popviz-plan"
FORMAT_VERSION = 1
MAX_PLAN_BYTES = 16 * 2**20


@dataclass(frozen=True)
class PlanFile:
    engine: str
    ipus: int
    layers_per_ipu: tuple[int, ...]
    placements: tuple[tuple[str, int], ...]
    """(module path, IPU) per layer, in execution order."""

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "engine": self.engine,
                "ipus": self.ipus, "layers_per_ipu": list(self.layers_per_ipu),
                "placements": [{"layer": name, "ipu": ipu} for name, ipu in self.placements]}


def make(engine: str, layers_per_ipu: Sequence[int], placements: Sequence[tuple[str, int]]) -> PlanFile:
    return PlanFile(engine, len(layers_per_ipu), tuple(int(k) for k in layers_per_ipu),
                    tuple((str(n), int(i)) for n, i in placements))


def write(path: str | Path, plan: PlanFile) -> None:
    """Write ``plan`` to a new file (never over an existing one)."""
    from popviz.fileio import write_new_text

    write_new_text(path, json.dumps(plan.to_dict(), indent=2) + "\n")


def read(path: str | Path) -> PlanFile:
    """Read and check a plan file; a one-line CorruptReportError/UsageError when it is not one."""
    from popviz.errors import CorruptReportError, UsageError, shown
    from popviz.fileio import read_versioned_json

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{shown(p)}: no such plan file (write one with popviz plan --write FILE)")
    if p.stat().st_size > MAX_PLAN_BYTES:
        raise CorruptReportError(f"{shown(p)} is too large to be a popviz plan file")

    def fail(what: str) -> CorruptReportError:
        return CorruptReportError(f"{shown(p)} {what}")

    doc = read_versioned_json(p, format_name=FORMAT, format_version=FORMAT_VERSION, kind="plan",
                              fail=fail)

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    engine, ipus, lpi, places = (doc.get(k) for k in ("engine", "ipus", "layers_per_ipu", "placements"))
    if not isinstance(engine, str):
        raise fail("is not a valid popviz plan file: engine must be a string")
    if not count(ipus) or ipus < 1:
        raise fail("is not a valid popviz plan file: ipus must be a positive integer")
    if not isinstance(lpi, list) or len(lpi) != ipus or not all(count(k) for k in lpi):
        raise fail(f"is not a valid popviz plan file: layers_per_ipu must be {ipus} non-negative integers")
    if not isinstance(places, list) or not all(
            isinstance(x, dict) and isinstance(x.get("layer"), str) and x["layer"]
            and count(x.get("ipu")) and x["ipu"] < ipus for x in places):
        raise fail(f"is not a valid popviz plan file: placements must be objects with a layer "
                   f"name and an ipu below {ipus}")
    return make(engine, lpi, [(x["layer"], x["ipu"]) for x in places])
