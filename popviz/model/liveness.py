"""The liveness table of a Report: not-always-live bytes at every program step, per IPU.

Poplar's liveness report (the Graph Analyser's *Liveness Report*; libpva's
``compilation.livenessProgramSteps``) lists the compiled program's steps in schedule order and,
for each, the bytes of the variables live there that are not live all the time. Together with the
always-live bytes of each IPU (code, weights, constants: live at every step) they give the memory
an IPU needs at each step; its peak is what must fit. Values are per replica.

The table keeps NumPy arrays, never one Python object per step: a POD64 profile has 10⁶ steps for
64 IPUs (``benchmarks/bench_liveness.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from popviz.model.tables import ModelError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


@dataclass(frozen=True)
class StepLabel:
    """What runs at one liveness step, where the source knows it: the model layer and operation
    (from PopTorch's debug contexts, or the emulator's stages) and the largest variables live
    there (name, bytes), largest first."""

    step: int
    layer: str | None = None
    operation: str | None = None
    op_type: str | None = None
    contributors: tuple[tuple[str, int], ...] = ()
    contributors_scope: str = "replica"
    """``replica``: the variables live at that step on all IPUs (libpva gives them per step,
    not per IPU); ``ipu``: on the peak's IPU (the emulator's)."""

    def __post_init__(self) -> None:
        if not isinstance(self.step, int) or isinstance(self.step, bool) or self.step < 0:
            raise ModelError(f"liveness label step must be a non-negative integer, got {self.step!r}")
        out = []
        for item in self.contributors:
            name, nbytes = item
            if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
                raise ModelError(f"liveness contributor {name!r}: bytes must be a non-negative integer, "
                                 f"got {nbytes!r}")
            out.append((str(name), int(nbytes)))
        object.__setattr__(self, "contributors", tuple(out))
        if self.contributors_scope not in ("replica", "ipu"):
            raise ModelError(f"liveness contributors_scope must be 'replica' or 'ipu', got {self.contributors_scope!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "layer": self.layer, "operation": self.operation, "op_type": self.op_type,
                "contributors": [list(c) for c in self.contributors],
                "contributors_scope": self.contributors_scope}


@dataclass(eq=False)
class LivenessTable:
    """Not-always-live bytes per program step (and per IPU where known), the always-live bytes
    per IPU, and labels for the steps that matter (each IPU's peak)."""

    programs: Any
    """Program name of each step: a ``pandas.Categorical`` (one code per step)."""
    total_bytes: Any
    """int64 array, one value per step: the replica's not-always-live bytes (all IPUs)."""
    ipu_bytes: Any = None
    """int64 array ``[steps, len(ipus)]``: each IPU's not-always-live bytes per step; None where
    the source gives only the replica's total."""
    ipus: tuple[int, ...] = ()
    """The IPUs the columns of ``ipu_bytes`` stand for."""
    always_live_bytes: Mapping[int, int] = field(default_factory=dict)
    """IPU -> bytes live at every step (empty when unknown)."""
    labels: tuple[StepLabel, ...] = ()
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        import numpy as np
        import pandas as pd

        programs = self.programs
        if not isinstance(programs, pd.Categorical):
            programs = pd.Categorical([str(p) for p in programs])
        if programs.categories.dtype != "str" and len(programs.categories):
            programs = programs.rename_categories([str(c) for c in programs.categories])
        n = len(programs)
        if not n:
            raise ModelError("a liveness table needs at least one step (use None for unknown)")
        total = _int64(self.total_bytes, "liveness total_bytes")
        if total.shape != (n,):
            raise ModelError(f"liveness total_bytes has {total.shape[0] if total.ndim else 0} values for {n} steps")
        ipus = tuple(int(k) for k in self.ipus)
        if len(set(ipus)) != len(ipus) or any(k < 0 for k in ipus):
            raise ModelError(f"liveness ipus must be distinct non-negative integers, got {list(ipus)}")
        per = None
        if self.ipu_bytes is not None:
            per = _int64(self.ipu_bytes, "liveness ipu_bytes")
            if per.ndim != 2 or per.shape != (n, len(ipus)):
                raise ModelError(f"liveness ipu_bytes must be [{n} steps, {len(ipus)} IPUs], got {list(per.shape)}")
        elif ipus:
            raise ModelError("liveness ipus given without ipu_bytes")
        always = {}
        for k, v in dict(self.always_live_bytes).items():
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or int(v) < 0:
                raise ModelError(f"liveness always_live_bytes of IPU {k} must be a non-negative integer, got {v!r}")
            always[int(k)] = int(v)
        labels = tuple(x if isinstance(x, StepLabel) else StepLabel(**x) for x in self.labels)
        for x in labels:
            if x.step >= n:
                raise ModelError(f"liveness label step {x.step} is beyond the table's {n} steps")
        self.programs, self.total_bytes, self.ipu_bytes, self.ipus = programs, total, per, ipus
        self.always_live_bytes = dict(sorted(always.items()))
        self.labels = labels
        self.notes = tuple(str(x) for x in self.notes)

    def __len__(self) -> int:
        return len(self.programs)

    @property
    def per_ipu(self) -> bool:
        return self.ipu_bytes is not None

    def series(self, ipu: int | None = None) -> np.ndarray:
        """Not-always-live bytes per step of ``ipu`` (None: the replica's total)."""
        if ipu is None:
            return self.total_bytes
        if ipu not in self.ipus:
            raise KeyError(f"no liveness figures for IPU {ipu} (IPUs: {list(self.ipus)})")
        return self.ipu_bytes[:, self.ipus.index(ipu)]

    def peak(self, ipu: int | None = None) -> tuple[int, int]:
        """(step, bytes) of the largest not-always-live bytes (the first step reaching them)."""
        s = self.series(ipu)
        step = int(s.argmax())
        return step, int(s[step])

    def label(self, step: int) -> StepLabel | None:
        return next((x for x in self.labels if x.step == step), None)

    def program(self, step: int) -> str:
        return str(self.programs[step])

    def frame(self, ipu: int | None = None, max_points: int | None = None) -> pd.DataFrame:
        """``step``, ``program``, ``not_always_live_bytes`` of ``ipu`` (None: the replica's total).
        With ``max_points``, long tables are reduced to the largest value of each of that many
        equal runs of steps (the peak is always kept), so a figure never draws 10⁶ points."""
        import numpy as np
        import pandas as pd

        s = self.series(ipu)
        n = len(s)
        if max_points is None or n <= max_points:
            idx = np.arange(n)
        else:
            edges = np.linspace(0, n, max_points + 1).astype("int64")
            starts = edges[:-1][edges[:-1] < edges[1:]]
            best = np.maximum.reduceat(s, starts)
            # the first step of each run reaching its maximum
            run = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
            hit = np.flatnonzero(s == best[run])
            first = np.unique(run[hit], return_index=True)[1]
            idx = hit[first]
        return pd.DataFrame({"step": idx.astype("int64"), "program": self.programs[idx].astype(str),
                             "not_always_live_bytes": s[idx]})

    def __eq__(self, other: object) -> bool:
        import numpy as np

        if not isinstance(other, LivenessTable):
            return NotImplemented
        return (list(self.programs.astype(str)) == list(other.programs.astype(str))
                and np.array_equal(self.total_bytes, other.total_bytes)
                and (self.ipu_bytes is None) == (other.ipu_bytes is None)
                and (self.ipu_bytes is None or np.array_equal(self.ipu_bytes, other.ipu_bytes))
                and self.ipus == other.ipus and self.always_live_bytes == other.always_live_bytes
                and self.labels == other.labels and self.notes == other.notes)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LivenessTable(steps={len(self)}, ipus={list(self.ipus) or 'total only'})"


def _int64(values: Any, what: str) -> np.ndarray:
    """``values`` as an int64 array, refusing what a cast would change (fractions, negatives)."""
    import numpy as np

    a = np.asarray(values)
    if a.dtype.kind == "b":
        raise ModelError(f"{what} holds booleans, not bytes")
    if a.dtype.kind == "f":
        if not np.isfinite(a).all() or (a != np.floor(a)).any():
            raise ModelError(f"{what} holds values that are not whole numbers of bytes")
    elif a.dtype.kind not in "iu":
        try:
            a = a.astype("int64")
        except (TypeError, ValueError):
            raise ModelError(f"{what} must hold integers") from None
    if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo("int64").max:
        raise ModelError(f"{what} holds values beyond int64")
    a = a.astype("int64", copy=False)
    if a.size and int(a.min()) < 0:
        raise ModelError(f"{what} holds negative bytes ({int(a.min())})")
    return a


def liveness_frame(table: LivenessTable, max_points: int | None = None,
                   ipus: Sequence[int | None] | None = None) -> pd.DataFrame:
    """``ipu``, ``step``, ``program``, ``not_always_live_bytes``, ``always_live_bytes`` and
    ``live_bytes`` (their sum) per step of every IPU (``ipu`` null: the replica's total, without
    per-IPU figures), reduced to ``max_points`` steps per IPU as :meth:`LivenessTable.frame` does;
    ``ipus``: only those (in that order; None stands for the replica's total)."""
    import pandas as pd

    parts = []
    for k in (ipus if ipus is not None else table.ipus if table.per_ipu else (None,)):
        f = table.frame(k, max_points=max_points)
        al = (table.always_live_bytes.get(k, 0) if k is not None else sum(table.always_live_bytes.values()))
        f.insert(0, "ipu", pd.array([k] * len(f), dtype="Int64"))
        f["always_live_bytes"] = al
        f["live_bytes"] = f["not_always_live_bytes"] + al
        parts.append(f)
    return pd.concat(parts, ignore_index=True)


def labels_from(items: Sequence[Mapping[str, Any]]) -> tuple[StepLabel, ...]:
    """Labels from their JSON form (:meth:`StepLabel.to_dict`)."""
    return tuple(StepLabel(step=int(x["step"]), layer=x.get("layer"), operation=x.get("operation"),
                           op_type=x.get("op_type"),
                           contributors=tuple((str(c[0]), int(c[1])) for c in x.get("contributors") or ()),
                           contributors_scope=x.get("contributors_scope", "replica")) for x in items)
