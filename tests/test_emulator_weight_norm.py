"""A weight computed from parameters in the stage before the one that uses it (DINO's head: the
``weight_norm`` pre-hook of ``last_layer1`` runs before its ``BeginBlock`` hook, so in the previous
block), under PopTorch's default Pipeline recomputation: its recomputed tensors are live apart
from the block's activations (PopART reruns what each backward operation needs,
``FindRequiredRecomputes`` in ``willow/src/popx/irlowering.cpp``), and the broadcast norm
``F.normalize`` divides by holds only its source's bytes (``ExpandOpx``,
``willow/src/popx/op/expandx.cpp``)."""

from __future__ import annotations

import pytest

from popviz.emulator import hardware, recompute
from popviz.emulator.cost_inputs import EngineSetup, Measurement, OpCost, Segment

MK2 = hardware.SPECS["Mk2"]
HOST = hardware.HostLink(bytes_per_second=8e9, latency_seconds=10e-6)


def _setup() -> EngineSetup:
    return EngineSetup(name="training", mode="training", strategy="PipelinedExecution", gradient_accumulation=4,
                       spec=MK2, host=HOST, calls=1)


def _two_chains(sources: bool) -> Measurement:
    """Stage 0: ops 0-1 on the activations (each saves 100 B, then 200 B), ops 2-3 on a weight
    made from parameters only (300 B, then 400 B); stage 1 reads both."""
    ops = [OpCost(seg, name, 0, 4, in_bytes=1000, out_bytes=1000, block=f"b{seg}")
           for seg, name in [(0, "addmm"), (0, "gelu"), (0, "div"), (0, "mul"), (1, "mm")]]
    return Measurement(
        segments=[Segment(0, ["b0"]), Segment(1, ["b1"])], ops=ops, params=[],
        saved_bytes=[1000, 0], boundary_bytes=[50],
        saved_slots=[(0, 1, 100), (0, 2, 200), (0, 3, 300), (0, 4, 400)],
        saved_keys=[10, 11, 12, 13], saved_producers=[0, 0, 2, 2],
        op_sources=[(), (0,), (), (2,), (1, 3)] if sources else [])


def test_chains_that_share_no_tensor_are_live_apart():
    plan = recompute.plan(_two_chains(sources=True), _setup())
    assert plan.recomputed == (True, True, True, True, False)
    assert plan.live_bytes == (300, 300, 700, 700, 0)


def test_without_the_operations_inputs_a_stage_is_one_chain():
    plan = recompute.plan(_two_chains(sources=False), _setup())
    assert plan.live_bytes == (1000, 1000, 1000, 1000, 0)


torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


def test_a_broadcast_view_counts_its_sources_bytes():
    norm = torch.zeros(256, 1)
    assert recompute._nbytes(norm.expand(256, 8)) == 1024
    assert recompute._nbytes(torch.zeros(4, 8).t()) == 128
    assert recompute._nbytes(torch.zeros(0, 1).expand(0, 8)) == 0


class _WeightNorm:
    """DINO's ``core/weight_norm.py``: ``weight = normalize(weight_v, dim=1) * weight_g`` before every
    forward, as a forward pre-hook."""

    def __call__(self, module, inputs):
        module.weight = F.normalize(module.weight_v, p=2.0, dim=1, eps=1e-6) * module.weight_g


class Head(nn.Module):
    """DINO's head in small: an MLP on IPU 0, then a weight-normed projection whose ``BeginBlock``
    (IPU 1) is registered after its weight-norm hook, so the weight is computed on IPU 0."""

    def __init__(self) -> None:
        super().__init__()
        import popviz.emulator as poptorch

        self.mlp = nn.Linear(16, 8)
        self.last = nn.Linear(8, 256, bias=False)
        weight = self.last.weight
        del self.last._parameters["weight"]
        self.last.weight_g = nn.Parameter(torch.ones(256, 1))
        self.last.weight_v = nn.Parameter(weight.data)
        self.last.weight = weight.data
        self.last.register_forward_pre_hook(_WeightNorm())
        self.mlp = poptorch.BeginBlock(self.mlp, "ipu0", ipu_id=0)
        self.last = poptorch.BeginBlock(self.last, "ipu1", ipu_id=1)

    def forward(self, x, y):
        import popviz.emulator as poptorch

        out = self.last(F.normalize(self.mlp(x), dim=-1))
        return out, poptorch.identity_loss(((out - y) ** 2).mean(), reduction="mean")


def test_weight_norm_in_the_stage_before_is_live_on_its_own():
    import popviz.emulator as poptorch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = Head()
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(4)
        ex = poptorch.trainingModel(model, opts, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        ex.compile(torch.zeros(4, 16), torch.zeros(4, 256))
        est = ex.popvizEstimate()
    finally:
        torch.set_num_threads(before)
    assert [(s.ipu, s.stash_depth) for s in est.stages] == [(0, 3), (1, 1)]
    assert est.recompute_note.startswith("Recomputation: Pipeline")
    # the weight's chain on IPU 0 (normalize(v) * g, v 256 x 8 float32): the recomputed norm
    # (256 x 1: 1,024 B), the clamped norm that the division's broadcast view keeps (1,024 B, not
    # 256 x 8) and the normalized v the product saves (8,192 B) are 10,240 B live; the product
    # works on normalized v and makes the weight (8,192 B each): 26,624 B. The activations' chain
    # (4 x 8 float32) is far smaller and not added.
    assert est.stages[0].temporary_bytes == 10_240 + 2 * 8_192
    # the weight crosses to IPU 1 once per micro-batch
    assert est.stages[0].weight_bytes == (256 * 8 + 256 + 16 * 8 + 8) * 4


class _Tower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(4))


class _HeadPair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Linear(8, 4)
        self.last1, self.last2 = nn.Linear(4, 6), nn.Linear(4, 6)


class StudentTeacherTowers(nn.Module):
    """DINO's module tree in small: a student and a teacher of one class (repeated modules at
    depth 1) whose blocks start the stages, and two heads with two last layers of one shape."""

    def __init__(self) -> None:
        super().__init__()
        import popviz.emulator as poptorch

        self.student, self.teacher = _Tower(), _Tower()
        self.student_head, self.teacher_head = _HeadPair(), _HeadPair()
        for tower in (self.student, self.teacher):
            tower.embed = poptorch.BeginBlock(tower.embed, "ipu0", ipu_id=0)
            tower.blocks[2] = poptorch.BeginBlock(tower.blocks[2], "ipu1", ipu_id=1)
        for head in (self.student_head, self.teacher_head):
            head.mlp = poptorch.BeginBlock(head.mlp, "ipu1", ipu_id=1)


def test_layers_are_the_blocks_when_the_shallowest_repeats_hold_block_starts():
    from popviz.emulator.layers import discover

    structure = discover(StudentTeacherTowers())
    assert structure.depth == 3
    assert sorted(structure.movable) == [f"{t}.blocks.{i}" for t in ("student", "teacher") for i in range(4)]
    assert structure.how.startswith("depth 3 chosen automatically: BeginBlock starts blocks inside the "
                                    "shallowest repeated modules (student ...), so the depth whose repeated "
                                    "modules start the most blocks (student.blocks.0 ... teacher.blocks.3, 8 layers)")


def test_without_block_starts_inside_the_shallowest_repeats_stay():
    from popviz.emulator.layers import discover

    model = StudentTeacherTowers()
    import popviz.emulator as poptorch

    for m in model.modules():
        poptorch.removeBlocks(m)
    structure = discover(model)
    assert structure.depth == 1
    assert sorted(structure.movable) == ["student", "student_head", "teacher", "teacher_head"]
