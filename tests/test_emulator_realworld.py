"""What real-world PopTorch code (PyTorch Lightning's IPUStrategy, HF-style models) needs from
the emulator and the capture: ``_executable``, a user ``batch_sampler`` combined into D·G·R
batches, unnamed ``with poptorch.Block`` blocks recorded once per executor, and profiles written
to the ``autoReport.directory`` the program itself set gathered into the capture directory."""

from __future__ import annotations

import json
import re
import sys
import textwrap

import pytest

from conftest import run_cli, unwrapped

torch = pytest.importorskip("torch")

import popviz.emulator as poptorch  # noqa: E402


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_executable_is_none_until_compiled_and_after_destroy():
    model = poptorch.inferenceModel(torch.nn.Linear(3, 2))
    assert model._executable is None
    model(torch.ones(2, 3))
    assert model._executable is not None
    model.destroy()
    assert model._executable is None


def _batch_sampler(n: int, size: int, drop_last: bool):
    return torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(range(n)), size, drop_last)


def test_batch_sampler_batches_are_combined_d_g_r_at_a_time():
    opts = poptorch.Options().deviceIterations(3)
    data = torch.utils.data.TensorDataset(torch.arange(40).float(), torch.arange(40))
    loader = poptorch.DataLoader(opts, data, batch_sampler=_batch_sampler(40, 4, False))
    batches = list(loader)
    # 10 sampler batches of 4, three per call: 3 full calls of 12, the last sampler batch dropped
    assert [tuple(x.shape) for x, _ in batches] == [(12,), (12,), (12,)]
    assert batches[1][1].tolist() == list(range(12, 24))
    assert loader.combinedBatchSize == 12
    kept = poptorch.DataLoader(opts, data, batch_sampler=_batch_sampler(40, 4, False), drop_last=False)
    assert [x.shape[0] for x, _ in kept] == [12, 12, 12, 4]


def test_batch_sampler_batches_feed_the_executor():
    opts = poptorch.Options().deviceIterations(5)
    data = torch.utils.data.TensorDataset(torch.randn(40, 3))
    loader = poptorch.DataLoader(opts, data, batch_sampler=_batch_sampler(40, 4, True))
    model = poptorch.inferenceModel(torch.nn.Linear(3, 2), opts)
    outs = [model(x) for (x,) in loader]
    assert [tuple(o.shape) for o in outs] == [(20, 2), (20, 2)]


def test_batch_sampler_rules_as_poptorch():
    data = torch.utils.data.TensorDataset(torch.arange(8))
    with pytest.raises(poptorch.Error, match="mutually exclusive with batch_size, shuffle"):
        poptorch.DataLoader(poptorch.Options(), data, batch_size=2, batch_sampler=_batch_sampler(8, 2, True))


SCRIPT = textwrap.dedent('''
    import json, os, sys
    import torch
    import poptorch

    # Like Lightning's IPUStrategy(autoreport=True, autoreport_dir=...): the program points
    # Poplar's reports at its own directory, inside the process.
    os.environ["POPLAR_ENGINE_OPTIONS"] = json.dumps(
        {"autoReport.all": True, "autoReport.directory": sys.argv[1]})

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 16)
            self.b = torch.nn.Linear(16, 4)

        def forward(self, x, y):
            with poptorch.Block(ipu_id=0):
                x = torch.relu(self.a(x))
            with poptorch.Block(ipu_id=1):
                x = self.b(x)
                return x, poptorch.identity_loss(torch.nn.functional.cross_entropy(x, y), "none")

    opts = poptorch.Options().deviceIterations(4)
    opts.Training.gradientAccumulation(8)
    opts.setExecutionStrategy(poptorch.PipelinedExecution())
    model = poptorch.trainingModel(Net(), opts, torch.optim.SGD(Net().parameters(), lr=0.1))
    for _ in range(2):
        model(torch.randn(128, 8), torch.randint(0, 4, (128,)))
''')


