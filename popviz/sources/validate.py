"""The boundary check every source's Report passes before any analysis sees it.

Sources parse files into the model; this module then checks what the model's types alone do
not: ranges (bytes and cycles non-negative, sums that fit in int64, finite positive clock,
durations finite and non-negative), cross-references (IPU and tile indices within the target,
stages on existing IPUs, memory-proportion keys naming IPUs), uniqueness of (ipu, tile) rows,
excluding-gaps bytes at most including-gaps bytes, booleans that are booleans and output-mode
periods consistent with the device iterations. A violation raises a one-line
:class:`CorruptReportError` naming the file, the column and the first offending row, so an
analysis never shows an impossible figure. Analyses trust what passes.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from popviz.errors import CorruptReportError, brief, shown
from popviz.model import Report
from popviz.model.aggregate import MAX_TOTAL_CYCLES  # noqa: F401  (2**62 cycles: ~79 years at 1.85 GHz)
from popviz.model.numbers import finite_float


class _Check:
    def __init__(self, report: Report, where: Path | str, files: Mapping[str, Path | str]) -> None:
        self.report = report
        self.where = where
        self.files = files

    def fail(self, part: str, what: str) -> CorruptReportError:
        file = self.files.get(part.split(" ", 1)[0].split(".", 1)[0], self.where)
        return CorruptReportError(f"{shown(file)}: {part}: {what}; the report is damaged: "
                                  "write it again (popviz export / capture)")

    def first_bad(self, frame, mask, table: str, column: str, what: str) -> None:
        import numpy as np

        idx = np.flatnonzero(np.asarray(mask))
        if len(idx):
            row = int(idx[0])
            value = frame[column].iloc[row]
            value = value.item() if hasattr(value, "item") else value
            raise self.fail(f"{table} column {column!r}",
                            f"{what} (row {row}: {value!r}; {len(idx):,} row(s) in all)")


def _finite_number(value: Any) -> bool:
    return finite_float(value) is not None


MAX_TILES_PER_IPU = 2**16
"""An IPU has 1,216 (Mk1) or 1,472 (Mk2) tiles; far more is a damaged file, not a target."""
MAX_IPUS = 2**16
MAX_BYTES_PER_TILE = 2**32


def check_report(report: Report, where: Path | str,
                 files: Mapping[str, Path | str] | None = None) -> Report:
    """Return ``report`` when every value is possible; else raise CorruptReportError
    naming the file the bad value came from: ``files`` maps a part (``tile``/``ipu`` memory,
    ``execution`` steps, ``runs``, ``provenance``, ``target``, ``config``, ``host_io``) to its
    file; parts not in it are named by ``where`` (the directory read).

    One value is mended rather than refused: ``setAvailableMemoryProportion`` naming IPUs the
    model does not use (a script written for 16 IPUs run on 1; PopTorch accepts it). Those
    entries are dropped and kept, as ``IPU<n>`` keys, in ``config.options
    ["available_memory_proportion_ignored"]``, which the memory analysis reports."""
    try:
        return _check_report(report, where, files)
    except BaseException:  # the pass the bundle reader began (if any) must not outlive the error
        if report.execution is not None:
            from popviz.model.aggregate import stop_cycle_totals

            stop_cycle_totals(report.execution)
        raise


def _check_report(report: Report, where: Path | str, files: Mapping[str, Path | str] | None) -> Report:
    c = _Check(report, where, files or {})
    p = report.provenance
    if not isinstance(p.estimated, bool):
        raise c.fail("provenance.estimated", f"must be true or false, got {p.estimated!r}")
    if p.source == "emulator" and not p.estimated:  # never shown as measured
        raise c.fail("provenance.estimated", "must be true for a report the emulator wrote (source "
                     "\"emulator\"): its figures are estimates")
    if not isinstance(p.tool, str):
        raise c.fail("provenance.tool", f"must be a string, got {p.tool!r}")
    if p.captured_at is not None and not isinstance(p.captured_at, str):
        raise c.fail("provenance.captured_at", f"must be a string or null, got {p.captured_at!r}")
    t = report.target
    if t is not None:
        if not isinstance(t.architecture, str) or not t.architecture:
            raise c.fail("target.architecture", f"must be a non-empty string, got {t.architecture!r}")
        if not math.isfinite(t.clock_hz):
            raise c.fail("target.clock_hz", f"must be a finite positive number, got {t.clock_hz!r}")
        for field, most in (("tiles_per_ipu", MAX_TILES_PER_IPU), ("num_ipus", MAX_IPUS),
                            ("bytes_per_tile", MAX_BYTES_PER_TILE)):
            if getattr(t, field) > most:  # a figure sized by it would need terabytes
                raise c.fail(f"target.{field}", f"{getattr(t, field):,} is more than any IPU system has "
                             f"({most:,} at most)")
        if t.num_ipus % t.num_replicas:
            raise c.fail("target.num_ipus", f"{t.num_ipus} is not a multiple of num_replicas "
                         f"{t.num_replicas}")
    if report.memory is not None:
        _memory(c, report)
    if report.execution is not None:
        _execution(c, report)
    if report.config is not None:
        report = _config(c, report)
    if report.host_io is not None:
        _host_io(c, report)
    if report.liveness is not None:
        _liveness(c, report)
    return report


def _liveness(c: _Check, report: Report) -> None:
    """IPUs of the liveness table within the target's (bytes are checked non-negative by the model)."""
    n_ipus = _ipus(report)
    lv = report.liveness
    bad = [k for k in (*lv.ipus, *lv.always_live_bytes) if n_ipus and k >= n_ipus]
    if bad:
        raise c.fail("liveness", f"IPU {bad[0]} is outside the target's {n_ipus} IPU(s)")


