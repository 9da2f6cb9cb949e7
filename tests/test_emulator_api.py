"""The emulator's PopTorch API, in process: batching, output modes, training, errors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    """Small tensors: intra-op threads only cost time (and the CI machine has 2 cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Identity(torch.nn.Module):
    """Returns its input scaled by a trainable scalar (starts at 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x * self.w


class WithLoss(torch.nn.Module):
    """Linear model returning (output, loss); the loss is a mean-squared error."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(3, 2)

    def forward(self, x, target):
        out = self.linear(x)
        return out, torch.nn.functional.mse_loss(out, target)


def opts(d=1, g=1, r=1, mode=None, period=None):
    o = poptorch.Options().deviceIterations(d).replicationFactor(r)
    o.Training.gradientAccumulation(g)
    if mode is not None:
        o.outputMode(mode, period)
    return o


# ------------------------------------------------------------------ inference output modes
# PopTorch's own check: deviceIterations(10), input [10, 1, 5, 6].
INPUT = torch.arange(10 * 30, dtype=torch.float32).reshape(10, 1, 5, 6)


@pytest.mark.parametrize("mode,period,expected", [
    (None, None, INPUT),
    (poptorch.OutputMode.All, None, INPUT),
    (poptorch.OutputMode.EveryN, 5, INPUT[[4, 9]]),
    (poptorch.OutputMode.Final, None, INPUT[9:10]),
    (poptorch.OutputMode.Sum, None, INPUT.sum(dim=0, keepdim=True)),
])
def test_inference_output_modes(mode, period, expected):
    model = poptorch.inferenceModel(Identity(), opts(d=10, mode=mode, period=period))
    out = model(INPUT)
    assert out.shape == expected.shape
    assert torch.equal(out, expected)


def test_inference_with_replicas_returns_per_replica_results():
    x = torch.arange(12, dtype=torch.float32).reshape(12, 1)  # D=3, R=2, micro-batch 2
    final = poptorch.inferenceModel(Identity(), opts(d=3, r=2, mode=poptorch.OutputMode.Final))(x)
    # order along dim 0 is (device iteration, replica): the last iteration is rows 8..11
    assert final.flatten().tolist() == [8.0, 9.0, 10.0, 11.0]
    summed = poptorch.inferenceModel(Identity(), opts(d=3, r=2, mode=poptorch.OutputMode.Sum))(x)
    assert summed.flatten().tolist() == [0 + 4 + 8, 1 + 5 + 9, 2 + 6 + 10, 3 + 7 + 11]


def test_inference_keeps_structure_and_gives_no_grad():
    class Two(torch.nn.Module):
        def forward(self, x):
            return {"a": x + 1, "b": (x * 2, x.sum())}

    out = poptorch.inferenceModel(Two(), opts(d=2))(torch.ones(4, 3))
    assert set(out) == {"a", "b"} and out["a"].shape == (4, 3) and out["b"][0].shape == (4, 3)
    assert out["b"][1].tolist() == [6.0, 6.0]  # a scalar per micro-batch, stacked
    assert not out["a"].requires_grad


# ------------------------------------------------------------------ training output modes

def data(n):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 3, generator=g), torch.randn(n, 2, generator=g)


def reference_training(x, y, d, g, lr=0.1):
    """What PopTorch computes, written out: per micro-batch forward/backward, one SGD step per G
    micro-batches on the mean gradient. Returns every micro-batch's (output, loss)."""
    model = WithLoss()
    sgd = torch.optim.SGD(model.parameters(), lr=lr)
    results = []
    m = x.shape[0] // (d * g)
    for it in range(d):
        sgd.zero_grad()
        for step in range(g):
            i = (it * g + step) * m
            out, loss = model(x[i:i + m], y[i:i + m])
            (loss / g).backward()
            results.append((out.detach(), loss.detach()))
        sgd.step()
    return results


@pytest.mark.parametrize("mode,period", [(None, None), (poptorch.OutputMode.Final, None),
                                         (poptorch.OutputMode.All, None), (poptorch.OutputMode.EveryN, 2),
                                         (poptorch.OutputMode.Sum, None)])
