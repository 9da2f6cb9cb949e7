"""Estimated reports are written whatever the script's numpy (popviz/emulator/report_writer.py):
a script whose interpreter cannot write Parquet (numpy 1 beside a pyarrow built for numpy 2, as
with Lightning 1.9 or optimum 1.6.1) gets its report from popviz's own interpreter; a report
that cannot be written at all stops the script with one line and exit code 2."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import popviz  # noqa: E402
from popviz.emulator import report_writer  # noqa: E402
from popviz.sources.bundle import read_bundle  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import torch, poptorch
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    opts = poptorch.Options().deviceIterations(2)
    opts.enableProfiling({out!r})
    ex = poptorch.inferenceModel(model, opts)
    ex(torch.randn(4, 8))
    print("done")
""")


def _run(tmp_path: Path, env: dict[str, str], python: str = sys.executable) -> subprocess.CompletedProcess:
    script = tmp_path / "infer.py"
    script.write_text(SCRIPT.format(out=str(tmp_path / "reports")), encoding="utf-8")
    return subprocess.run([python, str(script)], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)


def _emulated(extra: dict[str, str]) -> dict[str, str]:
    from popviz.emulator.launch import emulated_env

    env = emulated_env({k: v for k, v in os.environ.items() if k != report_writer.PYTHON_ENV})
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def _broken_pyarrow(tmp_path: Path) -> str:
    """A directory that makes ``import pyarrow`` fail as a numpy-2 pyarrow does under numpy 1."""
    stand_in = tmp_path / "numpy1"
    (stand_in / "pyarrow").mkdir(parents=True)
    (stand_in / "pyarrow" / "__init__.py").write_text(
        'raise ImportError("pyarrow requires NumPy 2.0 or newer (test stand-in for a numpy-1 client)")\n',
        encoding="utf-8")
    return str(stand_in)


def _without_pyarrow(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    parts = env["PYTHONPATH"].split(os.pathsep)  # the shim first, then the stand-in
    return {**env, "PYTHONPATH": os.pathsep.join([parts[0], _broken_pyarrow(tmp_path), *parts[1:]])}


def test_the_report_is_written_by_popvizs_interpreter_when_the_scripts_cannot(tmp_path):
    (tmp_path / "numpy1").mkdir()
    proc = _run(tmp_path / "numpy1", _without_pyarrow(tmp_path, _emulated({})))
    assert proc.returncode == 0, proc.stderr
    assert "done" in proc.stdout and "could not write" not in proc.stderr
    report = read_bundle(tmp_path / "numpy1" / "reports" / "inference")
    assert report.provenance.estimated and report.name == "inference"
    # the same report as one written in-process: the tables' values and dtypes survive the trip
    (tmp_path / "direct").mkdir()
    proc = _run(tmp_path / "direct", _emulated({}))
    assert proc.returncode == 0, proc.stderr
    same = read_bundle(tmp_path / "direct" / "reports" / "inference")
    assert len(report.execution.steps) == len(same.execution.steps) > 0
    assert report.memory.frame.equals(same.memory.frame)
    assert report.execution.steps.equals(same.execution.steps)
    assert report.execution.runs.drop(columns="duration_seconds").equals(
        same.execution.runs.drop(columns="duration_seconds"))
    # (the options differ in the run's own paths and times only)
    assert dataclasses.replace(report.config, options={}) == dataclasses.replace(same.config, options={})
    assert report.config.options["emulator"]["blocks"] == same.config.options["emulator"]["blocks"]
    assert report.target == same.target


def test_a_report_that_cannot_be_written_is_one_error_line_and_exit_2(tmp_path):
    env = _without_pyarrow(tmp_path, _emulated({}))
    env.pop(report_writer.PYTHON_ENV)
    proc = _run(tmp_path, env)
    assert proc.returncode == 2
    from conftest import unwrapped

    errors = [line for line in unwrapped(proc.stderr).splitlines() if line.startswith("popviz: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "could not write the estimated report to" in errors[0]
    assert "ImportError: pyarrow requires NumPy 2.0 or newer" in errors[0]
    assert "POPVIZ_PYTHON is not set" in errors[0]
    assert "done" not in proc.stdout


NUMPY1_VENV = os.environ.get("POPVIZ_TEST_NUMPY1_PYTHON")


@pytest.mark.slow
def test_a_numpy_1_client_gets_a_report(tmp_path):
    """A real numpy-1 environment: a venv over this interpreter's packages (torch 2.13 CPU, a
    pyarrow built for numpy 2) with numpy<2 and a pandas that imports with it installed into it,
    as a Lightning 1.9 client has; ``POPVIZ_TEST_NUMPY1_PYTHON`` names a ready one (else it is
    built, a minute or two)."""
    python = NUMPY1_VENV
    if not python:
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True,
                       timeout=300)
        python = str(venv / "bin" / "python")
        # "--system-site-packages" from inside a venv (CI's) gives the base interpreter's packages,
        # not this environment's torch and pyarrow: add this environment's site directories after
        # the new venv's own (so its numpy 1 comes first), their .pth files processed too
        import sysconfig

        here = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
        own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, timeout=120).stdout.strip()
        Path(own, "zz_popviz_test_parent.pth").write_text(
            "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in here) + "\n", encoding="utf-8")
        pip = subprocess.run([python, "-m", "pip", "install", "-q", "numpy<2", "pandas<2.3"], capture_output=True,
                             text=True, timeout=900)
        if pip.returncode != 0:
            pytest.skip(f"numpy<2 does not install here: {pip.stderr.strip().splitlines()[-1:]}")
    check = subprocess.run([python, "-c", "import numpy; print(numpy.__version__)"], capture_output=True,
                           text=True, timeout=120)
    assert check.stdout.startswith("1."), check
    # the case itself: this pyarrow does not import beside numpy 1
    arrow = subprocess.run([python, "-c", "import pyarrow"], capture_output=True, text=True, timeout=120)
    if arrow.returncode == 0:
        pytest.skip("pyarrow imports with numpy 1 here: nothing to write elsewhere")
    out = tmp_path / "cap"
    script = tmp_path / "infer.py"
    script.write_text(SCRIPT.format(out="unused"), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "popviz", "capture", "-o", str(out), "--emulate", "--",
                           python, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    summary = " ".join(proc.stderr.split())
    assert "popviz bundle" in summary and "no profile" not in summary, summary
    (report,) = popviz.load(out)
    assert report.provenance.estimated and len(report.execution.steps) > 0
