"""Recomputation as PopART does it (popviz/emulator/recompute.py): the type from the options
(PopTorch's Pipeline default included), what is recomputed and stashed, and its effect on a real
emulated model's stash, backward cycles, layers and notes."""

from __future__ import annotations

import enum

import pytest

from popviz.emulator import costmodel, hardware, recompute
from popviz.emulator.cost_inputs import EngineSetup, Measurement, OpCost, Segment
from popviz.emulator.recompute import Checkpoint, RecomputationType, parse_type

MK2 = hardware.SPECS["Mk2"]
HOST = hardware.HostLink(bytes_per_second=8e9, latency_seconds=10e-6)


class FakePopartType(enum.IntEnum):  # what w21's popart stand-in (or popart itself) records
    Standard = 1
    Pipeline = 3


@pytest.mark.parametrize("value,expected", [
    (0, RecomputationType.NONE), (3, RecomputationType.Pipeline), (4, RecomputationType.RecomputeAll),
    ("Pipeline", RecomputationType.Pipeline), ("RecomputationType.NormOnly", RecomputationType.NormOnly),
    ("none", RecomputationType.NONE), ("1", RecomputationType.Standard),
    ("RecomputationType.NoRecompute", RecomputationType.NONE),
    (FakePopartType.Pipeline, RecomputationType.Pipeline)])
def test_recomputation_type_from_int_enum_or_name(value, expected):
    assert parse_type(value) is expected


def test_the_emulated_popart_enum_is_recorded_as_its_value():
    import popviz.emulator as poptorch
    from popviz.emulator import popart_enums

    opts = poptorch.Options()
    opts._Popart.set("autoRecomputation", popart_enums.RecomputationType.RecomputeAll)
    assert parse_type(opts.toDict()[recompute.OPTION]) is RecomputationType.RecomputeAll


@pytest.mark.parametrize("bad", [7, -1, "Sometimes", True, 2.5])
def test_bad_recomputation_type_names_the_value(bad):
    with pytest.raises(ValueError, match=r"autoRecomputation=.* is not a RecomputationType"):
        parse_type(bad)


def test_a_bad_option_fails_the_compile_with_poptorchs_error():
    from popviz.emulator.errors import Error

    with pytest.raises(Error, match=r"autoRecomputation=9 is not a RecomputationType \(use 0-4 or one of None, "
                       r"Standard, NormOnly, Pipeline, RecomputeAll\) \(set with opts._Popart.set\)"):
        recompute.plan(measurement(), setup(options={recompute.OPTION: 9}))


def test_decreasing_intervals_follow_popart():
    # willow/src/intervals.cpp: K = int((int(sqrt(2N)) - 1) * 0.75): N = 5 -> K = 1 (singletons; the
    # file's comment predates the 0.75 factor); N = 20 -> K = 3
    assert recompute._decreasing_intervals(5) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert recompute._decreasing_intervals(20)[:4] == [(0, 3), (3, 5), (5, 6), (6, 7)]


def measurement(checkpoints=()) -> Measurement:
    """Two stages of three ops; each op's output (key 10 + index) is saved by the next op."""
    ops = [OpCost(seg, name, 0, 2, in_bytes=1000, out_bytes=1000, block=f"b{seg}")
           for seg, name in [(0, "relu"), (0, "gelu"), (0, "add"), (1, "relu"), (1, "gelu"), (1, "mul")]]
    saved = [(0, 1, 100), (0, 2, 200), (0, 3, 300), (1, 4, 400), (1, 5, 500), (1, 6, 600)]
    return Measurement(
        segments=[Segment(0, ["b0"]), Segment(1, ["b1"])], ops=ops, params=[],
        saved_bytes=[600, 1500], boundary_bytes=[50], saved_slots=saved,
        saved_keys=[10, 11, 12, 13, 14, 15], saved_producers=[None, 0, 1, 2, 3, 4],
        checkpoints=list(checkpoints))


def setup(**changes) -> EngineSetup:
    base = dict(name="training", mode="training", strategy="PipelinedExecution", gradient_accumulation=4,
                spec=MK2, host=HOST, calls=1)
    base.update(changes)
    return EngineSetup(**base)


