"""The one data model every source produces and every analysis, plot and renderer consumes.

A :class:`Report` is one compiled engine (PopTorch writes one per executor: ``training``,
``inference`` or the ``modelName``). Every part of it may be missing: an out-of-memory compile
has memory but no execution; an emulated report has per-IPU memory but no per-tile figures.
Absence is always explicit (``None``), never an empty table pretending to be data.

Units are in the names: ``*_bytes``, ``cycles``, ``*_seconds``, ``*_hz``, ``*_frac`` (0-1),
``*_pct`` (0-100).

The model is the bottom layer above the base utilities (docs/architecture.md): it imports nothing
from the sources, analyses, renderers or the package face. Its modules:

* :mod:`~popviz.model.names` — names every layer shares (output modes, program types);
* :mod:`~popviz.model.tables` — the memory and execution tables and their column checks;
* :mod:`~popviz.model.parts` — target, configuration, host I/O, provenance;
* :mod:`~popviz.model.layers` — the per-layer table;
* :mod:`~popviz.model.liveness` — not-always-live bytes per program step and IPU;
* :mod:`~popviz.model.report` — Report and ReportSet;
* :mod:`~popviz.model.aggregate` — the one reduction of an execution table (per run, IPU and
  program type) every source and analysis shares;
* :mod:`~popviz.model.thresholds` — the thresholds that reduction and the sources apply;
* :mod:`~popviz.model.frames` — the DataFrames behind the figures.
"""

from popviz.model.layers import LAYER_PINS, LAYER_ROLES, LAYER_SOURCES, Layer, LayerTable
from popviz.model.liveness import LivenessTable, StepLabel
from popviz.model.names import (
    COMPUTE_TYPES,
    EXCHANGE_TYPES,
    EXECUTION_STRATEGIES,
    INFERABLE_FIELDS,
    MODES,
    OUTPUT_MODES,
    PARTS,
    PROGRAM_TYPES,
    SOURCES,
    STREAM_COPY_TYPES,
)
from popviz.model.parts import CallStats, HostIO, HostTensor, ModelConfig, Provenance, Stage, Target
from popviz.model.report import Report, ReportSet
from popviz.model.tables import (
    CATEGORY_PREFIX,
    CATEGORY_SUFFIX,
    EXECUTION_COLUMNS,
    MEMORY_COLUMNS,
    RUN_COLUMNS,
    ExecutionTable,
    MemoryTable,
    ModelError,
)

__all__ = ["CATEGORY_PREFIX", "CATEGORY_SUFFIX", "COMPUTE_TYPES", "EXCHANGE_TYPES", "EXECUTION_COLUMNS",
           "EXECUTION_STRATEGIES", "INFERABLE_FIELDS", "LAYER_PINS", "LAYER_ROLES", "LAYER_SOURCES",
           "MEMORY_COLUMNS", "MODES", "OUTPUT_MODES", "PARTS", "PROGRAM_TYPES", "RUN_COLUMNS", "SOURCES",
           "STREAM_COPY_TYPES", "CallStats", "ExecutionTable", "HostIO", "HostTensor", "Layer", "LayerTable",
           "LivenessTable", "MemoryTable", "ModelConfig", "ModelError", "Provenance", "Report", "ReportSet", "Stage", "StepLabel", "Target"]
