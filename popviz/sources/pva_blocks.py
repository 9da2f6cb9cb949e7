"""Lightweight Profiling blocks from a ``profile.pop`` (Poplar's measured start/end cycles of
``Block`` programs).

Names from Graphcore's tutorial (graphcore/tutorials ``tutorials/popvision/lightweight_profiling/
README.md`` @ b7ffa4d): ``report.execution.blocks(tile)`` — blocks are measured on one tile per
IPU (tile 0 unless ``profiler.blocks.tile`` says otherwise); each block has ``program.name``,
``cyclesFrom``, ``cyclesTo``, ``tile`` and the kind tests ``isCommon``, ``isStreamCopy``,
``isBlockFlush``, ``isOverflow``. The tutorial shows them in C++ (``blocks(tile)``,
``cyclesFrom()``); the Python module is read the same way, each name tried as an attribute or a
method, and every one is optional: without ``execution.blocks`` the profile simply has no block
table.
"""

from __future__ import annotations

from typing import Any

from popviz.model.measured import BlockTable

BLOCK_TILE_OPTION = "profiler.blocks.tile"
"""Poplar engine option choosing the tile that measures blocks (default 0)."""


def _value(obj: Any, name: str) -> Any:
    value = getattr(obj, name, None)
    return value() if callable(value) else value


def _kind(block: Any) -> str:
    if _value(block, "isOverflow"):
        return "overflow"
    if _value(block, "isBlockFlush"):
        return "flush"
    if _value(block, "isStreamCopy"):
        return "stream copy"
    return "common"


def read_blocks(pva_report: Any, block_tile: int = 0) -> tuple[BlockTable | None, str | None]:
    """The profile's blocks and a note on what was missing (None when all was there, or when
    this libpva has no ``execution.blocks`` at all: most profiles are taken without LWP)."""
    import pandas as pd

    execution = getattr(pva_report, "execution", None)
    blocks = getattr(execution, "blocks", None) if execution is not None else None
    if blocks is None:
        return None, None
    target = pva_report.compilation.target
    per_ipu, n_ipus = int(target.tilesPerIpu), int(target.numIPUs)
    rows: list[tuple] = []
    skipped = 0
    try:
        sources = ([(k, blocks(k * per_ipu + block_tile)) for k in range(n_ipus)] if callable(blocks)
                   else [(None, blocks)])
        for ipu, listed in sources:
            for block in listed or ():
                start, end = _value(block, "cyclesFrom"), _value(block, "cyclesTo")
                program = _value(block, "program")
                name = getattr(program, "name", None)
                name = name() if callable(name) else name
                tile = _value(block, "tile")
                if not isinstance(start, int) or not isinstance(end, int) or end < start:
                    skipped += 1
                    continue
                tile = int(tile) if isinstance(tile, int) else (ipu or 0) * per_ipu + block_tile
                rows.append((tile // per_ipu if ipu is None else ipu, tile, str(name or "?"),
                             _kind(block), start, end))
    except (TypeError, AttributeError, RuntimeError) as exc:
        return None, f"Lightweight Profiling blocks could not be read ({exc})"
    if not rows:
        return None, None
    frame = pd.DataFrame(rows, columns=["ipu", "tile", "program", "kind", "start_cycle", "end_cycle"])
    note = (f"{skipped} Lightweight Profiling block(s) without valid start/end cycles left out"
            if skipped else None)
    return BlockTable(frame), note