def test_pipeline_is_poptorchs_default_for_a_multi_ipu_pipeline():
    plan = recompute.plan(measurement(), setup())
    assert plan.type is RecomputationType.Pipeline
    assert plan.note.startswith("Recomputation: Pipeline, PopTorch's default for a pipelined model on 2 IPUs")
    # stage 0 recomputed; the final stage (no checkpoint in it) is not (setFinalFwdStageRecomputation)
    assert plan.recomputed == (True, True, True, False, False, False)
    # stage 0 stashes the slot of a host input (100); its own ops' outputs are recomputed; stage 1,
    # not recomputed, stashes every slot as before
    assert plan.stash_bytes(2) == [100, 400 + 500 + 600]
    assert plan.live_bytes[:3] == (500, 500, 500)  # the recomputed interval: slots made by ops 0 and 1


def test_checkpoints_cut_intervals_and_stay_stashed():
    cp = Checkpoint(segment=0, position=1, bytes=999, keys=(11,), sizes=(999,))  # after op 0
    plan = recompute.plan(measurement([cp]), setup())
    assert plan.note.endswith("1 recomputationCheckpoint kept as stashed tensors. 3 of 6 forward operations "
                              "recomputed in the backward pass.")
    assert plan.stash_bytes(2)[0] == 100 + 200  # the host input's slot, the checkpointed slot (key 11)
    assert plan.live_bytes[:3] == (0, 300, 300)  # op 0's interval recomputes nothing saved (its output
    # is the checkpoint); ops 1-2 recompute op 1's saved output


def test_last_stage_is_recomputed_before_its_last_checkpoint():
    cp = Checkpoint(segment=1, position=5, bytes=8, keys=(99,), sizes=(8,))  # after op 4, unsaved tensor
    plan = recompute.plan(measurement([cp]), setup())
    assert plan.recomputed == (True, True, True, True, True, False)
    # stage 1 stashes its input (50) and the checkpoint (8); op 5's slot was made by op 4, recomputed
    assert plan.stash_bytes(2) == [100, 50 + 8]


def test_no_default_on_one_ipu_and_checkpoints_are_inert():
    m = measurement([Checkpoint(0, 1, 8, (11,), (8,))])
    m.segments = [Segment(0, ["b0"]), Segment(0, ["b1"])]
    plan = recompute.plan(m, setup(strategy=None))
    assert plan.type is RecomputationType.NONE and not plan.active
    assert plan.note == ("Recomputation: None (autoRecomputation not set, and PopTorch sets Pipeline only for a "
                         "pipeline over more than one IPU, here a single IPU); the 1 recomputationCheckpoint "
                         "has no effect without it.")
    assert plan.stash_bytes(2) == [600, 1500]


def test_recompute_all_keeps_everything_after_the_last_checkpoint():
    cp = Checkpoint(0, 2, 8, (12,), (8,))
    plan = recompute.plan(measurement([cp]), setup(options={recompute.OPTION: 4}))
    assert plan.recomputed == (True, True, False, False, False, False)
    explicit = recompute.plan(measurement([cp]), setup(options={recompute.OPTION: 4,
                                                                 recompute.EXPLICIT_OPTION: True}))
    assert all(explicit.recomputed)
    none = recompute.plan(measurement(), setup(options={recompute.OPTION: "RecomputeAll"}))
    assert not none.active  # no checkpoint: allCheckpointAfterLastCheckpoint keeps every op


def test_norm_only_and_explicit_none():
    m = measurement()
    m.ops[1] = m.ops[1].replace(name="native_layer_norm")
    plan = recompute.plan(m, setup(options={recompute.OPTION: 2}))
    assert plan.recomputed == (False, True, False, False, False, False)
    assert recompute.plan(m, setup(options={recompute.OPTION: 0})).note == (
        "Recomputation: None (autoRecomputation set by the script); 0 recomputationCheckpoints.")


