"""The memory levers sized without overlap (popviz.analysis.memory_levers), on reports built with
the categories the emulator wrote for the reviewer's scripts: 12 × Linear(8192, 8192), AdamW,
G = 4, two IPUs (``oom``: float32, optimizer state on chip; ``oom_fix``: model.half(), float16
inputs, optimizer state off chip). The emulator's own figures after each fix are the oracle:
applying offloading and model.half() to ``oom`` gave 5,972,492,288 B (``oom_fix``); halving the
micro-batch of ``oom_fix`` (``oom_fix_mb8``) saved 1,966,080 B in all, 655,360 B on IPU0."""

from __future__ import annotations

import dataclasses

import pandas as pd

from popviz import testing
from popviz.analysis import memory
from popviz.analysis import memory_levers as ml
from popviz.model import MemoryTable

OOM = [  # per IPU: weights, optimizerState, gradientAccumulators, activationStash, temporaries, code
    dict(weights=1_610_809_344, optimizerState=3_221_618_688, gradientAccumulators=1_610_809_344,
         activationStash=1_572_864, temporaries=5_242_880, codeAndExchange=32_145_408),
    dict(weights=1_610_809_344, optimizerState=3_221_618_688, gradientAccumulators=1_610_809_344,
         activationStash=4_194_304, temporaries=2_097_152, codeAndExchange=32_342_016),
]
OOM_FIX = [
    dict(weights=805_404_672, optimizerState=0, gradientAccumulators=1_610_809_344,
         activationStash=786_432, temporaries=536_870_912, codeAndExchange=31_621_120),
    dict(weights=805_404_672, optimizerState=0, gradientAccumulators=1_610_809_344,
         activationStash=2_097_152, temporaries=536_870_912, codeAndExchange=31_817_728),
]
ADAMW = {"type": "AdamW", "accum_type": "float32", "first_order_momentum_accum_type": "float32",
         "second_order_momentum_accum_type": "float32"}


def _report(cats, *, dtype, on_chip, layers=None):
    r = testing.pipeline_report([1000, 1000], memory_level="ipu", estimated=True, execution=False,
                                gradient_accumulation=4, blocks=[[], ["second"]],
                                optimizer_state_on_chip=on_chip,
                                inputs={"x": ((16, 8192), dtype), "y": ((16, 8192), dtype)})
    rows = []
    for ipu, c in enumerate(cats):
        used = sum(c.values())
        rows.append({"ipu": ipu, "total_bytes_including_gaps": used, "total_bytes_excluding_gaps": used,
                     "always_live_bytes": used - c["activationStash"] - c["temporaries"],
                     "not_always_live_bytes": c["activationStash"] + c["temporaries"],
                     "overflow_bytes": max(0, used - r.target.bytes_per_ipu),
                     **{f"cat_{k}_bytes": v for k, v in c.items()}})
    per_param = 4 if dtype == "float32" else 2
    options = {"model": {"parameters": 805_404_672, "parameter_bytes": 805_404_672 * per_param},
               "optimizer": ADAMW}
    r = r.replace(memory=MemoryTable(pd.DataFrame(rows), level="ipu"),
                  config=dataclasses.replace(r.cfg, options=options))
    return r.replace(layers=layers) if layers is not None else r


def _linear_layers():
    """The 12 Linear(8192, 8192) layers as the emulator recorded them (per layer: weights and
    float32 accumulators 268,468,224 B each, AdamW state 536,936,448 B), six per IPU."""
    return testing.layer_table([135_382] * 12, names=[f"layers.{i}" for i in range(12)],
                               layers_per_ipu=[6, 6], weight_bytes=2 * 268_468_224,
                               optimizer_bytes=536_936_448, activation_bytes=524_288,
                               temporary_bytes=5_242_880)


def test_precision_comes_from_the_parameters_else_float16_inputs():
    assert ml.precision(_report(OOM, dtype="float32", on_chip=True)) == "float32"
    assert ml.precision(_report(OOM_FIX, dtype="float16", on_chip=False)) == "float16"
    bare = testing.pipeline_report([1000], inputs={"x": ((4, 8), "float16")})
    assert ml.precision(bare) == "float16"
    assert ml.precision(testing.pipeline_report([1000])) is None  # a float32 input says nothing of the weights


