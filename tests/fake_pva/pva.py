"""A test double of libpva's Python module, exposing exactly the names popviz's adapter uses.

Its "profile.pop" files are JSON written by ``write_profile`` below (real ones are opaque
databases); the object graph it returns mirrors libpva's documented attribute names.
"""

from __future__ import annotations

import enum
import json
from types import SimpleNamespace as NS


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


def _tile(t: dict) -> NS:
    return NS(memory=NS(
        total=NS(includingGaps=t["inc"], excludingGaps=t["exc"]),
        overflowed=NS(includingGaps=t.get("over", 0), excludingGaps=t.get("over", 0)),
        alwaysLiveBytes=t["al"], notAlwaysLiveBytes=t["nal"],
        category=_Categories(t.get("cats", {}))))


def openReport(path: str, debug_path: str | None = None) -> NS:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if data.get("broken"):
        raise RuntimeError("Unable to open profile: database disk image is malformed")
    t = data["target"]
    target = NS(numIPUs=t["numIPUs"], tilesPerIpu=t["tilesPerIpu"], bytesPerTile=t["bytesPerTile"],
                clockFrequency=t["clockFrequency"], numReplicas=t.get("numReplicas", 1),
                ipusPerReplica=t.get("ipusPerReplica", t["numIPUs"]),
                architecture=_Arch[t["architecture"]])
    ipus = [NS(tiles=[_tile(tile) for tile in ipu]) for ipu in data["tiles"]]
    runs = []
    for run in data.get("runs", []):
        steps = []
        for step in run["steps"]:
            steps.append(NS(program=NS(name=step["name"], type=_ProgramType[step["type"]]),
                            ipus=[NS(cycles=c, activeCycles=NS(cyclesFrom=NS(max=s)))
                                  for c, s in zip(step["cycles"], step["start"], strict=False)]))
        runs.append(NS(name=run["name"], microseconds=run["microseconds"], steps=steps))
    return NS(poplarVersion=NS(major=3, minor=3, point=0, string=data.get("version", "3.3.0")),
              version=1, debug_path=debug_path,
              compilation=(NS(target=target, tiles=[t for ipu in ipus for t in ipu.tiles])
                           if data.get("flat") else NS(target=target, ipus=ipus)),
              execution=(NS(steps=[s for run in runs for s in run.steps])
                         if data.get("flat") else NS(runs=runs)))


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
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
