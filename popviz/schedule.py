"""Simulate the program steps of one executor call: what each IPU runs, for how many cycles.

Used by the emulator (with cycles from its cost model) and by :mod:`popviz.testing` (with
cycles the test chooses). Analyses never import it: they read execution steps from whatever
source made them.

The schedule follows PopART's pipelining as documented in ``docs/emulator.md``:

* **Pipelined training**, N forward stages: S = 2N - 1 pipeline stages (forward 0..N-1, then the
  backward stages in reverse; the last forward and first backward stage share a slot). Each
  weight update pipelines G micro-batches through G + S - 1 pipeline cycles (ramp-up, steady
  state, ramp-down), then every IPU runs its weight update. One call does D weight updates.
* **Pipelined inference**: S = N; the D micro-batches of a call go through D + N - 1 cycles.
* **Sharded** execution: each micro-batch runs the stages one after another; one IPU is busy
  at a time. **No strategy** (single IPU) is the sharded case with one stage.

A pipeline cycle ends with a ``Sync`` in which the IPUs that finished early wait for the
slowest (idle time is Sync cycles), then the inter-IPU copy of activations and gradients
(``GlobalExchange``, on every IPU). Sharded stages sync and copy between stages. Host
transfers are ``StreamCopyBegin`` (waiting for the host), ``StreamCopyMid`` (the transfer) and
``StreamCopyEnd`` steps (Begin also waits for the host to have the inputs ready: it prepares
them one after another, up to the prefetch depth ahead of the IPU): inputs on the first stage's
IPU for every micro-batch, outputs on the last stage's IPU for every micro-batch the output mode
returns (All: all; EveryN: those of every N-th device iteration; Final/Sum: one copy at the end
of the call); tensors anchored with ``opts.anchorTensor`` likewise, each by its own mode, from the
IPU holding it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class StageWork:
    """Cycles one forward stage costs per micro-batch on its IPU."""

    ipu: int
    forward_cycles: int
    backward_cycles: int = 0


@dataclass(frozen=True)
class HostTransfer:
    """Cycles of one host transfer: ``wait_cycles`` split between StreamCopyBegin and End,
    ``transfer_cycles`` in StreamCopyMid. ``prepare_cycles``: the host's work to have the data
    ready (inputs), done one transfer after another on the host and ahead of the IPU as far as
    the prefetch depth allows; the IPU waits in StreamCopyBegin for what is not done in time."""

    wait_cycles: int
    transfer_cycles: int
    prepare_cycles: int = 0


@dataclass(frozen=True)
class SchedulePlan:
    stages: Sequence[StageWork]
    mode: str = "training"
    strategy: str | None = "PipelinedExecution"
    gradient_accumulation: int = 1
    device_iterations: int = 1
    output_mode: str = "Final"
    """The effective mode (Default already resolved): All, EveryN, Final or Sum."""
    output_return_period: int = 1
    copy_cycles: Sequence[int] = ()
    """Inter-IPU copy cycles after each stage boundary (one per boundary, N - 1 values)."""
    input_transfer: HostTransfer | None = None
    output_transfer: HostTransfer | None = None
    weight_update_cycles: Mapping[int, int] = field(default_factory=dict)
    sync_cycles: int = 0
    """Fixed cost of one Sync on every IPU (on top of the time spent waiting)."""
    prefetch_depth: int = 1
    """Inputs the host may prepare before the IPU has taken the previous ones: it starts
    preparing input k when input k - depth has been copied (0: when the IPU asks for it)."""
    anchor_transfers: Sequence[AnchorTransfer] = ()
    input_overlap: str | None = None
    """Inputs preloaded through I/O tiles while the IPU computes (``set_overlap_for_input``):
    ``"inner"`` within the inner loop (accumulation, or device iterations when G = 1), ``"both"``
    across the device iterations too; None: not overlapped."""
    output_overlap: str | None = None
    """Outputs sent through I/O tiles while the IPU computes the next micro-batch, likewise."""
    input_io_copy_cycles: int = 0
    """The on-chip exchange between I/O and compute tiles of one overlapped input."""
    output_io_copy_cycles: int = 0
    """Tensors returned with ``opts.anchorTensor``, each copied as its own output mode says."""


@dataclass(frozen=True)
class AnchorTransfer:
    """One anchored tensor's copy to the host, from the IPU holding it: after every micro-batch
    (All), every ``return_period``-th iteration (EveryN), or once at the end of the call (Final,
    Sum)."""

    ipu: int
    output_mode: str
    transfer: HostTransfer
    return_period: int = 1


class _Timeline:
    """Appends steps and keeps each IPU's clock."""

    def __init__(self, ipus: Sequence[int]) -> None:
        self.ipus = list(ipus)
        self.clock = {i: 0 for i in self.ipus}
        self.rows: list[tuple[int, str, str, int, int, int]] = []
        self.step = 0

    def run(self, program: str, ptype: str, work: Mapping[int, int]) -> None:
        """One step: every IPU in ``work`` runs ``program`` for its cycles."""
        for ipu, cycles in work.items():
            self.rows.append((self.step, program, ptype, ipu, int(cycles), self.clock[ipu]))
            self.clock[ipu] += int(cycles)
        self.step += 1

    def host(self, program: str, ipu: int, transfer: HostTransfer | None, ready: int = 0) -> None:
        """A host transfer; the IPU waits at least until cycle ``ready`` for the host's data."""
        if transfer is None:
            return
        half = transfer.wait_cycles // 2
        self.run(f"{program}/begin", "StreamCopyBegin", {ipu: max(half, ready - self.clock[ipu])})
        self.run(f"{program}/mid", "StreamCopyMid", {ipu: transfer.transfer_cycles})
        self.run(f"{program}/end", "StreamCopyEnd", {ipu: transfer.wait_cycles - half})

    def host_cycles(self, program: str, ipu: int, begin: int, mid: int, end: int) -> None:
        """A host transfer with its three phases given (an overlapped one: what the IPU sees)."""
        self.run(f"{program}/begin", "StreamCopyBegin", {ipu: max(0, begin)})
        self.run(f"{program}/mid", "StreamCopyMid", {ipu: max(0, mid)})
        self.run(f"{program}/end", "StreamCopyEnd", {ipu: max(0, end)})

    def sync(self, fixed: int) -> None:
        """Every IPU waits for the slowest, plus the fixed cost of the sync itself."""
        end = max(self.clock.values())
        self.run("sync", "Sync", {i: end - self.clock[i] + fixed for i in self.ipus})


