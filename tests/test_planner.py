"""The planner's split against brute force, memory, pins, stash growth, N and no-fit."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

from popviz.analysis.planner import LayerCost, PlanSettings, evaluate, explain_no_fit, plan


def _compositions(n: int, k: int):
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = (0, *cuts, n)
        yield [bounds[i + 1] - bounds[i] for i in range(k)]


def test_optimal_against_brute_force() -> None:
    rng = random.Random(7)
    for _ in range(40):
        n = rng.randint(2, 8)
        layers = [LayerCost(f"l{i}", rng.randint(1, 50), rng.randint(0, 50),
                            weight_bytes=rng.randint(0, 30), optimizer_bytes=rng.randint(0, 20),
                            activation_bytes=rng.randint(0, 10), temporary_bytes=rng.randint(0, 15))
                  for i in range(n)]
        s = PlanSettings(capacity_bytes=rng.randint(60, 200), headroom_frac=0.9)
        k = rng.randint(1, min(4, n))
        got = plan(layers, k, s, exact_n=True).best
        brute = [evaluate(layers, c, s) for c in _compositions(n, k)]
        fitting = [b.bottleneck_cycles for b in brute if b.fits]
        if not fitting:
            assert got is None
        else:
            assert got is not None and got.bottleneck_cycles == min(fitting)
            assert evaluate(layers, got.layers_per_ipu, s).fits


def test_faster_split_that_overflows_is_rejected() -> None:
    layers = [LayerCost("a", 10, weight_bytes=50), LayerCost("b", 10, weight_bytes=50),
              LayerCost("c", 10, weight_bytes=10), LayerCost("d", 10, weight_bytes=10)]
    s = PlanSettings(capacity_bytes=100, headroom_frac=0.9, training=False)
    # [2, 2] is balanced (20/20) but IPU 0 needs 100 > 90 bytes
    assert not evaluate(layers, [2, 2], s).fits
    best = plan(layers, 2, s, exact_n=True).best
    assert best is not None and best.layers_per_ipu == [1, 3] and best.bottleneck_cycles == 30


def test_pinned_layers() -> None:
    layers = ([LayerCost("emb", 1, pin="first"), LayerCost("pooler", 10, pin="first")]
              + [LayerCost(f"l{i}", 10) for i in range(4)]
              + [LayerCost("head", 10, pin="last"), LayerCost("loss", 1, pin="last")])
    s = PlanSettings(capacity_bytes=10**9, training=False)
    # unpinned, 6 stages could isolate layers; pinned, emb+pooler share IPU 0, head+loss the last
    assert plan(layers, 8, s, exact_n=True).best is None
    best = plan(layers, 6, s, exact_n=True).best
    assert best is not None and best.layers_per_ipu == [2, 1, 1, 1, 1, 2]
    assert best.bottleneck_cycles == 11
    free = [LayerCost(x.name, x.fwd_cycles) for x in layers]
    assert plan(free, 8, s, exact_n=True).best is not None


def test_stash_grows_with_pipeline_position() -> None:
    layers = [LayerCost(f"l{i}", 10, 10, activation_bytes=10) for i in range(4)]
    s = PlanSettings(capacity_bytes=100, headroom_frac=1.0)
    split = evaluate(layers, [1, 1, 1, 1], s)
    assert [st.stash_depth for st in split.stages] == [7, 5, 3, 1]
    assert [st.memory_bytes for st in split.stages] == [70, 50, 30, 10]
    # 2 layers on IPU 0 at depth 3 need 60 bytes: fine; a tighter cap pushes work later
    tight = PlanSettings(capacity_bytes=50, headroom_frac=1.0)
    best = plan(layers, 2, tight, exact_n=True).best
    assert best is not None and best.layers_per_ipu == [1, 3]
    assert [st.memory_bytes for st in best.stages] == [30, 30]


def test_choice_of_n() -> None:
    layers = [LayerCost(f"l{i}", 10, weight_bytes=40) for i in range(6)]
    s = PlanSettings(capacity_bytes=100, headroom_frac=0.9, training=False)
    res = plan(layers, 4, s)
    assert res.by_ipus[1] is None and res.by_ipus[2] is None  # 3 layers = 120 bytes > 90
    assert res.by_ipus[3] is not None and res.by_ipus[3].bottleneck_cycles == 20
    assert res.by_ipus[4] is not None and res.by_ipus[4].bottleneck_cycles == 20
    assert res.best is res.by_ipus[3]  # fewest IPUs among the fastest


def test_no_fit_explanation() -> None:
    layers = [LayerCost(f"l{i}", 10, 10, weight_bytes=40, optimizer_bytes=40,
                        activation_bytes=5, temporary_bytes=8) for i in range(4)]
    s = PlanSettings(capacity_bytes=100, headroom_frac=0.9)
    assert plan(layers, 2, s).best is None
    why = explain_no_fit(layers, 2, s)
    # best: [2, 2]; IPU 0 holds 160 weights+optimizer + 10 x 3 stash + 8 temp = 198 bytes
    assert why.overflow_bytes == 198 - 90
    assert why.overflow_bytes_per_ipu == [108, 88]  # IPU 1: 160 + 5 x 2 x 1 + 8 = 178
    # more IPUs: 4 x 1 layer, IPU 0 still 80 + 5 x 7 + 8 = 123 bytes; 16 replicas: 80 - 5 saved
    assert why.levers_bytes == {"offload_optimizer": 80, "recompute": 20, "halve_micro_batch": 19,
                                "more_ipus": 75, "replicas": 75}
    assert not any(lv.closes_gap for lv in why.levers)


def test_halving_the_micro_batch_leaves_an_offloaded_optimizers_temporaries() -> None:
    """With the optimizer state off chip the temporaries may hold its largest tensor's state
    streamed in, weight-sized: halving the micro-batch then saves half the stash only (was: half
    the temporaries too, 257 MiB where MEM001 said 384 KiB)."""
    layers = [LayerCost(f"l{i}", 10, 10, weight_bytes=40, optimizer_bytes=40,
                        activation_bytes=5, temporary_bytes=8) for i in range(4)]
    s = PlanSettings(capacity_bytes=100, headroom_frac=0.9, offload_optimizer=True)
    why = explain_no_fit(layers, 2, s)
    # [2, 2]: IPU 0 = 80 weights + 5 x 2 x 3 stash + 8 temporaries: half the stash, 15
    assert why.levers_bytes["halve_micro_batch"] == 15
    on_chip = explain_no_fit(layers, 2, PlanSettings(capacity_bytes=100, headroom_frac=0.9))
    assert on_chip.levers_bytes["halve_micro_batch"] == 19  # (30 + 8) // 2
    # an operation's temporaries above the layer's state halve down to it (a reviewer's CNN: its
    # convolution's 512 MiB were half freed, the state streamed in being far smaller)
    small_state = [replace(x, optimizer_bytes=2) for x in layers]
    assert explain_no_fit(small_state, 2, s).levers_bytes["halve_micro_batch"] == 15 + 4  # 8 -> 4


def test_float16_lever_halves_the_parameters_and_activations_not_the_accumulators() -> None:
    """model.half() for a float32 model, as MEM005 sizes it: the parameters, the stash and the
    temporaries halve; gradient accumulators in PopTorch's float32 accum type stay (``"params"``),
    or halve too (``"all"``); no lever without ``float16`` (a float16 model, or unknown)."""
    layers = [LayerCost(f"l{i}", 10, 10, weight_bytes=40, param_bytes=20, optimizer_bytes=40,
                        activation_bytes=5, temporary_bytes=8) for i in range(4)]
    s = PlanSettings(capacity_bytes=100, headroom_frac=0.9)
    assert "float16" not in explain_no_fit(layers, 2, s).levers_bytes
    # [2, 2]: IPU 0 = half of (30 stash + 8 temporaries) = 19, + 2 x 20 // 2 of parameters
    assert explain_no_fit(layers, 2, s, float16="params").levers_bytes["float16"] == 19 + 20
    assert explain_no_fit(layers, 2, s, float16="all").levers_bytes["float16"] == 19 + 40


def test_no_fit_levers_that_close_the_gap() -> None:
    layers = [LayerCost(f"l{i}", 10, 10, weight_bytes=20, optimizer_bytes=40, activation_bytes=5)
              for i in range(4)]
    s = PlanSettings(capacity_bytes=100, headroom_frac=0.9)
    assert plan(layers, 2, s).best is None
    why = explain_no_fit(layers, 2, s)
    # [2, 2]: IPU 0 = 120 + 5 x 2 x 3 = 150 bytes, 60 over 90
    assert why.split.layers_per_ipu == [2, 2] and why.overflow_bytes == 60
    levers = {lv.name: lv for lv in why.levers}
    assert levers["offload_optimizer"].closes_gap and levers["offload_optimizer"].saved_bytes == 80
    assert not levers["recompute"].closes_gap and levers["recompute"].saved_bytes == 20
    # 4 IPUs: IPU 0 = 60 + 5 x 7 = 95 > 90: no; 3 IPUs cannot beat that either
    assert levers["more_ipus"].closes_gap is False
    # optimizer state sharded over 4 replicas: 40 // 4 = 10 per layer -> [2, 2] IPU 0 = 90
    assert levers["replicas"].closes_gap and levers["replicas"].value == 4
    assert levers["replicas"].saved_bytes == 60


def test_recomputation_holds_one_micro_batch_and_costs_a_forward() -> None:
    layers = [LayerCost(f"l{i}", 10, 20, activation_bytes=10) for i in range(4)]
    s = PlanSettings(capacity_bytes=10**6, recompute=True)
    split = evaluate(layers, [1, 1, 1, 1], s)
    assert [st.stash_depth for st in split.stages] == [1, 1, 1, 1]
    assert [st.cycles for st in split.stages] == [40, 40, 40, 40]


def test_hundred_layers_sixteen_ipus_is_exact_and_quick() -> None:
    layers = [LayerCost(f"l{i}", 100 + i % 7, 200, weight_bytes=10) for i in range(100)]
    res = plan(layers, 16, PlanSettings(capacity_bytes=10**9))
    assert res.best is not None and len(res.by_ipus) == 16


def test_least_memory_split_against_brute_force() -> None:
    from popviz.analysis.planner import least_memory_split

    rng = random.Random(11)
    for _ in range(30):
        n = rng.randint(2, 7)
        layers = [LayerCost(f"l{i}", rng.randint(1, 50), rng.randint(0, 50),
                            weight_bytes=rng.randint(0, 30), optimizer_bytes=rng.randint(0, 20),
                            activation_bytes=rng.randint(0, 10), temporary_bytes=rng.randint(0, 15))
                  for i in range(n)]
        s = PlanSettings(capacity_bytes=10, headroom_frac=0.9)
        k = rng.randint(1, min(4, n))
        got = least_memory_split(layers, k, s)
        peaks = [max(st.memory_bytes for st in evaluate(layers, c, s).stages) for c in _compositions(n, k)]
        assert max(st.memory_bytes for st in got.stages) == min(peaks)


def _simulated_cycles(stages, g: int, training: bool) -> int:
    """Elapsed cycles of the emulator's own schedule (popviz/schedule.py) with no syncs,
    copies, host transfers or weight update: the same pipeline, stepped cycle by cycle."""
    from popviz.schedule import SchedulePlan, StageWork, simulate

    frame = simulate(SchedulePlan(
        stages=[StageWork(ipu, f, b) for ipu, f, b in stages], mode="training" if training else "inference",
        gradient_accumulation=g if training else 1, device_iterations=1 if training else g))
    return int((frame["start_cycle"] + frame["cycles"]).max())


def test_pipeline_cycles_match_the_emulators_schedule() -> None:
    from popviz.analysis.pipeline_time import pipeline_cycles

    rng = random.Random(11)
    for _ in range(150):
        n = rng.randint(2, 6)
        ipus = [*range(n - 1), rng.randrange(n - 1)] if rng.random() < 0.4 else list(range(n))
        stages = [(ipu, rng.randint(1, 900), rng.randint(0, 1800)) for ipu in ipus]
        g = rng.randint(1, 40)
        training = rng.random() < 0.7
        if not training:
            stages = [(ipu, f, 0) for ipu, f, _ in stages]
        assert pipeline_cycles(stages, g, training) == _simulated_cycles(stages, g, training)


def test_pipeline_cycles_by_hand() -> None:
    from popviz.analysis.pipeline_time import pipeline_cycles

    # two IPUs, G = 16: slots IPU0 2,100 | IPU1 3,500 + 7,000 | IPU0 4,200; the first and last
    # pipeline cycles hold one slot, the 16 between hold IPU1's 10,500 at most
    assert pipeline_cycles([(0, 2100, 4200), (1, 3500, 7000)], 16, True) == 2100 + 16 * 10_500 + 4200
    # inference, D = 4 over 3 stages: 6 pipeline cycles
    assert pipeline_cycles([(0, 10, 0), (1, 30, 0), (2, 20, 0)], 4, False) == 10 + 30 + 30 + 30 + 30 + 20


def test_a_tied_projection_back_on_the_first_ipu_is_a_stage_of_its_own() -> None:
    from popviz.analysis.layer_costs import layer_costs
    from popviz.analysis.pipeline_time import pipeline_cycles, refine, stage_work
    from popviz.testing import layer_table

    t = layer_table([100] + [1000] * 6 + [1500], names=["emb", *(f"l{i}" for i in range(6)), "mlm"],
                    roles=["embeddings", *["layer"] * 6, "head"], pins=["first", *[None] * 6, "first"],
                    tied_to=[None] * 7 + ["emb"], layers_per_ipu=[2, 2, 2])
    costs = layer_costs(t)
    [emb] = [c for c in costs if c.name == "emb"]
    assert (emb.fwd_cycles, emb.tail_fwd_cycles, emb.tail_bwd_cycles) == (1600, 1500, 3000)
    s = PlanSettings(capacity_bytes=10**9, extra_stages=1)
    work = stage_work(costs, [3, 2, 2], s)
    assert work == [(0, 2100, 4200), (1, 2000, 4000), (2, 2000, 4000), (0, 1500, 3000)]
    # IPU0 works 10,800 a micro-batch against 6,000 elsewhere, but through the ramp too
    even = pipeline_cycles(work, 16, True)
    best = refine(costs, evaluate(costs, [3, 2, 2], s), s, 16)
    assert best.layers_per_ipu == [2, 3, 2]
    assert pipeline_cycles(stage_work(costs, best.layers_per_ipu, s), 16, True) < even


def test_a_head_returning_to_ipu0_is_an_extra_stage_not_an_extra_ipu() -> None:
    """optimum-graphcore's BERT pre-training model (models/bert/modeling_bert.py, parallelize):
    embeddings and the first layers on IPU 0, the encoder over IPUs 0-3, then the pooler and the
    classifier back on IPU 0 (`BeginBlock(self.bert.pooler, "Pooler", ipu_id=0)`). The plan keeps
    4 IPUs (the heads run in a fifth stage on IPU 0), never proposes ipus_per_replica=5."""
    from dataclasses import replace

    from popviz.analysis.layer_costs import extra_stages, layer_costs, returning_heads
    from popviz.analysis.layer_plan import current_counts, make_plan, planned_layers
    from popviz.model import LayerTable
    from popviz.testing import layer_table, layered_report

    t = layer_table([100, 1000, 1000, 1000, 1000, 30, 200],
                    names=["emb", "l0", "l1", "l2", "l3", "pooler", "cls"],
                    roles=["embeddings", *["layer"] * 4, "head", "head"],
                    pins=["first", *[None] * 6], layers_per_ipu=[1, 1, 1, 1], weight_bytes=1000)
    # the report's placement: the heads in stage 4, on IPU 0
    layers = tuple(replace(x, ipu=0, stage=4, block="Classifier") if x.role == "head" else x for x in t.layers)
    t = LayerTable(layers=layers, source=t.source, micro_batch_size=t.micro_batch_size, notes=t.notes)
    assert returning_heads(t) == {"pooler", "cls"} and extra_stages(t) == 1
    costs = layer_costs(t)
    [emb] = [c for c in costs if c.name == "emb"]
    assert [c.name for c in costs] == ["emb", "l0", "l1", "l2", "l3"]
    assert (emb.fwd_cycles, emb.tail_fwd_cycles) == (330, 230)
    assert current_counts(planned_layers(t, costs)) == [2, 1, 1, 1]
    report = layered_report(replace(t, layers=tuple(replace(x, stage=x.ipu) for x in t.layers)),
                            gradient_accumulation=16).replace(layers=t)
    plan = make_plan(report)
    assert len(plan.proposed.stages) == 4
    assert plan.proposed.layers_per_ipu == [1, 1, 1, 1]


def test_recomputed_activations_of_one_interval_are_live_together() -> None:
    """PopART's recomputation already on: a stage holds the recomputed activations of each of its
    intervals (its layers of one ``recompute_group``) at once, on top of the largest temporary."""
    from popviz.analysis.planner import explain_no_fit, stage_temporary_bytes

    s = PlanSettings(capacity_bytes=10_000, headroom_frac=1.0)
    same = [LayerCost(f"l{i}", 10, temporary_bytes=100 * (i + 1), recompute_bytes=1_000, recompute_group=0)
            for i in range(3)]
    # one interval (no checkpoints): 3 x 1,000 live with the largest temporary, 300
    assert stage_temporary_bytes(same, s) == 3_300
    assert evaluate(same, [1, 2], s).stages[1].memory_bytes == 300 + 2_000
    # a checkpoint after each layer: one layer's worth at a time
    split = [LayerCost(x.name, 10, temporary_bytes=x.temporary_bytes, recompute_bytes=1_000, recompute_group=i)
             for i, x in enumerate(same)]
    assert stage_temporary_bytes(split, s) == 1_300
    # a folded tied projection's temporary runs in a stage of its own: not in the interval
    tied = [LayerCost("emb", 10, temporary_bytes=50, recompute_bytes=200, recompute_group=0,
                      other_temporary_bytes=5_000)]
    assert stage_temporary_bytes(tied, s) == 5_000
    # nothing to gain from the "recompute" lever when recomputation is already on
    big = [LayerCost(f"l{i}", 10, activation_bytes=4_000, recompute_bytes=100, recompute_group=0) for i in range(3)]
    levers = {lv.name: lv for lv in explain_no_fit(big, 1, s).levers}
    assert (levers["recompute"].saved_bytes, levers["recompute"].closes_gap) == (0, False)


def _pipeline_recomputed(checkpoint_on: int | None = None):
    """Four layers, 100 forward cycles each; the report split them [2, 2] under PopART's Pipeline
    recomputation: IPU0's recompute (backward 200 + the forward again 100), IPU1's, the last
    stage without checkpoints, do not (backward 200)."""
    from popviz.analysis.planner import LayerCost, PlanSettings

    layers = [LayerCost(f"l{i}", fwd_cycles=100, bwd_cycles=300 if i < 2 else 200,
                        recompute_cycles=100 if i < 2 else 0, checkpoint=i == checkpoint_on)
              for i in range(4)]
    return layers, PlanSettings(capacity_bytes=1 << 40, pipeline_recompute=True)


def test_pipeline_recomputation_follows_the_split_into_and_out_of_the_last_stage() -> None:
    from dataclasses import replace

    from popviz.analysis.pipeline_time import stage_work
    from popviz.analysis.planner import evaluate

    layers, settings = _pipeline_recomputed()
    cycles = {tuple(c): [st.cycles for st in evaluate(layers, c, settings).stages]
              for c in ([2, 2], [1, 3], [3, 1], [4])}
    # l1 enters the last stage and loses its recomputation; l2 leaves it and gains its forward;
    # on one IPU nothing is recomputed
    assert cycles == {(2, 2): [800, 600], (1, 3): [400, 900], (3, 1): [1200, 300], (4,): [1200]}
    assert stage_work(layers, [1, 3], settings) == [(0, 100, 300), (1, 300, 600)]
    # a checkpoint on l2: the last stage recomputes up to it (l1 keeps 100, l2 gains 100)
    marked, _ = _pipeline_recomputed(checkpoint_on=2)
    assert [st.cycles for st in evaluate(marked, [1, 3], settings).stages] == [400, 1100]
    assert stage_work(marked, [1, 3], settings) == [(0, 100, 300), (1, 300, 800)]
    # any other recomputation type: the report's cycles wherever the layers go
    fixed = replace(settings, pipeline_recompute=False)
    assert [st.cycles for st in evaluate(layers, [1, 3], fixed).stages] == [400, 1000]


def test_the_exact_plan_uses_the_same_stage_cycles_as_evaluate_under_pipeline_recomputation() -> None:
    from popviz.analysis.planner import evaluate, plan

    layers, settings = _pipeline_recomputed()
    result = plan(layers, 2, settings, exact_n=True)
    # slowest stage: [2, 2] 800, [1, 3] 900, [3, 1] 1200
    assert result.best is not None and result.best.layers_per_ipu == [2, 2] and result.best.bottleneck_cycles == 800
    for counts in ([1, 3], [2, 2], [3, 1]):
        assert evaluate(layers, counts, settings).bottleneck_cycles == {(1, 3): 900, (2, 2): 800, (3, 1): 1200}[
            tuple(counts)]
    assert [st.cycles for st in result.best.stages] == [800, 600]
    assert plan(layers, 4, settings).by_ipus[1].bottleneck_cycles == 1200  # one IPU: nothing recomputed


def test_layer_costs_carry_the_recomputed_cycles_and_checkpoints_and_the_plan_reads_the_type() -> None:
    from popviz.analysis.layer_costs import layer_costs
    from popviz.analysis.layer_plan import settings_for
    from popviz.model import Layer, LayerTable
    from popviz.testing import layered_report

    table = LayerTable(layers=(
        Layer("l0", stage=0, ipu=0, fwd_cycles=100, bwd_cycles=300, recompute_cycles=100, checkpoint=True),
        Layer("l1", stage=1, ipu=1, fwd_cycles=100, bwd_cycles=200)), recomputation="Pipeline")
    costs = layer_costs(table.layers)
    assert [(c.recompute_cycles, c.checkpoint) for c in costs] == [(100, True), (0, False)]
    report = layered_report(table)
    assert settings_for(report, costs)[0].pipeline_recompute is True
    assert settings_for(report.replace(layers=LayerTable(table.layers)), costs)[0].pipeline_recompute is False
