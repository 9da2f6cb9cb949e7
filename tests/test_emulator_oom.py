"""A model whose estimate does not fit its IPUs fails to compile, as on a real IPU: poptorch.Error
with Poplar's out-of-memory message, and (with profiling on) a memory-only estimated report.

The model is sized for a Mk1 IPU (304 MiB, ``POPVIZ_EMULATOR_ARCH=Mk1``) to keep it small: five
2048x2048 linear layers trained with Adam and gradient accumulation hold 16 bytes per parameter
on IPU 0; a 2048x2 head sits alone on IPU 1.
"""

from __future__ import annotations

import json

import pytest

import popviz
from popviz.emulator import oom

from conftest import run_cli

torch = pytest.importorskip("torch")
import popviz.emulator as poptorch  # noqa: E402  (needs torch)

WIDTH, LAYERS = 2048, 5
IPU0_PARAMS = LAYERS * (WIDTH * WIDTH + WIDTH)  # 20,981,760
MK1_BYTES_PER_IPU = 1216 * 256 * 1024  # 318,767,104


class Wide(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS))
        self.head = torch.nn.Linear(WIDTH, 2)

    def forward(self, x, y):
        with poptorch.Block("body", ipu_id=0):
            for layer in self.body:
                x = torch.relu(layer(x))
        with poptorch.Block("head", ipu_id=1):
            out = self.head(x)
            return out, torch.nn.functional.mse_loss(out, y)


@pytest.fixture
def mk1(monkeypatch):
    monkeypatch.setenv("POPVIZ_EMULATOR_ARCH", "Mk1")
    monkeypatch.delenv("POPLAR_ENGINE_OPTIONS", raising=False)
    monkeypatch.delenv(oom.IGNORE_ENV, raising=False)


def _train(opts):
    torch.manual_seed(0)
    model = Wide()
    opts.Training.gradientAccumulation(3)
    executor = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.Adam(model.parameters()))
    return executor, (torch.randn(6, WIDTH), torch.randn(6, 2))


def test_out_of_memory_raises_and_writes_a_memory_only_report(mk1, tmp_path, capsys):
    executor, batch = _train(poptorch.Options().enableProfiling(str(tmp_path)))
    with pytest.raises(poptorch.Error) as info:
        executor(*batch)
    err = info.value
    report = popviz.load(tmp_path)["training"]
    ipu0 = report.memory.frame.set_index("ipu").loc[0]
    used, over = int(ipu0.total_bytes_including_gaps), int(ipu0.overflow_bytes)
    assert int(ipu0.cat_weights_bytes) == 4 * IPU0_PARAMS
    assert int(ipu0.cat_optimizerState_bytes) == 8 * IPU0_PARAMS  # Adam: two float32 moments
    assert int(ipu0.cat_gradientAccumulators_bytes) == 4 * IPU0_PARAMS
    assert over == used - MK1_BYTES_PER_IPU > 0
    assert int(report.memory.frame.set_index("ipu").loc[1].overflow_bytes) == 0

    assert type(err) is poptorch.Error and err.type == "popart_exception"
    assert err.message.splitlines() == [
        "Out of memory: Cannot fit all variable data onto one or more tiles.",
        f"Out of memory on IPU 0: {used:,} bytes used but IPUs only have 318,767,104 bytes of memory "
        f"(1,216 tiles x 262,144 bytes), exceeded by {over:,} bytes",
        "(estimated by popviz's emulator, per IPU: which tiles overflow is not modelled; set "
        "POPVIZ_EMULATOR_IGNORE_OOM=1 to run the model anyway)",
        f"The memory-only estimated report is in {tmp_path.resolve() / 'training'}",
    ]
    assert str(err).startswith("'popart_exception': Out of memory: Cannot fit")
    assert not executor.isCompiled()

    assert report.execution is None and report.provenance.estimated
    assert report.provenance.notes[-1] == oom.NOTE
    assert report.host_io.calls == 0
    proc = run_cli("analyse", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    findings = json.loads(proc.stdout)["engines"][0]["findings"]
    assert [(f["code"], f["title"]) for f in findings if f["analysis"] == "memory"] == [
        ("MEM001", "IPU0 is out of memory"),
        ("MEM006", "IPU0 overflows at liveness step 17 (body.0, stage0/forward)"),
        ("MEM004", "Memory unevenly spread: IPU0 is under pressure, IPU1 is not")]
    # the estimated liveness peaks at the memory table's bytes (stash at full depth + temporaries)
    mem006 = next(f for f in findings if f["code"] == "MEM006")
    assert f"IPU0 needs {used:,} B" in mem006["evidence"] and "(estimated)" in mem006["evidence"]
    mem001 = next(f for f in findings if f["code"] == "MEM001")
    assert mem001["evidence"].startswith(f"IPU0 needs {used:,} B")
    assert f"{over:,} B" in mem001["evidence"]


def test_without_profiling_or_with_allow_out_of_memory_false_nothing_is_written(mk1, tmp_path, monkeypatch):
    executor, batch = _train(poptorch.Options())
    with pytest.raises(poptorch.Error, match="Out of memory on IPU 0: ") as info:
        executor(*batch)
    assert "memory-only estimated report" not in info.value.message

    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps({
        "autoReport.all": "true", "autoReport.directory": str(tmp_path), "debug.allowOutOfMemory": "false"}))
    executor, batch = _train(poptorch.Options())
    with pytest.raises(poptorch.Error, match="Cannot fit all variable data"):
        executor(*batch)
    assert list(tmp_path.iterdir()) == []


