"""The plan file (``popviz plan --write FILE``) and the ``--split`` value that re-places blocks.

A plan file is JSON::

    {"format": "popviz-plan", "format_version": 1, "engine": "training", "ipus": 4,
     "layers_per_ipu": [3, 7, 7, 7],
     "placements": [{"layer": "encoder.layer.0", "ipu": 0}, ...]}

``placements`` names each movable layer (a module path of the report's ``layers`` table) and the
IPU it goes on; the stages follow the IPUs in layer order. ``layers_per_ipu`` says the same as
counts of the movable layers in order. ``popviz emulate --split FILE`` applies ``placements``
(or ``layers_per_ipu`` when there are none); ``--split layers_per_ipu=3,7,7,7`` gives the
counts directly.

Every bad input is a one-line :class:`~popviz.errors.UsageError` (exit 2) naming the file or the
value. This module is light (standard library only).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from popviz.errors import UsageError, brief, shown

FORMAT = "popviz-plan"
FORMAT_VERSION = 1
MAX_IPUS = 64
"""PopTorch's limit on the IPUs one process uses (also the emulator's)."""
LAYERS_PER_IPU_PREFIX = "layers_per_ipu="


@dataclass(frozen=True)
class PlanFile:
    """A split of the movable layers over IPUs."""

    ipus: int
    layers_per_ipu: tuple[int, ...]
    placements: tuple[tuple[str, int], ...] = ()
    """(layer module path, IPU) per movable layer, in layer order; may be empty."""
    engine: str | None = None
    source: str = ""
    """Where it came from, for messages and notes: ``layers_per_ipu=3,7,7,7`` or the file."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "engine": self.engine,
                "ipus": self.ipus, "layers_per_ipu": list(self.layers_per_ipu),
                "placements": [{"layer": name, "ipu": ipu} for name, ipu in self.placements]}

    def describe(self) -> str:
        return f"layers_per_ipu={','.join(map(str, self.layers_per_ipu))}"


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


MAX_LAYERS = 100_000
"""More layers than this on one IPU is not a model's split."""


def _check_counts(counts: list[Any], where: str) -> tuple[int, ...]:
    if not counts:
        raise UsageError(f"{where}: layers_per_ipu is empty; give one count per IPU, e.g. 3,7,7,7")
    wrong = [c for c in counts if not _int(c) or c < 0]
    if wrong:  # (a list: the wrong entry may be None itself)
        raise UsageError(f"{where}: layers_per_ipu entry {brief(wrong[0])} is not a whole number of layers (0 or more)")
    if max(counts) > MAX_LAYERS:
        raise UsageError(f"{where}: layers_per_ipu entry {max(counts):,} is more layers than a model has "
                         f"({MAX_LAYERS:,} at most)")
    if not any(counts):
        raise UsageError(f"{where}: layers_per_ipu {list(counts)} places no layer; give at least one")
    if len(counts) > MAX_IPUS:
        raise UsageError(f"{where}: {len(counts)} IPUs; PopTorch uses at most {MAX_IPUS} per process")
    return tuple(counts)


def parse_layers_per_ipu(text: str) -> PlanFile:
    """``layers_per_ipu=3,7,7,7`` (the prefix optional)."""
    body = text[len(LAYERS_PER_IPU_PREFIX):] if text.startswith(LAYERS_PER_IPU_PREFIX) else text
    counts: list[Any] = []
    for part in body.split(","):
        part = part.strip()
        try:
            counts.append(int(part))
        except ValueError:
            raise UsageError(f"--split {brief(text)}: {brief(part)} is not a whole number; expected e.g. "
                             "layers_per_ipu=3,7,7,7 or a plan file") from None
    spec = f"--split {brief(text)}"
    counts_t = _check_counts(counts, spec)
    return PlanFile(ipus=len(counts_t), layers_per_ipu=counts_t,
                    source=f"layers_per_ipu={','.join(map(str, counts_t))}")


def plan_from_dict(doc: Any, where: str) -> PlanFile:
    """Validate a plan document (``where`` names it in messages)."""
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: expected a JSON object written by popviz plan --write")
    if doc.get("format") != FORMAT:
        raise UsageError(f"{where}: not a popviz plan (format is {brief(doc.get('format'))}, expected {FORMAT!r})")
    version = doc.get("format_version")
    if version != FORMAT_VERSION:
        raise UsageError(f"{where}: plan format_version {brief(version)} is not supported (this popviz reads "
                         f"{FORMAT_VERSION}); write it again with this popviz")
    ipus = doc.get("ipus")
    if not _int(ipus) or not 1 <= ipus <= MAX_IPUS:
        raise UsageError(f"{where}: ipus {brief(ipus)} is not a whole number from 1 to {MAX_IPUS}")
    counts = doc.get("layers_per_ipu")
    if not isinstance(counts, list):
        raise UsageError(f"{where}: layers_per_ipu {brief(counts)} is not a list of counts")
    counts_t = _check_counts(counts, where)
    if len(counts_t) != ipus:
        raise UsageError(f"{where}: layers_per_ipu {list(counts_t)} has {len(counts_t)} entries for "
                         f"ipus {ipus}; they must agree")
    raw = doc.get("placements", [])
    if not isinstance(raw, list):
        raise UsageError(f"{where}: placements {brief(raw)} is not a list of {{\"layer\": ..., \"ipu\": ...}}")
    placements: list[tuple[str, int]] = []
    seen: set[str] = set()
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("layer"), str) or not item.get("layer"):
            raise UsageError(f"{where}: placement {brief(item)} needs a \"layer\" (module path) and an \"ipu\"")
        name, ipu = item["layer"], item.get("ipu")
        if not _int(ipu) or not 0 <= ipu < ipus:
            raise UsageError(f"{where}: placement of {brief(name)} on IPU {brief(ipu)}: expected 0 to {ipus - 1}")
        if name in seen:
            raise UsageError(f"{where}: layer {brief(name)} is placed twice")
        seen.add(name)
        placements.append((name, ipu))
    if placements and len(placements) != sum(counts_t):
        raise UsageError(f"{where}: {len(placements)} placements but layers_per_ipu {list(counts_t)} "
                         f"counts {sum(counts_t)} layers; they must agree")
    if placements:  # layers_per_ipu says in words what the placements do: an edit of one alone is refused
        expected = [ipu for ipu, n in enumerate(counts_t) for _ in range(n)]
        actual = [ipu for _, ipu in placements]
        if actual != expected:
            k = next(i for i, (a, e) in enumerate(zip(actual, expected, strict=True)) if a != e)
            raise UsageError(f"{where}: placements disagree with layers_per_ipu {list(counts_t)} (layer "
                             f"{brief(placements[k][0])} is on IPU {actual[k]}, where the counts put IPU "
                             f"{expected[k]}); edit both, or write the plan again with popviz plan --write")
    engine = doc.get("engine")
    if engine is not None and not isinstance(engine, str):
        raise UsageError(f"{where}: engine {brief(engine)} is not a string")
    return PlanFile(ipus=ipus, layers_per_ipu=counts_t, placements=tuple(placements), engine=engine,
                    source=where)


