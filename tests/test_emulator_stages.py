"""Pipeline stages as PopTorch and PopART count them (popviz/emulator/measure.py): a forward pass
that revisits its IPUs (a student, then a no-grad teacher over the same IPUs, as DINO does) has
one stage per stage id, not one per IPU switch; the stash depths, the pipeline check and the
report's stages follow; a no-grad segment has no backward and stashes nothing."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402
from popviz.emulator.errors import Error  # noqa: E402
from popviz.emulator.measure import stage_order  # noqa: E402

nn = torch.nn
W = 64


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class StudentTeacher(nn.Module):
    """Two IPUs visited twice: a student over IPUs 0 and 1, then a frozen teacher under
    torch.no_grad() over the same IPUs, in blocks of the same names (DINO's ``set_pipeline``)."""

    def __init__(self, teacher: bool = True) -> None:
        super().__init__()
        self.teacher = teacher
        self.s0, self.s1 = nn.Linear(W, W), nn.Linear(W, W)
        self.t0, self.t1 = nn.Linear(W, W), nn.Linear(W, W)
        for p in [*self.t0.parameters(), *self.t1.parameters()]:
            p.requires_grad = False
        self.s0 = poptorch.BeginBlock(self.s0, "ipu0", ipu_id=0)
        self.s1 = poptorch.BeginBlock(self.s1, "ipu1", ipu_id=1)
        self.t0 = poptorch.BeginBlock(self.t0, "ipu0", ipu_id=0)
        self.t1 = poptorch.BeginBlock(self.t1, "ipu1", ipu_id=1)

    def forward(self, x):
        s = self.s1(torch.relu(self.s0(x)))
        if self.teacher:
            with torch.no_grad():
                t = self.t1(torch.relu(self.t0(x))).detach()
        else:  # the student alone (still in block ipu1)
            t = torch.zeros(s.shape)
        loss = ((s - t) ** 2).mean()
        return s, poptorch.identity_loss(loss, reduction="mean")


def compile_model(model, accumulation=8, strategy=None):
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(accumulation)
    if strategy is not None:
        opts.setExecutionStrategy(strategy)
    ex = poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))
    ex.compile(torch.randn(8 * accumulation, W, generator=torch.Generator().manual_seed(0)))
    return ex.popvizEstimate()


def test_a_revisited_pipeline_has_popart_stages_and_stash_depths():
    est = compile_model(StudentTeacher())
    # PopTorch's SameAsIpu: stage id = IPU (python/enums.py), so the teacher's blocks are stages 0
    # and 1 again; PopART's stash of forward stage i is numIndependentStages(i, 2(N-1)-i+1)
    # (willow/src/transforms/pipeline.cpp): 3 and 1, not 7, 5, 3, 1 as one stage per IPU switch
    assert [(s.index, s.ipu, s.blocks) for s in est.stages] == [(0, 0, ["ipu0"]), (1, 1, ["ipu1"])]
    assert [s.stash_depth for s in est.stages] == [3, 1]
    assert [(s.index, s.ipu) for s in est.config.stages] == [(0, 0), (1, 1)]


def test_the_no_grad_teacher_adds_forward_work_only():
    with_teacher = compile_model(StudentTeacher())
    student = compile_model(StudentTeacher(teacher=False))
    # the teacher's operations grow no gradient (frozen weights, inputs that need none): its
    # stages' backward and stash are the student's alone
    assert [s.backward_cycles for s in with_teacher.stages] == [s.backward_cycles for s in student.stages]
    assert [s.saved_bytes for s in with_teacher.stages] == [s.saved_bytes for s in student.stages]
    assert [s.forward_cycles for s in with_teacher.stages] != [s.forward_cycles for s in student.stages]
    stash = with_teacher.memory.frame["cat_activationStash_bytes"].tolist()
    assert stash == student.memory.frame["cat_activationStash_bytes"].tolist()
    assert stash == [3 * with_teacher.stages[0].saved_bytes, 1 * with_teacher.stages[1].saved_bytes]


def test_popart_pipeline_check_counts_stage_ids():
    # 2 forward stages: 3 pipeline stages in training, so G = 3 compiles (4 IPU switches would need 7)
    est = compile_model(StudentTeacher(), accumulation=3)
    assert len(est.stages) == 2
    with pytest.raises(Error, match=r"greater than or equal to the number of pipeline stages \(3\)"):
        compile_model(StudentTeacher(), accumulation=2)