def test_ignore_oom_runs_the_model_and_the_report_still_says_it_does_not_fit(mk1, tmp_path, monkeypatch):
    monkeypatch.setenv(oom.IGNORE_ENV, "1")
    executor, batch = _train(poptorch.Options().enableProfiling(str(tmp_path)))
    out, loss = executor(*batch)
    assert loss.dim() == 0
    assert out.shape == (2, 2) and executor.isCompiled()
    executor.destroy()
    report = popviz.load(tmp_path)["training"]
    assert report.execution is not None and report.host_io.calls == 1
    assert int(report.memory.frame.set_index("ipu").loc[0].overflow_bytes) > 0
    assert oom.NOTE not in report.provenance.notes


def test_a_model_that_fits_is_unaffected(mk1, tmp_path):
    model = torch.nn.Linear(WIDTH, 2)
    executor = poptorch.inferenceModel(model, poptorch.Options().enableProfiling(str(tmp_path)))
    assert executor(torch.ones(1, WIDTH)).shape == (1, 2)
    assert oom.overflowing(executor.popvizEstimate()) == []


def test_a_model_name_with_separators_stays_under_the_report_directory(mk1, tmp_path):
    reports = tmp_path / "reports"
    executor, batch = _train(poptorch.Options().modelName("../escape").enableProfiling(str(reports)))
    with pytest.raises(poptorch.Error, match="Cannot fit all variable data"):
        executor(*batch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]
    assert [p.name for p in reports.iterdir()] == ["_escape"]
    assert popviz.load(reports)["../escape"].execution is None


def test_poptorch_errors_print_as_poptorchs_and_still_pickle():
    """A traceback of an out-of-memory compile names PopTorch's class, not the emulator's module;
    the errors still pickle (e.g. from a DataLoader worker) where poptorch is not importable."""
    import pickle
    import traceback

    from popviz.emulator.errors import CPP_ERROR, Error, UnrecoverableError

    try:
        raise Error("Out of memory", type=CPP_ERROR)
    except Error as exc:
        last = traceback.format_exception(exc)[-1]
    assert last == "poptorch.poptorch_core.Error: 'poptorch_cpp_error': Out of memory\n"
    again = pickle.loads(pickle.dumps(UnrecoverableError("gone", type="t", location="here")))
    assert (type(again), again.message, again.type, again.location) == (UnrecoverableError, "gone", "t", "here")
