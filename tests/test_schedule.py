from __future__ import annotations

import pytest

from popviz.schedule import HostTransfer, SchedulePlan, StageWork, simulate


def _clock(steps):
    return (steps["start_cycle"] + steps["cycles"]).groupby(steps["ipu"]).max().to_dict()


def _by(steps, ptype):
    return steps[steps.program_type == ptype].groupby("ipu")["cycles"].sum().to_dict()


def test_two_stage_training_pipeline_by_hand():
    # S = 3 slots; cycles: 10 | 60 | 60 | 60 | 20 = 210, then a 5-cycle weight update.
    plan = SchedulePlan(stages=[StageWork(0, 10, 20), StageWork(1, 20, 40)], mode="training",
                        gradient_accumulation=3, weight_update_cycles={0: 5, 1: 5})
    steps = simulate(plan)
    assert _clock(steps) == {0: 215, 1: 215}
    assert _by(steps, "Sync") == {0: 120, 1: 30}
    assert _by(steps, "OnTileExecute") == {0: 95, 1: 185}
    assert (steps.program == "stage1/backward").sum() == 3
    assert set(steps.run) == {0}


def test_pipeline_cycle_count_and_copies():
    plan = SchedulePlan(stages=[StageWork(i, 100, 200) for i in range(4)], mode="training",
                        gradient_accumulation=16, device_iterations=2, copy_cycles=[7, 7, 7],
                        sync_cycles=1)
    steps = simulate(plan)
    syncs = steps[(steps.program_type == "Sync") & (steps.ipu == 0)]
    # (G + 2N - 2) pipeline cycles + 1 weight-update sync per iteration, + 1 final output sync
    assert len(syncs) == 2 * (16 + 7 - 1 + 1) + 1
    assert (steps.program == "stage0/forward").sum() == 32
    copies = steps[steps.program_type == "GlobalExchange"]
    assert set(copies.cycles) == {7} and set(copies.ipu) == {0, 1, 2, 3}


@pytest.mark.parametrize("mode,period,expected", [("All", 1, 40), ("EveryN", 2, 20), ("Final", 1, 1),
                                                  ("Sum", 1, 1)])
def test_outputs_returned_per_call(mode, period, expected):
    plan = SchedulePlan(stages=[StageWork(0, 10, 20), StageWork(1, 10, 20)], mode="training",
                        gradient_accumulation=10, device_iterations=4, output_mode=mode,
                        output_return_period=period,
                        input_transfer=HostTransfer(4, 100), output_transfer=HostTransfer(6, 8))
    steps = simulate(plan)
    out_mid = steps[steps.program == "output/mid"]
    assert len(out_mid) == expected and set(out_mid.ipu) == {1} and set(out_mid.cycles) == {8}
    assert (steps.program == "input/mid").sum() == 40
    assert set(steps[steps.program == "input/begin"].cycles) == {2}


def test_pipelined_inference_uses_device_iterations():
    plan = SchedulePlan(stages=[StageWork(i, 50) for i in range(3)], mode="inference",
                        device_iterations=8, output_mode="All", output_transfer=HostTransfer(0, 1))
    steps = simulate(plan)
    assert (steps.program_type == "Sync").sum() == 3 * (8 + 3 - 1)
    assert (steps.program == "output/mid").sum() == 8
    assert not steps.program.str.contains("backward").any()
    # 10 pipeline cycles of 50, and the 8 cycles that return an output take 1 more
    assert _clock(steps) == {0: 508, 1: 508, 2: 508}


def test_sharded_runs_one_ipu_at_a_time():
    plan = SchedulePlan(stages=[StageWork(0, 10, 20), StageWork(1, 30, 60)], mode="training",
                        strategy="ShardedExecution", gradient_accumulation=2)
    steps = simulate(plan)
    # per micro-batch: 10 + 30 + 60 + 20 = 120 cycles of work, serial
    assert _clock(steps) == {0: 240, 1: 240}
    assert _by(steps, "Sync") == {0: 180, 1: 60}


def _input_begins(steps):
    return steps[steps.program == "input/begin"].cycles.tolist()


def test_host_preparation_overlaps_compute_up_to_the_prefetch_depth():
    # One IPU, 4 micro-batches of 100 cycles; the host needs 150 cycles per input. Depth 1: input k
    # starts once input k-1 is copied, so each input after the first waits 150 - 100 = 50 (+2).
    plan = SchedulePlan(stages=[StageWork(0, 100)], mode="inference", strategy=None, device_iterations=4,
                        input_transfer=HostTransfer(4, 10, prepare_cycles=150))
    steps = simulate(plan)
    assert _input_begins(steps) == [150, 50, 50, 50]
    assert _clock(steps) == {0: 150 + 3 * 50 + 4 * (10 + 2 + 100)}
    # Depth 2: the host works back to back, ready at 150, 300, 450, 600.
    deep = simulate(SchedulePlan(**{**plan.__dict__, "prefetch_depth": 2}))
    assert _input_begins(deep) == [150, 38, 38, 38]
    # Depth 0 (prefetch off): the host starts when the IPU asks, nothing overlaps.
    off = simulate(SchedulePlan(**{**plan.__dict__, "prefetch_depth": 0}))
    assert _input_begins(off) == [150] * 4
    assert _clock(off) == {0: 4 * (150 + 10 + 2 + 100)}


def test_host_preparation_hidden_behind_longer_compute():
    plan = SchedulePlan(stages=[StageWork(0, 100)], mode="inference", strategy=None, device_iterations=3,
                        input_transfer=HostTransfer(4, 10, prepare_cycles=30))
    # only the first input's preparation shows; later ones are ready before the IPU asks
    assert _input_begins(simulate(plan)) == [30, 2, 2]
