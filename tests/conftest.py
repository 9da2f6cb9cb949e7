from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_reports"
FAKE_PVA = Path(__file__).resolve().parent / "fake_pva"


HANG_GUARD_SECONDS = 900
"""How long a test lets a popviz command run before calling it hung (not a speed limit)."""


def run_cli(*args: str, cwd: str | Path | None = None, env: dict[str, str] | None = None,
            timeout: float = HANG_GUARD_SECONDS) -> subprocess.CompletedProcess[str]:
    """Run the real CLI (``python -m popviz``) in a subprocess. ``timeout`` guards against a
    hang only (generous: a loaded 2-core machine runs a command many times slower than an idle
    one); reaching it fails the test saying so."""
    full_env = {**os.environ, "COLUMNS": "100", **(env or {})}
    try:
        return subprocess.run([sys.executable, "-m", "popviz", *args], cwd=cwd, env=full_env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang guard: popviz {' '.join(map(str, args))} still running after {timeout:.0f} s "
                    "(a limit for hangs, not for speed: is it stuck?)", pytrace=False)


def unwrapped(text: str) -> str:
    """``text`` with the lines popviz broke to fit the terminal joined again (a wrapped line's
    continuations are indented four columns more, a command's lines end in `` \\``:
    ``popviz.ui.wrap_line``, ``wrap_command``, ``wrap_code``)."""
    import re

    return re.sub(r"( \\)?\n(\s*)    (?=\S)", " ", text)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, exactly one message on stderr (its line wrapped at the terminal's width) naming
    what it must, no traceback; returns it on one line."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in unwrapped(proc.stderr.strip()).splitlines()
             if line not in ("popviz plot: reading the report and drawing its figures ...",
                             "popviz analyse: reading the report and writing the page ...")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="session")
def mnist_capture(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``popviz capture -o out --emulate`` of examples/mnist_pipeline.py for two training steps
    (of its ten: the same engines, options and per-call figures in a fifth of the time), made
    once per test process and shared: tests read it and write elsewhere. Returns the run
    directory and the finished capture."""
    tmp = tmp_path_factory.mktemp("mnist")
    proc = run_cli("capture", "-o", "out", "--emulate", "--", sys.executable, str(ROOT / "examples" / "mnist_pipeline.py"),
                   "--steps", "2", cwd=tmp, env={"OMP_NUM_THREADS": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return tmp / "out", proc


@pytest.fixture
def fake_pva_env() -> dict[str, str]:
    """Environment in which ``import pva`` finds the test double in tests/fake_pva."""
    return {"PYTHONPATH": os.pathsep.join([str(FAKE_PVA), os.environ.get("PYTHONPATH", "")])}
