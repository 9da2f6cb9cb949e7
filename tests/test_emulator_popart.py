"""The emulator's ``popart`` stand-in: PopART's enums with PopART's Python names and C++ values
(``willow/include/popart/sessionoptions.hpp``, bound in ``python/popart/popart_core/popart.cpp``),
recorded by ``opts._Popart.set`` as the integers PopART takes; importable only in emulated runs,
never shadowing a real PopART; and a script whose directory holds a ``popviz/`` folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from popviz.emulator import popart_enums as popart

from conftest import run_cli


def test_enums_have_poparts_names_and_values():
    # sessionoptions.hpp: enum class RecomputationType { None = 0, Standard, NormOnly, Pipeline,
    # RecomputeAll, N }; popart.cpp binds None as "NoRecompute".
    assert [(m.name, m.value) for m in popart.RecomputationType] == [
        ("NoRecompute", 0), ("Standard", 1), ("NormOnly", 2), ("Pipeline", 3), ("RecomputeAll", 4)]
    # MergeVarUpdateType { None = 0, All, AutoLoose, AutoTight }, None bound as "Off".
    assert [(m.name, m.value) for m in popart.MergeVarUpdateType] == [
        ("Off", 0), ("All", 1), ("AutoLoose", 2), ("AutoTight", 3)]
    assert popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized == 3
    assert popart.SubgraphCopyingStrategy.JustInTime == 1
    assert popart.SyntheticDataMode.RandomNormal == 2
    assert popart.BatchSerializationBatchSchedule.Isomorphic == 1
    assert popart.ReductionType.NoReduction == 2
    assert (popart.DataType.FLOAT, popart.DataType.FLOAT16, popart.DataType.UNDEFINED) == (11, 12, 18)
    assert popart.CommGroupType.Ungrouped == 3 and popart.TensorStorage.OffChip == 1
    assert "RecomputationType" in popart.__all__ and "IntEnum" not in popart.__all__


def test_popart_set_records_enum_members_as_poparts_integers():
    import popviz.emulator as poptorch

    opts = poptorch.Options()
    opts._Popart.set("autoRecomputation", popart.RecomputationType.Pipeline)
    opts._Popart.set("syntheticDataMode", int(popart.SyntheticDataMode.RandomNormal))
    opts._Popart.set("accumulateOuterFragmentSettings.schedule",
                     popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized)
    recorded = opts.toDict()
    assert recorded["_Popart.autoRecomputation"] == 3
    assert type(opts._Popart.options["autoRecomputation"]) is int
    assert recorded["_Popart.syntheticDataMode"] == 2 and opts.synthetic_data
    assert recorded["_Popart.accumulateOuterFragmentSettings.schedule"] == 3
    # PopTorch's own documented way (options.py: `set("autoRecomputation", 3)`) is the same record.
    other = poptorch.Options()
    other._Popart.set("autoRecomputation", 3)
    assert other.toDict()["_Popart.autoRecomputation"] == 3
    # and through PopTorch's JSON form (options.py from_json: '{"_Popart.set":["OptionName", 1]}'),
    # which POPTORCH_DEFAULT_OPTIONS holds
    assert poptorch.Options().from_json('{"_Popart.set": ["autoRecomputation", 4]}').toDict()[
        "_Popart.autoRecomputation"] == 4


def test_popart_is_only_importable_in_emulated_runs():
    plain = subprocess.run([sys.executable, "-c", "import popart"], capture_output=True, text=True)
    assert plain.returncode == 1 and "No module named 'popart'" in plain.stderr
    code = ("import popart, poptorch; o = poptorch.Options(); "
            "o._Popart.set('autoRecomputation', popart.RecomputationType.RecomputeAll); "
            "print(popart.__name__, o._Popart.options['autoRecomputation'])")
    proc = run_cli("emulate", "--", sys.executable, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["popart", "4"]


def test_a_real_popart_on_the_path_is_never_shadowed(tmp_path):
    real = tmp_path / "sdk" / "popart"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("ORIGIN = 'sdk'\n")
    proc = run_cli("emulate", "--", sys.executable, "-c", "import popart; print(popart.ORIGIN)",
                   env={"PYTHONPATH": str(tmp_path / "sdk")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "sdk"


@pytest.mark.parametrize("regular_package", [False, True])
def test_a_popviz_folder_beside_the_script_does_not_hide_the_emulator(tmp_path, regular_package):
    (tmp_path / "popviz").mkdir()
    if regular_package:
        (tmp_path / "popviz" / "__init__.py").write_text("raise ImportError('the wrong popviz')\n")
    script = tmp_path / "s.py"
    script.write_text("import poptorch, popdist, popart\n"
                      "print(poptorch.__version__.split('+')[1], popart.SyntheticDataMode.Zeros.value)\n")
    # The console script, run from that directory, as a user would (``python -m popviz`` there
    # would import the folder as popviz itself).
    console = Path(sys.executable).with_name("popviz")
    if not console.exists():
        pytest.skip("popviz console script not installed beside this Python")
    proc = subprocess.run([str(console), "emulate", "--", sys.executable, "s.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[1] == "1" and proc.stdout.startswith("popviz.emulator")
    assert json.dumps(proc.stdout)  # printable


def test_popart_enums_reach_the_cost_model():
    """``autoRecomputation`` and ``syntheticDataMode`` set with the stand-in's enums are what the
    estimate uses (recomputation: popviz/emulator/recompute.py; synthetic data: no host input)."""
    import torch

    import popviz.emulator as poptorch

    def estimate(**popart_options):
        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lin = torch.nn.Linear(64, 64)

            def forward(self, x):
                return poptorch.identity_loss(self.lin(x).pow(2).mean(), reduction="none")

        opts = poptorch.Options()
        for key, value in popart_options.items():
            opts._Popart.set(key, value)
        executor = poptorch.trainingModel(Model(), opts)
        executor.compile(torch.randn(4, 64))
        report, cycles = executor.popvizReport(), executor.popvizEstimate().call_cycles
        executor.destroy()
        return report, cycles

    recomputed, _ = estimate(autoRecomputation=popart.RecomputationType.RecomputeAll)
    assert any(n.startswith("Recomputation: RecomputeAll") for n in recomputed.provenance.notes)
    _, streamed = estimate()
    synthetic, no_host_input = estimate(syntheticDataMode=popart.SyntheticDataMode.RandomNormal)
    assert synthetic.cfg.options["_Popart.syntheticDataMode"] == 2
    assert no_host_input < streamed  # no input copied from the host
