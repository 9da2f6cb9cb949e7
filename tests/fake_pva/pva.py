"""A test double of libpva's Python module, exposing exactly the names popviz's adapter uses.

Its "profile.pop" files are opaque to popviz, as real ones are: small ones are JSON, large ones
(``write_columns``) a NumPy ``.npz`` archive. The object graph ``openReport`` returns mirrors
libpva's documented attribute names (docs/sources.md), and like libpva it builds the objects for
a tile or a step's IPUs when they are accessed, not all up front.

Profile builders: ``write_profile`` (the small two-IPU profile), ``write_columns`` (any size,
from columns), and ``pipeline_profile`` / ``single_ipu_inference`` / ``out_of_memory`` (data for
the raw-profile tests).
"""

from __future__ import annotations

import enum
import io
import json
import re
from types import SimpleNamespace as NS

CATEGORY_NAMES = ("vertexCode", "vertexInstanceState", "vectorListDescriptor",
                  "internalExchangeCode", "globalExchangeCode", "hostExchangeCode", "controlCode",
                  "constant", "variable")
"""libpva's memory category names (the set varies by SDK)."""


class _Arch(enum.Enum):
    Ipu1 = 1
    Ipu2 = 2
    Ipu21 = 3


class IPU:
    Architecture = _Arch


class _ProgramType(enum.Enum):
    OnTileExecute = 1
    DoExchange = 2
    StreamCopyBegin = 3
    StreamCopyMid = 4
    StreamCopyEnd = 5
    GlobalExchange = 6
    Sync = 7


class Program:
    Type = _ProgramType


class _Categories:
    def __init__(self, cats: dict[str, int]) -> None:
        for name, total in cats.items():
            setattr(self, name, NS(total=total))


class _Tiles:
    """A sequence of tiles built on access from the tile columns (``start`` to ``stop``)."""

    def __init__(self, cols: dict, start: int, stop: int) -> None:
        self.cols, self.start, self.stop = cols, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: int) -> NS:
        if not 0 <= i < len(self):
            raise IndexError(i)
        c, k = self.cols, self.start + i
        return NS(memory=NS(
            total=NS(includingGaps=int(c["inc"][k]), excludingGaps=int(c["exc"][k])),
            overflowed=NS(includingGaps=int(c["over"][k]), excludingGaps=int(c["over"][k])),
            alwaysLiveBytes=int(c["al"][k]), notAlwaysLiveBytes=int(c["nal"][k]),
            category=_Categories({n: int(v[k]) for n, v in c["cats"].items()})))

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class _IpuStep:
    __slots__ = ("activeCycles", "cycles", "dataIn", "dataOut")

    def __init__(self, cycles: int, start: int, data: tuple | None = None) -> None:
        self.cycles = cycles
        self.activeCycles = NS(cyclesFrom=NS(max=start))
        if data is not None:
            # step.ipus[k].dataIn / dataOut: bytes the step moved (Graphcore's reptil libpva
            # helper, IO.Bandwidth._calculate_bandwidth, sums them over StreamCopyMid steps);
            # absent unless the profile data gives them, as on SDKs without them
            self.dataIn, self.dataOut = data


class _Step:
    """One execution step: ``program`` and, built on access, ``ipus[k].cycles`` /
    ``ipus[k].activeCycles.cyclesFrom.max``."""

    def __init__(self, program: NS, cycles, start, data=None) -> None:
        self.program = program
        self._cycles, self._start, self._data = cycles, start, data

    @property
    def ipus(self) -> list[_IpuStep]:
        data = self._data or [None] * len(self._cycles)
        return [_IpuStep(int(c), int(s), d) for c, s, d in zip(self._cycles, self._start, data, strict=True)]


class _Steps:
    def __init__(self, programs: list[NS], codes, cycles, start, data=None) -> None:
        self.programs, self.codes, self.cycles, self.start = programs, codes, cycles, start
        self.data = data

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: int) -> _Step:
        if not 0 <= i < len(self):
            raise IndexError(i)
        if isinstance(self.data, tuple):  # the columnar form: (bytes in, bytes out)[step, ipu]
            data = list(zip(self.data[0][i].tolist(), self.data[1][i].tolist(), strict=True))
        else:
            data = self.data[i] if self.data is not None else None
        return _Step(self.programs[int(self.codes[i])], self.cycles[i], self.start[i], data)

    def __iter__(self):
        return (self[i] for i in range(len(self)))


class _Chain:
    """``execution.steps`` of SDKs without runs: every run's steps, one after another."""

    def __init__(self, parts: list[_Steps]) -> None:
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __iter__(self):
        for p in self.parts:
            yield from p


def _load(path: str) -> dict:
    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] == b"PK":  # the columnar (npz) form
        import numpy as np

        arrays = np.load(io.BytesIO(raw), allow_pickle=False)
        data = json.loads(str(arrays["meta"]))
        data["_arrays"] = {k: arrays[k] for k in arrays.files if k != "meta"}
        return data
    return json.loads(raw.decode("utf-8"))