def test_training_output_modes(mode, period):
    d, g = 4, 3
    x, y = data(2 * d * g)
    ref = reference_training(x, y, d, g)
    model = WithLoss()
    out, loss = poptorch.trainingModel(model, opts(d=d, g=g, mode=mode, period=period),
                                       poptorch.optim.SGD(model.parameters(), lr=0.1))(x, y)
    if mode in (None, poptorch.OutputMode.Final):  # Default = Final for training
        expected_out, expected_loss = ref[-1]
    elif mode == poptorch.OutputMode.All:
        expected_out = torch.cat([o for o, _ in ref])
        expected_loss = torch.stack([v for _, v in ref])
    elif mode == poptorch.OutputMode.EveryN:  # iterations 1 and 3, all their G steps
        kept = ref[g:2 * g] + ref[3 * g:]
        expected_out = torch.cat([o for o, _ in kept])
        expected_loss = torch.stack([v for _, v in kept])
    else:
        expected_out = sum(o for o, _ in ref)
        expected_loss = sum(v for _, v in ref)
    assert out.shape == expected_out.shape and loss.shape == expected_loss.shape
    assert torch.allclose(out, expected_out, atol=1e-6) and torch.allclose(loss, expected_loss, atol=1e-6)
    assert loss.shape == {None: (), poptorch.OutputMode.Final: (), poptorch.OutputMode.Sum: (),
                          poptorch.OutputMode.All: (12,), poptorch.OutputMode.EveryN: (6,)}[mode]


def test_sum_mode_sums_losses_of_every_micro_batch():
    x, y = data(2 * 3)
    model = WithLoss()
    all_losses = poptorch.trainingModel(WithLoss(), opts(d=3, mode=poptorch.OutputMode.All))(x, y)[1]
    summed = poptorch.trainingModel(model, opts(d=3, mode=poptorch.OutputMode.Sum))(x, y)[1]
    assert torch.isclose(summed, all_losses.sum())


def test_training_updates_the_host_model_in_place():
    model = WithLoss()
    before = model.linear.weight.detach().clone()
    trainer = poptorch.trainingModel(model, opts(d=2), poptorch.optim.SGD(model.parameters(), lr=0.1))
    trainer(*data(4))
    assert not torch.equal(model.linear.weight, before)
    assert trainer.model is model and trainer.linear is model.linear  # attribute forwarding


# ------------------------------------------------------------------ gradient accumulation

def sgd_weights(g, reduction=None, lr=0.1):
    x, y = data(8)
    model = WithLoss()
    o = opts(d=1, g=g)
    if reduction is not None:
        o.Training.accumulationAndReplicationReductionType(reduction)
    trainer = poptorch.trainingModel(model, o, poptorch.optim.SGD(model.parameters(), lr=lr))
    for i in range(0, 8, 4 if g == 1 else 8):
        trainer(x[i:i + (4 if g == 1 else 8)], y[i:i + (4 if g == 1 else 8)])
        if g == 1:
            break
    return model


def test_gradient_accumulation_mean_equals_one_big_batch():
    # G=2 over micro-batches of 4 = one step on the mean of both micro-batch gradients, which for a
    # mean-reduced loss equals G=1 on the whole batch of 8.
    x, y = data(8)
    big = WithLoss()
    poptorch.trainingModel(big, opts(), poptorch.optim.SGD(big.parameters(), lr=0.1))(x, y)
    accumulated = WithLoss()
    poptorch.trainingModel(accumulated, opts(g=2), poptorch.optim.SGD(accumulated.parameters(), lr=0.1))(x, y)
    assert torch.allclose(big.linear.weight, accumulated.linear.weight, atol=1e-6)
    assert torch.allclose(big.linear.bias, accumulated.linear.bias, atol=1e-6)


def test_sum_reduction_doubles_the_step():
    x, y = data(8)
    mean = WithLoss()
    poptorch.trainingModel(mean, opts(g=2), poptorch.optim.SGD(mean.parameters(), lr=0.1))(x, y)
    summed = WithLoss()
    o = opts(g=2)
    o.Training.accumulationAndReplicationReductionType(poptorch.ReductionType.Sum)
    poptorch.trainingModel(summed, o, poptorch.optim.SGD(summed.parameters(), lr=0.05))(x, y)
    assert torch.allclose(mean.linear.weight, summed.linear.weight, atol=1e-6)


