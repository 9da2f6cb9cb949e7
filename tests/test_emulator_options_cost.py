"""Options that change speed or memory in the emulator's cost model: the available memory
proportion (caps matmul temporaries, costs cycles), replicated tensor sharding of the optimizer
state, half-precision partials."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402
from popviz.emulator import costmodel, hardware  # noqa: E402


def test_serialisation_factor_per_halving_of_the_temporaries():
    op = costmodel.OpCost(segment=0, name="mm", flops=1e9, element_bytes=4, in_bytes=3000, out_bytes=1000,
                          matmul=True, weight_bytes=2000)
    # activations 2,000 B; the fastest plan wants 2 × 2,000 = 4,000 B
    assert costmodel.serialisation_factor(op, 4000) == 1.0
    assert costmodel.serialisation_factor(op, 1000) == pytest.approx(1 + 0.15 * 2)  # two halvings
    assert costmodel.serialisation_factor(op.replace(matmul=False), 1000) == 1.0
    assert costmodel.op_temporary_bytes(op, 1000) == 2000  # never below operands and result
    assert costmodel.op_temporary_bytes(op, 3000) == 3000
    assert costmodel.op_temporary_bytes(op, 9000) == 4000


class Big(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(1024, 1024, bias=False)

    def forward(self, x):
        return self.a(x)


def _estimate(amp: float | None = None, **opts):
    o = poptorch.Options()
    if amp is not None:
        o.setAvailableMemoryProportion({"IPU0": amp})
    model = poptorch.inferenceModel(Big(), o)
    model.compile(torch.zeros(16384, 1024))
    return model.popvizEstimate()


def test_a_lower_available_memory_proportion_caps_temporaries_and_costs_cycles():
    torch.set_num_threads(1)
    bytes_per_ipu = hardware.spec().bytes_per_ipu
    activations = 2 * 16384 * 1024 * 4  # input and output, float32: 128 MiB
    default, low, lower = _estimate(), _estimate(0.2), _estimate(0.1)
    assert default.stages[0].temporary_bytes == 2 * activations  # fits under 0.6 of the IPU
    assert low.stages[0].temporary_bytes == int(0.2 * bytes_per_ipu)
    assert lower.stages[0].temporary_bytes == activations  # the cap is below the operands: kept
    assert default.call_cycles < low.call_cycles < lower.call_cycles
    # the matmul's cycles before the serialisation factor: (c + AMP_HALF_CYCLES) / AMP_PEAK_EFFICIENCY
    # at peak, plus its activations exchanged
    ideal = 16384 * 1024 * 1024 * 2 / hardware.spec().flops_per_cycle(4)
    matmul = ((ideal + 18_000) / 0.6
              + activations / hardware.spec().per_cycle(hardware.spec().exchange_bytes_per_second))
    factor = 1 + 0.15 * math.log2(2 * activations / (0.2 * bytes_per_ipu))
    assert low.stages[0].forward_cycles - default.stages[0].forward_cycles == pytest.approx(
        matmul * (factor - 1), abs=1)


class WithLoss(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x):
        return poptorch.identity_loss(self.lin(x).sum(), "none")


def test_replicated_tensor_sharding_splits_the_optimizer_state():
    torch.set_num_threads(1)

    def memory(sharded: bool):
        o = poptorch.Options().replicationFactor(4)
        o.TensorLocations.setOptimizerLocation(
            poptorch.TensorLocationSettings().useReplicatedTensorSharding(sharded))
        model = WithLoss()
        ex = poptorch.trainingModel(model, o, poptorch.optim.Adam(model.parameters(), lr=1e-3))
        ex.compile(torch.zeros(8, 64))
        frame = ex.popvizEstimate().memory.frame
        ex.destroy()
        return int(frame["cat_optimizerState_bytes"].iloc[0])

    plain, sharded = memory(False), memory(True)
    assert plain == (64 * 64 + 64) * 8  # Adam: two float32 slots per element
    assert sharded == plain // 4


def test_host_work_between_calls_is_measured_and_added_to_the_loop_rate():
    """The script's own work between two calls: the calling thread's CPU time (busy work counts, a
    sleep — like waiting for data-loader workers — only in the wall time)."""
    import time

    from popviz.analysis.throughput import throughput

    torch.set_num_threads(1)
    model = torch.nn.Linear(4, 2)
    ex = poptorch.inferenceModel(model, poptorch.Options().deviceIterations(2))
    x = torch.zeros(4, 4)
    ex(x)
    for _ in range(2):
        time.sleep(0.05)
        end = time.thread_time() + 0.02
        while time.thread_time() < end:  # 20 ms of the script's own CPU work
            pass
        ex(x)
    report = ex.popvizReport()
    ex.destroy()
    emulator = report.cfg.options["emulator"]
    assert emulator["host_gaps_measured"] == 2
    assert 0.02 <= emulator["host_seconds_between_calls"] < 0.05 <= emulator["host_wall_seconds_between_calls"]
    assert any(n.startswith("The script's own host work between calls, measured (not estimated) over 2 gaps")
               for n in report.provenance.notes)
    t = throughput(report)
    assert t.loop_samples_per_second == pytest.approx(
        t.samples_per_call / (t.call_seconds + emulator["host_seconds_between_calls"]))
    first = poptorch.inferenceModel(model, poptorch.Options())
    first(x)
    assert "host_seconds_between_calls" not in first.popvizReport().cfg.options["emulator"]  # one call: no gap
    first.destroy()


def test_a_gap_in_which_another_model_ran_is_not_the_loops_host_work():
    """Lightning runs a whole training epoch between its sanity check's validation calls and the
    next validation: those gaps are another model's, and only the others are measured."""
    import time

    torch.set_num_threads(1)
    val = poptorch.inferenceModel(torch.nn.Linear(4, 2), poptorch.Options())
    train_model = WithLoss()
    train = poptorch.trainingModel(train_model, poptorch.Options(), torch.optim.SGD(train_model.parameters(), lr=0.1))
    x, big = torch.zeros(1, 4), torch.zeros(1, 64)
    val(x)
    val(x)  # gap 1: the script's own
    end = time.thread_time() + 0.05
    train(big)  # compiled and run in gap 2
    while time.thread_time() < end:
        pass
    train(big)  # 50 ms of the training loop's work: not validation's
    val(x)
    val(x)  # gap 3: the script's own again
    report = val.popvizReport()
    emulator = report.cfg.options["emulator"]
    assert emulator["host_gaps_measured"] == 2
    assert emulator["host_seconds_between_calls"] < 0.02
    assert any("over 2 gaps (1 more left out: another model compiled or ran in them)" in n
               for n in report.provenance.notes)
    assert train.popvizReport().cfg.options["emulator"]["host_gaps_measured"] == 1
    val.destroy()
    train.destroy()