def test_offloading_and_half_together_match_what_the_emulator_then_estimates():
    r = _report(OOM, dtype="float32", on_chip=True, layers=_linear_layers())
    rows = ml.rows_of(memory.analyse(r).metrics["ipus"])
    before = sum(ml.total(c) for _i, c in rows)
    assert before == 12_964_069_376
    both = ml.apply(rows, [ml.offload_optimizer(r), ml.to_float16(r)])
    # the emulator estimated 5,972,492,288 B for oom_fix.py (its code bytes and the bias's
    # share of the largest tensor's state differ by 1.2 MB)
    assert before - both == 5_973_671_936
    assert ml.apply(rows, [ml.to_float16(r), ml.offload_optimizer(r)]) == both  # in either order
    assert both < ml.apply(rows, [ml.offload_optimizer(r)]) + ml.apply(rows, [ml.to_float16(r)]) + 1


def test_mem005_sizes_half_from_what_is_float32_and_does_not_claim_the_gap_closes():
    r = _report(OOM, dtype="float32", on_chip=True, layers=_linear_layers())
    f = memory.analyse(r).findings[0]
    assert f.code == "MEM005"
    rec = f.recommendation
    assert ("(3) the model runs in float32: model.half() with float16 inputs halves the weights, activation "
            "stash and temporaries; the optimizer state and gradient accumulators stay float32 (PopTorch's "
            "accum types): about 1,617,362,944 B (1.5 GiB)") in rec
    assert ("(1) optimizer state off chip saves about 5,376,704,512 B (5.0 GiB) (each IPU's largest tensor's "
            "state stays on chip while its update runs: up to 536,936,448 B (512.1 MiB))") in rec
    assert "together close the gap" not in rec
    assert rec.endswith(" All of them together save about 10,214,178,816 B (9.5 GiB) (not the sum: they "
                        "overlap), 92% of the 11,082,924,032 B (10.3 GiB) over: not enough.")


def test_mem005_offers_no_half_lever_to_a_float16_model_and_no_weight_sized_temporaries():
    rec = memory.analyse(_report(OOM_FIX, dtype="float16", on_chip=False)).findings[0].recommendation
    assert "model.half()" not in rec and "float32" not in rec
    # the temporaries are the offloaded state's largest tensor: only the stash halves
    # (training: only G keeps the global batch; a larger D keeps the samples per call, not per update)
    assert ("halving the micro-batch size (doubling gradientAccumulation to keep the global "
            "batch) saves about 1,441,792 B (1.4 MiB) of activation stash (the temporaries hold the largest "
            "tensor's optimizer state, which does not shrink with the micro-batch)") in rec


def test_mem005_quotes_the_planners_verdict_on_more_ipus():
    from popviz.analysis.layer_plan import make_plan

    r = _report(OOM, dtype="float32", on_chip=True, layers=_linear_layers())
    rec = memory.analyse(r).findings[0].recommendation
    assert rec.startswith(
        "Free about 11,082,924,032 B (10.3 GiB) in total; more IPUs alone cannot make it fit: `popviz plan` "
        "finds no split that fits on up to 12 IPUs (it moves the report's 12 layers whole); layers.0 "
        "alone holds 1,073,872,896 B (1.0 GiB) of weights and optimizer state, over an IPU's 90% budget of "
        "846,515,404 B (807.3 MiB). Levers")
    assert "at least 14 IPUs" not in rec
    more = next(lv for lv in make_plan(r).shortfall.levers if lv.name == "more_ipus")
    assert more.value is None  # popviz plan: "no number of IPUs is enough"
    # without layers: the count from the total bytes, said to be a lower bound
    rec = memory.analyse(_report(OOM, dtype="float32", on_chip=True)).findings[0].recommendation
    assert rec.startswith("Free about 11,082,924,032 B (10.3 GiB) in total, or spread the model over at least "
                          "14 IPUs (more pipeline stages; a lower bound from the total bytes: each IPU's "
                          "share must fit too).")