def _columns(data: dict) -> tuple[dict, list]:
    """Tile columns and per-run step columns, from either form."""
    if "_arrays" in data:
        a = data["_arrays"]
        tiles = {k: a[f"tile_{k}"] for k in ("inc", "exc", "over", "al", "nal")}
        tiles["cats"] = {n: a[f"cat_{n}"] for n in data["categories"]}
        runs = [(r["name"], r["microseconds"], a[f"run{k}_program"], a[f"run{k}_cycles"],
                 a[f"run{k}_start"],
                 (a[f"run{k}_data_in"], a[f"run{k}_data_out"]) if f"run{k}_data_in" in a else None)
                for k, r in enumerate(data["runs"])]
        return tiles, runs
    flat = [t for ipu in data["tiles"] for t in ipu]
    tiles = {"inc": [t["inc"] for t in flat], "exc": [t["exc"] for t in flat],
             "over": [t.get("over", 0) for t in flat], "al": [t["al"] for t in flat],
             "nal": [t["nal"] for t in flat]}
    names = sorted({n for t in flat for n in t.get("cats", {})})
    tiles["cats"] = {n: [t.get("cats", {}).get(n, 0) for t in flat] for n in names}
    programs = data.setdefault("programs", [])
    runs = []
    for run in data.get("runs", []):
        codes = []
        for step in run["steps"]:
            key = [step["name"], step["type"]]
            if key not in programs:
                programs.append(key)
            codes.append(programs.index(key))
        data = None
        if any("data_in" in s for s in run["steps"]):  # per IPU bytes in/out, where given
            data = [list(zip(s["data_in"], s["data_out"], strict=True)) if "data_in" in s else None
                    for s in run["steps"]]
        runs.append((run["name"], run["microseconds"], codes, [s["cycles"] for s in run["steps"]],
                     [s["start"] for s in run["steps"]], data))
    return tiles, runs


def _poptorch3_context(op: dict) -> NS:
    """An operation's debug context as PopTorch 3 and PopART nest them: PopART's own
    (``"layer": "popart"``, ``category``, ``opid``: popart willow/src/opdebuginfo.cpp) whose
    ``parents[0]`` is PopTorch's (``"layer": "poptorch"``, ``op_name`` = module path with ``/``
    then the op type, ``op_type``), as graphcore/poptorch tests/precompilation_test.py
    (``test_pva_annotations``) reads them. ``op["layer"]`` is the module path (dotted) or ``""``
    for an operation outside any module."""
    path = op["layer"].replace(".", "/")
    name = f"{path}/{op['op_type']}" if path else op["op_type"]
    poptorch = NS(json=json.dumps({"layer": "poptorch", "op_name": name, "op_type": op["op_type"]}),
                  location=NS(fileName="model.py", lineNumber=1), parents=[])
    opid = f"ai.graphcore.{op.get('popart_op', op['op_type'])}:1"
    return NS(json=json.dumps({"layer": "popart", "category": "op", "instanceId": "7", "opid": opid}),
              location=NS(fileName="opx.cpp", lineNumber=1), parents=[poptorch])


class OperationAnalysis:
    """``pva.OperationAnalysis(report).operations``: each with ``name``, ``programs()`` and
    ``debugContext.json`` (PopTorch's ``layer``, ``op_name``, ``op_type``); with
    ``"context": "poptorch3"`` in the data, the nested contexts of :func:`_poptorch3_context`."""

    def __init__(self, report: NS) -> None:
        by_name = {p.name: p for p in report._programs}
        self.operations = [
            NS(name=op["name"], programs=(lambda names=op["programs"]: [by_name[n] for n in names]),
               debugContext=_poptorch3_context(op) if op.get("context") == "poptorch3" else
               NS(json=json.dumps({"layer": op["layer"], "op_name": op["name"], "op_type": op["op_type"]})),
               replacedDebugContext=[],
               location=NS(fileName="model.py", lineNumber=1), parents=[])
            for op in report._operations]


