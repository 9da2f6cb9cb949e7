"""The cost model on a hand-made measurement: exact cycles and bytes from the documented rules.

These numbers follow from the constants in popviz/emulator/hardware.py (Mk2): peak FP32 is
32 FLOP/tile/cycle x 1472 tiles; a matmul worth c cycles at peak takes (c + 18,000) / 0.6; other
ops move bytes at 50% of 47.5 TB/s / 1.33 GHz; each op kind adds its fixed cycles (matmul 4,000,
element-wise 1,200, reduction 2,500). Recomputation is switched off (autoRecomputation 0) except
where a test says otherwise (tests/test_emulator_recompute.py covers it). Changing a constant
must change a test.
"""

from __future__ import annotations

import pytest

from popviz.emulator import costmodel, hardware
from popviz.emulator.cost_inputs import EngineSetup, Measurement, OpCost, ParamInfo, Segment
from popviz.model import HostTensor
from popviz.sources.bundle import read_bundle, write_bundle

MK2 = hardware.SPECS["Mk2"]
HOST = hardware.HostLink(bytes_per_second=8e9, latency_seconds=10e-6)


def measurement() -> Measurement:
    return Measurement(
        segments=[Segment(0, ["A"]), Segment(1, ["B", "loss"])],
        ops=[
            # 18,841,600 FLOPs = 400 cycles at 47,104 FLOP/cycle: (400 + 18,000) / 0.6 = 30,666.7;
            # 60,000 activation bytes exchanged at 8 TB/s = 9.975 cycles; + 4,000 = 34,676.6
            OpCost(0, "addmm", 18_841_600, 4, in_bytes=64_000, out_bytes=0, matmul=True, weight_bytes=4_000,
                   block="A"),
            # 89,286 bytes at 50% of 35,714 B/cycle = 5.0 cycles, + 1,200
            OpCost(0, "relu", 0, 4, in_bytes=44_643, out_bytes=44_643, block="A"),
            OpCost(1, "mse_loss", 0, 4, in_bytes=892_857, out_bytes=0, block="loss"),  # 50.0 + 2,500 cycles
        ],
        params=[ParamInfo("a.weight", 0, 4_000, 1_000, 4, block="A"),
                ParamInfo("buffer:a.stat", 0, 400, 100, 4, False, block="A"),
                ParamInfo("b.weight", 1, 2_000, 500, 4, block="B")],
        saved_bytes=[10_000, 6_000],
        boundary_bytes=[8_000],
        saved_bytes_by_block={"A": 10_000, "loss": 6_000},
    )


NO_RECOMPUTATION = {"_Popart.autoRecomputation": 0}


def setup(**changes) -> EngineSetup:
    base = dict(name="training", mode="training", strategy="PipelinedExecution", device_iterations=2,
                gradient_accumulation=4, output_mode="All", options=NO_RECOMPUTATION,
                optimizer_slots=[("first_moment", 4), ("second_moment", 4)],
                inputs=[HostTensor("x", "input", (4, 10), "float32", 160)],
                outputs=[HostTensor("loss", "output", (), "float32", 4)], spec=MK2, host=HOST, calls=3)
    base.update(changes)
    return EngineSetup(**base)


def test_stage_cycles():
    est = costmodel.estimate(measurement(), setup())
    # backward: 2 x the matmul, 1 x the element-wise op and the reduction
    assert [(s.ipu, s.forward_cycles, s.backward_cycles) for s in est.stages] == [(0, 35_882, 70_558),
                                                                                    (1, 2_550, 2_550)]
    assert [s.stash_depth for s in est.stages] == [3, 1]  # 2(N - i) - 1 for N = 2
    # PopTorch's default for a 2-IPU pipeline recomputes the first stage: its forward is added
    default = costmodel.estimate(measurement(), setup(options={}))
    assert [(s.backward_cycles, s.recompute_cycles) for s in default.stages] == [(70_558 + 35_882, 35_882), (2_550, 0)]