def _ipus(report: Report) -> int | None:
    t = report.target
    return t.ipus_per_replica if t is not None else None


def _memory(c: _Check, report: Report) -> None:
    f = report.memory.frame
    table = f"{report.memory.level} memory table"
    for col in f.columns:
        if col.endswith("_bytes") or col.startswith("total_bytes"):  # total_bytes_including_gaps too
            c.first_bad(f, f[col].to_numpy() < 0, table, col, "bytes must not be negative")
    inc = f["total_bytes_including_gaps"].to_numpy()
    c.first_bad(f, f["total_bytes_excluding_gaps"].to_numpy() > inc, table,
                "total_bytes_excluding_gaps", "exceeds total_bytes_including_gaps")
    ipu = f["ipu"].to_numpy()
    n_ipus = _ipus(report)
    c.first_bad(f, (ipu < 0) | (ipu >= n_ipus if n_ipus else False), table, "ipu",
                f"IPU index outside the target's {n_ipus} IPU(s)" if n_ipus else "IPU index is negative")
    if report.memory.level == "tile":
        tile = f["tile"].to_numpy()
        tiles = report.target.tiles_per_ipu if report.target is not None else None
        c.first_bad(f, (tile < 0) | (tile >= tiles if tiles else False), table, "tile",
                    f"tile index outside the target's {tiles} tiles per IPU" if tiles
                    else "tile index is negative")
        c.first_bad(f, f.duplicated(["ipu", "tile"]).to_numpy(), table, "tile",
                    "(ipu, tile) appears more than once")
    else:
        c.first_bad(f, f.duplicated(["ipu"]).to_numpy(), table, "ipu", "IPU appears more than once")


def _execution(c: _Check, report: Report) -> None:
    """The rows' checks come from the one pass over them that every analysis shares
    (:class:`popviz.model.aggregate.RunCycles`, block by block: a table out of core is read once)."""
    import numpy as np

    from popviz.model import ModelError
    from popviz.model.aggregate import cycle_totals

    n_ipus = _ipus(report)
    try:
        problems = cycle_totals(report.execution, n_ipus=n_ipus or 0).problems
    except ModelError as exc:
        raise c.fail("execution steps table", str(exc)) from None
    table = "execution steps table"
    for check, column, what in (
            ("cycles", "cycles", "cycles must not be negative"),
            ("cycle_total", "cycles", "the cycle total exceeds 2**62 from this row on (impossible for a real run)"),
            ("start_cycle", "start_cycle", "must not be negative"),
            ("ipu", "ipu", f"IPU index outside the target's {n_ipus} IPU(s)" if n_ipus else "IPU index is negative"),
            ("run", "run", "run index is negative")):
        if check in problems:
            row, value, count = problems[check]
            raise c.fail(f"{table} column {column!r}", f"{what} (row {row}: {value!r}; {count:,} row(s) in all)")
    runs = report.execution.runs
    d = runs["duration_seconds"].to_numpy()
    c.first_bad(runs, np.isinf(d) | (d < 0), "execution runs table", "duration_seconds",
                "must be a finite non-negative number of seconds (NaN where unknown)")
    c.first_bad(runs, runs.duplicated(["run"]).to_numpy(), "execution runs table", "run",
                "run appears more than once")