def test_device_iterations_step_once_per_iteration():
    x, y = data(8)
    stepped = WithLoss()
    poptorch.trainingModel(stepped, opts(d=2), poptorch.optim.SGD(stepped.parameters(), lr=0.1))(x, y)
    manual = WithLoss()
    sgd = torch.optim.SGD(manual.parameters(), lr=0.1)
    for i in (0, 4):
        sgd.zero_grad()
        manual(x[i:i + 4], y[i:i + 4])[1].backward()
        sgd.step()
    assert torch.allclose(stepped.linear.weight, manual.linear.weight, atol=1e-6)


# ------------------------------------------------------------------ losses

def test_identity_loss_marks_the_final_loss():
    class Custom(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor(2.0))

        def forward(self, x):
            return poptorch.identity_loss((x * self.w) ** 2, reduction="mean")

    model = Custom()
    loss = poptorch.trainingModel(model, opts(), poptorch.optim.SGD(model.parameters(), lr=0.1))(
        torch.ones(4))
    assert loss.item() == 4.0
    assert model.w.item() == pytest.approx(2.0 - 0.1 * 4.0)  # d/dw mean((w x)^2) = 2w = 4


def test_two_independent_losses_is_popart_error():
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x, y):
            out = self.lin(x)
            return torch.nn.functional.mse_loss(out, y) + torch.nn.functional.l1_loss(out, y)

    with pytest.raises(poptorch.Error, match="Multiple independent losses found in graph"):
        poptorch.trainingModel(Two())(torch.ones(1, 2), torch.ones(1, 2))


def test_no_loss_is_an_error():
    with pytest.raises(poptorch.Error, match="Couldn't find a loss in graph!"):
        poptorch.trainingModel(Identity())(torch.ones(2))


def test_outputs_refuse_backward():
    out = poptorch.trainingModel(WithLoss())(*data(1))
    with pytest.raises(poptorch.Error, match="backward\\(\\) cannot be called explicitly"):
        out[1].backward()


# ------------------------------------------------------------------ errors PopTorch raises

def test_frozen_options():
    o = opts()
    poptorch.trainingModel(WithLoss(), o)
    with pytest.raises(AttributeError, match="^Can't modify frozen Options$"):
        o.deviceIterations(2)
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        o.Training.gradientAccumulation(2)
    clone = o.clone()
    clone.deviceIterations(4)
    assert clone.device_iterations == 4 and o.device_iterations == 1


def test_inference_model_with_gradient_accumulation():
    with pytest.raises(poptorch.Error) as info:
        poptorch.inferenceModel(Identity(), opts(g=2))
    assert str(info.value).startswith("'poptorch_py_error': You must set "
                                      "poptorch.Options().Training.gradientAccumulation to 1")
    assert "Use poptorch.Options().deviceIterations" in info.value.message  # pipelined by default
    assert isinstance(info.value, poptorch.poptorch_core.Error)