def openReport(path: str, debug_path: str | None = None) -> NS:
    data = _load(path)
    if data.get("broken"):
        raise RuntimeError("Unable to open profile: database disk image is malformed")
    t = data["target"]
    target = NS(numIPUs=t["numIPUs"], tilesPerIpu=t["tilesPerIpu"], bytesPerTile=t["bytesPerTile"],
                clockFrequency=t["clockFrequency"], numReplicas=t.get("numReplicas", 1),
                ipusPerReplica=t.get("ipusPerReplica", t["numIPUs"]),
                architecture=_Arch[t["architecture"]])
    tiles, run_cols = _columns(data)
    per_ipu = t["tilesPerIpu"]
    n_ipus = len(tiles["inc"]) // per_ipu
    _liveness_programs(data)
    programs = [NS(name=n, type=_ProgramType[ty]) for n, ty in data.get("programs", [])]
    # run.microseconds: a number, or libpva's .start / .end (reptil's _calculate_bandwidth reads
    # run.microseconds.end - run.microseconds.start)
    runs = [NS(name=name, microseconds=NS(**micro) if isinstance(micro, dict) else micro,
               steps=_Steps(programs, codes, cycles, start, sdata))
            for name, micro, codes, cycles, start, sdata in run_cols]
    flat = data.get("flat")
    compilation = (NS(target=target, tiles=_Tiles(tiles, 0, len(tiles["inc"]))) if flat else
                   NS(target=target, ipus=[NS(tiles=_Tiles(tiles, k * per_ipu, (k + 1) * per_ipu))
                                           for k in range(n_ipus)]))
    execution = NS(steps=_Chain([r.steps for r in runs])) if flat else NS(runs=runs)
    compilation.alwaysLiveVariables = [NS(name=n, size=b) for n, b in data.get("variables", [])]
    if "blocks" in data:
        execution.blocks = _blocks(data["blocks"], programs)
    _add_liveness(compilation, data, programs, target)  # SDKs without these names: data has none
    # operations carry debug contexts only when debug.cbor is opened with the profile
    operations = data.get("operations", []) if debug_path else []
    return NS(poplarVersion=NS(major=3, minor=3, point=0, string=data.get("version", "3.3.0")),
              version=1, debug_path=debug_path, compilation=compilation, execution=execution,
              _programs=programs, _operations=operations)


def _blocks(rows: list, programs: list[NS]):
    """``execution.blocks(tile)``: Lightweight Profiling blocks measured on ``tile``, each with
    ``program.name``, ``cyclesFrom``, ``cyclesTo``, ``tile`` and ``isCommon`` / ``isStreamCopy`` /
    ``isBlockFlush`` / ``isOverflow`` (graphcore/tutorials
    tutorials/popvision/lightweight_profiling/README.md @ b7ffa4d, shown there in C++)."""
    by_name = {p.name: p for p in programs}

    def blocks(tile: int) -> list[NS]:
        return [NS(program=by_name.get(b["program"]) or NS(name=b["program"], type=_ProgramType.OnTileExecute),
                   cyclesFrom=b["start"], cyclesTo=b["end"], tile=b["tile"],
                   isCommon=b.get("kind", "common") == "common",
                   isStreamCopy=b.get("kind") == "stream copy", isBlockFlush=b.get("kind") == "flush",
                   isOverflow=b.get("kind") == "overflow")
                for b in rows if b["tile"] == tile]
    return blocks


def openTrace(path: str) -> NS:
    """``pva.openTrace(path)``: a PVTI host trace with ``processes[i].pid`` / ``.threads``,
    ``thread.tid`` / ``.events`` and each event's ``label``, ``channel``, ``timestamp``,
    ``duration`` (microseconds) and ``children()`` (graphcore/tutorials
    tutorials/popvision/reading_pvti_files/walkthrough.py @ b7ffa4d). The fake's trace file is
    JSON (``write_trace``); a real one is opaque to popviz."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)

    def event(e: dict) -> NS:
        kids = [event(c) for c in e.get("children", [])]
        return NS(label=e["label"], channel=NS(name=e.get("channel", "")), timestamp=e["timestamp"],
                  duration=e["duration"], children=lambda kids=kids: kids)

    return NS(processes=[NS(pid=p["pid"], threads=[NS(tid=t["tid"], events=[event(e) for e in t["events"]])
                                                   for t in p["threads"]]) for p in doc["processes"]])


def write_trace(path, processes: list) -> None:
    """Write a fake ``.pvti``: ``processes`` of ``{"pid", "threads": [{"tid", "events": [{"label",
    "channel", "timestamp", "duration", "children"}]}]}`` (times in microseconds)."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"processes": processes}, fh)


def training_loop_trace(*, pid=4242, calls=4, executor_us=20_000, loading_us=6_000, other_us=1_000,
                        channel="poptorch.trainingModel") -> list:
    """One training process as PopTorch instruments it: per call, the DataLoader's dataset
    ``__getitem__`` (``loading_us``), ``other_us`` of Python, then ``<channel>.modelExecution``
    (``executor_us``); a ``modelCompilation`` before the first call."""
    events, clock = [{"label": f"{channel}.modelCompilation", "channel": channel, "timestamp": 0,
                      "duration": 500_000, "children": []}], 500_000
    for _c in range(calls):
        events.append({"label": "__getitem__", "channel": "dataset", "timestamp": clock,
                       "duration": loading_us, "children": []})
        clock += loading_us + other_us
        events.append({"label": f"{channel}.modelExecution", "channel": channel, "timestamp": clock,
                       "duration": executor_us, "children": []})
        clock += executor_us
    return [{"pid": pid, "threads": [{"tid": pid, "events": events},
                                      {"tid": pid + 1, "events": [{"label": "prefetch", "channel": "popart",
                                                                   "timestamp": 600_000, "duration": 100,
                                                                   "children": []}]}]}]


