"""Names every layer shares: the parts of a Report, where its figures come from, PopTorch's
output modes, execution strategies and program types, and the program names that mark a weight
update. Sources, analyses and renderers all read them here, so none imports another for them."""

from __future__ import annotations

import re
from typing import Any

PARTS = ("target", "memory", "execution", "config", "host_io")
"""The parts of a Report, in the order summaries list them."""

SOURCES = ("pva", "emulator", "bundle", "capture")
"""Where a report's figures come from: a real Poplar profile read through libpva (also when
exported to a bundle), popviz's emulator cost model, a bundle written directly by a program
(``popviz.testing`` builders, a user's own converter), or only the capture hooks'
``popviz-model.json`` (configuration and host I/O, no profile)."""

INSTANCE_DIR = re.compile(r"instance-\d+")
"""How the instances of one PopRun/PopDist run are laid out: ``DIR/instance-<rank>/<engine>``
(what ``popviz capture`` creates for each rank it finds in the OpenMPI/PMI variables)."""

OUTPUT_MODES = ("All", "EveryN", "Final", "Sum", "Default")
EXECUTION_STRATEGIES = (
    "PipelinedExecution",
    "ShardedExecution",
    "SerialPhasedExecution",
    "ParallelPhasedExecution",
)
MODES = ("training", "inference")
INFERABLE_FIELDS = ("mode", "execution_strategy", "stages", "gradient_accumulation",
                    "device_iterations", "replication_factor")
"""ModelConfig fields popviz can infer from a profile alone (``popviz.sources.infer``)."""

PROGRAM_TYPES = (
    "OnTileExecute",
    "DoExchange",
    "GlobalExchange",
    "StreamCopyBegin",
    "StreamCopyMid",
    "StreamCopyEnd",
    "Sync",
)
"""Program types popviz gives meaning to. Other types (as libpva names them) are kept as-is."""

STREAM_COPY_TYPES = ("StreamCopyBegin", "StreamCopyMid", "StreamCopyEnd")
COMPUTE_TYPES = ("OnTileExecute",)
EXCHANGE_TYPES = ("DoExchange", "GlobalExchange")

WEIGHT_UPDATE_PROGRAM = re.compile(r"weight.?update|optimi[sz]er", re.IGNORECASE)
"""Program names of the weight update (``weightUpdate``, ``optimizer``...): where a profile
names one, the analyses count its cycles apart and inference of a raw profile reads the mode."""

OUTPUT_MODE_NAMES = {0: "Final", 1: "EveryN", 2: "All", 3: "Sum", 4: "Default"}
"""PopTorch's ``OutputMode`` values by their integer value."""


def output_mode_label(mode: str | None, period: int | None) -> str | None:
    """An output mode as users write it: ``EveryN(4)`` with its return period, else the name."""
    return f"EveryN({period})" if mode == "EveryN" and period else mode


def output_mode_name(value: Any) -> str | None:
    """PopTorch's output mode (enum member, its integer value or its name) as the model's name."""
    if value is None:
        return None
    name = getattr(value, "name", None)
    if isinstance(name, str) and name in OUTPUT_MODE_NAMES.values():
        return name
    if isinstance(value, int) and not isinstance(value, bool):
        return OUTPUT_MODE_NAMES.get(value)
    if isinstance(value, str):
        short = value.rsplit(".", 1)[-1]
        return short if short in OUTPUT_MODE_NAMES.values() else None
    return None