class Pipelined(torch.nn.Module):
    """Three blocks on three IPUs, the loss in the last."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x, y=None):
        with poptorch.Block("A", ipu_id=0):
            x = self.a(x)
        with poptorch.Block("B", ipu_id=1):
            x = self.b(x)
        with poptorch.Block("C", ipu_id=2):
            x = self.c(x)
            return x if y is None else torch.nn.functional.mse_loss(x, y)


def test_gradient_accumulation_below_pipeline_stages():
    trainer = poptorch.trainingModel(Pipelined(), opts(g=4).autoRoundNumIPUs(True))
    with pytest.raises(poptorch.Error, match=r"gradientAccumulation must be greater than or equal to the number "
                                             r"of pipeline stages \(5\) when using poptorch.PipelinedExecution"):
        trainer(torch.ones(4, 4), torch.ones(4, 4))
    assert not trainer.isCompiled()
    ok = poptorch.trainingModel(Pipelined(), opts(g=5).autoRoundNumIPUs(True))
    ok(torch.ones(5, 4), torch.ones(5, 4))
    assert [s.blocks for s in ok.popvizEstimate().config.stages] == [("A",), ("B",), ("C",)]


def test_pipelined_inference_needs_device_iterations():
    with pytest.raises(poptorch.Error, match=r"deviceIterations must be greater than or equal to the number of "
                                             r"pipeline stages \(3\)"):
        poptorch.inferenceModel(Pipelined(), opts(d=2).autoRoundNumIPUs(True))(torch.ones(2, 4))
    sharded = opts(d=2).autoRoundNumIPUs(True)
    sharded.setExecutionStrategy(poptorch.ShardedExecution())
    assert poptorch.inferenceModel(Pipelined(), sharded)(torch.ones(2, 4)).shape == (2, 4)


def test_three_ipus_need_auto_round_num_ipus():
    """PopTorch reserves IPUs in powers of two (its pipelining_test.py expects this message, and
    before the device-iterations check: it acquires the device first)."""
    with pytest.raises(poptorch.Error, match=r"The model specifies the use of 3 IPUs, however PopTorch must "
                                             r"reserve a minimum of 4 in order to allow the model to run, "
                                             r"because PopTorch must reserve a power of 2 or maximum of 64 IPUs "
                                             r"per process\. Please reconfigure your model to use a different "
                                             r"number of IPUs or set poptorch\.Options\(\)\.autoRoundNumIPUs"):
        poptorch.inferenceModel(Pipelined(), opts(d=1))(torch.ones(1, 4))
    rounded = poptorch.inferenceModel(Pipelined(), opts(d=3).autoRoundNumIPUs(True))
    rounded(torch.ones(3, 4))
    assert rounded.popvizEstimate().target.num_ipus == 4
    offline = poptorch.inferenceModel(Pipelined(), opts(d=3).useOfflineIpuTarget(2))
    offline.compile(torch.ones(3, 4))
    assert offline.popvizEstimate().target.num_ipus == 3


def test_every_n_needs_a_period():
    with pytest.raises(AssertionError, match="EveryN anchor must have output_return_period set"):
        poptorch.Options().outputMode(poptorch.OutputMode.EveryN)


def test_batch_not_divisible_by_combined_batches():
    model = poptorch.inferenceModel(Identity(), opts(d=4))
    with pytest.raises(AssertionError, match=r"Invalid batch dimension: In the input torch.Size\(\[6, 2\]\), the "
                                             r"batch dimension \(6\) must be a multiple of "
                                             r"Options.deviceIterations\(4\)"):
        model(torch.ones(6, 2))


def test_inputs_must_match_the_compiled_ones():
    model = poptorch.inferenceModel(Identity(), opts(d=2))
    model(torch.ones(4, 3))
    with pytest.raises(poptorch.Error, match=r"Shape mismatch for x: expected torch.Size\(\[4, 3\]\) but got "
                                             r"torch.Size\(\[6, 3\]\)"):
        model(torch.ones(6, 3))


def test_unknown_block_in_explicit_stages():
    o = opts(g=5)
    o.setExecutionStrategy(poptorch.PipelinedExecution("A", "B"))
    with pytest.raises(AssertionError, match=r"Unknown Block 'C' list of expected Blocks: \['A', 'B'\]"):
        poptorch.trainingModel(Pipelined(), o)(torch.ones(5, 4), torch.ones(5, 4))


def test_wrapping_twice_for_training():
    model = WithLoss()
    first = poptorch.trainingModel(model)
    with pytest.raises(RuntimeError, match="Model has already been wrapped in 'poptorch.trainingModel'"):
        poptorch.trainingModel(model)
    first(*data(1))
    model.destroy()
    assert not first.isCompiled()
    poptorch.trainingModel(model)  # allowed again after destroy()


def test_device_and_timing_calls():
    o = opts(d=2)
    o.logCycleCount(True)
    model = poptorch.inferenceModel(Identity(), o)
    assert model.getPerfCounters() == {"input": [[]], "input_complete": [[]], "output": [[]],
                                       "output_complete": [[]]}
    with pytest.raises(poptorch.Error, match="Model has not been compiled or has been destroyed."):
        model.detachFromDevice()
    with pytest.raises(poptorch.Error, match="Please compile the model before obtaining compilation time."):
        model.compilationTime()
    model.compile(torch.ones(2, 3))
    assert model.isCompiled() and model.isAttachedToDevice()
    with pytest.raises(poptorch.Error, match="Please run the model at least once before obtaining cycle count."):
        model.cycleCount()
    model(torch.ones(2, 3))
    assert model.cycleCount() == model.popvizEstimate().call_cycles > 0
    counters = model.getPerfCounters()
    assert [len(counters[k][0]) for k in ("input", "input_complete", "output", "output_complete")] == [2, 2, 2, 2]
    low, high, avg = model.getLatency()
    assert 0 < low <= avg <= high
    # the transfers' timeline is worked out once per estimate (popviz capture asks for these
    # after every call it samples)
    assert model.popvizEstimate().timeline() is model.popvizEstimate().timeline()
    model.detachFromDevice()
    with pytest.raises(poptorch.Error, match="Device is not attached"):
        model.detachFromDevice()
    model(torch.ones(2, 3))  # calling re-attaches, as in PopTorch
    assert model.isAttachedToDevice()
    no_log = poptorch.inferenceModel(Identity())
    no_log(torch.ones(1))
    with pytest.raises(poptorch.Error, match="Cycle count logging is disabled"):
        no_log.cycleCount()


def test_perf_counter_lengths_follow_the_output_mode():
    o = opts(d=6, g=2, mode=poptorch.OutputMode.EveryN, period=3)
    model = poptorch.trainingModel(WithLoss(), o)
    model(*data(12))
    counters = model.getPerfCounters()
    assert len(counters["input"]) == 2 and len(counters["input"][0]) == 12  # two inputs, D·G·R each
    assert len(counters["output"]) == 2 and len(counters["output"][0]) == 4  # (D/N)·G·R


# ------------------------------------------------------------------ blocks

class Chain(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how
        self.l0, self.l1, self.l2 = (torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        if self.how == "start":
            poptorch.Block.start("first", ipu_id=0)
            x = self.l0(x)
            poptorch.Block.start("second", ipu_id=1)
            x = self.l1(x)
            x = self.l2(x)
            return x
        return self.l2(self.l1(self.l0(x)))


def test_block_start_splits_stages():
    model = poptorch.inferenceModel(Chain("start"), opts(d=2))
    model(torch.ones(2, 4))
    stages = model.popvizEstimate().config.stages
    assert [(s.ipu, s.blocks) for s in stages] == [(0, ("first",)), (1, ("second",))]
    # l1 and l2 are in the second stage: twice the parameters of the first
    first, second = model.popvizEstimate().stages
    assert (first.weight_bytes, second.weight_bytes) == (80, 160)
    blocks = model.popvizEstimate().config.options["emulator"]["blocks"]
    assert [(b["block"], b["ipu"], b["ops"], b["weight_bytes"]) for b in blocks] == [
        ("first", 0, 1, 80), ("second", 1, 2, 160)]  # one addmm per Linear


def test_begin_block_and_repr():
    chain = Chain("hooks")
    poptorch.BeginBlock(chain.l1, "mid", ipu_id=1)
    poptorch.BeginBlock(chain.l2, ipu_id=2)
    assert "BeginBlock(user_id=mid, ipu_id=1)" in repr(list(chain.l1._forward_pre_hooks.values()))
    with pytest.raises(poptorch.Error, match="module has already been assigned to a block."):
        poptorch.BeginBlock(chain.l1, "again")
    model = poptorch.inferenceModel(chain, opts(d=3).autoRoundNumIPUs(True))
    model(torch.ones(3, 4))
    # l0 runs before the first block: on IPU 0, a stage of its own (PopTorch's user guide,
    # overview.rst: "PopTorch places the first layers on ipu_id 0 by default", relied on by its
    # docs/user_guide/pipeline_simple.py); l2's block got the automatic id "0" and is shown by
    # its module path; the user_id "mid" is kept
    assert [(s.ipu, s.blocks) for s in model.popvizEstimate().config.stages] == [
        (0, ()), (1, ("mid",)), (2, ("l2",))]
    assert [s.weight_bytes for s in model.popvizEstimate().stages] == [80, 80, 80]
    poptorch.removeBlocks(chain)
    assert not chain.l1._forward_pre_hooks


def test_same_ipu_blocks_merge_and_auto_increment():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(2, 2)

        @poptorch.BlockFunction("f", ipu_id=0)
        def first(self, x):
            return self.l(x)

        def forward(self, x):
            x = self.first(x)
            with poptorch.Block("g", ipu_id=0):
                x = x * 2
            with poptorch.Block("h"):
                return x + 1

    o = opts(d=1)
    o.setExecutionStrategy(poptorch.ShardedExecution(poptorch.AutoStage.AutoIncrement))
    model = poptorch.inferenceModel(M(), o)
    model(torch.ones(1, 2))
    # f and g share IPU 0 (one stage); h gets stage 3 and, with no ipu_id, IPU 3
    assert [(s.ipu, s.blocks) for s in model.popvizEstimate().config.stages] == [(0, ("f", "g")), (3, ("h",))]


def test_same_as_ipu_needs_an_ipu():
    class M(torch.nn.Module):
        def forward(self, x):
            with poptorch.Block("nowhere"):
                return x + 1

    with pytest.raises(AssertionError, match="AutoStage.SameAsIpu was selected but no IPU was specified "
                                             "for block nowhere"):
        poptorch.inferenceModel(M())(torch.ones(1))


def test_blocks_do_nothing_outside_an_executor():
    chain = Chain("start")
    assert chain(torch.ones(1, 4)).shape == (1, 4)
    assert not poptorch.isRunningOnIpu()


# ------------------------------------------------------------------ options, data, optimizers

def test_options_record_and_chain():
    o = poptorch.Options()
    assert o.deviceIterations(4) is o
    o.setAvailableMemoryProportion({"IPU0": 0.3, "IPU1": 0.5}).modelName("bert").randomSeed(7)
    o.TensorLocations.setOptimizerLocation(poptorch.TensorLocationSettings().useOnChipStorage(False))
    o._Popart.set("defaultPrefetchBufferingDepth", 3)
    assert o.available_memory_proportion == {0: 0.3, 1: 0.5} and o.model_name == "bert"
    assert o.TensorLocations.on_chip("optimizer") is False and o.TensorLocations.on_chip("weight") is True
    d = o.toDict()
    assert d["_Popart.defaultPrefetchBufferingDepth"] == 3 and d["device_iterations"] == 4
    assert o.Training.accumulation_and_replication_reduction_type == poptorch.ReductionType.Mean
    with pytest.raises(ValueError, match="must be set to poptorch.ReductionType.Mean or"):
        o.Training.accumulationAndReplicationReductionType(poptorch.ReductionType.NoReduction)
    with pytest.raises(AttributeError, match="Invalid attribute nope."):
        o.nope  # noqa: B018


def test_dataloader_combined_batch_size():
    o = poptorch.Options().deviceIterations(3).replicationFactor(2)
    o.Training.gradientAccumulation(4)
    dataset = torch.utils.data.TensorDataset(torch.arange(100.0))
    loader = poptorch.DataLoader(o, dataset, batch_size=2)
    assert loader.combinedBatchSize == 2 * 3 * 2 * 4
    batches = [b[0] for b in loader]
    assert len(batches) == 2 and batches[0].tolist() == list(range(48))  # drop_last, not shuffled
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        o.deviceIterations(1)


def test_dataloader_splits_the_dataset_between_processes():
    o = poptorch.Options().deviceIterations(2)
    o.Distributed.configureProcessId(1, 2)
    loader = poptorch.DataLoader(o, torch.utils.data.TensorDataset(torch.arange(20.0)), batch_size=2)
    assert [b[0].tolist() for b in loader] == [[8.0, 9.0, 10.0, 11.0], [12.0, 13.0, 14.0, 15.0]]


def test_poptorch_optimizers_accept_poptorch_arguments():
    params = [torch.nn.Parameter(torch.ones(3))]
    adamw = poptorch.optim.AdamW(params, lr=0.01, loss_scaling=128.0, accum_type=torch.float16,
                                 max_grad_norm=1.0)
    assert adamw.defaults["weight_decay"] == 0.01 and adamw.loss_scaling == 128.0
    assert poptorch.optim.SGD(params, lr=0.1, momentum=0.9, velocity_scaling=2.0).defaults["momentum"] == 0.9
    with pytest.raises(AssertionError, match="Accumulation types must be either"):
        poptorch.optim.Adam(params, accum_type=torch.int32)


def test_lamb_step():
    p = torch.nn.Parameter(torch.tensor([3.0, 4.0]))  # norm 5
    lamb = poptorch.optim.LAMB([p], lr=0.1, weight_decay=0.0)
    p.grad = torch.tensor([1.0, -2.0])
    lamb.step()
    # first step with bias correction: update = g / (|g| + eps) = sign(g), norm sqrt(2);
    # trust ratio 5 / sqrt(2); the step is lr * trust * sign(g)
    step = 0.1 * 5 / 2 ** 0.5
    assert torch.allclose(p.detach(), torch.tensor([3.0 - step, 4.0 + step]), atol=1e-5)


def test_version_and_hardware():
    assert "popviz.emulator" in poptorch.__version__
    assert poptorch.ipuHardwareIsAvailable() is True and poptorch.ipuHardwareVersion() == 2
    assert {"Options", "trainingModel", "OutputMode", "DataLoader", "Block"} <= set(poptorch.__all__)