def write_profile(path, *, num_ipus=2, tiles=3, runs=True, broken=False, flat=False) -> None:
    """Write a small fake profile: every tile of IPU i holds 1000*(i+1)+tile bytes."""
    tiles_data = [[{"inc": 1000 * (i + 1) + j, "exc": 900 * (i + 1) + j, "al": 400, "nal": 500 * (i + 1) + j - 400 + 400,
                    "over": 0 if j else (50 if i == 1 else 0),
                    "cats": {"variable": 600 * (i + 1), "vertexCode": 300 * (i + 1) + j}}
                   for j in range(tiles)] for i in range(num_ipus)]
    data = {
        "broken": broken, "flat": flat,
        "version": "3.3.0 (d8d3d63b1b)",
        "target": {"numIPUs": num_ipus, "tilesPerIpu": tiles, "bytesPerTile": 2000,
                   "clockFrequency": 1.33e9, "architecture": "Ipu2"},
        "tiles": tiles_data,
        "runs": [{"name": "Run 1", "microseconds": 250.5, "steps": [
            {"name": "main/stage0", "type": "OnTileExecute", "cycles": [1200, 0], "start": [5000, 0]},
            {"name": "copy", "type": "GlobalExchange", "cycles": [300, 300], "start": [6200, 6200]},
            {"name": "main/stage1", "type": "OnTileExecute", "cycles": [0, 2400], "start": [0, 6500]},
            {"name": "out", "type": "StreamCopyMid", "cycles": [0, 700], "start": [0, 8900]},
        ]}] if runs else [],
    }
    write_data(path, data)


def write_data(path, data: dict) -> None:
    """Write a profile given as a dict: ``target``, ``tiles`` (per IPU, per tile: ``inc``,
    ``exc``, ``al``, ``nal``, ``over``, ``cats``), ``runs`` (``name``, ``microseconds``, ``steps``
    of ``name``, ``type``, per-IPU ``cycles`` and ``start``), ``flat`` for the SDKs without
    ``compilation.ipus`` / ``execution.runs``."""
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh)


def write_columns(path, *, target: dict, tiles: dict, categories: dict, programs: list,
                  runs: list, flat: bool = False, liveness: tuple | None = None) -> None:
    """Write a profile of any size from NumPy columns: ``tiles`` maps ``inc``, ``exc``, ``over``,
    ``al``, ``nal`` to one value per tile (IPU-major); ``categories`` maps a category name to one
    value per tile; ``programs`` lists ``[name, type]``; each run is ``(name, microseconds,
    program codes per step, cycles[step, ipu], start[step, ipu])``, optionally followed by
    ``data_in[step, ipu], data_out[step, ipu]`` (bytes each step moved: ``step.ipus[k].dataIn`` /
    ``dataOut``)."""
    import numpy as np

    meta = {"target": target, "flat": flat, "version": "3.3.0 (d8d3d63b1b)",
            "categories": list(categories), "programs": programs,
            "runs": [{"name": r[0], "microseconds": r[1]} for r in runs]}
    arrays = {"meta": np.array(json.dumps(meta))}
    arrays.update({f"tile_{k}": np.asarray(v) for k, v in tiles.items()})
    arrays.update({f"cat_{k}": np.asarray(v) for k, v in categories.items()})
    if liveness is not None:  # (program codes per step, bytes[step, ipu]): livenessProgramSteps
        arrays["liveness_program"] = np.asarray(liveness[0], dtype="int32")
        arrays["liveness_bytes"] = np.asarray(liveness[1])
    for k, (_name, _micro, codes, cycles, start, *data) in enumerate(runs):
        arrays[f"run{k}_program"] = np.asarray(codes, dtype="int32")
        arrays[f"run{k}_cycles"] = np.asarray(cycles)
        arrays[f"run{k}_start"] = np.asarray(start)
        if data:
            arrays[f"run{k}_data_in"], arrays[f"run{k}_data_out"] = np.asarray(data[0]), np.asarray(data[1])
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


# ------------------------------------------------------------------------------- profile data

MK2 = {"tilesPerIpu": 4, "bytesPerTile": 638976, "clockFrequency": 1.33e9, "architecture": "Ipu2"}
"""A Mk2 target with 4 tiles per IPU (a real one has 1472): small profiles, real per-tile bytes."""