def test_mem001_says_when_its_levers_do_not_close_the_gap_and_offers_only_those_that_help():
    out = memory.analyse(_report(OOM_FIX, dtype="float16", on_chip=False))
    ipu0, ipu1 = [f.recommendation for f in out.findings if f.code == "MEM001"]
    assert "Levers that fit" not in ipu0 + ipu1
    assert ipu0.startswith("Levers (none enough alone, nor all together: they save 1,611,202,560 B (1.5 GiB) "
                           "of the 2,138,977,076 B (2.0 GiB) that would get IPU0 under 90% of its memory): "
                           "(1) the gradient accumulators are 54% of IPU0's bytes")
    # the micro-batch lever counts the stash only (the emulator: 655,360 B less on IPU0 at half the batch)
    assert ipu0.endswith("keep the global batch (saves about 393,216 B (384.0 KiB)).")
    # 82% always live: no available memory proportion, no move
    assert "AvailableMemoryProportion" not in ipu1 and "move blocks" not in ipu1
    assert ipu1 == ("The gradient accumulators are 54% of IPU1's bytes: keep them off chip with "
                    "opts.TensorLocations.setAccumulatorLocation(poptorch.TensorLocationSettings()"
                    ".useOnChipStorage(False)) (saves about 1,610,809,344 B (1.5 GiB)): not enough: IPU1 "
                    "must shed 2,140,484,404 B (2.0 GiB) to be under 90% of its memory.")


def test_mem005_offers_no_recomputation_to_layers_that_already_recompute():
    """PopTorch recomputes a multi-IPU pipeline's stages by default (the layers' recompute_group):
    checkpoints cannot shrink the stash further, and popviz plan offers no recompute lever."""
    layers = _linear_layers()
    recomputing = layers.__class__([dataclasses.replace(x, recompute_group=0 if x.ipu == 0 else None)
                                    for x in layers], notes=layers.notes)
    rec = memory.analyse(_report(OOM, dtype="float32", on_chip=True, layers=recomputing)).findings[0].recommendation
    assert "recomputation saves" not in rec
    assert "recomputation saves" in memory.analyse(
        _report(OOM, dtype="float32", on_chip=True, layers=_linear_layers())).findings[0].recommendation


def test_mem001_offers_model_half_as_mem005_does_with_the_same_bytes():
    """A float32 model: each IPU's MEM001 offers model.half(), and the two IPUs' savings add up to
    what MEM005 promises for the whole model (one lever, one figure)."""
    out = memory.analyse(_report(OOM_FIX, dtype="float32", on_chip=False))
    whole = next(f for f in out.findings if f.code == "MEM005").recommendation
    assert ("(2) the model runs in float32: model.half() with float16 inputs halves the weights and activation "
            "stash; the optimizer state and gradient accumulators stay float32 (PopTorch's accum types): about "
            "806,846,464 B (769.5 MiB)") in whole
    ipu0, ipu1 = [f.recommendation for f in out.findings if f.code == "MEM001"]
    assert "(2) the model runs in float32: model.half()" in ipu0 and "(2) the model runs in float32" in ipu1
    assert "(saves about 403,095,552 B (384.4 MiB))" in ipu0 and "(saves about 403,750,912 B (385.0 MiB))" in ipu1
    assert 403_095_552 + 403_750_912 == 806_846_464
    # a float16 model is not offered it
    half = memory.analyse(_report(OOM_FIX, dtype="float16", on_chip=False))
    assert not any("model.half()" in f.recommendation for f in half.findings if f.code == "MEM001")