def _input_waits(**engine):
    o = poptorch.Options().deviceIterations(4).replicationFactor(2)
    if "depth" in engine:
        o._Popart.set("defaultPrefetchBufferingDepth", engine["depth"])
    if "threads" in engine:
        o._Popart.set("engineOptions", {"streamCallbacks.multiThreadMode": "collaborative",
                                        "streamCallbacks.numWorkerThreads": engine["threads"]})
    model = poptorch.inferenceModel(Big(), o)
    model.compile(torch.zeros(4 * 2 * 256, 1024))
    est = model.popvizEstimate()
    steps = est.steps
    return steps[steps.program == "input/begin"].cycles.tolist(), est


def test_the_script_options_set_prefetch_depth_and_callback_threads():
    torch.set_num_threads(1)
    # 2 replicas x 256 x 1024 float32 = 2 MiB per micro-batch through one host thread at 2.35 GB/s
    one = round(2 * 256 * 1024 * 4 / 2.35e9 * hardware.spec().clock_hz)
    waits, est = _input_waits()
    # the first input waits for all of it; the next ones were prepared while the IPU computed
    assert waits == [one, 771_102, 771_102, 771_102] and one == 1_186_899
    assert est.config.options["emulator"]["host_callback_threads"] == 1
    deeper, _ = _input_waits(depth=3)  # the host runs further ahead
    assert deeper == [one, 415_800, 415_800, 415_800]
    threaded, est = _input_waits(threads="auto")  # one thread per replica: half the time
    assert threaded == [593_449, 177_652, 177_652, 177_652]
    assert est.config.options["emulator"]["host_callback_threads"] == 2