def test_per_block_figures_are_recorded():
    blocks = costmodel.estimate(measurement(), setup()).config.options["emulator"]["blocks"]
    assert blocks == [
        {"block": "A", "stage": 0, "ipu": 0, "forward_cycles": 35_882, "flops": 18_841_600.0, "ops": 2,
         "weight_bytes": 4_400, "saved_bytes": 10_000},
        {"block": "B", "stage": 1, "ipu": 1, "forward_cycles": 0, "flops": 0.0, "ops": 0, "weight_bytes": 2_000,
         "saved_bytes": 0},
        {"block": "loss", "stage": 1, "ipu": 1, "forward_cycles": 2_550, "flops": 0.0, "ops": 1,
         "weight_bytes": 0, "saved_bytes": 6_000}]


def test_memory_per_ipu_by_category():
    frame = costmodel.estimate(measurement(), setup()).memory.frame.set_index("ipu")
    tile_overhead = 16_384 * 1472
    update_code = 262_144  # one trainable tensor per IPU
    assert frame.loc[0, "cat_weights_bytes"] == 4_400
    assert frame.loc[0, "cat_optimizerState_bytes"] == 1_000 * 8
    assert frame.loc[0, "cat_gradientAccumulators_bytes"] == 4_000
    assert frame.loc[0, "cat_activationStash_bytes"] == 10_000 * 3
    assert frame.loc[0, "cat_temporaries_bytes"] == 60_000 * 2  # the matmul's, twice its activations
    # code per forward op, x 3 in training: matmul 160 KiB, element-wise 48 KiB; + the copy buffers
    assert frame.loc[0, "cat_codeAndExchange_bytes"] == tile_overhead + (163_840 + 49_152) * 3 + 8_000 * 2 \
        + update_code
    assert frame.loc[1].to_dict() == {
        "total_bytes_including_gaps": 25_498_857, "total_bytes_excluding_gaps": 25_498_857,
        "always_live_bytes": 24_600_000, "not_always_live_bytes": 898_857, "overflow_bytes": 0,
        "cat_activationStash_bytes": 6_000,
        "cat_codeAndExchange_bytes": tile_overhead + 65_536 * 3 + 16_000 + update_code,
        "cat_gradientAccumulators_bytes": 2_000, "cat_optimizerState_bytes": 4_000,
        "cat_temporaries_bytes": 892_857, "cat_weights_bytes": 2_000}


def test_offloaded_optimizer_and_fp16_accumulators():
    est = costmodel.estimate(measurement(), setup(optimizer_on_chip=False, accumulator_element_bytes=2))
    frame = est.memory.frame.set_index("ipu")
    assert frame.loc[0, "cat_optimizerState_bytes"] == 0 and frame.loc[0, "cat_gradientAccumulators_bytes"] == 2_000
    # the largest tensor's state (1,000 elements x 8 bytes) is on chip while its update runs, after the
    # backward: the temporaries are the larger of it and the largest op's (120,000)
    assert frame.loc[0, "cat_temporaries_bytes"] == 120_000
    assert frame.loc[1, "cat_temporaries_bytes"] == 892_857
    big = costmodel.estimate(measurement(), setup(optimizer_on_chip=False, optimizer_slots=[("m", 400)]))
    assert big.memory.frame.set_index("ipu").loc[0, "cat_temporaries_bytes"] == 1_000 * 400
    updates = est.steps[est.steps.program == "weightUpdate"].set_index("ipu")["cycles"].to_dict()
    # touched bytes 8,000 + 2 x 2,000 + 16,000 = 28,000 -> 1.568 cycles, + 1,500 per tensor,
    # + 16,000 bytes to and from streaming memory at 20 GB/s = 1,064 cycles
    assert updates[0] == 2_566


def test_schedule_steps():
    steps = costmodel.estimate(measurement(), setup()).steps
    by_program = steps.groupby("program", observed=True)
    assert (steps.program == "stage0/forward").sum() == 8 and (steps.program == "stage1/backward").sum() == 8
    assert set(by_program.get_group("interIpuCopy").cycles) == {2_166}  # 2,000 + 8,000 B at 64 GB/s
    assert set(by_program.get_group("input/mid").cycles) == {27}  # 160 B at 8 GB/s
    assert set(by_program.get_group("input/begin").cycles) == {6_650}  # half of 10 us
    assert (steps.program == "output/mid").sum() == 8  # All: every micro-batch
    updates = by_program.get_group("weightUpdate").set_index("ipu")["cycles"].to_dict()
    assert updates == {0: 1_502, 1: 1_501}


