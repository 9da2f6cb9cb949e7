"""The host transfers of one call in the cost model's terms: cycles of one micro-batch's input
or output copy on one replica (the IPU-Machines' host links shared by the run's replicas, the
host process's threads handing inputs to Poplar), the copies of anchored tensors, and which
transfers overlap the compute through I/O tiles."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from popviz.emulator import hardware as hw
from popviz.emulator.cost_inputs import EngineSetup, Measurement

if TYPE_CHECKING:
    from popviz.schedule import AnchorTransfer, HostTransfer


def transfer(nbytes: int, setup: EngineSetup, ipus_per_replica: int, prepare: bool = False) -> HostTransfer:
    """One micro-batch's host transfer on one replica: the host links of the IPU-M2000s the run
    uses (one per ``IPUS_PER_HOST_LINK`` IPUs, all processes' replicas together) are shared by
    its replicas. With ``prepare`` (inputs), the host process's callback threads hand all its
    local replicas' micro-batch to Poplar first (``HostLink.process_bytes_per_second``)."""
    from popviz.schedule import HostTransfer

    clock = setup.spec.clock_hz
    r = setup.replication_factor
    system = setup.system_replicas
    links = max(1, math.ceil(ipus_per_replica * system / hw.IPUS_PER_HOST_LINK))
    per_replica = setup.host.bytes_per_second * min(links, system) / system
    prepare_cycles = 0
    if prepare:
        threads = max(1, min(setup.callback_threads, r))
        prepare_cycles = int(round(nbytes * r / (setup.host.process_bytes_per_second * threads) * clock))
    return HostTransfer(wait_cycles=int(round(setup.host.latency_seconds * clock)),
                        transfer_cycles=int(round(nbytes / per_replica * clock)),
                        prepare_cycles=prepare_cycles)


def anchor_transfers(m: Measurement, setup: EngineSetup, ipus: Sequence[int]) -> list[AnchorTransfer]:
    """Each anchored tensor's copy, from the IPU of the stage holding its parameter."""
    from popviz.schedule import AnchorTransfer

    segment = {p.name: p.segment for p in m.params}
    out = []
    for a in setup.anchors:
        seg = segment.get(a.parameter)
        ipu = m.segments[seg].ipu if seg is not None and seg < len(m.segments) else None
        ipu = ipu if ipu in ipus else ipus[-1]
        out.append(AnchorTransfer(ipu=ipu, output_mode=a.output_mode, return_period=a.return_period,
                                  transfer=transfer(a.tensor.bytes, setup, len(ipus))))
    return out


OVERLAP_LOOPS = {"overlap_accumulation_loop": "inner", "overlap_device_iteration_loop": "both"}
"""PopTorch's ``OverlapMode`` values -> the loops a preloaded transfer spans: ``inner``, the
inner loop only (PopART's ``ExchangeStrategy::OverlapInnerLoop``: the accumulation loop, or the
device-iteration loop when G = 1, ``MainLoops::getInnerLoopSubgraph`` in
``willow/include/popart/transforms/mainloops.hpp``), ``both`` (``OverlapLoops``)."""


def io_overlap(m: Measurement, setup: EngineSetup, strategy: str | None, in_bytes: int, out_bytes: int
               ) -> dict[str, Any]:
    """The schedule's overlapped host I/O: with I/O tiles (``numIOTiles``) and inputs or outputs
    marked by ``set_overlap_for_input`` / ``set_overlap_for_output``, a transfer goes through the
    I/O tiles while the compute tiles work on another micro-batch, then one on-chip exchange
    moves it between I/O and compute tiles (PopTorch's ``docs/user_guide/hostio_optimisation.rst``,
    "Overlapping compute and I/O"; it asks for ``ShardedExecution`` or a phased strategy, so a
    pipeline's transfers are not overlapped). Empty when nothing is overlapped."""
    io = setup.io_tiles
    if not io or strategy == "PipelinedExecution" or not m.overlap:
        return {}
    out: dict[str, Any] = {}
    for kind, nbytes in (("input", in_bytes), ("output", out_bytes)):
        loops = OVERLAP_LOOPS.get(m.overlap.get(kind, ""))
        if loops:
            out[f"{kind}_overlap"] = loops
            out[f"{kind}_io_copy_cycles"] = hw.io_tile_copy_cycles(nbytes, setup.spec, io)
    return out