def test_auto_increment_gives_a_revisit_its_own_stage():
    # AutoIncrement numbers every new block (python/enums.py: Block "2" ipu=0 -> stage 2)
    class Three(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(W, W), nn.Linear(W, W), nn.Linear(W, W)

        def forward(self, x):
            with poptorch.Block(ipu_id=0):
                x = self.a(x)
            with poptorch.Block(ipu_id=1):
                x = self.b(x)
            with poptorch.Block(ipu_id=0):
                x = self.c(x)
                return x, poptorch.identity_loss(x.square().mean(), reduction="mean")

    est = compile_model(Three(), accumulation=5,
                        strategy=poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    assert [(s.ipu, s.stash_depth) for s in est.stages] == [(0, 5), (1, 3), (0, 1)]


def test_stage_order():
    # student and teacher over IPUs 0, 1: two stages
    assert stage_order([(0, 0), (1, 1), (0, 0), (1, 1)])[0] == [0, 1, 0, 1]
    # a head back on IPU 0 that reads IPU 1's output cannot run in stage 0: a stage of its own
    of, segments = stage_order([(0, 0), (1, 1), (0, 0)], {2: {1}})
    assert of == [0, 1, 2] and [s.ipu for s in segments] == [0, 1, 0]
    # consecutive stages on one IPU are one (PopART's mergeConsecutivePipelineStages)
    of, segments = stage_order([(0, 0), (0, 1), (1, 2)])
    assert of == [0, 0, 1] and [s.ipu for s in segments] == [0, 1]


# ------------------------------------------------------------------ I/O tiles


class Overlapped(nn.Module):
    """Graphcore's CNN inference wrapper (vision/cnns/pytorch/models/model_wrappers.py,
    OverlapModel): inputs and outputs marked for overlap."""

    def __init__(self, overlap: bool) -> None:
        super().__init__()
        self.overlap = overlap
        self.net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))

    def forward(self, x):
        if self.overlap:
            x = poptorch.set_overlap_for_input(x, poptorch.OverlapMode.OverlapAccumulationLoop)
        y = self.net(x)
        if self.overlap:
            y = poptorch.set_overlap_for_output(y, poptorch.OverlapMode.OverlapAccumulationLoop)
        return y


def inference(io_tiles: int, overlap: bool, iterations: int = 4):
    opts = poptorch.Options().deviceIterations(iterations)
    if io_tiles:
        opts.TensorLocations.numIOTiles(io_tiles)
        opts.setExecutionStrategy(poptorch.ShardedExecution())
    ex = poptorch.inferenceModel(Overlapped(overlap), opts)
    ex.compile(torch.randn(iterations * 64, 256, generator=torch.Generator().manual_seed(0)))
    return ex.popvizEstimate()


def stream(est, program: str) -> list[int]:
    steps = est.steps
    return steps[steps.program == program].cycles.tolist()


def test_io_tiles_leave_compute():
    from popviz.emulator import costmodel, hardware

    plain, reserved = inference(0, False), inference(64, False)
    # the same operations on 1408 of 1472 tiles: slower, and less memory to hold them
    assert reserved.stages[0].forward_cycles > plain.stages[0].forward_cycles
    spec = hardware.compute_spec(hardware.SPECS["Mk2"], 64)
    assert (spec.tiles_per_ipu, spec.bytes_per_ipu) == (1408, 1408 * 638_976)
    assert spec.memory_bytes_per_second == pytest.approx(47.5e12 * 1408 / 1472, rel=1e-12)
    big = costmodel.OpCost(0, "add", 0, 4, in_bytes=10**8, out_bytes=10**8)
    assert costmodel.op_cycles(big, spec) > costmodel.op_cycles(big, hardware.SPECS["Mk2"])
    # without set_overlap_for_input/output the transfers are as before
    assert stream(reserved, "input/mid") == stream(plain, "input/mid")


def test_overlapped_transfers_hide_behind_compute():
    from popviz.emulator import hardware

    plain, overlapped = inference(64, False), inference(64, True)
    mk2 = hardware.SPECS["Mk2"]
    copy_in = hardware.io_tile_copy_cycles(64 * 256 * 4, mk2, 64)
    assert copy_in == round(64 * 256 * 4 / (8e12 / 1.33e9 / 1472 * 64)) + hardware.SYNC_CYCLES
    before = stream(plain, "input/mid")
    # OverlapAccumulationLoop with G = 1 spans the device iterations (PopART's inner loop): the
    # first input is not preloaded; the others hide behind the previous micro-batch's compute
    # (one 64 x 256 float32 micro-batch's transfer is shorter than its compute here)
    micro = overlapped.stages[0].forward_cycles
    transfer = before[0]
    assert transfer < micro
    assert stream(overlapped, "input/mid") == [transfer + copy_in] + [copy_in] * 3
    assert stream(overlapped, "input/begin")[1:] == [0, 0, 0] and stream(overlapped, "input/end")[1:] == [0, 0, 0]
    # outputs: every one but the last of the loop hides behind the next micro-batch
    out = stream(plain, "output/mid")
    assert stream(overlapped, "output/mid")[-1] == out[-1] + hardware.io_tile_copy_cycles(64 * 256 * 4, mk2, 64)
    assert overlapped.call_cycles < plain.call_cycles
    from popviz.emulator.cost_inputs import EngineSetup
    from popviz.emulator.report_notes import notes

    setup = EngineSetup(name="x", mode="inference", strategy=None, options={"TensorLocations.numIOTiles": 64})
    assert notes(setup)[-1].startswith("I/O tiles: 64 of each IPU's 1,472 tiles are reserved for I/O")


