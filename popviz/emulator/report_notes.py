"""The notes an estimated report carries (its provenance): what the cost model assumes, and the
script's measured host work between calls.

Split from :mod:`popviz.emulator.costmodel`, which turns a measurement into cycles and bytes;
this module only words what it assumed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from popviz.emulator import hardware as hw
from popviz.emulator.cost_inputs import EngineSetup
from popviz.model import ModelConfig


def notes(setup: EngineSetup) -> tuple[str, ...]:
    spec = setup.spec
    return (  # noqa: RUF005 (the fixed notes, then the conditional ones)
        "Estimated by popviz's emulator from one CPU forward pass per micro-batch; not measured on an IPU.",
        f"Cycles: matmuls and convolutions at up to {hw.AMP_PEAK_EFFICIENCY:.0%} of {spec.architecture} "
        f"peak FLOPs (less for small products), other ops at {hw.MEMORY_EFFICIENCY:.0%} of on-chip bandwidth, "
        f"plus fixed cycles per op by kind ({hw.FIXED_CYCLES['elementwise']:,} element-wise to "
        f"{hw.FIXED_CYCLES['conv']:,}); backward per op kind, plus the recomputed forward.",
        "Memory per IPU (no per-tile figures, so tile imbalance is not modelled): weights, optimizer state, "
        "gradient accumulators, activation stash for micro-batches in flight, largest op's temporaries, "
        "code and exchange overhead.",
        f"Host link {setup.host.bytes_per_second / 1e9:g} GB/s shared by replicas, "
        f"{setup.host.latency_seconds * 1e6:g} us wait per transfer ({hw.HOST_BANDWIDTH_ENV}, "
        f"{hw.HOST_LATENCY_ENV}); the host process hands its {setup.replication_factor} replica(s)' inputs "
        f"to Poplar at {setup.host.process_bytes_per_second / 1e9:g} GB/s per stream-callback thread "
        f"({setup.callback_threads} thread(s), {hw.HOST_PROCESS_ENV}), up to {setup.prefetch_depth} "
        f"input(s) ahead of the IPU (prefetch depth); architecture {spec.architecture} ({hw.ARCH_ENV}).",
        "Sources and known errors of every constant: docs/emulator.md.",
    ) + io_tiles_note(setup)


def io_tiles_note(setup: EngineSetup) -> tuple[str, ...]:
    """What ``numIOTiles`` changed (nothing when it is not set)."""
    if not setup.io_tiles:
        return ()
    compute = setup.compute_spec.tiles_per_ipu
    return (f"I/O tiles: {setup.io_tiles} of each IPU's {setup.spec.tiles_per_ipu:,} tiles are reserved for I/O "
            f"(TensorLocations.numIOTiles): compute, its bandwidth and the memory that holds the model are the "
            f"other {compute:,} tiles'; host transfers given set_overlap_for_input/output overlap the compute "
            "of the neighbouring micro-batch (not in a pipeline).",)


def with_host_gaps(config: ModelConfig, gaps: Sequence[tuple[float, float]], skipped: int = 0
                    ) -> tuple[ModelConfig, tuple[str, ...]]:
    """The script's host work between calls, as measured: ``options.emulator`` gets
    ``host_seconds_between_calls`` (mean CPU time of the calling thread: the work that cannot overlap
    a synchronous call), ``host_wall_seconds_between_calls`` (mean wall time, waits included) and
    ``host_gaps_measured``; plus a note (saying how many gaps were ``skipped``: another model
    compiled or ran in them)."""
    gaps = [(w, c) for w, c in gaps if math.isfinite(w) and math.isfinite(c) and w >= 0 and c >= 0]
    if not gaps:
        return config, ()
    wall = sum(w for w, _ in gaps) / len(gaps)
    cpu = sum(c for _, c in gaps) / len(gaps)
    emulator = {**dict(config.options.get("emulator", {})), "host_seconds_between_calls": cpu,
                "host_wall_seconds_between_calls": wall, "host_gaps_measured": len(gaps)}
    config = dataclasses.replace(config, options={**config.options, "emulator": emulator})
    return config, (
        f"The script's own host work between calls, measured (not estimated) over {len(gaps)} gap"
        f"{'s' if len(gaps) != 1 else ''}"
        + (f" ({skipped} more left out: another model compiled or ran in them)" if skipped else "")
        + f": {cpu * 1e3:,.2f} ms of CPU in the thread that calls the model, "
        f"{wall * 1e3:,.2f} ms of wall time (waits for data-loader workers included) per call. PopTorch's "
        "calls are synchronous, so that thread's work runs between calls on an IPU host too: the throughput "
        "table's 'as the loop runs' figure adds it to each estimated call. The wall time's waits depend on "
        "this machine's cores (workers overlap the IPU's call on a host with cores to spare) and are "
        "not added.",)
