"""The samples' scripts estimated with `popviz capture --emulate --calls 1`: the fake-tensor trace
(the default) gives the same report as the real trace (POPVIZ_EMULATOR_TRACE=real), everything
`popviz analyse --json` shows but times and paths; real subprocesses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_samples_captured import REGEN, _differences, _stable

from conftest import ROOT, run_cli

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # a few minutes: every sample's script captured twice, two whole runs twice


def capture(sample, trace: str, into: Path) -> tuple[dict, str]:
    out = into / trace
    env = {"OMP_NUM_THREADS": "1", "POPVIZ_EMULATOR_TRACE": trace, **sample.env}
    proc = run_cli("capture", "-o", str(out), "--emulate", "--calls", "1", "--", sys.executable, sample.script,
                   *sample.args, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == sample.expect_exit, proc.stderr
    analysis = run_cli("analyse", str(out), "--json")
    assert analysis.returncode == 0, analysis.stderr
    return _stable(json.loads(analysis.stdout)), proc.stderr


@pytest.mark.parametrize("sample", [s.name for s in REGEN.SAMPLES])
def test_fake_trace_gives_the_real_traces_report(sample, tmp_path):
    chosen = next(s for s in REGEN.SAMPLES if s.name == sample)
    reason = REGEN.available(chosen)
    if reason:
        pytest.skip(f"{sample}: {reason}")
    real, _ = capture(chosen, "real", tmp_path)
    faked, log = capture(chosen, "auto", tmp_path)
    assert "the fake-tensor trace stopped" not in log  # no fallback
    assert _differences(faked, real) == []
    assert [e["name"] for e in faked["engines"]] == [e["name"] for e in real["engines"]] != []


@pytest.mark.parametrize("sample", ["mnist_pipeline", "cnn_replicated"])
def test_whole_runs_with_every_compilation_faked_give_the_real_traces_capture(sample, tmp_path, monkeypatch):
    """POPVIZ_EMULATOR_TRACE=fake: every compilation traces with fake tensors, also when its call
    then runs for real; the whole capture (block summary included: its parameters counted once,
    not once per fake and once per real tensor) is the real trace's."""
    from test_samples_captured import _analysis

    analyses = []
    for trace in ("real", "fake"):
        monkeypatch.setenv("POPVIZ_EMULATOR_TRACE", trace)
        REGEN.regenerate([sample], tmp_path / trace)
        analyses.append(_analysis(tmp_path / trace / sample))
    assert _differences(analyses[1], analyses[0]) == []
    assert [e["name"] for e in analyses[0]["engines"]] == [e["name"] for e in analyses[1]["engines"]] != []