def test_with_the_state_off_chip_an_operations_temporaries_still_halve_down_to_the_streamed_state():
    """A reviewer's CNN with its optimizer state off chip: its temporaries were a convolution's
    536,870,912 B, far above the largest tensor's streamed state, and halving the micro-batch
    freed them too (the emulator: 766,178,560 B, the stash's half and the temporaries' half)."""
    layers = testing.layer_table([135_382] * 12, names=[f"layers.{i}" for i in range(12)],
                                 layers_per_ipu=[6, 6], weight_bytes=2 * 268_468_224,
                                 optimizer_bytes=134_250_496, activation_bytes=524_288,
                                 temporary_bytes=5_242_880)
    r = _report(OOM_FIX, dtype="float16", on_chip=False, layers=layers)
    rows = ml.rows_of(memory.analyse(r).metrics["ipus"])
    assert ml.temporaries_shrink(r, rows)
    # stash (786,432 + 2,097,152) / 2, each IPU's temporaries 536,870,912 -> 268,435,456
    assert ml.apply(rows, [ml.halve_micro_batch(r)]) == 1_441_792 + 2 * 268_435_456 == 538_312_704
    rec = memory.analyse(r).findings[0].recommendation
    assert "saves about 538,312,704 B (513.4 MiB) of stash and temporaries" in rec
    # a state larger than half the temporaries: they halve down to it, not below
    big = testing.layer_table([135_382] * 12, names=[f"layers.{i}" for i in range(12)],
                              layers_per_ipu=[6, 6], weight_bytes=2 * 268_468_224,
                              optimizer_bytes=400_000_000, activation_bytes=524_288, temporary_bytes=5_242_880)
    r = _report(OOM_FIX, dtype="float16", on_chip=False, layers=big)
    assert ml.apply(rows, [ml.halve_micro_batch(r)]) == 1_441_792 + 2 * (536_870_912 - 400_000_000)


def _one_ipu(cats):
    r = testing.pipeline_report([1000], strategy=None, memory_level="ipu", estimated=True, execution=False,
                                inputs={"x": ((16, 8192), "float32")})
    used = sum(cats.values())
    row = {"ipu": 0, "total_bytes_including_gaps": used, "total_bytes_excluding_gaps": used,
           "always_live_bytes": used - cats["activationStash"] - cats["temporaries"],
           "not_always_live_bytes": cats["activationStash"] + cats["temporaries"],
           "overflow_bytes": max(0, used - r.target.bytes_per_ipu), **{f"cat_{k}_bytes": v for k, v in cats.items()}}
    options = {"model": {"parameters": 50_000_000, "parameter_bytes": 200_000_000}, "optimizer": ADAMW}
    return r.replace(memory=MemoryTable(pd.DataFrame([row]), level="ipu"),
                     config=dataclasses.replace(r.cfg, options=options))


def test_outside_a_pipeline_mem005_and_mem001_offer_the_same_recomputation_and_the_micro_batch():
    """A single-IPU model recomputes nothing by default and recomputationCheckpoint alone does
    nothing there: both findings say to enable recomputation, and MEM001 offers halving the
    micro-batch as MEM005 does (it offered neither, and called the gap impossible to close)."""
    r = _one_ipu(dict(weights=200_000_000, optimizerState=400_000_000, gradientAccumulators=0,
                      activationStash=900_000_000, temporaries=500_000_000, codeAndExchange=20_000_000))
    out = memory.analyse(r)
    mem005 = next(f for f in out.findings if f.code == "MEM005")
    mem001 = next(f for f in out.findings if f.code == "MEM001")
    assert mem005.title == "The model does not fit on 1 IPU: no split of it can"
    assert mem005.evidence.startswith("the IPU holds 940,572,672 B (897.0 MiB); the model needs "
                                      "2,020,000,000 B (1.9 GiB) (estimated), 214.8% of it,")
    enable = ('enable recomputation: opts._Popart.set("autoRecomputation", 1) (outside a multi-IPU pipeline '
              "PopTorch recomputes nothing by default, and recomputationCheckpoint alone does nothing)")
    assert enable in mem005.recommendation and enable in mem001.recommendation
    assert "recomputationCheckpoint(x) on each layer" not in mem005.recommendation
    assert ("halve the micro-batch size (doubling gradientAccumulation to keep the global batch): "
            "the activation stash and the temporaries shrink with it (saves about 700,000,000 B (667.6 MiB))"
            ) in mem001.recommendation


def test_inference_keeps_the_samples_per_call_with_device_iterations():
    # inference has no gradient accumulation: a halved micro-batch is made up with D
    r = _report(OOM_FIX, dtype="float32", on_chip=True)
    inference = r.replace(config=dataclasses.replace(r.cfg, mode="inference", gradient_accumulation=1,
                                                     optimizer_state_on_chip=None))
    rec = " ".join(f.recommendation for f in memory.analyse(inference).findings)
    assert "halving the micro-batch size (doubling deviceIterations to keep the samples per call)" in rec
    assert "gradientAccumulation" not in rec
