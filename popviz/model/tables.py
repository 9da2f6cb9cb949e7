"""The Report's tables (memory per tile or IPU, execution steps and runs) and the checks that
coerce every source's frames to one set of columns and dtypes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is a core dependency, but importing it costs ~0.3 s: keep it lazy.
    import pandas as pd

    from popviz.model.rowsource import RowSource


# Column name -> dtype. Tables are coerced to these on construction, so every source and the
# bundle round trip give identical dtypes.
MEMORY_COLUMNS: dict[str, str] = {
    "ipu": "int32",
    "tile": "int32",
    "total_bytes_including_gaps": "int64",
    "total_bytes_excluding_gaps": "int64",
    "always_live_bytes": "int64",
    "not_always_live_bytes": "int64",
    "overflow_bytes": "int64",
}
CATEGORY_PREFIX = "cat_"
CATEGORY_SUFFIX = "_bytes"

EXECUTION_COLUMNS: dict[str, str] = {
    "run": "int32",
    "step": "int32",
    "program": "category",
    "program_type": "category",
    "ipu": "int32",
    "cycles": "int64",
    "start_cycle": "Int64",
}
RUN_COLUMNS: dict[str, str] = {"run": "int32", "name": "str", "duration_seconds": "float64"}
BYTES_PER_ROW = 32
"""About what one execution row takes in a pandas frame (run, step, IPU int32; cycles int64;
start Int64 with its mask; two category codes)."""
WARN_MATERIALISE_ROWS = 2**25
"""Reading this many rows or more into memory at once warns (about 1 GiB)."""


class ModelError(ValueError):
    """A Report part was built with values that break the model's rules (a programming error
    in a source or builder; sources turn it into a CorruptReportError naming the file)."""


def _coerce(df: pd.DataFrame, columns: Mapping[str, str], what: str, optional: Sequence[str] = (),
            extra_dtype: str | None = None, extra_prefix: str | None = None) -> pd.DataFrame:
    """Return ``df`` with exactly the declared columns (in order) and dtypes.

    ``optional`` columns may be absent (they are then filled with nulls); columns starting with
    ``extra_prefix`` are kept with ``extra_dtype``; any other column is an error.
    """
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise ModelError(f"{what} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns and c not in optional]
    if missing:
        raise ModelError(f"{what} lacks column(s) {', '.join(missing)}")
    extra = [c for c in df.columns if c not in columns]
    unknown = [c for c in extra if not (extra_prefix and str(c).startswith(extra_prefix))]
    if unknown:
        raise ModelError(f"{what} has unknown column(s) {', '.join(map(str, unknown))}")
    out = {}
    n = len(df)
    for name, dtype in columns.items():
        if name in df.columns:
            col = df[name]
        elif dtype == "Int64":  # all missing, built without n Python objects
            import numpy as np

            col = pd.Series(pd.arrays.IntegerArray(np.zeros(n, dtype="int64"), np.ones(n, dtype=bool)),
                            copy=False)
        else:
            col = pd.Series([None] * n, dtype="object")
        try:
            if dtype == "category":
                col = col.astype("str").astype("category") if col.dtype != "category" else col
                if col.cat.categories.dtype != "str":
                    col = col.cat.rename_categories([str(c) for c in col.cat.categories])
            elif col.dtype == dtype:
                pass  # already right (and an int64/int32 numpy column holds no missing values)
            elif dtype.startswith("int") and col.isna().any():
                raise ModelError(f"{what} column {name} has missing values")
            else:
                if dtype.lower().startswith("int"):
                    _check_integral(col, dtype, what, name)
                col = col.astype(dtype)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ModelError):
                raise
            raise ModelError(f"{what} column {name} cannot be read as {dtype}: {exc}") from None
        out[name] = col.reset_index(drop=True)
    for name in sorted(c for c in extra):
        col = df[name]
        if col.isna().any():
            raise ModelError(f"{what} column {name} has missing values")
        try:
            out[name] = col.astype(extra_dtype).reset_index(drop=True)
        except (TypeError, ValueError) as exc:
            raise ModelError(f"{what} column {name} cannot be read as {extra_dtype}: {exc}") from None
    # copy=False: no consolidation into 2-D blocks, which would copy every column (copy-on-write
    # keeps the caller's frame and this one independent).
    return pd.DataFrame(out, copy=False)


def _check_integral(col: pd.Series, dtype: str, what: str, name: str) -> None:
    """Refuse values an integer cast would silently change: fractions, booleans, out of range."""
    import numpy as np

    kind = col.dtype.kind
    if kind == "b":
        raise ModelError(f"{what} column {name} holds booleans, not integers")
    if kind not in "fu":
        return
    info = np.iinfo(dtype.lower())
    values = col.dropna().to_numpy()
    if kind == "f":
        bad = ~np.isfinite(values) | (values != np.floor(values))
        bad |= (values < info.min) | (values >= float(info.max))
    else:
        bad = values > info.max
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ModelError(f"{what} column {name} row {row}: {values[row]!r} is not a whole number "
                         f"that fits {dtype.lower()}")


def _distinct(values):
    """The distinct values of a 1-D integer array: in one linear pass when sorted (execution
    steps come in run order), else by hashing."""
    import numpy as np
    import pandas as pd

    if len(values) > 1 and bool((values[1:] >= values[:-1]).all()):
        return values[np.concatenate(([True], values[1:] != values[:-1]))]
    return pd.unique(values)


def _frames_equal(a: pd.DataFrame | None, b: pd.DataFrame | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return list(a.columns) == list(b.columns) and a.dtypes.equals(b.dtypes) and a.equals(b)


class MemoryTable:
    """Memory use, either per tile (``level == "tile"``) or, where only per-IPU figures exist
    (e.g. the emulator), per IPU (``level == "ipu"``; no ``tile`` column).

    Columns: ``ipu``, ``tile`` (tile level only), ``total_bytes_including_gaps``,
    ``total_bytes_excluding_gaps``, ``always_live_bytes``, ``not_always_live_bytes``,
    ``overflow_bytes`` (bytes beyond the tile's capacity; non-zero means out of memory), and one
    ``cat_<category>_bytes`` column per memory category where known (libpva's names, e.g.
    ``cat_vertexCode_bytes``).
    """

    LEVELS = ("tile", "ipu")

    def __init__(self, frame: pd.DataFrame, level: str = "tile") -> None:
        if level not in self.LEVELS:
            raise ModelError(f"memory level must be 'tile' or 'ipu', got {level!r}")
        columns = dict(MEMORY_COLUMNS)
        if level == "ipu":
            del columns["tile"]
        self.level = level
        self.frame = _coerce(frame, columns, f"{level} memory table",
                             extra_dtype="int64", extra_prefix=CATEGORY_PREFIX)
        bad = [c for c in self.frame.columns
               if c.startswith(CATEGORY_PREFIX) and not c.endswith(CATEGORY_SUFFIX)]
        if bad:
            raise ModelError(f"memory category column(s) {', '.join(bad)} must end in _bytes")

    @property
    def categories(self) -> list[str]:
        """Memory category names present (without prefix/suffix), e.g. ``["constant", ...]``."""
        return [c[len(CATEGORY_PREFIX):-len(CATEGORY_SUFFIX)] for c in self.frame.columns
                if c.startswith(CATEGORY_PREFIX)]

    @property
    def ipus(self) -> list[int]:
        return sorted(int(i) for i in self.frame["ipu"].unique())

    def per_ipu(self) -> pd.DataFrame:
        """Sums per IPU (a copy of the table itself at IPU level)."""
        if self.level == "ipu":
            return self.frame.copy()
        return (self.frame.drop(columns="tile").groupby("ipu", sort=True).sum()
                .reset_index().astype({"ipu": "int32"}))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, MemoryTable) and self.level == other.level
                and _frames_equal(self.frame, other.frame))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MemoryTable(level={self.level!r}, rows={len(self.frame)}, ipus={self.ipus})"


class ExecutionTable:
    """Execution steps: one row per program step per IPU.

    ``steps`` columns: ``run`` (index into ``runs``), ``step`` (index of the step within its
    run), ``program`` (name), ``program_type`` (``OnTileExecute``, ``DoExchange``,
    ``GlobalExchange``, ``StreamCopyBegin``/``Mid``/``End``, ``Sync``, ...), ``ipu``, ``cycles``
    and ``start_cycle`` (cycle at which the step started on that IPU, null where unknown).
    ``runs`` columns: ``run``, ``name``, ``duration_seconds`` (NaN where unknown).

    The rows may stay out of core (``rows``: a :class:`~popviz.model.rowsource.RowSource`, e.g.
    a large bundle's Parquet file): every analysis and figure reduces them block by block
    (:mod:`popviz.model.aggregate`), and ``steps`` reads the whole table into a pandas frame
    only when asked for (:attr:`nbytes_in_memory` says how big it would be; :meth:`read` reads
    some runs or columns).
    """

    materialisations = 0
    """How many times a table held out of core was read whole into memory (``steps``), in this
    process: the analyses and figures never do."""

    def __init__(self, steps: pd.DataFrame | None = None, runs: pd.DataFrame | None = None, *,
                 rows: RowSource | None = None) -> None:
        import pandas as pd

        from popviz.model.rowsource import FrameRows

        if rows is not None:
            if steps is not None or runs is None:
                raise ModelError("an execution table out of core takes its rows and a runs table, not steps")
            self._steps = None
            self.rows = rows
            self.runs = _coerce(runs, RUN_COLUMNS, "execution runs table", optional=("duration_seconds",))
            return  # its rows' runs are checked by the one pass over them (RunCycles)
        if steps is None:
            raise ModelError("an execution table needs its steps")
        self._steps = _coerce(steps, EXECUTION_COLUMNS, "execution steps table",
                              optional=("start_cycle",))
        self.rows = FrameRows(self._steps)
        present = _distinct(self._steps["run"].to_numpy())
        if runs is None:
            ids = sorted(int(r) for r in present)
            runs = pd.DataFrame({"run": ids, "name": [f"run{r}" for r in ids],
                                 "duration_seconds": [float("nan")] * len(ids)})
        self.runs = _coerce(runs, RUN_COLUMNS, "execution runs table",
                            optional=("duration_seconds",))
        unknown = set(present.tolist()) - set(self.runs["run"].tolist())
        if unknown:
            raise ModelError(f"execution steps refer to run(s) {sorted(unknown)} missing from runs")

    @property
    def on_disk(self) -> bool:
        """Whether the rows are held out of core (read block by block)."""
        return self._steps is None

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows

    @property
    def nbytes_in_memory(self) -> int:
        """About how many bytes ``steps`` takes as a pandas frame (≈32 a row)."""
        return BYTES_PER_ROW * self.num_rows

    @property
    def steps(self) -> pd.DataFrame:
        """Every row as a pandas frame; a table held out of core is read whole the first time
        (≈32 bytes a row: 3 GiB for 10⁸ rows; :meth:`read` reads part of it)."""
        if self._steps is None:
            import warnings

            if self.num_rows >= WARN_MATERIALISE_ROWS:
                warnings.warn(f"reading all {self.num_rows:,} execution rows into memory "
                              f"(about {self.nbytes_in_memory / 2**30:,.1f} GiB); "
                              "execution.read(runs=[...], columns=[...]) reads part of them",
                              ResourceWarning, stacklevel=2)
            type(self).materialisations += 1
            self._steps = _coerce(self.rows.frame(), EXECUTION_COLUMNS, "execution steps table",
                                  optional=("start_cycle",))
        return self._steps

    def read(self, runs: Sequence[int] | None = None, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The rows of ``runs`` (default: all), only ``columns`` (default: all), as a frame,
        without holding the rest in memory."""
        if columns is not None:
            unknown = [c for c in columns if c not in EXECUTION_COLUMNS]
            if unknown:
                raise ModelError(f"execution steps have no column(s) {', '.join(unknown)}; "
                                 f"columns: {', '.join(EXECUTION_COLUMNS)}")
        if self._steps is not None:
            from popviz.model.rowsource import FrameRows

            return FrameRows(self._steps).frame(columns, runs)
        frame = self.rows.frame(columns, runs)
        wanted = {c: t for c, t in EXECUTION_COLUMNS.items() if columns is None or c in columns}
        return _coerce(frame, wanted, "execution steps table", optional=("start_cycle",))

    @property
    def ipus(self) -> list[int]:
        if self._steps is not None:
            return sorted(int(i) for i in self._steps["ipu"].unique())
        cached = self.__dict__.get("_popviz_run_cycles")  # the shared reduction's, when it ran
        if cached is not None and cached[0] is self.rows:
            return cached[1].ipus
        if "_ipus" not in self.__dict__:  # one pass over the IPU column
            import numpy as np

            seen = np.zeros(0, dtype="int64")
            for _, b in self.rows.blocks(["ipu"]):
                seen = np.union1d(seen, np.unique(b["ipu"]))
            self.__dict__["_ipus"] = [int(i) for i in seen]
        return list(self.__dict__["_ipus"])

    def cycles_by_type(self) -> pd.DataFrame:
        """Total cycles per IPU and program type (IPUs as rows, types as columns)."""
        return (self.steps.groupby(["ipu", "program_type"], observed=True)["cycles"].sum()
                .unstack(fill_value=0))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ExecutionTable) and _frames_equal(self.steps, other.steps)
                and _frames_equal(self.runs, other.runs))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = " out of core" if self.on_disk else ""
        return f"ExecutionTable(steps={self.num_rows}{where}, runs={len(self.runs)}, ipus={self.ipus})"