def read_plan(path: str | Path) -> PlanFile:
    """Read and validate a plan file."""
    p = Path(path)
    where = shown(p)
    from popviz.errors import PopvizError
    from popviz.fileio import read_regular_text

    if not p.exists():
        raise UsageError(f"{where}: no such plan file (write one with popviz plan REPORT --write FILE)")
    if p.is_dir():
        raise UsageError(f"{where}: is a directory, not a plan file")
    try:  # a regular file of at most MAX_PLAN_BYTES: a FIFO given to --split is never waited on
        text = read_regular_text(p, MAX_PLAN_BYTES)
    except PopvizError as exc:
        raise UsageError(exc.message) from None
    except UnicodeDecodeError:
        raise UsageError(f"{where}: cannot be read (it is not UTF-8 text)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno}); expected a plan written "
                         "by popviz plan --write") from None
    except RecursionError:
        raise UsageError(f"{where}: nests JSON too deeply to be a plan file") from None
    except ValueError as exc:  # e.g. an integer longer than Python's digit limit
        raise UsageError(f"{where}: holds a value popviz cannot read ({str(exc).split(';')[0]})") from None
    return plan_from_dict(doc, where)


MAX_PLAN_BYTES = 16 * 2**20
"""A plan file larger than this is not one (a plan of 100,000 layers is a few MiB)."""


def write_plan(plan: PlanFile, path: str | Path, *, force: bool = False) -> Path:
    """Write ``plan`` to ``path``: an existing file is replaced only with ``force``."""
    from popviz.fileio import check_output, write_output

    p = Path(path)
    check_output(p, force)
    write_output(p, json.dumps(plan.to_dict(), indent=1) + "\n", force)
    return p


def is_counts(text: str) -> bool:
    """Whether a ``--split`` value gives counts (``layers_per_ipu=3,7,7,7`` or ``3,7,7,7``), not a file."""
    text = text.strip()
    return text.startswith(LAYERS_PER_IPU_PREFIX) or (bool(text) and all(c.isdigit() or c in ", " for c in text))


def parse_split(text: str) -> PlanFile:
    """The value of ``--split``: ``layers_per_ipu=3,7,7,7`` or a plan file's path."""
    text = text.strip()
    if is_counts(text):
        return parse_layers_per_ipu(text)
    if not text:
        raise UsageError("--split is empty; give layers_per_ipu=3,7,7,7 or a plan file")
    return read_plan(text)


__all__ = ["FORMAT", "FORMAT_VERSION", "PlanFile", "from_split", "is_counts", "parse_layers_per_ipu", "parse_split", "plan_from_dict",
           "read_plan", "write_plan"]


def from_split(layers: Sequence[Any], cost_names: Sequence[str], layers_per_stage: Sequence[int],
               engine: str | None = None) -> PlanFile:
    """The plan file of a planner split: ``layers`` are the report's layers (``name``, ``role``),
    ``cost_names`` the names of the planner's layer costs in order (``layer_costs.layer_costs``: tied
    layers folded into their partner), ``layers_per_stage`` the split's counts of those costs
    (``Split.layers_per_ipu``; stage ``i`` on IPU ``i``). Placements and counts are of the movable
    (role ``layer``) layers, as ``--split`` takes them."""
    if sum(layers_per_stage) != len(cost_names):
        raise ValueError(f"layers_per_stage {list(layers_per_stage)} does not cover {len(cost_names)} layers")
    stage_of: dict[str, int] = {}
    i = 0
    for stage, count in enumerate(layers_per_stage):
        for name in cost_names[i:i + count]:
            stage_of[name] = stage
        i += count
    placements = tuple((x.name, stage_of[x.name]) for x in layers if x.role == "layer" and x.name in stage_of)
    counts = [0] * len(layers_per_stage)
    for _, ipu in placements:
        counts[ipu] += 1
    return PlanFile(ipus=len(layers_per_stage), layers_per_ipu=tuple(counts), placements=placements,
                    engine=engine, source="popviz plan")