@pytest.mark.parametrize("mode,copies", [("Final", 1), ("Sum", 1), ("Default", 1), ("EveryN", 4)])
def test_output_copies_follow_output_mode(mode, copies):
    # EveryN(2) with D = 2: the G = 4 micro-batches of the second device iteration
    steps = costmodel.estimate(measurement(), setup(output_mode=mode, output_return_period=2)).steps
    assert (steps.program == "output/mid").sum() == copies


def test_synthetic_data_has_no_host_transfers():
    steps = costmodel.estimate(measurement(), setup(synthetic_data=True)).steps
    assert not steps.program_type.isin(["StreamCopyBegin", "StreamCopyMid", "StreamCopyEnd"]).any()


def test_inference_holds_no_training_state():
    est = costmodel.estimate(measurement(), setup(mode="inference", name="inference", device_iterations=4,
                                                  output_mode="Default"))
    frame = est.memory.frame
    for cat in ("optimizerState", "gradientAccumulators", "activationStash"):
        assert (frame[f"cat_{cat}_bytes"] == 0).all(), cat
    assert [s.backward_cycles for s in est.stages] == [0, 0]
    assert est.config.effective_output_mode == "All" and est.config.gradient_accumulation == 1
    assert "weightUpdate" not in set(est.steps.program)


def test_replicas_share_the_host_link():
    est = costmodel.estimate(measurement(), setup(replication_factor=2))
    assert (est.target.num_ipus, est.target.num_replicas, est.target.ipus_per_replica) == (4, 2, 2)
    # 4 IPUs: one IPU-M2000's link, shared by the 2 replicas: 160 B at 4 GB/s
    assert set(est.steps[est.steps.program == "input/mid"].cycles) == {53}
    updates = est.steps[est.steps.program == "weightUpdate"].set_index("ipu")["cycles"].to_dict()
    # all-reduce: 2(R - 1)/R x 4,000 B of gradients at 0.65 of a link's 64 GB/s (41.6 GB/s,
    # 31.28 B per cycle at 1.33 GHz) = 127.9 cycles, + 2,000 per copy
    assert updates[0] == 1_502 + 128 + 2_000
    # 4 replicas: one direction round the ring (GCL's ring pair is not what the tutorial's 4-replica
    # figure shows): 2(3/4) x 4,000 B at 31.28 B per cycle = 191.8 cycles
    four = costmodel.estimate(measurement(), setup(replication_factor=4))
    assert set(four.steps[(four.steps.program == "weightUpdate") & (four.steps.ipu == 0)].cycles) == {
        1_502 + 192 + 2_000}
    # 8 replicas of 2 IPUs: 4 links for 8 replicas, 16 GB/s each... 160 B at 4 GB/s again
    eight = costmodel.estimate(measurement(), setup(replication_factor=8))
    assert set(eight.steps[eight.steps.program == "input/mid"].cycles) == {53}
    one = costmodel.estimate(measurement(), setup(replication_factor=1))
    assert set(one.steps[one.steps.program == "input/mid"].cycles) == {27}  # 160 B at 8 GB/s


