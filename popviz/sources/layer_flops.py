"""FLOPs the capture hooks counted on the model, joined to a measured profile's layers.

``popviz capture`` counts the model's FLOPs per module for one micro-batch after the executor
compiles (:mod:`popviz.capture.flops`, the ``flops`` object of ``popviz-model.json``). A real
profile's layer table (:mod:`popviz.sources.attribution`) names its layers by module path, as
PopTorch's debug contexts do. :func:`with_flops` gives each layer the FLOPs of the modules at or
below its path that no deeper layer of the table claims (a module's FLOPs go to the nearest
layer among itself and its ancestors), so nothing is counted twice; FLOPs of modules no layer
covers (operations of the model's own ``forward``, layers the debug contexts do not name) are
left out and the table's notes say how many. The achieved-efficiency analysis then divides
these FLOPs by the measured cycles (:mod:`popviz.analysis.efficiency`).

Every reason the FLOPs are absent ends up as a note starting with
:data:`popviz.model.layers.FLOPS_NOTE`, which the analysis quotes in its "not checked" line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from popviz.model import Layer, Report
from popviz.model.layers import FLOPS_NOTE

STATUSES = ("counted", "failed", "skipped")


@dataclass(frozen=True)
class CapturedFlops:
    """The ``flops`` record of one ``popviz-model.json``, checked."""

    status: str
    reason: str | None = None
    counted_by: str | None = None
    modules: tuple[tuple[str, int, int | None], ...] = ()
    """(module path, own forward FLOPs, own backward FLOPs or None) per micro-batch."""
    backward_not_counted: str | None = None
    uncounted_ops: tuple[tuple[str, int], ...] = ()
    elementwise_calls: int = 0
    micro_batch_inputs: tuple[tuple[int, ...], ...] = ()

    @property
    def backward_counted(self) -> bool:
        return bool(self.modules) and all(b is not None for _, _, b in self.modules)


def parse(value: Any, fail: Callable[[str], Exception]) -> CapturedFlops | None:
    """The checked record (None when the manifest has none); ``fail(what)`` makes the error for a
    damaged one."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise fail("field 'flops' must be a JSON object")
    status = value.get("status")
    if status not in STATUSES:
        raise fail(f"flops status must be one of {', '.join(STATUSES)}, got {status!r}")

    def count(x: Any, what: str, nullable: bool = False) -> int | None:
        if x is None and nullable:
            return None
        if not isinstance(x, int) or isinstance(x, bool) or x < 0:
            raise fail(f"flops: {what} must be a non-negative integer, got {x!r}")
        return x

    def text(x: Any) -> str | None:
        return None if x is None else str(x)

    modules = []
    seen: set[str] = set()
    for m in value.get("modules") or ():
        if not isinstance(m, Mapping) or not isinstance(m.get("module"), str):
            raise fail("flops: each module must be an object with a string 'module'")
        if m["module"] in seen:
            raise fail(f"flops: module {m['module']!r} appears more than once")
        seen.add(m["module"])
        modules.append((m["module"], count(m.get("fwd_flops"), f"{m['module']!r} fwd_flops"),
                        count(m.get("bwd_flops"), f"{m['module']!r} bwd_flops", nullable=True)))
    ops = []
    for o in value.get("uncounted_ops") or ():
        if not isinstance(o, Mapping) or not isinstance(o.get("op"), str):
            raise fail("flops: each uncounted op must be an object with a string 'op'")
        ops.append((o["op"], count(o.get("calls"), "calls")))
    shapes = []
    for s in value.get("micro_batch_inputs") or ():
        if not isinstance(s, list) or not all(isinstance(d, int) and d >= 0 for d in s):
            raise fail(f"flops: micro_batch_inputs must be lists of sizes, got {s!r}")
        shapes.append(tuple(s))
    return CapturedFlops(status=status, reason=text(value.get("reason")), counted_by=text(value.get("counted_by")),
                         modules=tuple(modules), backward_not_counted=text(value.get("backward_not_counted")),
                         uncounted_ops=tuple(ops),
                         elementwise_calls=count(value.get("elementwise_calls", 0), "elementwise_calls") or 0,
                         micro_batch_inputs=tuple(shapes))