AMP_IGNORED = "available_memory_proportion_ignored"
"""``config.options`` key of the available memory proportions set for IPUs outside the target."""


def _config(c: _Check, report: Report) -> Report:
    cfg = report.config
    n_ipus = _ipus(report)
    for i, st in enumerate(cfg.stages):
        for name in ("index", "ipu"):
            value = getattr(st, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise c.fail(f"config.stages[{i}].{name}", f"must be a non-negative integer, got {value!r}")
        if n_ipus is not None and st.ipu >= n_ipus:
            raise c.fail(f"config.stages[{i}].ipu", f"stage {st.index} is on IPU {st.ipu}, but the "
                         f"target has {n_ipus} IPU(s)")
    if cfg.optimizer_state_on_chip is not None and not isinstance(cfg.optimizer_state_on_chip, bool):
        raise c.fail("config.optimizer_state_on_chip",
                     f"must be true, false or null, got {cfg.optimizer_state_on_chip!r}")
    ignored: dict[str, float] = {}
    for ipu, frac in cfg.available_memory_proportion.items():
        if ipu < 0:
            raise c.fail("config.available_memory_proportion", f"names IPU {ipu}, a negative index")
        if not (math.isfinite(frac) and 0 < frac <= 1):
            raise c.fail("config.available_memory_proportion",
                         f"IPU {ipu}: {frac!r} is not a proportion in (0, 1]")
        if n_ipus is not None and ipu >= n_ipus:
            ignored[f"IPU{ipu}"] = frac
    n, d = cfg.output_return_period, cfg.device_iterations
    if cfg.effective_output_mode == "EveryN" and n is not None and d is not None and n > d:
        raise c.fail("config.output_return_period",
                     f"EveryN period {n} exceeds device_iterations {d} (PopTorch would return "
                     "nothing)")
    if not ignored:
        return report
    kept = {k: v for k, v in cfg.available_memory_proportion.items() if f"IPU{k}" not in ignored}
    options = {**cfg.options, AMP_IGNORED: {**dict(cfg.options.get(AMP_IGNORED) or {}), **ignored}}
    return report.replace(config=dataclasses.replace(cfg, available_memory_proportion=kept, options=options))


def _host_io(c: _Check, report: Report) -> None:
    h = report.host_io
    if h.calls is not None and (not isinstance(h.calls, int) or isinstance(h.calls, bool) or h.calls < 0):
        raise c.fail("host_io.calls", f"must be a non-negative integer, got {h.calls!r}")
    if h.compile_seconds is not None and not (_finite_number(h.compile_seconds) and h.compile_seconds >= 0):
        raise c.fail("host_io.compile_seconds", f"must be a finite non-negative number, got "
                     f"{brief(h.compile_seconds)}")
    if h.compile_error is not None and not isinstance(h.compile_error, str):
        raise c.fail("host_io.compile_error", f"must be a string or null, got {brief(h.compile_error)}")
    for t in h.tensors:
        if not isinstance(t.name, str) or not isinstance(t.dtype, str):
            raise c.fail("host_io.tensors", f"tensor name and dtype must be strings, got {t.name!r}")
        if any(dim < 0 for dim in t.shape):
            raise c.fail("host_io.tensors", f"tensor {t.name!r} has a negative dimension {t.shape}")
    for s in h.call_stats:
        if not isinstance(s.metric, str):
            raise c.fail("host_io.call_stats", f"metric must be a string, got {s.metric!r}")
        if not isinstance(s.count, int) or isinstance(s.count, bool) or s.count < 0:
            raise c.fail("host_io.call_stats", f"{s.metric}: count must be a non-negative integer")
        for name in ("sum", "min", "max", "p50", "p90", "p99"):
            value = getattr(s, name)
            if value is None and name.startswith("p"):
                continue
            if not (_finite_number(value) and value >= 0):
                raise c.fail("host_io.call_stats", f"{s.metric}.{name} must be a finite "
                             f"non-negative number, got {brief(value)}")
