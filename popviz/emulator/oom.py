"""A model that does not fit its IPUs: compilation fails, as on a real IPU.

Poplar allocates all of an engine's memory when it compiles. When the graph does not fit, the
compile fails with Poplar's ``graph_memory_allocation_error``, which PopART passes on as a
``memory_allocation_err`` and PopTorch raises as ``poptorch.Error`` (type ``popart_exception``).
With the engine option ``debug.allowOutOfMemory`` (``Options.enableProfiling`` and ``popviz
capture`` set it; Poplar turns it on with autoReport) the compile first goes on far enough to
write the memory report, which then has no execution.

The emulator does the same from its estimate: when any IPU's estimated bytes exceed its capacity,
the compiling call raises :class:`~popviz.emulator.errors.Error` with Poplar's message, listing
the overflowing IPUs (the estimate is per IPU, not per tile), and, when profiling is on and
``debug.allowOutOfMemory`` is not ``"false"``, first writes a memory-only estimated report.
``POPVIZ_EMULATOR_IGNORE_OOM=1`` runs the model anyway (the estimate's memory figures have known
errors, docs/emulator.md): its report then has an execution and the memory findings still say
the IPU is out of memory.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from popviz.emulator import costmodel
from popviz.emulator.errors import Error
from popviz.errors import shown
from popviz.model import Report

IGNORE_ENV = "POPVIZ_EMULATOR_IGNORE_OOM"
"""Set to 1 to run a model whose estimate does not fit (the default raises, as Poplar does)."""
ERROR_TYPE = "popart_exception"
"""The ``type`` PopTorch gives a Poplar out-of-memory error (PopART wraps it in its own)."""
ALLOW_OOM_OPTION = "debug.allowOutOfMemory"
FIRST_LINE = "Out of memory: Cannot fit all variable data onto one or more tiles."
"""Poplar's message when ``debug.allowOutOfMemory`` let the compile finish its memory report."""
NOTE = ("Compilation ran out of memory (estimated): this report has the memory estimate only, "
        "no execution, as Poplar's report of a failed compile.")


def ignored() -> bool:
    """True when ``POPVIZ_EMULATOR_IGNORE_OOM`` asks to run models that do not fit."""
    return os.environ.get(IGNORE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def overflowing(est: costmodel.Estimate) -> list[dict[str, int]]:
    """The IPUs (one replica's) whose estimated bytes exceed their capacity: ``ipu``,
    ``used_bytes``, ``overflow_bytes``; empty when the model fits."""
    frame = est.memory.frame
    over = frame[frame["overflow_bytes"] > 0]
    return [{"ipu": int(r.ipu), "used_bytes": int(r.total_bytes_including_gaps),
             "overflow_bytes": int(r.overflow_bytes)} for r in over.itertuples(index=False)]


def report_allowed(engine_options: Mapping[str, Any]) -> bool:
    """Whether Poplar would write the report of a failed compile: unless ``debug.allowOutOfMemory``
    is explicitly false (it is on by default when profiling is)."""
    value = engine_options.get(ALLOW_OOM_OPTION)
    return not (value is False or (isinstance(value, str) and value.strip().lower() == "false"))


def memory_only(report: Report) -> Report:
    """The report of a compile that ran out of memory: the same memory, no execution."""
    notes = (*report.provenance.notes, NOTE)
    return dataclasses.replace(report, execution=None,
                               provenance=dataclasses.replace(report.provenance, notes=notes))


def build_report(est: costmodel.Estimate, setup: costmodel.EngineSetup, **kwargs: Any) -> Report:
    """:func:`costmodel.build_report` without the execution (see :func:`memory_only`)."""
    return memory_only(costmodel.build_report(est, setup, **kwargs))


def error(est: costmodel.Estimate, over: list[dict[str, int]], report_dir: Path | None) -> Error:
    """PopTorch's error for this estimate: Poplar's message, then each overflowing IPU."""
    capacity = est.target.bytes_per_ipu
    lines = [FIRST_LINE]
    for row in over:
        lines.append(f"Out of memory on IPU {row['ipu']}: {row['used_bytes']:,} bytes used but IPUs only "
                     f"have {capacity:,} bytes of memory ({est.target.tiles_per_ipu:,} tiles x "
                     f"{est.target.bytes_per_tile:,} bytes), exceeded by {row['overflow_bytes']:,} bytes")
    lines.append("(estimated by popviz's emulator, per IPU: which tiles overflow is not modelled; "
                 f"set {IGNORE_ENV}=1 to run the model anyway)")
    if report_dir is not None:
        lines.append(f"The memory-only estimated report is in {shown(report_dir)}")
    return Error("\n".join(lines), type=ERROR_TYPE)


__all__ = ["IGNORE_ENV", "build_report", "error", "ignored", "memory_only", "overflowing", "report_allowed"]