def test_inference_never_recomputes():
    plan = recompute.plan(measurement(), setup(mode="inference"))
    assert plan.type is RecomputationType.NONE and plan.note == ""


def test_recomputed_forward_is_added_to_the_backward():
    m = measurement()
    table = costmodel.op_table(m, setup())
    off = costmodel.op_table(m, setup(options={recompute.OPTION: 0}))
    assert [b - o for b, o in zip(table.backward, off.backward, strict=True)] == [
        table.forward[0], table.forward[1], table.forward[2], 0, 0, 0]
    stages = costmodel.stage_estimates(m, setup(), table)
    assert stages[0].recompute_cycles == round(sum(table.forward[:3]))
    assert [s.saved_bytes for s in stages] == [0 + 100, 1500]  # no host inputs in this setup


# ------------------------------------------------------------------------------ a real model

torch = pytest.importorskip("torch")


def _pipeline(checkpoint: bool, option=None):
    import popviz.emulator as poptorch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(),
                                                                  torch.nn.Linear(64, 32)) for _ in range(4))
            self.loss = torch.nn.MSELoss()

        def forward(self, x, y):
            for i, layer in enumerate(self.layers):
                with poptorch.Block(f"l{i}", ipu_id=i // 2):
                    x = layer(x)
                    if checkpoint and i != 3:
                        x = poptorch.recomputationCheckpoint(x)
                    if i == 3:
                        return x, self.loss(x, y)

    opts = poptorch.Options()
    opts.Training.gradientAccumulation(4)
    if option is not None:
        opts._Popart.set("autoRecomputation", option)
    model = poptorch.trainingModel(Net(), opts, optimizer=torch.optim.SGD(Net().parameters(), lr=0.1))
    model.compile(torch.zeros(32, 32), torch.zeros(32, 32))
    return model.popvizEstimate(), model.popvizReport()


def test_real_pipeline_stash_backward_layers_and_notes():
    est, report = _pipeline(checkpoint=True)
    off, _ = _pipeline(checkpoint=True, option=0)
    note = next(n for n in report.provenance.notes if n.startswith("Recomputation"))
    assert note.startswith("Recomputation: Pipeline, PopTorch's default for a pipelined model on 2 IPUs "
                           "(autoRecomputation not set; poptorch Compiler.cpp); 3 recomputationCheckpoints")
    # stage 0 stashes the input the first Linear saves (8 x 32 float32) and its checkpoint outputs
    # (l0, l1: 1,024 B each)
    assert est.stages[0].saved_bytes == 1024 + 1024 + 1024
    assert off.stages[0].saved_bytes > est.stages[0].saved_bytes
    assert est.stages[0].recompute_cycles > 0 and est.stages[1].recompute_cycles > 0
    assert est.stages[0].backward_cycles - off.stages[0].backward_cycles == est.stages[0].recompute_cycles
    layers = report.layers.layers
    stage0 = [x for x in layers if x.stage == 0]
    assert sum(x.bwd_cycles for x in stage0) == est.stages[0].backward_cycles
    assert sum(x.activation_bytes for x in stage0) == est.stages[0].saved_bytes


def test_layers_record_their_recomputed_forward_and_checkpoints_for_the_plan():
    """l0-l2 make a checkpoint; stage 1 (l2, l3) is the last: l2 is recomputed up to its
    checkpoint, l3 after it is not. Each recomputed layer's recompute_cycles is its forward (all of
    its operations run again), and the stages' sums are the estimate's recompute cycles."""
    est, report = _pipeline(checkpoint=True)
    table = report.layers
    by = {x.name: x for x in table.layers}
    assert table.recomputation == "Pipeline"
    assert [by[f"layers.{i}"].checkpoint for i in range(4)] == [True, True, True, False]
    assert [by[f"layers.{i}"].recompute_cycles == by[f"layers.{i}"].fwd_cycles for i in range(3)] == [True] * 3
    assert by["layers.3"].recompute_cycles == 0
    for stage in (0, 1):
        assert sum(x.recompute_cycles for x in table.layers if x.stage == stage) == pytest.approx(
            est.stages[stage].recompute_cycles, abs=2)