def _tiles(num_ipus: int, used: list[int] | None = None, over: dict | None = None) -> list:
    """Tiles of each IPU: tile j of IPU i holds used[i] + 1000 j bytes (over: {(i, j): bytes})."""
    out = []
    for i in range(num_ipus):
        base = used[i] if used else 200_000
        row = []
        for j in range(MK2["tilesPerIpu"]):
            inc = base + 1000 * j
            row.append({"inc": inc, "exc": inc - 100, "al": inc // 4, "nal": inc - inc // 4,
                        "over": (over or {}).get((i, j), 0),
                        "cats": {"variable": inc // 2, "vertexCode": inc // 4,
                                 "controlCode": inc - inc // 2 - inc // 4}})
        out.append(row)
    return out


def pipeline_profile(*, work=(1000, 1000, 2000, 1000), micro_batches=8, updates=2, calls=2,
                     copy_cycles=200, sync_cycles=50, exchange_cycles=100, flat=False) -> dict:
    """A pipelined training profile as PopART schedules it: N stages on N IPUs; per pipeline
    cycle every active stage runs its forward (``work[i]`` cycles) and/or backward (twice that)
    from the same start, then all IPUs sync (waiting for the slowest) and exchange. IPU0 copies
    one input per micro-batch from the host (StreamCopyMid) before its forward. After the
    ``micro_batches + 2N - 2`` pipeline cycles of a weight update, each IPU runs its
    ``stage<i>/weightUpdate`` (work[i] / 2 cycles). ``updates`` weight updates per call,
    ``calls`` calls (runs), plus a first run that copies the weights from the host. Debug
    contexts (with a debug.cbor): one layer per stage, ``layers.<i>``, whose MatMul runs the
    forward program and MatMulGrad the backward; always-live variables ``layers.<i>.weight`` of
    100 × work[i] bytes."""
    n = len(work)
    s = 2 * n - 1
    runs = [{"name": "WeightsFromHost", "microseconds": 3.0, "steps": [
        {"name": "weightsFromHost", "type": "StreamCopyMid", "cycles": [400] * n, "start": [0] * n}]}]
    for c in range(calls):
        steps = []
        clock = 10_000  # absolute counters: the adapter makes them relative to the run

        def step(name, kind, cycles, start, steps=steps):
            steps.append({"name": name, "type": kind, "cycles": cycles, "start": start})

        for _u in range(updates):
            for p in range(micro_batches + s - 1):
                busy = [0] * n
                if 0 <= p < micro_batches:
                    step("inputCopy", "StreamCopyMid", [copy_cycles] + [0] * (n - 1),
                         [clock] + [0] * (n - 1))
                    busy[0] += copy_cycles
                for i in range(n):
                    fwd_mb = p - i
                    if 0 <= fwd_mb < micro_batches:
                        cyc = [0] * n
                        cyc[i] = work[i]
                        st = [0] * n
                        st[i] = clock + busy[i]
                        step(f"stage{i}/fwd", "OnTileExecute", cyc, st)
                        busy[i] += work[i]
                for i in range(n):
                    bwd_mb = p - (s - 1 - i)
                    if 0 <= bwd_mb < micro_batches:
                        cyc = [0] * n
                        cyc[i] = 2 * work[i]
                        st = [0] * n
                        st[i] = clock + busy[i]
                        step(f"stage{i}/bwd", "OnTileExecute", cyc, st)
                        busy[i] += 2 * work[i]
                length = max(busy)
                step("pipelineSync", "Sync", [length - b + sync_cycles for b in busy],
                     [clock + b for b in busy])
                clock += length + sync_cycles
                step("interIpuCopy", "GlobalExchange", [exchange_cycles] * n, [clock] * n)
                clock += exchange_cycles
            for i in range(n):
                cyc = [0] * n
                cyc[i] = work[i] // 2
                st = [0] * n
                st[i] = clock
                step(f"stage{i}/weightUpdate", "OnTileExecute", cyc, st)
            clock += max(work) // 2
        runs.append({"name": f"Run {c + 1}", "microseconds": None, "steps": steps})
    for run in runs:
        run["microseconds"] = run["microseconds"] or round(
            sum(max(st["cycles"]) for st in run["steps"]) / MK2["clockFrequency"] * 1e6, 3)
    operations = [op for i in range(n) for op in (
        {"name": f"layers.{i}/MatMul", "op_type": "MatMul", "layer": f"layers.{i}",
         "programs": [f"stage{i}/fwd"]},
        {"name": f"layers.{i}/MatMulGrad", "op_type": "MatMulGrad", "layer": f"layers.{i}",
         "programs": [f"stage{i}/bwd"]})]
    variables = [[f"layers.{i}.weight", 100 * w] for i, w in enumerate(work)] + [["loss/scale", 4]]
    return {"flat": flat, "version": "3.2.0 (1513ba7afc)",
            "target": {**MK2, "numIPUs": n, "numReplicas": 1, "ipusPerReplica": n},
            "tiles": _tiles(n, [200_000 + 50_000 * w // 1000 for w in work]), "runs": runs,
            "operations": operations, "variables": variables}


def offloaded_optimizer(*, remote_cycles=6000, remote_bytes=4_000_000, input_bytes=50_000, calls=2) -> dict:
    """A two-stage pipelined training profile (``pipeline_profile``: 4 micro-batches, one weight
    update per call) whose optimizer state lives in streaming memory: before its weight update
    each IPU loads the state from a remote buffer and stores it back (PopART's RemoteLoad /
    RemoteStore), StreamCopyBegin 500 + Mid ``remote_cycles`` + End 500 cycles each way. IPU0's
    load is named ``optimizerState/load0`` (placed by its debug context, op type RemoteLoad),
    the stores ``RB_<i>/store`` (placed by the name PopART gives remote buffers). Every copy
    carries its bytes (dataIn/dataOut): ``remote_bytes`` per state transfer, ``input_bytes`` per
    input copy."""
    data = pipeline_profile(work=(1000, 1000), micro_batches=4, updates=1, calls=calls)
    n = 2
    for run in data["runs"][1:]:
        clock = max(st["start"][k] + st["cycles"][k] for st in run["steps"] for k in range(n))
        steps = []
        for st in run["steps"]:
            if st["name"] == "inputCopy":
                st["data_in"], st["data_out"] = [input_bytes] + [0] * (n - 1), [0] * n
            if st["name"] == "stage0/weightUpdate":
                for name, direction in (("optimizerState/load{i}", "in"), ("RB_{i}/store", "out")):
                    for kind, cyc in (("StreamCopyBegin", 500), ("StreamCopyMid", remote_cycles),
                                      ("StreamCopyEnd", 500)):
                        moved = remote_bytes if kind == "StreamCopyMid" else 0
                        for i in range(n):
                            cycles, start = [0] * n, [0] * n
                            cycles[i], start[i] = cyc, clock
                            steps.append({"name": name.format(i=i), "type": kind, "cycles": cycles,
                                          "start": start,
                                          "data_in": [moved if direction == "in" and k == i else 0 for k in range(n)],
                                          "data_out": [moved if direction == "out" and k == i else 0 for k in range(n)]})
                        clock += cyc
            steps.append(st)
        run["steps"] = steps
        run["microseconds"] = round(sum(max(st["cycles"]) for st in steps) / MK2["clockFrequency"] * 1e6, 3)
    data["operations"] += [{"name": f"optimizerState{i}/RemoteLoad", "op_type": "RemoteLoad", "layer": "",
                            "programs": [f"optimizerState/load{i}"]} for i in range(n)]
    return data


def single_ipu_inference(*, device_iterations=4, calls=3, flat=False) -> dict:
    """One IPU, inference: per micro-batch the host handshake (StreamCopyBegin 300 cycles), the
    input transfer (StreamCopyMid 500), StreamCopyEnd (100), the model (OnTileExecute 4000) and
    the output transfer (StreamCopyMid 100)."""
    runs = []
    for c in range(calls):
        steps, clock = [], 0
        for _m in range(device_iterations):
            for name, kind, cyc in (("input/begin", "StreamCopyBegin", 300),
                                    ("input", "StreamCopyMid", 500),
                                    ("input/end", "StreamCopyEnd", 100),
                                    ("model/forward", "OnTileExecute", 4000),
                                    ("output", "StreamCopyMid", 100)):
                steps.append({"name": name, "type": kind, "cycles": [cyc], "start": [clock]})
                clock += cyc
        runs.append({"name": f"Run {c + 1}", "microseconds": round(clock / MK2["clockFrequency"] * 1e6, 3),
                     "steps": steps})
    return {"flat": flat, "target": {**MK2, "numIPUs": 1}, "tiles": _tiles(1), "runs": runs}


def out_of_memory(*, flat=False) -> dict:
    """Two IPUs, memory only (a compile with debug.allowOutOfMemory): tiles 1 and 3 of IPU1
    overflow by 12,000 and 3,000 bytes."""
    full = MK2["bytesPerTile"]
    data = {"flat": flat, "target": {**MK2, "numIPUs": 2},
            "tiles": _tiles(2, [300_000, full - 10_000], over={(1, 1): 12_000, (1, 3): 3_000}),
            "runs": []}
    data["tiles"][1][1]["inc"] = full + 12_000
    data["tiles"][1][3]["inc"] = full + 3_000
    return data


# ------------------------------------------------------------------------- liveness and code
# Names followed (each optional: a profile built without them reads as from an SDK without it):
# - compilation.livenessProgramSteps[i].program / .notAlwaysLiveMemory.bytes: graphcore/tensorflow
#   tensorflow/python/ipu/tests/keras/keras_pipeline_recomputation_test.py (peak liveness = the
#   tiles' memory.alwaysLiveBytes + the largest step's notAlwaysLiveMemory.bytes);
# - .notAlwaysLiveMemoryForIpu(k).bytes and livenessProgramSteps[0]: graphcore/ipu_tensorflow_addons
#   ipu_tensorflow_addons/keras/experimental/auto_pipeline/utils/pva_utils.py (get_max_live_memory);
# - .notAlwaysLiveMemory.variables (.name, .size): graphcore-research/flash-attention-ipu
#   demo/profile_utils.py (get_step_variables);
# - compilation.programs with .name, .type, .codeBytesByTile, .controlCodeByTile, .children:
#   pva_utils.py above (get_internal_exchange_code, get_control_code) and graphcore/popliner
#   popliner/operation.py (control code of childless programs only, as a program's includes its
#   children's).


class _LiveStep:
    __slots__ = ("_bytes", "_vars", "program")

    def __init__(self, program: NS, per_ipu, variables) -> None:
        self.program, self._bytes, self._vars = program, per_ipu, variables

    @property
    def notAlwaysLiveMemory(self) -> NS:
        return NS(bytes=int(sum(int(b) for b in self._bytes)),
                  variables=[NS(name=n, size=int(b)) for n, b in self._vars])

    def notAlwaysLiveMemoryForIpu(self, ipu: int) -> NS:
        return NS(bytes=int(self._bytes[ipu]))


class _LiveSteps:
    """``compilation.livenessProgramSteps``: built on access, as libpva does."""

    def __init__(self, programs: list[NS], codes, per_ipu, variables: dict, total_only: bool) -> None:
        self.programs, self.codes, self.per_ipu, self.variables = programs, codes, per_ipu, variables
        self.total_only = total_only

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: int) -> _LiveStep:
        if not 0 <= i < len(self):
            raise IndexError(i)
        row = self.per_ipu[i]
        step = _LiveStep(self.programs[int(self.codes[i])], row.tolist() if hasattr(row, "tolist") else row,
                         self.variables.get(str(i), ()))
        if self.total_only:  # an SDK without notAlwaysLiveMemoryForIpu
            return NS(program=step.program, notAlwaysLiveMemory=step.notAlwaysLiveMemory)
        return step

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def _liveness_programs(data: dict) -> None:
    """Add the liveness steps' programs (``[name, type]``) to the profile's program list."""
    live = data.get("liveness")
    if not live or "_arrays" in data:
        return
    programs = data.setdefault("programs", [])
    codes = []
    for name, kind, _bytes in live["steps"]:
        key = [name, kind]
        if key not in programs:
            programs.append(key)
        codes.append(programs.index(key))
    live["_codes"] = codes


def _add_liveness(compilation: NS, data: dict, programs: list[NS], target: NS) -> None:
    live = data.get("liveness")
    if "_arrays" in data and "liveness_program" in data["_arrays"]:
        a = data["_arrays"]
        compilation.livenessProgramSteps = _LiveSteps(programs, a["liveness_program"], a["liveness_bytes"], {},
                                                      total_only=bool(data.get("liveness_total_only")))
    elif live:
        compilation.livenessProgramSteps = _LiveSteps(
            programs, live["_codes"], [b for _n, _k, b in live["steps"]], live.get("variables", {}),
            total_only=bool(live.get("total_only")))
    code = data.get("program_code")
    if code is None:
        return
    tiles = target.numIPUs * target.tilesPerIpu
    by_name = {p.name: p for p in programs}
    for name, (ipu, code_per_tile, control_per_tile) in code.items():
        program = by_name.get(name)
        if program is None:
            continue
        first = ipu * target.tilesPerIpu
        program.codeBytesByTile = [code_per_tile if first <= t < first + target.tilesPerIpu else 0
                                   for t in range(tiles)]
        program.controlCodeByTile = [control_per_tile if first <= t < first + target.tilesPerIpu else 0
                                     for t in range(tiles)]
        program.children = []
    compilation.programs = programs


def with_liveness(data: dict, *, activation=None, fwd_temp=None, bwd_temp=None, always_live=600_000,
                  code=(1000, 1500), control=100, total_only=False) -> dict:
    """``pipeline_profile`` data with the liveness of its first weight update and code per program.

    The compiled program's steps are those of the first call's first weight update, in order. On
    IPU i, stage i's forward of a micro-batch makes ``activation[i]`` bytes that stay live until
    its backward (the stash) and needs ``fwd_temp[i]`` more while it runs; its backward needs
    ``bwd_temp[i]`` above the stash while it runs and frees the micro-batch's activation at its
    end. Defaults: 10, 5 and 8 bytes per cycle of work. Each IPU's tiles hold ``always_live``
    bytes (a quarter per tile) plus, spread evenly, its peak not-always-live bytes; a tile beyond
    its capacity overflows (``overflowed``), as in a compile with ``debug.allowOutOfMemory``.
    ``stage<i>/fwd`` and ``/bwd`` take ``code`` bytes per tile of IPU i (and ``control`` bytes of
    control code per tile). Variables live at each step are named ``layers.<i>/act<mb>`` and
    ``layers.<i>/MatMul[Grad]/tmp``."""
    n = len(data["tiles"])
    pattern = re.compile(r"^stage(\d+)/(?:layers\.(\d+)/)?(fwd|bwd)$")
    layer_of: dict[str, tuple[int, int, str]] = {}  # program -> (IPU, layer, pass)
    w: dict[int, int] = {}
    for st in data["runs"][1]["steps"]:
        m = pattern.match(st["name"])
        if m:
            i = int(m.group(1))
            j = int(m.group(2)) if m.group(2) is not None else i
            layer_of[st["name"]] = (i, j, m.group(3))
            if m.group(3) == "fwd":
                w[j] = max(w.get(j, 0), max(st["cycles"]))
    layers = range(max(w) + 1)
    act = list(activation or [10 * w.get(j, 0) for j in layers])
    ft = list(fwd_temp or [5 * w.get(j, 0) for j in layers])
    bt = list(bwd_temp or [8 * w.get(j, 0) for j in layers])
    steps, variables = [], {}
    stash: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # per IPU: (layer, micro-batch)
    counter = [0] * len(act)
    run = data["runs"][1]["steps"]
    end = next(k for k, st in enumerate(run) if st["name"].endswith("/weightUpdate"))
    while end < len(run) and run[end]["name"].endswith("/weightUpdate"):
        end += 1
    for st in run[:end]:
        name = st["name"]
        per = [sum(act[j] for j, _mb in stash[i]) for i in range(n)]
        live = [(f"layers.{j}/act{mb}", act[j]) for i in range(n) for j, mb in stash[i]]
        if name in layer_of:
            i, j, kind = layer_of[name]
            if kind == "fwd":
                mb = counter[j]
                counter[j] += 1
                per[i] += act[j] + ft[j]
                live += [(f"layers.{j}/act{mb}", act[j]), (f"layers.{j}/MatMul/tmp", ft[j])]
                stash[i].append((j, mb))
            else:
                per[i] += bt[j]
                live.append((f"layers.{j}/MatMulGrad/tmp", bt[j]))
                stash[i].remove(next(x for x in stash[i] if x[0] == j))
        variables[str(len(steps))] = sorted(live, key=lambda v: -v[1])
        steps.append([name, st["type"], per])
    peak = [max(s[2][i] for s in steps) for i in range(n)]
    cap = data["target"]["bytesPerTile"]
    per_tile = data["target"]["tilesPerIpu"]
    for i, row in enumerate(data["tiles"]):
        for t in row:
            al, nal = always_live // per_tile, -(-peak[i] // per_tile)
            inc = al + nal
            t.update(al=al, nal=nal, inc=inc, exc=inc - 100, over=max(0, inc - cap),
                     cats={"variable": inc // 2, "vertexCode": inc - inc // 2})
    data["liveness"] = {"steps": steps, "variables": variables, "total_only": total_only}
    data["program_code"] = {name: [i, code[0 if kind == "fwd" else 1], control]
                            for name, (i, _j, kind) in layer_of.items()}
    return data


def liveness_overflow(*, runs: bool = True) -> dict:
    """``pipeline_profile`` with liveness in which IPU1 overflows at one step: the backward of
    layers.1 (``stage1/bwd``, operation ``layers.1/MatMulGrad``) needs 2,000,000 bytes of
    temporaries above its stash of 5 micro-batches × 10,000 bytes, on top of 600,000 always-live
    bytes: 2,650,000 bytes, 94,096 over the IPU's 2,555,904. Without ``runs``: the compile of a
    model that does not fit (``debug.allowOutOfMemory``), memory only."""
    data = with_liveness(pipeline_profile(), bwd_temp=[8000, 2_000_000, 16_000, 8000])
    if not runs:
        data["runs"] = []
    return data


def layered_pipeline(layer_work=((1000, 1000), (1000, 1000), (3000, 1000), (1000, 1000)), **liveness) -> dict:
    """``pipeline_profile`` with several layers per stage, each with programs of its own
    (``stage<i>/layers.<j>/fwd`` and ``/bwd``, ``w`` and ``2w`` cycles per micro-batch, run one
    after another within the stage's, each followed by a step of its own exchange, which holds
    no temporaries), operations ``layers.<j>/MatMul`` and ``MatMulGrad`` and
    weights ``layers.<j>.weight`` of 100 × w bytes; with the liveness of :func:`with_liveness`
    (``liveness`` passed on)."""
    work = [sum(stage) for stage in layer_work]
    data = pipeline_profile(work=tuple(work))
    index = {}
    j = 0
    for i, stage in enumerate(layer_work):
        index[i] = list(range(j, j + len(stage)))
        j += len(stage)
    cycles = [w for stage in layer_work for w in stage]
    for run in data["runs"]:
        out = []
        for st in run["steps"]:
            m = re.match(r"^stage(\d+)/(fwd|bwd)$", st["name"])
            if not m:
                out.append(st)
                continue
            i, kind = int(m.group(1)), m.group(2)
            offset = 0
            for k in index[i]:
                c = cycles[k] * (1 if kind == "fwd" else 2)
                cyc = [c if x else 0 for x in st["cycles"]]
                start = [s0 + offset if x else 0 for s0, x in zip(st["start"], st["cycles"], strict=True)]
                out.append({"name": f"stage{i}/layers.{k}/{kind}", "type": st["type"], "cycles": cyc,
                            "start": start})
                # the exchange feeding the next operation: a step of its own (no cycles counted here)
                out.append({"name": f"stage{i}/layers.{k}/{kind}/exchange", "type": "DoExchange",
                            "cycles": [0] * len(cyc), "start": [0] * len(cyc)})
                offset += c
        run["steps"] = out
    data["operations"] = [op for i, ks in index.items() for k in ks for op in (
        {"name": f"layers.{k}/MatMul", "op_type": "MatMul", "layer": f"layers.{k}",
         "programs": [f"stage{i}/layers.{k}/fwd"]},
        {"name": f"layers.{k}/MatMulGrad", "op_type": "MatMulGrad", "layer": f"layers.{k}",
         "programs": [f"stage{i}/layers.{k}/bwd"]})]
    data["variables"] = [[f"layers.{k}.weight", 100 * w] for k, w in enumerate(cycles)] + [["loss/scale", 4]]
    return with_liveness(data, **liveness)