def test_a_pipeline_does_not_overlap_its_transfers():
    from popviz.emulator import host_transfers
    from popviz.emulator.cost_inputs import EngineSetup, Measurement, OpCost, Segment

    m = Measurement(segments=[Segment(0, ["a"])], ops=[OpCost(0, "add", 0, 4, 100, 100)], params=[],
                    saved_bytes=[0], boundary_bytes=[], overlap={"input": "overlap_device_iteration_loop"})
    setup = EngineSetup(name="x", mode="inference", strategy="PipelinedExecution",
                        options={"TensorLocations.numIOTiles": 64})
    assert host_transfers.io_overlap(m, setup, "PipelinedExecution", 100, 100) == {}
    assert host_transfers.io_overlap(m, setup, "ShardedExecution", 100, 100)["input_overlap"] == "both"


def test_only_operations_towards_the_loss_grow_gradients():
    from popviz.emulator.measure import towards_loss

    # op0: x -> a; op1: a -> b (loss path); op2: a, w -> c (an EMA-like update, off the path); op3: b -> loss
    keys = [((1,), (2,)), ((2,), (3,)), ((2,), (4,)), ((3,), (5,))]
    assert towards_loss(keys, 5) == [True, True, False, True]
    assert towards_loss(keys, None) == [True] * 4 and towards_loss(keys, 99) == [True] * 4


class EmaStudent(nn.Module):
    """A student whose forward also updates a frozen copy of its weight from it (DINO's EMA,
    in place under no_grad): that update reads a trainable weight but does not lead to the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.s = nn.Linear(W, W)
        self.t = nn.Linear(W, W)
        for p in self.t.parameters():
            p.requires_grad = False

    def forward(self, x):
        with torch.no_grad():
            self.t.weight.mul_(0.9).add_(self.s.weight * 0.1)
        y = self.s(x)
        return y, poptorch.identity_loss(y.square().mean(), reduction="mean")


def test_a_weight_update_in_the_forward_has_no_backward(monkeypatch):
    from popviz.emulator import costmodel

    seen = []
    real = costmodel.estimate
    monkeypatch.setattr(costmodel, "estimate", lambda m, setup: seen.append(m) or real(m, setup))
    model = EmaStudent()
    ex = poptorch.trainingModel(model, poptorch.Options(), torch.optim.SGD(model.s.parameters(), lr=0.1))
    ex.compile(torch.randn(8, W, generator=torch.Generator().manual_seed(0)))
    (m,) = seen
    grads = [(o.name, o.has_backward) for o in m.ops]
    assert grads[:3] == [("mul_", False), ("mul", False), ("add_", False)]  # the update: off the path to the loss
    assert ("addmm", True) in grads[3:]


STUDENT_TEACHER_SCRIPT = '''\
import torch
import torch.nn as nn
import poptorch

class Net(nn.Module):
    def __init__(self, n=64):
        super().__init__()
        self.s0 = poptorch.BeginBlock(nn.Linear(n, n), "ipu0", ipu_id=0)
        self.s1 = poptorch.BeginBlock(nn.Linear(n, n), "ipu1", ipu_id=1)
        self.t0 = poptorch.BeginBlock(nn.Linear(n, n), "ipu0", ipu_id=0)
        self.t1 = poptorch.BeginBlock(nn.Linear(n, n), "ipu1", ipu_id=1)
        for p in [*self.t0.parameters(), *self.t1.parameters()]:
            p.requires_grad = False
    def forward(self, x):
        s = self.s1(torch.relu(self.s0(x)))
        with torch.no_grad():
            t = self.t1(torch.relu(self.t0(x))).detach()
        return s, poptorch.identity_loss(((s - t) ** 2).mean(), reduction="mean")

opts = poptorch.Options()
opts.Training.gradientAccumulation(3)
m = Net()
ex = poptorch.trainingModel(m, opts, torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1))
ex(torch.randn(24, 64))
'''
"""StudentTeacher as a script (its loss in the forward), run under popviz capture."""


def test_capture_and_analyse_count_the_same_stages(tmp_path):
    import popviz

    from conftest import assert_one_line_error, run_cli

    script = tmp_path / "student_teacher.py"
    script.write_text(STUDENT_TEACHER_SCRIPT, encoding="utf-8")
    proc = run_cli("capture", "-o", str(tmp_path / "cap"), "--emulate", "--calls", "1", "--", sys.executable,
                   str(script), cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "training, PipelinedExecution, 2 stage(s)" in " ".join(proc.stderr.split())
    (report,) = popviz.load(tmp_path / "cap")
    assert [(s.index, s.ipu) for s in report.config.stages] == [(0, 0), (1, 1)]
    assert report.config.num_stages == 2
    # popviz plan proposes one contiguous run of layers per IPU: a forward that goes back to IPU 0
    # (the teacher after the student) has no such split, so plan says why instead of proposing one
    plan = run_cli("plan", str(tmp_path / "cap"), cwd=tmp_path)
    assert_one_line_error(plan, "training: its layers go back to IPU 0 at t0 after IPU 1",
                          "does not plan this model")
