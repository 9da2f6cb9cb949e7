"""Report (one compiled engine: its parts and tables) and ReportSet (every engine found under a
report directory)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from popviz.model.layers import LayerTable
from popviz.model.liveness import LivenessTable
from popviz.model.measured import BlockTable, HostTrace, StreamCopyTable
from popviz.model.names import PARTS
from popviz.model.parts import HostIO, ModelConfig, Provenance, Target
from popviz.model.tables import ExecutionTable, MemoryTable, ModelError

if TYPE_CHECKING:
    import pandas as pd

@dataclass(eq=False)
class Report:
    """One compiled engine. Any part but ``name`` and ``provenance`` may be ``None``."""

    name: str
    provenance: Provenance
    target: Target | None = None
    memory: MemoryTable | None = None
    execution: ExecutionTable | None = None
    config: ModelConfig | None = None
    host_io: HostIO | None = None
    path: str | None = None
    """Directory the report was read from (None when built in memory)."""
    instance: str | None = None
    """Instance (process) of a multi-instance run, e.g. ``instance-1``; None for a single one."""
    layers: LayerTable | None = None
    """Per-layer placement and costs (for ``popviz plan``), where known."""
    streams: StreamCopyTable | None = None
    """Stream copies by destination as the source read them (else derived by program name)."""
    blocks: BlockTable | None = None
    """Lightweight Profiling blocks (measured start/end cycles), where the profile has them."""
    host_trace: HostTrace | None = None
    """Host time per executor call from System Analyser traces (``.pvti``), where captured."""
    liveness: LivenessTable | None = None
    """Not-always-live bytes per program step and IPU (Poplar's liveness report), where known."""

    def has(self, part: str) -> bool:
        if part not in PARTS:
            raise ModelError(f"unknown report part {part!r}; parts are {', '.join(PARTS)}")
        value = getattr(self, part)
        if isinstance(value, ModelConfig):
            return not value.is_empty()
        if isinstance(value, HostIO):
            return value != HostIO()
        return value is not None

    @property
    def present(self) -> list[str]:
        return [p for p in PARTS if self.has(p)]

    @property
    def missing(self) -> list[str]:
        return [p for p in PARTS if not self.has(p)]

    @property
    def label(self) -> str:
        """``name``, or ``instance/name`` in a multi-instance run."""
        return f"{self.instance}/{self.name}" if self.instance else self.name

    @property
    def cfg(self) -> ModelConfig:
        """``config``, or an all-unknown ModelConfig when absent (saves None checks)."""
        return self.config if self.config is not None else ModelConfig()

    def replace(self, **changes: Any) -> Report:
        return dataclasses.replace(self, **changes)

    def __eq__(self, other: object) -> bool:
        """Equal content; where it was read from (``path``, ``instance``) does not count."""
        if not isinstance(other, Report):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(self)
                   if f.name not in ("path", "instance"))

    __hash__ = None  # type: ignore[assignment]

    def _repr_html_(self) -> str:
        from popviz.render.html import notebook

        return notebook(self)

    # What each figure of popviz.plot draws, as a DataFrame (popviz/model/frames.py documents the columns).
    def _labelled(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` with where its figures come from in ``frame.attrs`` (``engine``, ``source``,
        ``estimated``): an estimated report's tables say so wherever they are passed on."""
        frame.attrs.update(engine=self.label, source=self.provenance.source, estimated=self.provenance.estimated)
        return frame

    def steps(self, run: int | None = None) -> pd.DataFrame:
        """One executor call's steps in time order per IPU, with start/end cycles and category."""
        from popviz.model import frames
        return self._labelled(frames.steps(self, run))

    def stage_cycles(self) -> pd.DataFrame:
        """Cycles per micro-batch of each pipeline stage, its idle % and the bottleneck."""
        from popviz.model import frames
        return self._labelled(frames.stage_cycles(self))

    def ipu_cycles(self) -> pd.DataFrame:
        """Cycles per micro-batch of each IPU running pipeline stages (the balance measured per
        IPU when stages share one), its stages, idle % and the bottleneck."""
        from popviz.model import frames
        return self._labelled(frames.ipu_cycles(self))

    def memory_by_ipu(self) -> pd.DataFrame:
        """Bytes per IPU: used, capacity, used %, gaps and one column per memory category."""
        from popviz.model import frames
        return self._labelled(frames.memory_by_ipu(self))

    def tile_memory(self) -> pd.DataFrame:
        """Bytes and used % of every tile."""
        from popviz.model import frames
        return self._labelled(frames.tile_memory(self))

    def time_shares(self) -> pd.DataFrame:
        """Per IPU, % of the calls' cycles in compute, exchange, sync/idle, host copy and other."""
        from popviz.model import frames
        return self._labelled(frames.time_shares(self))

    def output_modes(self) -> pd.DataFrame:
        """Outputs and output bytes per call under each output mode, the current one marked."""
        from popviz.model import frames
        return self._labelled(frames.output_modes(self))

    def liveness_steps(self, max_points: int | None = None) -> pd.DataFrame:
        """Bytes live at each liveness step per IPU: ``ipu``, ``step``, ``program``,
        ``not_always_live_bytes``, ``always_live_bytes``, ``live_bytes`` (``max_points``: at most
        that many steps per IPU, each the largest of its run). Raises MissingDataError without a
        liveness table."""
        from popviz.model.frames import MissingDataError
        from popviz.model.liveness import liveness_frame

        if self.liveness is None:
            raise MissingDataError(f"engine '{self.label}' has no liveness steps")
        return self._labelled(liveness_frame(self.liveness, max_points))

    def __repr__(self) -> str:
        return (f"Report(name={self.label!r}, source={self.provenance.source!r}, "
                f"estimated={self.provenance.estimated}, present={self.present})")


class ReportSet(Sequence[Report]):
    """Every engine found under a report directory (or the one in a bundle)."""

    def __init__(self, reports: Sequence[Report], root: str | None = None,
                 warnings: Sequence[str] = ()) -> None:
        self._reports = list(reports)
        self.root = root
        self.warnings = list(warnings)
        """Problems with the input that leave the reports usable (e.g. an interrupted capture)."""

    def __len__(self) -> int:
        return len(self._reports)

    def __iter__(self) -> Iterator[Report]:
        return iter(self._reports)

    def __getitem__(self, key):  # type: ignore[override]
        """By position, or by name (``"training"``) or label (``"instance-0/training"``)."""
        if isinstance(key, str):
            matches = [r for r in self._reports if r.label == key] or \
                      [r for r in self._reports if r.name == key]
            if not matches:
                raise KeyError(f"no engine named {key!r}; engines: {', '.join(self.labels) or 'none'}")
            if len(matches) > 1:
                raise KeyError(f"{len(matches)} engines are named {key!r} (one per instance); "
                               f"use one of: {', '.join(r.label for r in matches)}")
            return matches[0]
        return self._reports[key]

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(r.name for r in self._reports))

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self._reports]

    @property
    def instances(self) -> list[str]:
        return list(dict.fromkeys(r.instance for r in self._reports if r.instance))

    def summary(self) -> pd.DataFrame:
        """One row per engine: where it came from and which parts are present."""
        import pandas as pd

        rows = []
        for r in self._reports:
            t = r.target
            rows.append({
                "engine": r.label, "source": r.provenance.source, "estimated": r.provenance.estimated,
                "num_ipus": t.num_ipus if t else None,
                "strategy": r.cfg.execution_strategy, "stages": r.cfg.num_stages,
                **{f"has_{p}": r.has(p) for p in PARTS},
            })
        return pd.DataFrame(rows)

    def _repr_html_(self) -> str:
        from popviz.render.html import notebook

        return notebook(self)

    def __repr__(self) -> str:
        return f"ReportSet(root={self.root!r}, engines={self.labels})"

