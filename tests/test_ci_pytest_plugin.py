"""popviz's pytest plugin through pytester: found through its pytest11 entry point (no -p), the
popviz_capture fixture under the emulator, budgets, baselines (missing, written with
--popviz-update-baselines, then a teammate's change failing with compare's table)."""

from __future__ import annotations

import json
import textwrap
from importlib.metadata import entry_points

import pytest

pytest_plugins = ["pytester"]

MODEL = textwrap.dedent('''
    import pytest
    import torch
    import poptorch

    HIDDEN = {hidden}


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(64, HIDDEN)
            self.b = torch.nn.Linear(HIDDEN, 4)

        def forward(self, x):
            with poptorch.Block("first", ipu_id=0):
                x = torch.relu(self.a(x))
            with poptorch.Block("second", ipu_id=1):
                return self.b(x)


    def run_model():
        opts = poptorch.Options().deviceIterations(4)
        opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.Stage("first").ipu(0),
                                                              poptorch.Stage("second").ipu(1)))
        model = poptorch.inferenceModel(Net(), opts)
        for _ in range(2):
            model(torch.randn(8, 64))


    def test_reports(popviz_capture):
        run_model()
        reports = popviz_capture.reports()
        [inference] = reports
        assert (inference.name, inference.provenance.estimated) == ("inference", True)
        assert inference.config.device_iterations == 4
        assert [(s.ipu, s.blocks) for s in inference.config.stages] == [(0, ("first",)), (1, ("second",))]
        assert inference.host_io.calls == 2


    @pytest.mark.popviz(budgets={{"memory.*.used_pct": "<= 85"}}, baseline=True)
    def test_within_budget_and_baseline():
        run_model()


    @pytest.mark.popviz(budgets={{"pipeline.imbalance_ratio": "<= 1.0"}})
    def test_budget_broken():
        run_model()


    def test_nothing_captured(popviz_capture):
        popviz_capture.reports()


    @pytest.mark.popviz(budgets={{"pipline.imbalance_ratio": "<= 1.0"}})
    def test_budget_typo():
        run_model()
''')


def test_registered_through_the_pytest11_entry_point():
    [ep] = [e for e in entry_points(group="pytest11") if e.name == "popviz"]
    assert ep.value == "popviz.ci.pytest_plugin"


def test_help_lists_the_options_without_importing_heavy_modules(pytester):
    pytester.makeconftest('''
        import sys
        def pytest_configure(config):
            heavy = [m for m in ("torch", "pandas", "rich", "popviz.analysis") if m in sys.modules]
            print("HEAVY", heavy)
    ''')
    result = pytester.runpytest_subprocess("--help", "-s")
    result.stdout.fnmatch_lines(["*--popviz-update-baselines*", "*--popviz-emulate*", "*popviz_emulate*"])
    result.stdout.fnmatch_lines(["HEAVY []"])


def outcomes(result) -> dict[str, int]:
    return {k: v for k, v in result.parseoutcomes().items() if k in ("passed", "failed", "errors")}


@pytest.mark.slow  # four inner pytest runs, each capturing under the emulator
@pytest.mark.timeout(600)
def test_fixture_budgets_and_baselines_under_the_emulator(pytester):
    pytest.importorskip("torch")
    pytester.makepyfile(test_model=MODEL.format(hidden=64), test_other=MODEL.format(hidden=64))
    env_args = ("--popviz-emulate", "-p", "no:cacheprovider")
    first = pytester.runpytest_subprocess(*env_args, "test_model.py")
    assert outcomes(first) == {"passed": 1, "failed": 4}, first.stdout.str()
    assert "Traceback" not in first.stdout.str() and "check_budgets" not in first.stdout.str()
    first.stdout.fnmatch_lines(["*_ test_budget_typo _*", "popviz: budget pipline.imbalance_ratio matches no metric*"])
    first.stdout.fnmatch_lines([
        "*_ test_within_budget_and_baseline _*",
        "popviz: no baseline popviz_baselines/test_model.test_within_budget_and_baseline.json; run pytest "
        "--popviz-update-baselines to write it, then commit it",
    ])
    first.stdout.fnmatch_lines([
        "*_ test_budget_broken _*",
        "popviz: FAIL: budget broken: inference pipeline.imbalance_ratio = 1.017 (budget <= 1.0)",
        "engine*metric*value*budget*verdict*",
        "inference*pipeline.imbalance_ratio*1.017*<= 1.0*broken*",
    ])
    first.stdout.fnmatch_lines(["*_ test_nothing_captured _*",
                                "popviz: no report to check: *this capture recorded no engine*"])

    # under pytest-xdist the workers write, and the controller lists what they wrote
    update = pytester.runpytest_subprocess(*env_args, "--popviz-update-baselines", "-k", "baseline", "-n", "2")
    assert outcomes(update) == {"passed": 2}, update.stdout.str()
    update.stdout.fnmatch_lines(["popviz: wrote 2 baseline(s); commit them:",
                                 "  popviz_baselines/test_model.test_within_budget_and_baseline.json",
                                 "  popviz_baselines/test_other.test_within_budget_and_baseline.json"])
    saved = json.loads((pytester.path / "popviz_baselines" / "test_model.test_within_budget_and_baseline.json")
                       .read_text())
    assert saved["format"] == "popviz-baseline"
    [engine] = saved["engines"]
    assert (engine["name"], engine["provenance"]["estimated"], engine["config"]["device_iterations"]) == (
        "inference", True, 4)
    m = engine["metrics"]
    # the emulator's calibrated model (docs/emulator.md, per-operation costs): Linear + ReLU on IPU0
    # (35,201 cycles), Linear on IPU1 (34,000): tiny operations cost their fixed overheads
    assert (m["pipeline.stage0.cycles_per_micro_batch"], m["pipeline.stage1.cycles_per_micro_batch"]) == (
        35201, 34000)
    assert m["pipeline.imbalance_ratio"] == 35201 / ((35201 + 34000) / 2)
    assert (m["host_io.input_bytes_per_call"], m["host_io.output_bytes_per_call"]) == (4 * 2 * 64 * 4, 4 * 2 * 4 * 4)

    # a teammate widens the hidden layer 64 -> 4096 in test_model.py: its committed baseline catches
    # it; test_other.py, unchanged, still matches its own
    pytester.makepyfile(test_model=MODEL.format(hidden=4096))
    wider = pytester.runpytest_subprocess(*env_args, "-k", "baseline")
    assert outcomes(wider) == {"passed": 1, "failed": 1}, wider.stdout.str()
    wider.stdout.fnmatch_lines(["*_ test_within_budget_and_baseline _*",
        # the wider matmul is still far below the calibrated model's fixed per-operation costs, so
        # the whole call's cycles and IPU0's memory are what regress past the 1% threshold
        "popviz: FAIL: regression in inference pipeline.call_cycles_per_micro_batch (63,048 → *",
        "inference*",
        "metric*base*new*change*threshold*verdict*",
        "memory.ipu0.used_bytes*regressed*",
    ])
    assert "FAILED test_model.py::test_within_budget_and_baseline" in wider.stdout.str()