def test_host_process_prepares_its_replicas_inputs():
    big = [HostTensor("x", "input", (4, 10), "float32", 2_350_000)]

    def run(**changes):
        steps = costmodel.estimate(measurement(), setup(inputs=big, **changes)).steps
        return (steps[steps.program == "input/begin"].cycles.tolist(),
                set(steps[steps.program == "input/mid"].cycles),
                steps[(steps.program == "weightUpdate") & (steps.ipu == 0)].cycles.iloc[0])

    # one host thread hands 4 replicas x 2.35 MB to Poplar at 2.35 GB/s: 4 ms = 5.32M cycles before
    # the first input; the next ones were prepared while the IPUs computed (depth 1), so wait less
    begins, mids, update = run(replication_factor=4)
    assert begins[:3] == [5_320_000, 5_281_452, 5_281_452]
    assert mids == {781_375}  # 8 IPUs: 2 links for 4 replicas, 4 GB/s each
    assert update == 1_502 + 192 + 2_000  # all-reduce of 4 replicas (above)
    # a thread per replica (streamCallbacks.multiThreadMode): a quarter of the time
    assert run(replication_factor=4, callback_threads=4)[0][:2] == [1_330_000, 1_291_452]
    # prefetch off: every input waits for all of its preparation
    assert set(run(replication_factor=4, prefetch_depth=0)[0]) == {5_320_000}
    # PopRun: 4 instances of 1 replica share the links of all 8 IPUs (2 links, 4 replicas), and
    # the gradient all-reduce spans the 4 replicas; each instance's host prepares only its own
    begins, mids, update = run(replication_factor=1, processes=4)
    assert begins[0] == 1_330_000 and mids == {781_375}
    assert update == run(replication_factor=4)[2]
    assert run(replication_factor=1)[1] == {390_688}


def test_architecture_and_host_parameters_from_the_environment(monkeypatch):
    monkeypatch.setenv("POPVIZ_EMULATOR_ARCH", "bow")
    monkeypatch.setenv("POPVIZ_EMULATOR_HOST_GBPS", "16")
    assert hardware.spec().architecture == "Bow" and hardware.host_link().bytes_per_second == 16e9
    monkeypatch.setenv("POPVIZ_EMULATOR_ARCH", "Mk9")
    with pytest.raises(Exception, match="POPVIZ_EMULATOR_ARCH='Mk9' is not an IPU architecture"):
        hardware.spec()
    monkeypatch.delenv("POPVIZ_EMULATOR_ARCH")
    assert hardware.spec(ipu_version=1).architecture == "Mk1"
    monkeypatch.setenv("POPVIZ_EMULATOR_HOST_PROCESS_GBPS", "4.7")
    assert hardware.host_link().process_bytes_per_second == 4.7e9
    monkeypatch.setenv("POPVIZ_EMULATOR_HOST_GBPS", "-1")
    with pytest.raises(Exception, match="POPVIZ_EMULATOR_HOST_GBPS='-1' is not a positive number"):
        hardware.host_link()


def test_overflow_when_the_ipu_is_full():
    big = measurement()
    big.params.append(ParamInfo("huge", 1, 900_000_000, 225_000_000, 4))
    frame = costmodel.estimate(big, setup()).memory.frame.set_index("ipu")
    assert frame.loc[1, "overflow_bytes"] == frame.loc[1, "total_bytes_including_gaps"] - MK2.bytes_per_ipu > 0


def test_report_is_estimated_and_round_trips(tmp_path):
    est = costmodel.estimate(measurement(), setup())
    report = costmodel.build_report(est, setup(), versions={"torch": "x"}, captured_at="2024-01-01T00:00:00+00:00")
    assert report.provenance.source == "emulator" and report.provenance.estimated
    assert report.provenance.tool.endswith(" emulator") and len(report.provenance.notes) == 7
    assert report.provenance.notes[5] == "Recomputation: None (autoRecomputation set by the script); " \
        "0 recomputationCheckpoints."
    # the addmm (15,000 activation elements): 3 x 34,676.6 of the 111,540 cycles, a small product
    assert report.provenance.notes[6].startswith("Likely pessimistic: 93% of the estimated operation cycles are "
                                                 "matmuls or convolutions with under 50,000 activation elements")
    assert round(est.config.options["emulator"]["small_products_share"], 5) == 0.93267
    assert report.host_io.calls == 3 and report.memory.level == "ipu"
    assert report.execution.runs["duration_seconds"][0] == est.call_cycles / MK2.clock_hz
    assert report.config.stages[1].blocks == ("B", "loss")
    write_bundle(report, tmp_path / "training")
    assert read_bundle(tmp_path / "training") == report


