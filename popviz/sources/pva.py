"""Read a real Poplar ``profile.pop`` through libpva (the ``pva`` module of the Poplar SDK).

This is the only module that imports ``pva``. It uses only the libpva names that public code
calls (``docs/sources.md`` lists them and what happens without each; libpva's own reference is
the PopVision Analysis Python API, https://docs.graphcore.ai/projects/libpva/en/latest/api-python.html). What libpva cannot tell (PopTorch options, stages, host
tensors) comes from the capture manifest, merged by :mod:`popviz.sources.discover`; without one,
:mod:`popviz.sources.infer` infers what the execution shows, labelled as inferred.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from popviz.errors import CorruptReportError, MissingDependencyError, shown
from popviz.model import STREAM_COPY_TYPES, ExecutionTable, MemoryTable, Provenance, Report, Target

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


def _category_names(memory: Any) -> list[str]:
    """The memory categories libpva exposes (the set varies by SDK; read from one tile)."""
    cats = memory.category
    names = []
    for name in dir(cats):
        if name.startswith("_"):
            continue
        total = getattr(getattr(cats, name, None), "total", None)
        if isinstance(total, (int, float)):
            names.append(name)
    return sorted(names)


def _tile_lists(pva_report: Any) -> list[tuple[int, Any]]:
    """(first tile's IPU, tiles) from ``compilation.ipus[k].tiles`` or, on SDKs without it,
    ``compilation.tiles`` (split into IPUs by ``target.tilesPerIpu`` afterwards)."""
    compilation = pva_report.compilation
    ipus = getattr(compilation, "ipus", None)
    if ipus is not None:
        return [(k, ipu.tiles) for k, ipu in enumerate(ipus)]
    return [(0, compilation.tiles)]


TILE_FIELDS = ("total.includingGaps", "total.excludingGaps", "alwaysLiveBytes",
               "notAlwaysLiveBytes", "overflowed.includingGaps")
MEMORY_FIELDS = ("total_bytes_including_gaps", "total_bytes_excluding_gaps", "always_live_bytes",
                 "not_always_live_bytes", "overflow_bytes")
PROGRESS_EVERY = 8192
"""Tiles or steps read between two progress updates (``popviz.ui.progress``)."""


def _memory(pva_report: Any) -> MemoryTable:
    """One row per tile. libpva gives no per-IPU memory arrays, so each tile is read once: its
    five totals with one ``attrgetter`` and its categories by the names found on the first
    tile, into compact int64 buffers (no per-tile dicts)."""
    from array import array
    from operator import attrgetter

    import numpy as np
    import pandas as pd

    from popviz.ui import progress

    per_ipu = int(pva_report.compilation.target.tilesPerIpu)
    totals = array("q")
    cats = array("q")
    names: list[str] | None = None
    ipu_of_first: list[tuple[int, int]] = []
    get_totals = attrgetter(*TILE_FIELDS)
    count = 0
    lists = _tile_lists(pva_report)
    try:
        of = f" of {sum(len(tiles) for _k, tiles in lists):,}"
    except TypeError:  # tiles without a length: progress counts without a total
        of = ""
    for ipu_index, tiles in lists:
        ipu_of_first.append((ipu_index, count))
        for tile in tiles:
            m = tile.memory
            totals.extend(get_totals(m))
            if names is None:
                names = _category_names(m)
                getters = [attrgetter(f"{n}.total") for n in names]
            c = m.category
            for get in getters:
                try:
                    cats.append(get(c))
                except AttributeError:  # a category this tile lacks
                    cats.append(0)
            count += 1
            if count % PROGRESS_EVERY == 0:
                progress(f"tile {count:,}{of}")
    names = names or []
    t = np.frombuffer(totals, dtype="int64").reshape(count, len(TILE_FIELDS)) if count else \
        np.zeros((0, len(TILE_FIELDS)), dtype="int64")
    index = np.arange(count, dtype="int64")
    if len(ipu_of_first) > 1:  # nested: IPU k's tiles start at its recorded offset
        ipu = np.zeros(count, dtype="int32")
        tile = np.zeros(count, dtype="int32")
        bounds = [first for _k, first in ipu_of_first] + [count]
        for (k, first), stop in zip(ipu_of_first, bounds[1:], strict=True):
            ipu[first:stop] = k
            tile[first:stop] = index[first:stop] - first
    else:
        ipu, tile = (index // per_ipu).astype("int32"), (index % per_ipu).astype("int32")
    frame = pd.DataFrame({"ipu": ipu, "tile": tile,
                          **{col: t[:, k] for k, col in enumerate(MEMORY_FIELDS)}})
    c = np.frombuffer(cats, dtype="int64").reshape(count, len(names)) if count and names else None
    for k, name in enumerate(names):
        frame[f"cat_{name}_bytes"] = c[:, k]
    return MemoryTable(frame, level="tile")


class _AllSteps:
    """``execution.steps`` seen as one run, for SDKs whose execution has no ``runs``."""

    name = "all steps"
    microseconds = None

    def __init__(self, steps: Any) -> None:
        self.steps = steps


def _categorical(labels: list[str], codes):  # -> pandas.Categorical
    """``labels[codes]`` as a categorical with sorted categories (labels may repeat)."""
    import numpy as np
    import pandas as pd

    categories = sorted(set(labels))
    position = {c: i for i, c in enumerate(categories)}
    lut = np.array([position[x] for x in labels], dtype="int32")
    return pd.Categorical.from_codes(lut[codes], categories=categories)


def _run_seconds(micro: Any) -> float:
    """A run's duration: ``run.microseconds`` as a number, or as libpva's ``.start`` / ``.end``
    (Graphcore's reptil helper reads ``run.microseconds.end - run.microseconds.start``)."""
    if micro is None:
        return float("nan")
    start, end = getattr(micro, "start", None), getattr(micro, "end", None)
    if start is not None and end is not None:
        return (float(end) - float(start)) / 1e6
    return float(micro) / 1e6


def _execution(pva_report: Any, copies: dict | None = None) -> ExecutionTable | None:
    """One row per step per IPU with cycles. Each step's per-IPU cycles (``step.ipus[k].cycles``,
    what libpva gives per step) are read once into compact buffers; the step-level columns (run,
    step, program) are stored once per step and repeated with NumPy, never per tile (a step's
    ``cyclesByTile`` would be ~1,500 values per IPU). ``copies``, when given, collects the
    stream-copy steps for :mod:`popviz.sources.pva_streams` in the same pass."""
    from array import array
    from itertools import compress
    from operator import attrgetter

    import pandas as pd

    from popviz.ui import progress

    execution = getattr(pva_report, "execution", None)
    runs = getattr(execution, "runs", None) if execution is not None else None
    if runs is None and execution is not None and getattr(execution, "steps", None) is not None:
        runs = [_AllSteps(execution.steps)]  # SDKs without runs: one run of every step
    runs = list(runs or [])
    if not runs:
        return None
    total = None
    try:
        total = sum(len(run.steps) for run in runs)
    except TypeError:  # steps without a length: progress counts without a total
        pass
    per_step = array("i")  # rows each step contributes
    step_run, step_index, step_program = array("i"), array("i"), array("i")
    ipu_col, cycles_col, start_col = array("i"), array("q"), array("q")
    programs: dict[tuple[str, str], int] = {}
    run_rows = []
    done = 0
    get_cycles = attrgetter("cycles")
    get_start = attrgetter("activeCycles.cyclesFrom.max")
    starts = True  # start cycles are optional: the first step without them turns them off
    spill, limit, started = None, _out_of_core_rows(), False  # a table too large for memory: on disk

    def piece():  # the rows read since the last piece, as the model's frame
        return _frame(per_step, step_run, step_index, step_program, ipu_col, cycles_col, start_col, starts, programs)

    for r, run in enumerate(runs):
        if len(cycles_col) > limit:  # whole runs so far: write them out (start cycles per run)
            spill = spill or _spill()
            started |= starts
            spill.write(piece())
            for buf in (per_step, step_run, step_index, step_program, ipu_col, cycles_col, start_col):
                del buf[:]
        micro = getattr(run, "microseconds", None)
        run_rows.append((r, str(run.name), _run_seconds(micro)))
        for s, step in enumerate(run.steps):
            program = step.program
            key = (str(program.name), _enum_name(program.type))
            code = programs.setdefault(key, len(programs))
            ipus = step.ipus
            # C-level loops over the step's IPUs (map / compress): no Python code per IPU
            cycles = list(map(get_cycles, ipus))
            busy = list(compress(range(len(cycles)), cycles))
            per_step.append(len(busy))
            step_run.append(r)
            step_index.append(s)
            step_program.append(code)
            ipu_col.extend(busy)
            cycles_col.extend(compress(cycles, cycles))
            if copies is not None and key[1] in STREAM_COPY_TYPES:
                from popviz.sources.pva_streams import collect

                collect(copies, r, key, ipus, cycles)
            if starts:
                try:
                    start_col.extend(map(get_start, compress(ipus, cycles)))
                except (AttributeError, TypeError, OverflowError):
                    starts = False
            done += 1
            if done % PROGRESS_EVERY == 0:
                progress(f"step {done:,}" + (f" of {total:,}" if total else ""))
    run_frame = pd.DataFrame(run_rows, columns=["run", "name", "duration_seconds"])
    if spill is not None:
        if len(per_step):
            spill.write(piece())
        try:
            rows = spill.close(hide=("start_cycle",) if started and not starts else ())
        except BaseException:
            spill.discard()
            raise
        return ExecutionTable(rows=rows, runs=run_frame) if rows.num_rows else None
    frame = piece()
    if frame is None:
        return None  # no step ran on any IPU: the engine never executed
    return ExecutionTable(frame, run_frame)


def _out_of_core_rows() -> int:
    from popviz.sources.parquet_rows import out_of_core_rows

    return out_of_core_rows()


def _spill():  # -> popviz.sources.parquet_rows.Spill
    from popviz.sources.parquet_rows import Spill

    return Spill()


def _frame(per_step, step_run, step_index, step_program, ipu_col, cycles_col, start_col, starts: bool,
           programs: dict[tuple[str, str], int]):  # -> pandas.DataFrame | None
    """The execution rows buffered (per step: its rows, run, index and program; per row: IPU,
    cycles and, where ``starts``, the absolute start) as the model's frame, start cycles relative
    to their run's first step; None without a row."""
    import numpy as np
    import pandas as pd

    counts = np.frombuffer(per_step, dtype="int32") if len(per_step) else np.zeros(0, dtype="int32")
    if not counts.sum():
        return None
    codes = np.repeat(np.frombuffer(step_program, dtype="int32"), counts)
    n = int(counts.sum())
    start = (pd.array(np.frombuffer(start_col, dtype="int64").copy(), dtype="Int64") if starts
             else pd.array([pd.NA] * n, dtype="Int64"))
    frame = pd.DataFrame({
        "run": np.repeat(np.frombuffer(step_run, dtype="int32"), counts),
        "step": np.repeat(np.frombuffer(step_index, dtype="int32"), counts),
        "program": _categorical([k[0] for k in programs], codes),
        "program_type": _categorical([k[1] for k in programs], codes),
        "ipu": np.frombuffer(ipu_col, dtype="int32").copy(),
        "cycles": np.frombuffer(cycles_col, dtype="int64").copy(),
        "start_cycle": start,
    })
    if frame["start_cycle"].notna().any():  # counters are absolute: make them relative to the run
        first = frame.groupby("run")["start_cycle"].transform("min")
        frame["start_cycle"] = frame["start_cycle"] - first
    return frame


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
    copies: dict = {}
    execution = _execution(pva_report, copies)
    from popviz.sources import pva_blocks, pva_streams

    streams = pva_streams.stream_table(pva, pva_report, copies) if execution is not None else None
    blocks, block_note = pva_blocks.read_blocks(pva_report)
    mtime = _dt.datetime.fromtimestamp(profile.stat().st_mtime, _dt.timezone.utc)
    notes = () if execution is not None else (
        "no execution profile: the compile ran out of memory or the engine never ran",)
    notes += tuple(n for n in (pva_streams.note(streams), block_note) if n)
    from popviz.sources.liveness import read_liveness

    target, memory = _target(pva_report), _memory(pva_report)
    return Report(
        name=name or profile.parent.name,
        provenance=Provenance(source="pva", estimated=False, tool=f"Poplar SDK {version}",
                              versions={"poplar": version},
                              captured_at=mtime.isoformat(timespec="seconds"), notes=notes),
        target=target,
        memory=memory,
        execution=execution,
        path=str(profile.parent),
        streams=streams,
        blocks=blocks,
        liveness=read_liveness(pva_report, memory, target),
    )


def read_operations(profile: str | Path):  # -> tuple[list[Operation], list[tuple[str, int]]]
    """The profile's operations that PopTorch's debug contexts place in a layer, and its
    always-live variables (name, bytes), for :mod:`popviz.sources.attribution`. Both lists are
    empty when this libpva has no ``OperationAnalysis`` or the debug contexts name no layer
    (``debug.cbor`` missing); nothing here is required."""

    from popviz.sources.attribution import Operation, layer_context

    profile = Path(profile)
    pva = import_pva(profile)
    analysis = getattr(pva, "OperationAnalysis", None)
    if analysis is None:
        return [], []
    debug = _debug_cbor(profile)
    try:
        pva_report = pva.openReport(str(profile), str(debug)) if debug else pva.openReport(str(profile))
        operations = list(analysis(pva_report).operations)
    except Exception:  # libpva's own exception types: attribution is optional
        return [], []
    from popviz.sources.layer_memory import program_code_bytes

    out = []
    code_of: dict[str, int | None] = {}
    for op in operations:
        doc = layer_context(op)
        layer = doc.get("layer") if isinstance(doc, dict) else None
        if not isinstance(layer, str) or not layer:
            continue
        try:
            listed = list(op.programs())
            programs = tuple(str(p.name) for p in listed)
        except (AttributeError, TypeError):
            continue
        code = tuple(program_code_bytes(p, code_of) for p in listed)
        out.append(Operation(layer=layer, name=str(getattr(op, "name", doc.get("op_name", ""))),
                             op_type=str(doc.get("op_type", "")), programs=programs,
                             code=code if None not in code else ()))
    variables = []
    for var in getattr(pva_report.compilation, "alwaysLiveVariables", None) or ():
        try:
            variables.append((str(var.name), int(var.size)))
        except (AttributeError, TypeError, ValueError):
            continue
    return out, variables
