"""The integer kernels of :class:`popviz.model.aggregate.RunCycles`' pass over an execution
table's blocks: exact integer sums by ``bincount``, sums over a block's range of keys, and the
per-code class tables of the program types and programs (compute, Sync, stream copy, work,
weight update) with the masks they give."""

from __future__ import annotations

from typing import TYPE_CHECKING

from popviz.model.names import COMPUTE_TYPES, STREAM_COPY_TYPES, WEIGHT_UPDATE_PROGRAM

if TYPE_CHECKING:
    import numpy as np

    from popviz.model.rowsource import RowSource

WORK_TYPES = ("OnTileExecute", "DoExchange")
"""Program types that do an IPU's work (the weight-update split counts these)."""


def exact_bincount(key: np.ndarray, weights: np.ndarray, n_bins: int) -> np.ndarray:
    """``numpy.bincount`` of integer weights, exact, as int64: float sums are exact below 2**53
    per bin, else the bins are summed again in int64."""
    import numpy as np

    sums = np.bincount(key, weights=weights, minlength=n_bins)
    if sums.max(initial=0) >= 2**53:
        sums = np.zeros(n_bins, dtype="int64")
        np.add.at(sums, key, weights)
        return sums
    return sums.astype("int64")


def add_ranged(target: np.ndarray, key: np.ndarray, weights: np.ndarray | None) -> None:
    """``target[key] += weights`` (or += 1 per key) over the block's range of keys only."""
    import numpy as np

    if not len(key):
        return
    lo, hi = int(key.min()), int(key.max()) + 1
    local = key - lo
    if weights is None:
        target[lo:hi] += np.bincount(local, minlength=hi - lo)
    else:
        target[lo:hi] += exact_bincount(local, weights, hi - lo)


class Luts:
    """Per category code: which class it is in (one extra entry, for code -1, at the end)."""

    def __init__(self) -> None:
        self.types: list[str] = []
        self.programs: list[str] = []
        import numpy as np

        self.compute = self.sync = self.copy = np.zeros(1, dtype=bool)
        self.work = np.zeros(1, dtype=bool)
        self.update = np.zeros(1, dtype=bool)
        self.update_codes = self.sync_codes = self.copy_codes = np.zeros(0, dtype="int64")

    def refresh(self, source: RowSource) -> None:
        import numpy as np

        types = source.categories("program_type")
        if len(types) != len(self.types):
            self.types = types
            self.compute = np.array([t in COMPUTE_TYPES for t in types] + [False], dtype=bool)
            self.sync = np.array([t == "Sync" for t in types] + [False], dtype=bool)
            self.copy = np.array([t in STREAM_COPY_TYPES for t in types] + [False], dtype=bool)
            self.work = np.array([t in WORK_TYPES for t in types] + [False], dtype=bool)
        programs = source.categories("program")
        if len(programs) != len(self.programs):
            self.programs = programs
            self.update = np.array([bool(WEIGHT_UPDATE_PROGRAM.search(p)) for p in programs] + [False],
                                   dtype=bool)
            self.update_codes = np.flatnonzero(self.update[:-1])
        self.sync_codes = np.flatnonzero(self.sync[:-1])
        self.copy_codes = np.flatnonzero(self.copy[:-1])

    @staticmethod
    def mask(values: np.ndarray, codes: np.ndarray, lut: np.ndarray) -> np.ndarray | None:
        """``lut[values]`` (rows whose code is in ``codes``), None when no code is: a compare per
        code when they are few (a gather through the table costs ~6 ns a row, a compare of the
        small integer codes a tenth of that), else the gather."""
        import numpy as np

        if not len(codes):
            return None
        if len(codes) <= 4:
            m = values == codes[0]
            for c in codes[1:]:
                m |= values == c
            return m
        return np.take(lut.view(np.uint8), values).view(bool)
