"""`popviz emulate` and `emulated_env`: the emulator is poptorch only in the child asked for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from popviz.emulator.launch import SHIM_DIR, emulated_env

from conftest import ROOT, assert_one_line_error, run_cli, unwrapped


def test_emulated_env_prepends_shim_and_keeps_user_path():
    env = emulated_env({"PYTHONPATH": "/a" + os.pathsep + "/b", "HOME": "/h"})
    assert env == {"PYTHONPATH": os.pathsep.join([str(SHIM_DIR), "/a", "/b"]), "HOME": "/h",
                   "POPVIZ_PYTHON": sys.executable}  # where the report is written whatever the numpy
    assert emulated_env({}) == {"PYTHONPATH": str(SHIM_DIR), "POPVIZ_PYTHON": sys.executable}
    assert emulated_env(env) == env  # idempotent


def test_emulated_env_does_not_touch_its_argument():
    original = {"PYTHONPATH": "/a"}
    emulated_env(original)
    assert original == {"PYTHONPATH": "/a"}


def test_child_imports_emulator_as_poptorch_and_exit_code_passes_through():
    code = ("import poptorch, sys; print(poptorch.__version__); "
            "print(poptorch.Error is poptorch.poptorch_core.Error); sys.exit(7)")
    proc = run_cli("emulate", "--", sys.executable, "-c", code)
    assert proc.returncode == 7, proc.stderr
    version, same_error = proc.stdout.split()
    assert "popviz.emulator" in version and same_error == "True"


def test_poptorch_is_not_importable_without_emulate():
    proc = subprocess.run([sys.executable, "-c", "import poptorch"], capture_output=True, text=True)
    assert proc.returncode == 1 and "No module named 'poptorch'" in proc.stderr


def test_missing_or_unknown_command_is_one_line_error():
    assert_one_line_error(run_cli("emulate"), "no command given")
    assert_one_line_error(run_cli("emulate", "--"), "no command given")
    assert_one_line_error(run_cli("emulate", "--", "popviz-no-such-command"),
                          "popviz-no-such-command: command not found")


def test_sigterm_is_forwarded_and_child_code_returned(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(
        "import signal, sys, time\n"
        "def bye(signum, frame):\n"
        "    print('child got', signal.Signals(signum).name, flush=True)\n"
        "    sys.exit(5)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "popviz", "emulate", "--", sys.executable, str(script)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, stdin=subprocess.DEVNULL)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert out.strip() == "child got SIGTERM"
    assert proc.returncode == 5


def test_child_killed_by_signal_gives_128_plus_n():
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    proc = run_cli("emulate", "--", sys.executable, "-c", code)
    assert proc.returncode == 128 + signal.SIGKILL


def test_launch_and_emulate_command_do_not_import_torch():
    code = ("import sys; import popviz.emulator.launch, popviz.commands.emulate, popviz.emulator.costmodel; "
            "print([m for m in ('torch', 'pandas', 'pyarrow') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_missing_torch_is_a_one_line_error_before_the_child_starts(monkeypatch):
    import importlib.util

    import pytest

    from popviz.emulator import launch
    from popviz.errors import MissingDependencyError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(MissingDependencyError, match=r"needs PyTorch, which is not installed in .*"
                                                     r"pip install torch==2\.13\.0"):
        launch.check_command([sys.executable, "train.py"], os.environ)
    # another interpreter is not ours to judge: its own import error will speak
    launch.check_torch_for("/bin/sh")


def test_emulate_calls_1_without_profiling_says_no_report_is_written(tmp_path):
    """Was: "reports are written as it exits" although profiling was off and none was."""
    pytest.importorskip("torch")
    code = ("import torch, poptorch\n"
            "m = poptorch.inferenceModel(torch.nn.Linear(4, 4))\n"
            "m(torch.randn(2, 4))\n")
    proc = run_cli("emulate", "--calls", "1", "--", sys.executable, "-c", code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert unwrapped(proc.stderr).splitlines()[-1] == (
        "popviz emulator: 'inference': call 1 of 1 estimated, not run; stopping the script (--calls 1); profiling "
        "is off, so no report is written (enable it with opts.enableProfiling(DIR), or run popviz capture --emulate)")
    assert list(tmp_path.iterdir()) == []
