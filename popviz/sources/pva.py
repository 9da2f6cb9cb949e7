"""Read a real Poplar ``profile.pop`` through libpva (the ``pva`` module of the Poplar SDK).

This is the only module that imports ``pva``. It uses only the libpva names that public code
calls (see ``docs/sources.md``). What libpva cannot tell (PopTorch options, stages, host
tensors) comes from the capture manifest, merged by :mod:`popviz.sources.discover`.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from popviz.errors import CorruptReportError, MissingDependencyError, shown
from popviz.model import ExecutionTable, MemoryTable, Provenance, Report, Target

PROFILE_FILE = "profile.pop"
DEBUG_FILE = "debug.cbor"

ARCHITECTURES = {"Ipu1": "Mk1", "Ipu2": "Mk2", "Ipu21": "Bow"}


def import_pva(profile: Path):
    """The ``pva`` module, or a MissingDependencyError naming ``profile`` and the way out."""
    try:
        import pva  # type: ignore[import-not-found]
    except ImportError:
        raise MissingDependencyError(
            f"{shown(profile)} needs libpva (the pva module of the Poplar SDK), which is not "
            f"installed here: on the IPU host run `popviz export {shown(profile.parent.parent)}` "
            "and analyse the exported bundle, or enable the Poplar SDK first") from None
    return pva


def _enum_name(value: Any) -> str:
    name = getattr(value, "name", None)
    return str(name) if name else str(value).rsplit(".", 1)[-1]


def _debug_cbor(profile: Path) -> Path | None:
    """``debug.cbor`` beside the profile, or in the report directory above it (PopTorch puts
    it there)."""
    for candidate in (profile.parent / DEBUG_FILE, profile.parent.parent / DEBUG_FILE):
        if candidate.is_file():
            return candidate
    return None


def _target(pva_report: Any) -> Target:
    t = pva_report.compilation.target
    return Target(
        architecture=ARCHITECTURES.get(_enum_name(t.architecture), _enum_name(t.architecture)),
        num_ipus=int(t.numIPUs),
        tiles_per_ipu=int(t.tilesPerIpu),
        bytes_per_tile=int(t.bytesPerTile),
        clock_hz=float(t.clockFrequency),
        num_replicas=int(getattr(t, "numReplicas", 1) or 1),
        ipus_per_replica=int(getattr(t, "ipusPerReplica", 0) or 0) or None,
    )


def _categories(memory: Any) -> dict[str, int]:
    """Every memory category libpva exposes on this tile (the set varies by SDK)."""
    cats = memory.category
    out = {}
    for name in dir(cats):
        if name.startswith("_"):
            continue
        value = getattr(cats, name, None)
        total = getattr(value, "total", None)
        if isinstance(total, (int, float)):
            out[name] = int(total)
    return out


def _tiles(pva_report: Any):
    """(ipu, tile-on-ipu, tile) from ``compilation.ipus[k].tiles`` or, on SDKs without it, from
    ``compilation.tiles`` split by ``target.tilesPerIpu``."""
    compilation = pva_report.compilation
    ipus = getattr(compilation, "ipus", None)
    if ipus is not None:
        for ipu_index, ipu in enumerate(ipus):
            for tile_index, tile in enumerate(ipu.tiles):
                yield ipu_index, tile_index, tile
        return
    per_ipu = int(compilation.target.tilesPerIpu)
    for i, tile in enumerate(compilation.tiles):
        yield i // per_ipu, i % per_ipu, tile


def _memory(pva_report: Any) -> MemoryTable:
    import pandas as pd

    rows: dict[str, list[int]] = {k: [] for k in (
        "ipu", "tile", "total_bytes_including_gaps", "total_bytes_excluding_gaps",
        "always_live_bytes", "not_always_live_bytes", "overflow_bytes")}
    cat_rows: list[dict[str, int]] = []
    for ipu_index, tile_index, tile in _tiles(pva_report):
            m = tile.memory
            rows["ipu"].append(ipu_index)
            rows["tile"].append(tile_index)
            rows["total_bytes_including_gaps"].append(int(m.total.includingGaps))
            rows["total_bytes_excluding_gaps"].append(int(m.total.excludingGaps))
            rows["always_live_bytes"].append(int(m.alwaysLiveBytes))
            rows["not_always_live_bytes"].append(int(m.notAlwaysLiveBytes))
            rows["overflow_bytes"].append(int(m.overflowed.includingGaps))
            cat_rows.append(_categories(m))
    frame = pd.DataFrame(rows)
    names = sorted({n for r in cat_rows for n in r})
    for name in names:
        frame[f"cat_{name}_bytes"] = [r.get(name, 0) for r in cat_rows]
    return MemoryTable(frame, level="tile")


def _start(ipu_step: Any) -> int | None:
    try:
        return int(ipu_step.activeCycles.cyclesFrom.max)
    except (AttributeError, TypeError, ValueError):
        return None


class _AllSteps:
    """``execution.steps`` seen as one run, for SDKs whose execution has no ``runs``."""

    name = "all steps"
    microseconds = None

    def __init__(self, steps: Any) -> None:
        self.steps = steps


def _execution(pva_report: Any) -> ExecutionTable | None:
    import pandas as pd

    execution = getattr(pva_report, "execution", None)
    runs = getattr(execution, "runs", None) if execution is not None else None
    if runs is None and execution is not None and getattr(execution, "steps", None) is not None:
        runs = [_AllSteps(execution.steps)]  # SDKs without runs: one run of every step
    runs = list(runs or [])
    if not runs:
        return None
    steps: list[tuple[int, int, str, str, int, int, int | None]] = []
    run_rows = []
    for r, run in enumerate(runs):
        micro = getattr(run, "microseconds", None)
        run_rows.append((r, str(run.name), float(micro) / 1e6 if micro is not None else float("nan")))
        for s, step in enumerate(run.steps):
            program = step.program
            pname, ptype = str(program.name), _enum_name(program.type)
            for ipu_index, ipu in enumerate(step.ipus):
                cycles = int(ipu.cycles)
                if cycles:
                    steps.append((r, s, pname, ptype, ipu_index, cycles, _start(ipu)))
    frame = pd.DataFrame(steps, columns=["run", "step", "program", "program_type", "ipu", "cycles",
                                         "start_cycle"])
    frame["start_cycle"] = frame["start_cycle"].astype("Int64")
    if frame["start_cycle"].notna().any():  # counters are absolute: make them relative to the run
        first = frame.groupby("run")["start_cycle"].transform("min")
        frame["start_cycle"] = frame["start_cycle"] - first
    return ExecutionTable(frame, pd.DataFrame(run_rows, columns=["run", "name", "duration_seconds"]))


def read_profile(profile: str | Path, name: str | None = None) -> Report:
    """Read one ``profile.pop`` into a Report (engine ``name`` defaults to its directory)."""
    profile = Path(profile)
    pva = import_pva(profile)
    debug = _debug_cbor(profile)
    try:
        pva_report = pva.openReport(str(profile), str(debug)) if debug else pva.openReport(str(profile))
    except Exception as exc:  # libpva raises its own exception types
        raise CorruptReportError(f"{shown(profile)}: libpva cannot open it ({exc}); the profile is "
                                 "incomplete (was the run interrupted?) or from an incompatible SDK") from None
    try:
        version = str(pva_report.poplarVersion.string)
    except AttributeError:
        version = "unknown"
    execution = _execution(pva_report)
    mtime = _dt.datetime.fromtimestamp(profile.stat().st_mtime, _dt.timezone.utc)
    notes = () if execution is not None else (
        "no execution profile: the compile ran out of memory or the engine never ran",)
    return Report(
        name=name or profile.parent.name,
        provenance=Provenance(source="pva", estimated=False, tool=f"Poplar SDK {version}",
                              versions={"poplar": version},
                              captured_at=mtime.isoformat(timespec="seconds"), notes=notes),
        target=_target(pva_report),
        memory=_memory(pva_report),
        execution=execution,
        path=str(profile.parent),
    )