def test_prefetch_depth_and_callback_threads_from_the_options(monkeypatch):
    from popviz.emulator import runtime_options as profiling

    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)
    monkeypatch.delenv("POPLAR_RUNTIME_OPTIONS", raising=False)
    assert profiling.prefetch_depth({}) == 1  # Poplar prefetches by default, depth 1
    assert profiling.prefetch_depth({"defaultPrefetchBufferingDepth": 3}) == 3
    assert profiling.prefetch_depth({"enablePrefetchDatastreams": False, "defaultPrefetchBufferingDepth": 3}) == 0
    assert profiling.callback_threads({}, 4) == 1  # singleThread: the main thread runs every callback
    collaborative = {"streamCallbacks.multiThreadMode": "collaborative", "streamCallbacks.numWorkerThreads": "auto"}
    assert profiling.callback_threads(collaborative, 4) == 4
    assert profiling.callback_threads({**collaborative, "streamCallbacks.numWorkerThreads": "2"}, 4) == 2
    assert profiling.callback_threads({**collaborative, "streamCallbacks.numWorkerThreads": "0"}, 4) == 1
    monkeypatch.setenv("POPLAR_RUNTIME_OPTIONS", '{"streamCallbacks.multiThreadMode": "dedicated", '
                       '"streamCallbacks.numWorkerThreads": "8"}')
    assert profiling.callback_threads({}, 4) == 4
    monkeypatch.setenv("POPLAR_RUNTIME_OPTIONS", "{oops")
    with pytest.raises(Exception, match="POPLAR_RUNTIME_OPTIONS is not valid JSON"):
        profiling.callback_threads({}, 4)
    monkeypatch.delenv("POPLAR_RUNTIME_OPTIONS")
    with pytest.raises(Exception, match="streamCallbacks.multiThreadMode 'bogus' is not one of singleThread"):
        profiling.callback_threads({"streamCallbacks.multiThreadMode": "bogus"}, 4)


def test_a_product_with_large_weights_and_a_tiny_batch_is_bound_by_reading_its_weights():
    # PopSparse's 8192 x 8192 float32 product at a batch of 4 (Bow): 537 MFLOP is 11,398 cycles
    # at peak, so the FLOP curve gives (11,398 + 18,000) / 0.6 = 48,997; reading 67.1M weights,
    # 45,590 per tile, at 2.85 cycles each takes 129,931 (hardware: ~129,000). Exchange:
    # (4 x 8192 + 4 x 8192) x 4 bytes at 11.1 TB/s / 1.85 GHz = 43.7 cycles; + 4,000.
    bow = hardware.SPECS["Bow"]
    k = 8192
    big = OpCost(0, "mm", 2.0 * k * k * 4, 4, in_bytes=(4 * k + k * k) * 4, out_bytes=4 * k * 4, matmul=True,
                 weight_bytes=k * k * 4)
    assert costmodel.weight_stream_cycles(big, bow) == pytest.approx(2.85 * k * k / 1472)
    assert costmodel.op_cycles(big, bow) == pytest.approx(2.85 * k * k / 1472 + 262_144 / (11.1e12 / 1.85e9) + 4_000)
    # In float16 the same product reads 45,590 elements at 1.0 cycle: 45,590 (hardware: ~46,400)
    half = big.replace(flops=2.0 * k * k * 4, element_bytes=2, in_bytes=(4 * k + k * k) * 2, out_bytes=4 * k * 2,
                       weight_bytes=k * k * 2)
    assert costmodel.weight_stream_cycles(half, bow) == pytest.approx(k * k / 1472)
    # With a batch of 1,024 its FLOPs dominate: the floor changes nothing
    wide = big.replace(flops=2.0 * k * k * 1024)
    assert costmodel.op_cycles(wide, bow) == pytest.approx(
        (2.0 * k * k * 1024 / (32 * 1472) + 18_000) / 0.6 + 262_144 / (11.1e12 / 1.85e9) + 4_000)
    # An operation without parameters (attention's products) has no floor
    assert costmodel.weight_stream_cycles(big.replace(weight_bytes=0), bow) == 0.0