def owner(path: str, names: set[str]) -> str | None:
    """The layer among ``path`` and its ancestors (nearest first) that ``names`` holds, or None."""
    while path:
        if path in names:
            return path
        path = path.rpartition(".")[0]
    return None


def _flops_text(n: int) -> str:
    return f"{n:,}"


def with_flops(report: Report, captured: CapturedFlops | None, manifest: bool) -> Report:
    """``report`` whose measured layer table has the FLOPs the capture hooks counted, or a note
    saying why it has none. ``manifest``: a ``popviz-model.json`` was beside the profile."""
    table = report.layers
    if table is None or table.source != "debug_context" or any(x.fwd_flops is not None for x in table):
        return report
    training = report.cfg.mode == "training"
    if not manifest:
        why = ("not counted: no popviz-model.json beside the profile (capture the run with popviz capture, "
               "whose hooks count the model's FLOPs)")
    elif captured is None:
        why = ("not counted: popviz-model.json has no FLOPs (written by a popviz that did not count them yet, "
               "or the hooks never saw the executor compile)")
    elif captured.status != "counted":
        why = f"not counted by the capture hooks: {captured.reason or 'no reason recorded'}"
    else:
        why = None
    if why is not None:
        return report.replace(layers=dataclasses.replace(table, notes=(*table.notes, FLOPS_NOTE + why)))
    names = {x.name for x in table}
    fwd = dict.fromkeys(names, 0)
    bwd = dict.fromkeys(names, 0)
    lost_fwd = lost_bwd = 0
    for path, f, b in captured.modules:
        layer = owner(path, names)
        if layer is None:
            lost_fwd += f
            lost_bwd += b or 0
            continue
        fwd[layer] += f
        bwd[layer] += b or 0
    total = sum(f + (b or 0) for _, f, b in captured.modules)
    if total and lost_fwd + lost_bwd == total:
        sample = ", ".join(sorted(p or "(the model itself)" for p, _, _ in captured.modules)[:3])
        layers = ", ".join(x.name for x in list(table)[:3])
        why = (f"not joined: the capture hooks counted FLOPs in modules ({sample}) none of which is a layer "
               f"of this profile's debug contexts ({layers}) or below one")
        return report.replace(layers=dataclasses.replace(table, notes=(*table.notes, FLOPS_NOTE + why)))
    backward = training and captured.backward_counted

    def flops_of(x: Layer) -> Layer:
        return dataclasses.replace(x, fwd_flops=fwd[x.name], bwd_flops=bwd[x.name] if backward else
                                   (None if training else 0))

    counted = "forward and backward" if backward else "forward"
    note = (f"{FLOPS_NOTE}counted by the capture hooks on the model ({counted}, per micro-batch, "
            f"{captured.counted_by or 'torch.utils.flop_counter'}): products, convolutions and attention only")
    notes = [note]
    if lost_fwd + lost_bwd:
        notes.append(f"{FLOPS_NOTE}{_flops_text(lost_fwd + lost_bwd)} of {_flops_text(total)} counted FLOPs are in "
                     "modules no layer of the profile covers (e.g. the model's own forward), and are left out")
    if training and not backward:
        notes.append(f"{FLOPS_NOTE}backward not counted: {captured.backward_not_counted or 'not recorded'}")
    if captured.uncounted_ops or captured.elementwise_calls:
        named = ", ".join(op for op, _ in captured.uncounted_ops[:4])
        parts = [f"{captured.elementwise_calls:,} element-wise calls"] if captured.elementwise_calls else []
        if named:
            parts.append(f"{len(captured.uncounted_ops)} other operations without a FLOP formula ({named}"
                         f"{', ...' if len(captured.uncounted_ops) > 4 else ''})")
        notes.append(f"{FLOPS_NOTE}not in the figures: {' and '.join(parts)}")
    layers = tuple(flops_of(x) for x in table)
    return report.replace(layers=dataclasses.replace(table, layers=layers, notes=(*table.notes, *notes)))


__all__ = ["STATUSES", "CapturedFlops", "owner", "parse", "with_flops"]
