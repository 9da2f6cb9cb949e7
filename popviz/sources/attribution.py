"""Per-layer cycles and weight bytes of a real profile, from PopTorch's debug contexts.

libpva's ``pva.OperationAnalysis(report).operations`` lists the Poplar operations with the
programs each one runs and its debug context, whose JSON PopTorch fills with the PyTorch
``layer`` (module path), ``op_name`` and ``op_type`` (PopVision Analysis Python API:
https://docs.graphcore.ai/projects/libpva/en/latest/api-python.html). :func:`popviz.sources.pva.
read_operations` turns them into plain :class:`Operation` records; this module attributes the
execution table's cycles to layers through the program names, and the always-live variables to
layers by name (PopTorch names a parameter by its module path, e.g. ``encoder.layer.3.weight``),
giving :attr:`popviz.model.Report.layers` with ``source="debug_context"``.

Cycles are per micro-batch (the executor calls' cycles divided by the micro-batches they ran,
recorded or inferred); an operation is backward when its type or name says ``Grad`` (PopART's
gradient operations are named so). A program that several layers' operations run is split evenly
between them. Activation, temporary and code bytes come from the liveness steps and the programs'
code (:mod:`popviz.sources.layer_memory`) where the profile has them; what it does not give
(optimizer state) stays 0, and the table's notes say how each figure was obtained.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from popviz.model import Layer, LayerTable, Report

BACKWARD_OP = re.compile(r"grad", re.IGNORECASE)
"""Operation types or names of the backward pass (PopART's ``...Grad`` operations)."""


@dataclass(frozen=True)
class Operation:
    """One operation of a profile: its layer (from the debug context) and the programs it runs."""

    layer: str
    name: str
    op_type: str
    programs: tuple[str, ...]
    code: tuple[int, ...] = ()
    """Code bytes of each of ``programs`` (``codeBytesByTile`` plus, for a program without
    children, ``controlCodeByTile``, summed over the tiles); empty where libpva has neither."""


def _context_doc(context: Any) -> dict | None:
    raw = getattr(context, "json", None)
    try:
        doc = json.loads(raw) if isinstance(raw, (str, bytes)) else dict(raw or {})
    except (ValueError, TypeError):
        return None
    return doc if isinstance(doc, dict) else None


def layer_context(op: Any) -> dict | None:
    """The debug context naming an operation's layer, as a dict with ``layer``, ``op_name`` and
    ``op_type``. PopTorch 3's own context (``"layer": "poptorch"``) is a parent of PopART's
    (``"layer": "popart"``, willow/src/opdebuginfo.cpp) and puts the module path in ``op_name``
    (``block0/lstm/LSTM``: the path with ``/``, then the op type; an operation outside any module
    has ``op_name`` equal to ``op_type``): graphcore/poptorch tests/precompilation_test.py
    ``test_pva_annotations`` walks ``replacedDebugContext[0]`` (else ``debugContext``) and its
    ``parents[0]`` to it. There the layer is that path with dots (``block0.lstm``), the module
    path PopTorch names parameters by; a context with no ``poptorch`` ancestor keeps its own
    ``layer``."""
    replaced = getattr(op, "replacedDebugContext", None)
    try:
        context = replaced[0] if replaced else getattr(op, "debugContext", None)
    except (TypeError, IndexError, KeyError):
        context = getattr(op, "debugContext", None)
    first = _context_doc(context)
    if first is None:
        return None
    doc, node = first, context
    for _ in range(32):  # a bounded walk: contexts form a tree
        if doc is not None and doc.get("layer") == "poptorch":
            name, kind = str(doc.get("op_name") or ""), str(doc.get("op_type") or "")
            path = name[: -len(kind) - 1] if kind and name.endswith("/" + kind) else name.rpartition("/")[0]
            opid = str(first.get("opid") or "")
            return {"layer": path.replace("/", "."), "op_name": name,
                    "op_type": opid if BACKWARD_OP.search(opid) else kind}
        parents = getattr(node, "parents", None)
        try:
            node = parents[0] if parents else None
        except (TypeError, IndexError, KeyError):
            node = None
        if node is None:
            break
        doc = _context_doc(node)
    return first


def with_layers(report: Report, operations: list[Operation],
                variables: list[tuple[str, int]]) -> Report:
    """``report`` with ``layers`` attributed from ``operations`` (unchanged when it has layers
    already, no execution, or no micro-batch count to turn cycles per call into cycles per
    micro-batch)."""
    if report.liveness is not None and operations:
        from popviz.sources.liveness import label_layers

        report = report.replace(liveness=label_layers(report.liveness, operations))
    if report.layers is not None or not operations or report.execution is None:
        return report
    from popviz.model.aggregate import cycle_totals

    cfg = report.cfg
    d, g = cfg.device_iterations, cfg.gradient_accumulation
    per_call = (d * g if cfg.mode == "training" and d and g else d if cfg.mode == "inference" else None)
    runs = cycle_totals(report.execution).calls()
    if not per_call or not runs:
        return report
    micro_batches = per_call * len(runs)
    by_program = cycle_totals(report.execution).by_program_ipu(runs)  # one pass, never the whole table
    claims: dict[str, set[str]] = {}
    for op in operations:
        for p in op.programs:
            claims.setdefault(p, set()).add(op.layer)
    order: list[str] = []
    fwd: dict[str, float] = {}
    bwd: dict[str, float] = {}
    ipu_cycles: dict[str, dict[int, float]] = {}
    seen: set[tuple[str, str]] = set()
    code: dict[str, float] = {}
    code_seen: set[tuple[str, str]] = set()
    programs: dict[str, tuple[list[str], list[str]]] = {}
    for op in operations:
        if op.layer not in fwd:
            order.append(op.layer)
            fwd[op.layer] = bwd[op.layer] = 0.0
            ipu_cycles[op.layer] = {}
        backward = bool(BACKWARD_OP.search(op.op_type) or BACKWARD_OP.search(op.name))
        programs.setdefault(op.layer, ([], []))[1 if backward else 0].extend(op.programs)
        for p, c in zip(op.programs, op.code, strict=False):
            if (p, op.layer) not in code_seen:
                code_seen.add((p, op.layer))
                code[op.layer] = code.get(op.layer, 0.0) + c / len(claims[p])
        for p in op.programs:
            if (p, op.layer) in seen or p not in by_program.index.get_level_values(0):
                continue
            seen.add((p, op.layer))
            share = 1 / len(claims[p])
            for ipu, cycles in by_program.loc[p].items():
                c = cycles * share
                (bwd if backward else fwd)[op.layer] += c
                if not backward:
                    ipu_cycles[op.layer][int(ipu)] = ipu_cycles[op.layer].get(int(ipu), 0.0) + c
    from popviz.sources import layer_memory

    stage_of = {s.ipu: s.index for s in cfg.stages}
    why_not = layer_memory.usable(report.liveness)
    training = cfg.mode == "training"
    layers = []
    for name in order:
        ipus = ipu_cycles[name]
        ipu = max(ipus, key=lambda k: ipus[k]) if ipus else None
        weight = sum(size for var, size in variables if var == name or var.startswith(name + "."))
        act = temp = 0
        if why_not is None and ipu is not None and ipu in report.liveness.ipus:
            act, temp = layer_memory.layer_bytes(report.liveness, ipu, *programs[name], training)
        layers.append(Layer(name=name, stage=stage_of.get(ipu) if ipu is not None else None, ipu=ipu,
                            fwd_cycles=round(fwd[name] / micro_batches),
                            bwd_cycles=round(bwd[name] / micro_batches), weight_bytes=int(weight),
                            activation_bytes=act, temporary_bytes=temp, code_bytes=round(code.get(name, 0))))
    basis = "inferred" if cfg.is_inferred("device_iterations") else "recorded"
    notes = [f"cycles per micro-batch: the executor calls' cycles of each layer's programs (PopTorch "
             f"debug contexts) over {micro_batches:,} micro-batches ({basis} D·G)",
             "weight bytes: always-live variables named after the layer; optimizer bytes are not in the "
             "debug contexts (0)"]
    if why_not is None:
        notes += [layer_memory.NOTE_ACTIVATION if training else
                  "activation bytes: 0 in inference (nothing is kept for a backward pass)",
                  layer_memory.NOTE_TEMPORARY]
    else:
        notes.append(f"activation and temporary bytes: 0, {why_not}")
    notes.append(layer_memory.NOTE_CODE if code else
                 "code bytes: 0, the profile's programs have no codeBytesByTile (the planner counts code per IPU)")
    return report.replace(layers=LayerTable(tuple(layers), source="debug_context", notes=tuple(notes)))
