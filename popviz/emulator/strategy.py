"""Execution strategies and stages: which block runs in which stage, on which IPU.

PopTorch's rules, which the emulator follows:

* ``Stage(*block_ids).ipu(n)`` groups blocks; ``PipelinedExecution(*stages | *block_ids)``
  numbers the stages in the order given. A block the strategy does not list is an error.
* With no stages given, an ``AutoStage`` decides: ``SameAsIpu`` (the default) makes the
  stage id the block's ``ipu_id`` (which must then be given), ``AutoIncrement`` gives every new
  block the next stage id.
* A block's IPU is its stage's ``.ipu(n)`` if set, else the block's ``ipu_id``, else its stage id.
* Blocks without a ``user_id`` get automatic ids ``"0"``, ``"1"``, ... per trace.

This module does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from popviz.emulator.enums import AutoStage, Liveness

BlockId = str


class Stage:
    """One or more blocks that run together on one IPU."""

    def __init__(self, *block_ids: BlockId) -> None:
        assert all(isinstance(b, str) for b in block_ids), (
            f"Block IDs are supposed to be strings but got {block_ids}")
        self._blocks = tuple(block_ids)
        self._stage_id = -1
        self._phase_id = -1
        self._ipu: int | None = None

    @property
    def blocks(self) -> list[BlockId]:
        return list(self._blocks)

    def ipu(self, ipu: int) -> Stage:
        """Run this stage on IPU ``ipu``."""
        assert isinstance(ipu, int)
        self._ipu = ipu
        return self

    def __repr__(self) -> str:
        ipu = f".ipu({self._ipu})" if self._ipu is not None else ""
        return f"Stage({', '.join(map(repr, self._blocks))}){ipu}"


@dataclass(frozen=True)
class BlockPlacement:
    """Where one block runs: its id, stage id and IPU."""

    block: BlockId
    stage: int
    ipu: int


class StageResolver:
    """Maps blocks to stages during one trace of the model (PopTorch's stage manager)."""

    def __init__(self, strategy: _ExecutionStrategy) -> None:
        self._strategy = strategy
        self._next_auto_id = 0
        self._next_stage = 1
        self._auto_stages: dict[BlockId, Stage] = {}

    def next_auto_id(self) -> str:
        value = str(self._next_auto_id)
        self._next_auto_id += 1
        return value

    def reset_auto_id(self) -> None:
        self._next_auto_id = 0

    def _stage_for(self, block_id: BlockId, ipu_id: int | None) -> Stage:
        block_map = self._strategy._block_map
        if block_map:
            assert block_id in block_map, (
                f"Unknown Block '{block_id}' list of expected Blocks: {list(block_map.keys())}")
            return block_map[block_id]
        if block_id not in self._auto_stages:
            stage = Stage(block_id)
            if self._strategy._auto_stage == AutoStage.SameAsIpu:
                assert ipu_id is not None, (
                    f"poptorch.AutoStage.SameAsIpu was selected but no IPU was specified for "
                    f"block {block_id}")
                stage._stage_id = ipu_id
            else:
                stage._stage_id = self._next_stage
                self._next_stage += 1
            self._auto_stages[block_id] = stage
        return self._auto_stages[block_id]

    def begin(self, user_id: BlockId | None, ipu_id: int | None) -> BlockPlacement:
        """A block starts: resolve its id, stage and IPU."""
        block_id = user_id if user_id is not None else self.next_auto_id()
        block_id = str(block_id)
        stage = self._stage_for(block_id, ipu_id)
        ipu = stage._ipu if stage._ipu is not None else ipu_id
        if ipu is None:
            ipu = stage._stage_id
        return BlockPlacement(block_id, stage._stage_id, int(ipu))


class _ExecutionStrategy:
    """Common base: the block -> stage map, or the AutoStage rule when there is none."""

    def __init__(self, block_map: dict[BlockId, Stage], auto_stage: AutoStage = AutoStage.SameAsIpu) -> None:
        self._block_map = block_map
        self._auto_stage = auto_stage

    def stage(self, block_id: BlockId) -> Stage:
        """The Stage ``block_id`` belongs to."""
        assert block_id in self._block_map, f"Unknown block {block_id}"
        return self._block_map[block_id]

    def resolver(self) -> StageResolver:
        return StageResolver(self)

    @property
    def name(self) -> str:
        """PopTorch's class name of the strategy (the report's ``execution_strategy``)."""
        for cls in type(self).__mro__:
            if cls.__name__ in ("PipelinedExecution", "ShardedExecution", "SerialPhasedExecution",
                                "ParallelPhasedExecution"):
                return cls.__name__
        return type(self).__name__

    def describe(self) -> dict:
        """JSON-compatible description for the report's recorded options."""
        stages = {}
        for block, stage in self._block_map.items():
            stages.setdefault(stage._stage_id, {"blocks": [], "ipu": stage._ipu})
            stages[stage._stage_id]["blocks"].append(block)
        return {"name": self.name, "auto_stage": self._auto_stage.name if not self._block_map else None,
                "stages": [stages[k] for k in sorted(stages)]}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


def _stages_from(args: tuple) -> dict[BlockId, Stage]:
    block_map: dict[BlockId, Stage] = {}
    for stage_id, arg in enumerate(args):
        if isinstance(arg, Stage):
            stage = arg
        elif isinstance(arg, str):
            stage = Stage(arg)
        else:
            assert all(isinstance(elt, str) for elt in arg)
            stage = Stage(*arg)
        stage._stage_id = stage_id
        for block in stage._blocks:
            assert block not in block_map, f"{block} associated with more than one stage"
            block_map[block] = stage
    return block_map


class PipelinedExecution(_ExecutionStrategy):
    """Pipeline the stages over their IPUs. Arguments: one ``AutoStage``, or stages / block ids
    (a string is a one-block stage; a list of strings is one stage)."""

    def __init__(self, *args) -> None:
        if len(args) == 1 and isinstance(args[0], AutoStage):
            super().__init__({}, args[0])
        else:
            super().__init__(_stages_from(args))


class ShardedExecution(PipelinedExecution):
    """Run the stages one after another (one IPU busy at a time)."""


class Phase:
    """Stages that run in parallel within one phase of a phased execution."""

    def __init__(self, *arg) -> None:
        if all(isinstance(elt, Stage) for elt in arg):
            self.stages = list(arg)
        else:
            assert all(isinstance(elt, str) for elt in arg), (
                "All arguments must either be block IDs (strings) or Stages: "
                + str([type(elt) for elt in arg]))
            self.stages = [Stage(*arg)]

    def stage(self, idx: int) -> Stage:
        return self.stages[idx]

    def ipus(self, *ipus: int) -> None:
        """One IPU per stage of this phase."""
        assert len(ipus) == len(self.stages), (
            f"Phase contains {len(self.stages)} stages but you provided {len(ipus)} ipus")
        for stage, ipu in zip(self.stages, ipus, strict=True):
            stage.ipu(ipu)


class _PhasedExecution(_ExecutionStrategy):
    def __init__(self, *phases) -> None:
        assert phases, ("There is currently no AutoStage for PhasedExecution, please explicitly "
                        "specify the phases")
        self._phases: list[Phase] = []
        self._tensors_liveness = Liveness.AlwaysLive
        self._separate_backward_phase = False
        block_map: dict[BlockId, Stage] = {}
        stage_id = 0
        for phase_id, args in enumerate(phases):
            phase = args if isinstance(args, Phase) else Phase(*(args if isinstance(args, list) else [args]))
            self._phases.append(phase)
            for stage in phase.stages:
                stage._phase_id = phase_id
                stage._stage_id = stage_id
                stage_id += 1
                for block in stage._blocks:
                    assert block not in block_map, f"{block} associated with more than one stage"
                    block_map[block] = stage
        super().__init__(block_map)

    def phase(self, phase: int) -> Phase:
        assert isinstance(phase, int) and 0 <= phase < len(self._phases), (
            f"Invalid phase index {phase}")
        return self._phases[phase]

    def useSeparateBackwardPhase(self, use: bool = True) -> _PhasedExecution:
        self._separate_backward_phase = bool(use)
        return self


class SerialPhasedExecution(_PhasedExecution):
    """Run the phases one after another on the same IPUs."""

    def setTensorsLiveness(self, liveness: Liveness) -> SerialPhasedExecution:
        assert isinstance(liveness, Liveness)
        self._tensors_liveness = liveness
        return self


class ParallelPhasedExecution(_PhasedExecution):
    """Run consecutive phases in parallel on alternating IPU sets."""

    def sendTensorsOffChipAfterFwd(self, off_chip: bool = True) -> ParallelPhasedExecution:
        assert isinstance(off_chip, bool)
        self._tensors_liveness = Liveness.OffChipAfterFwd if off_chip else Liveness.AlwaysLive
        return self


__all__ = ["BlockPlacement", "ParallelPhasedExecution", "Phase", "PipelinedExecution",
           "SerialPhasedExecution", "ShardedExecution", "Stage", "StageResolver"]