class _HostInputs:
    """The host's side of the input transfers: prepared one after another, input k starting
    when the host is free and input k - depth has been copied (depth 0: when the IPU asks)."""

    def __init__(self, transfer: HostTransfer | None, depth: int) -> None:
        self.prepare = transfer.prepare_cycles if transfer is not None else 0
        self.depth = depth
        self.free = 0
        self.copied: list[int] = []

    def ready(self, ipu_clock: int) -> int:
        """The cycle at which the next input is ready on the host."""
        if not self.prepare:
            return 0
        k, start = len(self.copied), self.free
        if self.depth <= 0:
            start = max(start, ipu_clock)
        elif k >= self.depth:
            start = max(start, self.copied[k - self.depth])
        self.free = start + self.prepare
        return self.free


def _returned(mode: str, period: int, iteration: int) -> bool:
    """Whether an output (or anchor) of this micro-batch is copied to the host right after it is made."""
    if mode == "All":
        return True
    if mode == "EveryN":
        return (iteration + 1) % period == 0
    return False


def simulate(plan: SchedulePlan) -> pd.DataFrame:
    """The execution steps of one call, as an ``ExecutionTable``-shaped steps frame (run 0)."""
    import pandas as pd

    stages = list(plan.stages)
    if not stages:
        raise ValueError("a schedule needs at least one stage")
    n = len(stages)
    ipus = sorted({s.ipu for s in stages})
    training = plan.mode == "training"
    tl = _Timeline(ipus)
    first_ipu, last_ipu = stages[0].ipu, stages[-1].ipu
    copies = list(plan.copy_cycles) or [0] * (n - 1)
    g = plan.gradient_accumulation if training else 1
    pipelined = plan.strategy == "PipelinedExecution" and n > 1

    def exchange(boundaries: Sequence[int]) -> None:
        """Sync every IPU, then copy activations/gradients across the given stage boundaries."""
        tl.sync(plan.sync_cycles)
        cycles = max((copies[b] for b in boundaries), default=0)
        if cycles:
            tl.run("interIpuCopy", "GlobalExchange", {i: cycles for i in ipus})

    prepared = _HostInputs(plan.input_transfer, plan.prefetch_depth)

    def input_copy() -> None:
        tl.host("input", first_ipu, plan.input_transfer, prepared.ready(tl.clock[first_ipu]))
        prepared.copied.append(tl.clock[first_ipu])

    def output_copy(name: str) -> None:
        tl.host(name, last_ipu, plan.output_transfer)

    def returned_copies(iteration: int) -> None:
        """The outputs and anchors a micro-batch of this device iteration returns."""
        if _returned(plan.output_mode, plan.output_return_period, iteration):
            output_copy("output")
        for a in plan.anchor_transfers:
            if _returned(a.output_mode, a.return_period, iteration):
                tl.host("anchor", a.ipu, a.transfer)

    def weight_update() -> None:
        if training:
            tl.run("weightUpdate", "OnTileExecute",
                   {i: int(plan.weight_update_cycles.get(i, 0)) for i in ipus})
            tl.sync(plan.sync_cycles)

    if pipelined:
        s_total = 2 * n - 1 if training else n
        updates = plan.device_iterations if training else 1
        micro_per_pipeline = g if training else plan.device_iterations
        for it in range(updates):
            for t in range(micro_per_pipeline + s_total - 1):
                fwd = [(p, t - p) for p in range(n) if 0 <= t - p < micro_per_pipeline]
                bwd = []
                if training:
                    # Pipeline slot p >= n-1 runs the backward pass of forward stage 2n-2-p.
                    bwd = [(2 * n - 2 - p, t - p) for p in range(n - 1, s_total)
                           if 0 <= t - p < micro_per_pipeline]
                if fwd and fwd[0][0] == 0:
                    input_copy()
                for stage, _m in fwd:
                    tl.run(f"stage{stage}/forward", "OnTileExecute",
                           {stages[stage].ipu: stages[stage].forward_cycles})
                for stage, _m in bwd:
                    tl.run(f"stage{stage}/backward", "OnTileExecute",
                           {stages[stage].ipu: stages[stage].backward_cycles})
                last = [m for s, m in fwd if s == n - 1]
                if last:
                    returned_copies(it if training else last[0])
                exchange([s for s, _ in fwd if s < n - 1] + [s - 1 for s, _ in bwd if s > 0])
            weight_update()
    else:
        iterations = plan.device_iterations
        # one micro-batch's compute: what an overlapped transfer hides behind (I/O tiles)
        micro = sum(st.forward_cycles + (st.backward_cycles if training else 0) for st in stages) + \
            sum(copies) * (2 if training else 1)

        def spans(overlap: str | None, it: int, m: int, step: int) -> bool:
            """Whether the micro-batch ``step`` away (-1: before, +1: after) is in the loop an
            overlapped transfer spans (then it hides behind that micro-batch's compute)."""
            if overlap == "both":
                k = it * g + m + step
                return 0 <= k < iterations * g
            if overlap == "inner":
                k, size = (m, g) if g > 1 else (it, iterations)
                return 0 <= k + step < size
            return False

        def overlapped_copy(program: str, ipu: int, transfer: HostTransfer, io_copy: int, hidden: bool,
                            ready: int = 0) -> None:
            wait = max(0, ready - tl.clock[ipu])
            if hidden:
                tl.host_cycles(program, ipu, wait, max(0, transfer.wait_cycles + transfer.transfer_cycles - micro)
                               + io_copy, 0)
            else:
                half = transfer.wait_cycles // 2
                tl.host_cycles(program, ipu, max(half, wait), transfer.transfer_cycles + io_copy,
                               transfer.wait_cycles - half)

        for it in range(iterations):
            for _m in range(g):
                if plan.input_overlap and plan.input_transfer is not None:
                    overlapped_copy("input", first_ipu, plan.input_transfer, plan.input_io_copy_cycles,
                                    spans(plan.input_overlap, it, _m, -1), prepared.ready(tl.clock[first_ipu]))
                    prepared.copied.append(tl.clock[first_ipu])
                else:
                    input_copy()
                for s, st in enumerate(stages):
                    tl.run(f"stage{s}/forward", "OnTileExecute", {st.ipu: st.forward_cycles})
                    if s < n - 1:
                        exchange([s])
                if (plan.output_overlap and plan.output_transfer is not None
                        and _returned(plan.output_mode, plan.output_return_period, it)):
                    overlapped_copy("output", last_ipu, plan.output_transfer, plan.output_io_copy_cycles,
                                    spans(plan.output_overlap, it, _m, +1))
                    for a in plan.anchor_transfers:
                        if _returned(a.output_mode, a.return_period, it):
                            tl.host("anchor", a.ipu, a.transfer)
                else:
                    returned_copies(it)
                if training:
                    for s in reversed(range(n)):
                        tl.run(f"stage{s}/backward", "OnTileExecute",
                               {stages[s].ipu: stages[s].backward_cycles})
                        if s > 0:
                            exchange([s - 1])
                tl.sync(plan.sync_cycles)
            weight_update()
    final = [a for a in plan.anchor_transfers if a.output_mode in ("Final", "Sum")]
    if plan.output_mode in ("Final", "Sum") or final:
        if plan.output_mode in ("Final", "Sum"):
            output_copy("output")
        for a in final:
            tl.host("anchor", a.ipu, a.transfer)
        tl.sync(plan.sync_cycles)

    frame = pd.DataFrame(tl.rows, columns=["step", "program", "program_type", "ipu", "cycles",
                                           "start_cycle"])
    frame.insert(0, "run", 0)
    return frame