@pytest.fixture(scope="module")
def own_dir_capture(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("owndir")
    (tmp / "train.py").write_text(SCRIPT)
    proc = run_cli("capture", "-o", "cap", "--emulate", "--", sys.executable, "train.py", "elsewhere",
                   cwd=tmp, env={"OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return tmp, proc


def test_unnamed_blocks_are_recorded_once_per_executor(own_dir_capture):
    tmp, _ = own_dir_capture
    doc = json.loads((tmp / "cap" / "training" / "popviz-model.json").read_text())
    # `with poptorch.Block(ipu_id=...)` without a user_id: named by the module each ran
    assert doc["options"]["stages"] == [{"index": 0, "ipu": 0, "blocks": ["a"]},
                                        {"index": 1, "ipu": 1, "blocks": ["b"]}]
    # Linear(8, 16): 144 parameters; Linear(16, 4): 68; PopTorch's automatic ids kept beside
    assert [(b["id"], b["name"], b["ipu"], b["parameters"]) for b in doc["model"]["blocks"]] == [
        ("0", "a", 0, 144), ("1", "b", 1, 68)]


def test_profiles_written_elsewhere_are_gathered_with_their_manifest(own_dir_capture):
    tmp, proc = own_dir_capture
    doc = json.loads((tmp / "cap" / "training" / "popviz-model.json").read_text())
    assert doc["executor"]["report_directory"] == str((tmp / "elsewhere").resolve())
    assert (tmp / "elsewhere" / "training" / "popviz-report.json").is_file()  # left where it was
    assert (tmp / "cap" / "training" / "popviz-report.json").is_file()
    assert ("  training: profile written to elsewhere/training (the program's autoReport.directory); "
            "linked execution.parquet, liveness.parquet, memory.parquet, popviz-report.json, runs.parquet "
            "into cap/training") in unwrapped(proc.stderr)
    assert "training  popviz bundle · training, PipelinedExecution, 2 stage(s) · D=4 G=8" in proc.stderr
    run = json.loads((tmp / "cap" / "popviz-run.json").read_text())
    assert any("elsewhere/training" in n for n in run["notes"])
    analysed = run_cli("analyse", "cap", "--json", cwd=tmp)
    assert analysed.returncode == 0, analysed.stderr
    [report] = json.loads(analysed.stdout)["engines"]
    assert (report["config"]["device_iterations"], report["config"]["gradient_accumulation"]) == (4, 8)
    assert [s["ipu"] for s in report["config"]["stages"]] == [0, 1]


CALLS_SCRIPT = textwrap.dedent('''
    import torch
    import poptorch

    opts = poptorch.Options().deviceIterations(2)
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return poptorch.identity_loss(self.lin(x).pow(2).mean(), "none")

    model = poptorch.trainingModel(Net(), opts)
    try:
        for step in range(5):
            print(f"step {step}: loss {float(model(torch.ones(2, 4)).mean()):.4f}", flush=True)
    finally:
        print("cleanup ran", flush=True)
    print("after the loop")
''')


@pytest.fixture(scope="module")
def calls_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("calls")
    (tmp / "train.py").write_text(CALLS_SCRIPT)
    proc = run_cli("capture", "-o", "cap", "--emulate", "--calls", "3", "--", sys.executable, "train.py",
                   cwd=tmp, env={"OMP_NUM_THREADS": "1"}, timeout=300)
    return tmp, proc


def test_calls_stops_the_script_cleanly_at_the_nth_call(calls_run):
    tmp, proc = calls_run
    assert proc.returncode == 0, proc.stderr
    # two calls run, the third estimated only, then the script unwinds (finally blocks run)
    assert [line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("step")] == [
        "step 0", "step 1"]
    assert "cleanup ran" in proc.stdout and "after the loop" not in proc.stdout
    # each step as it starts and ends (heartbeats, "... (N s)", come only while one lasts 4 s)
    progress = [re.sub(r"[0-9.]+ s$", "N s", line) for line in unwrapped(proc.stderr).splitlines()
                if line.startswith("popviz emulator: ") and "report" not in line.split(":")[1]
                and not re.search(r"\(\d+ s\)$", line)]
    assert progress == ["popviz emulator: compiling 'training': tracing and measuring one micro-batch",
                        "popviz emulator: 'training' estimated in N s",
                        "popviz emulator: 'training': running call 1 of 3 on the CPU",
                        "popviz emulator: 'training': call 1 of 3 done",
                        "popviz emulator: 'training': running call 2 of 3 on the CPU",
                        "popviz emulator: 'training': call 2 of 3 done",
                        "popviz emulator: 'training': call 3 of 3 estimated, not run; stopping the "
                        "script (--calls 3); reports are written as it exits"]
    text = " ".join(proc.stderr.split())  # the summary's lines wrap at the terminal's width
    summary = [text[text.index(" training popviz bundle "):]]
    assert " 3 call(s), estimated in " in summary[0], proc.stderr
    assert summary[0].split(", estimated in ")[1].split(", ")[1].startswith("calls run on the CPU in ")
    doc = json.loads((tmp / "cap" / "training" / "popviz-model.json").read_text())
    assert (doc["status"], doc["calls"]["count"], doc["calls"]["compile"]["error"]) == ("final", 3, None)
    bundle = json.loads((tmp / "cap" / "training" / "popviz-report.json").read_text())
    assert bundle["host_io"]["calls"] == 3


def test_calls_needs_the_emulator():
    from conftest import assert_one_line_error

    proc = run_cli("capture", "--calls", "1", "--", sys.executable, "-c", "pass")
    assert_one_line_error(proc, "--calls 1 stops an emulated run: add --emulate")
    proc = run_cli("emulate", "--calls", "0", "--", sys.executable, "-c", "pass")
    assert proc.returncode == 2 and "must be at least 1, got 0" in proc.stderr


class HFStyle(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, input_ids, attention_mask=None, labels=None):
        return self.lin(input_ids * attention_mask)


def test_keyword_and_positional_calls_are_the_same_call():
    model = poptorch.inferenceModel(HFStyle())
    x, mask = torch.ones(2, 4), torch.ones(2, 4)
    first = model(input_ids=x, attention_mask=mask)
    assert torch.equal(model(x, mask), first)
    assert torch.equal(model(x, attention_mask=mask), first)
    with pytest.raises(AssertionError, match="Parameter input_ids was passed more than once"):
        model(x, input_ids=x)
    with pytest.raises(AssertionError, match="masks is not a valid parameter"):
        model(x, masks=mask)
    with pytest.raises(poptorch.Error, match="Mandatory parameter input_ids missing"):
        poptorch.inferenceModel(HFStyle())(attention_mask=mask)


def test_half_model_with_float_inputs_computes_in_float32():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).half()
    out = poptorch.inferenceModel(model)(torch.ones(2, 4))
    assert out.dtype == torch.float32 and tuple(out.shape) == (2, 3)
    assert model[0].weight.dtype == torch.float16  # the model itself is left as it was


class Pair:
    def __init__(self, a, b) -> None:
        self.a, self.b = a, b


class PairParser(poptorch.ICustomArgParser):
    def yieldTensors(self, struct):
        yield struct.a
        yield struct.b

    def reconstruct(self, original, tensors):
        return Pair(next(tensors), next(tensors))


class Doubler(torch.nn.Module):
    def forward(self, pair):
        return Pair(pair.a * 2, pair.b + 1)


def test_custom_arg_parser_splits_and_rebuilds_user_types():
    poptorch.registerCustomArgParser(Pair, PairParser())
    try:
        model = poptorch.inferenceModel(Doubler(), poptorch.Options().deviceIterations(2))
        out = model(Pair(torch.arange(4.0).reshape(4, 1), torch.zeros(4, 3)))
        assert isinstance(out, Pair)
        assert out.a.flatten().tolist() == [0.0, 2.0, 4.0, 6.0] and tuple(out.b.shape) == (4, 3)
        with pytest.raises(poptorch.Error, match="must inherit from ICustomArgParser"):
            poptorch.registerCustomArgParser(Pair, object())
    finally:
        poptorch.registerCustomArgParser(Pair, None)


class AfterBlock(torch.nn.Module):
    def forward(self, x):
        with poptorch.Block(ipu_id=0):
            x = x * 2
        return x * 4  # no block is active here


def test_an_operation_after_a_with_block_needs_a_block():
    opts = poptorch.Options().deviceIterations(2)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    with pytest.raises(poptorch.Error, match="No active Block, all the ops must belong to a Block"):
        poptorch.inferenceModel(AfterBlock(), opts).compile(torch.ones(2, 3))


def test_for_loop_rules_as_poptorch():
    x = torch.ones(1, 5, dtype=torch.int32)

    def body(y):
        y += 1
        return y

    assert poptorch.for_loop(3, body, [x])[0].tolist() == [[4] * 5]
    assert x.tolist() == [[1] * 5]  # inputs are passed by value
    with pytest.raises(ValueError, match=r"\(Object is not list\)"):
        poptorch.for_loop(2, body, x)
    with pytest.raises(ValueError, match=r"\(Object contained in list at index 1 is not torch.tensor\)"):
        poptorch.for_loop(2, lambda a, b: (a, b), [x, 5])


class TwoBuffers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b1", torch.ones(1))
        self.register_buffer("b2", torch.ones(1))

    def forward(self, x):
        return torch.sum(x + self.b1 + self.b2)


def test_inference_sees_host_buffers_only_when_copied():
    host = TwoBuffers()
    model = poptorch.inferenceModel(host, poptorch.Options().updatableNamedBuffers(["b1"]))
    x = torch.ones(3)
    assert float(model(x)) == 9.0
    host.b1.add_(1)
    host.b2.add_(1)
    assert float(model(x)) == 9.0  # the device still has its own copy
    model.copyNamedBuffersToDevice()
    assert float(model(x)) == 12.0  # b1 only: b2 is not updatable
    with pytest.raises(poptorch.Error, match="No named buffers marked as updatable"):
        _compiled(poptorch.inferenceModel(TwoBuffers())).copyNamedBuffersToDevice()
    with pytest.raises(poptorch.Error, match="'nope' is not a buffer of the model"):
        poptorch.inferenceModel(TwoBuffers(), poptorch.Options().updatableNamedBuffers(["nope"]))(x)


def _compiled(model):
    model(torch.ones(3))
    return model


def test_distributed_shuffle_changes_each_epoch_with_persistent_workers():
    opts = poptorch.Options().randomSeed(0)
    opts.Distributed.configureProcessId(1, 2)
    data = torch.utils.data.TensorDataset(torch.arange(64))
    loader = poptorch.DataLoader(opts, data, batch_size=8, shuffle=True, num_workers=1)
    epochs = [sorted(int(v) for (batch,) in loader for v in batch) for _ in range(3)]
    assert all(len(e) == 32 for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]


class Scale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(2))

    def forward(self, x):
        return poptorch.identity_loss((x * self.w).sum(), "none")


def test_float16_accumulators_choose_running_mean_reduction():
    running = poptorch.MeanReductionStrategy.Running
    model = Scale()
    sgd = poptorch.optim.SGD(model.parameters(), lr=0.1, accum_type=torch.float16)
    ex = poptorch.trainingModel(model, optimizer=sgd)
    assert ex.options.Training.meanAccumulationAndReplicationReductionStrategy == running
    ex.destroy()
    model = Scale()
    adam = poptorch.optim.Adam(model.parameters(), lr=0.1)
    ex = poptorch.trainingModel(model, optimizer=adam)
    ex.compile(torch.ones(1, 2))
    adam.accum_type = torch.float16
    with pytest.raises(ValueError, match="is already compiled"):
        ex.setOptimizer(adam)


def test_compile_hooks_and_the_ipu_limit():
    calls = []
    pre = poptorch.registerPreCompileHook(lambda: calls.append("pre"))
    post = poptorch.registerPostCompileHook(lambda: calls.append("post"))
    try:
        poptorch.inferenceModel(torch.nn.Linear(2, 2))(torch.ones(1, 2))
    finally:
        pre.remove()
        post.remove()
    poptorch.inferenceModel(torch.nn.Linear(2, 2))(torch.ones(1, 2))
    assert calls == ["pre", "post"]
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2), poptorch.Options().replicationFactor(128))
    with pytest.raises(poptorch.Error, match=r"Too many IPUs requested \(128\)\. Experiments that need more "
                                             r"than 64 IPUs require distributed execution"):
        model(torch.ones(128, 2))


def test_a_model_wrapped_for_training_can_still_be_saved_whole():
    import io

    model = Scale()
    ex = poptorch.trainingModel(model)
    ex(torch.ones(1, 2))
    buffer = io.BytesIO()
    torch.save(model, buffer)  # the model's destroy() handle is picklable
    buffer.seek(0)
    copy_ = torch.load(buffer, weights_only=False)
    assert torch.equal(copy_.w, model.w)
    copy_.destroy()  # bound to no executor: does nothing
    assert ex.isCompiled()
    model.destroy()
    assert not ex.isCompiled()
