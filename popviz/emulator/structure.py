"""The emulator's layer structure as plain data (no torch): the layer-level modules of a model
(:class:`Structure`), the environment variables that set the depth and the split, and the error
a bad setting raises. Below :mod:`popviz.emulator.layers` (which finds the structure and builds
the layer table) and :mod:`popviz.emulator.split` (which re-places blocks by it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

DEPTH_ENV = "POPVIZ_EMULATOR_LAYER_DEPTH"
SPLIT_ENV = "POPVIZ_EMULATOR_SPLIT"
ROOT_NAME = "(model)"
"""The layer name of a model that has no child module with parameters (it is its only layer)."""


class LayerSetupError(SystemExit):
    """A bad ``--layer-depth`` or ``--split`` for this model: one line on stderr, exit code 2."""

    def __init__(self, message: str) -> None:
        from popviz.escape import status_line
        from popviz.ui import fitted

        print(fitted(status_line(f"popviz: error: {' '.join(message.split())}")), file=sys.stderr, flush=True)
        super().__init__(2)
        self.message = message


@dataclass(frozen=True)
class Structure:
    """The model's layer-level modules (plain data, no torch)."""

    depth: int
    units: tuple[str, ...]
    """Layer-level module paths in module order."""
    movable: frozenset[str]
    roles: dict[str, str] = field(default_factory=dict)
    tied: dict[str, str] = field(default_factory=dict)
    """Module -> the earlier module whose parameters it shares."""
    how: str = ""
    split: dict[str, int] | None = None
    """Module -> IPU when a ``--split`` re-placed the blocks."""
    split_note: str | None = None
