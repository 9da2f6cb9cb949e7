"""Capture under faults, with real processes: popviz killed, children ignoring signals, big output,
forking children."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import hang_guard, run_cli

PY = sys.executable

WRITE_ENGINE_THEN_WAIT = (
    "import os, sys, time\n"
    "from popviz import testing\n"
    "from popviz.sources.bundle import write_bundle\n"
    "write_bundle(testing.pipeline_report([1000, 2000], tiles_per_ipu=8),"
    " os.path.join(os.environ['POPVIZ_CAPTURE_DIR'], 'training'))\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def start_capture(tmp_path: Path, code: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([PY, "-m", "popviz", "capture", "-o", "out", "--", PY, "-c", code],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)


def wait_ready(proc: subprocess.Popen[str]) -> None:
    line = proc.stdout.readline()
    assert line == "ready\n", (line, proc.stderr.read() if proc.poll() is not None else "")


def record(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "popviz-run.json").read_text())


def signal_and_wait(proc, sig: int) -> None:
    """Send ``sig`` to popviz once the child is ready, wait for the capture to end (killing the
    group if it hangs), and drain its output."""
    try:
        wait_ready(proc)
        os.kill(proc.pid, sig)
        proc.wait(timeout=hang_guard(60))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=hang_guard(30))


def test_killed_popviz_reads_as_interrupted_and_its_temp_dir_is_cleaned(tmp_path):
    proc = start_capture(tmp_path, WRITE_ENGINE_THEN_WAIT)
    try:
        wait_ready(proc)
        run = record(tmp_path)
        bootstrap = Path(run["environment"]["PYTHONPATH"].split(os.pathsep)[0])
        assert bootstrap.is_dir() and str(proc.pid) in bootstrap.name
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=hang_guard(30))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the orphaned child, in popviz's session
        proc.communicate(timeout=hang_guard(30))
    assert record(tmp_path)["status"] == "running"
    assert bootstrap.is_dir()
    out = run_cli("analyse", "--json", "out", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warnings = json.loads(out.stdout)["warnings"]
    assert len(warnings) == 1 and "capture was interrupted" in warnings[0]
    assert "popviz was killed" in warnings[0]
    console = run_cli("analyse", "out", cwd=tmp_path)
    assert "warning: popviz-run.json: the capture was interrupted" in " ".join(console.stdout.split())
    assert console.stdout.rstrip().endswith("1 input warning(s), shown at the top")
    md = run_cli("analyse", "--markdown", "out", cwd=tmp_path)
    assert "- ⚠️ **warning** popviz-run.json: the capture was interrupted" in md.stdout
    # the next capture removes the temp directory the killed one left
    again = run_cli("capture", "-o", "out2", "--", PY, "-c", "pass", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert not bootstrap.exists()


def test_a_child_ignoring_sigint_is_escalated_to_sigterm(tmp_path):
    code = ("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(120)")
    proc = start_capture(tmp_path, code, env={"POPVIZ_SIGNAL_GRACE_SECONDS": "0.5"})
    signal_and_wait(proc, signal.SIGINT)
    assert proc.returncode == 128 + signal.SIGTERM
    run = record(tmp_path)
    assert (run["status"], run["signal"]) == ("killed", "SIGTERM")
    assert run["signals_forwarded"] == ["SIGINT"] and run["signals_escalated"] == ["SIGTERM"]
    assert run["ended_at"] and run["duration_seconds"] > 0


def test_a_child_ignoring_sigint_and_sigterm_is_killed(tmp_path):
    code = ("import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)")
    proc = start_capture(tmp_path, code, env={"POPVIZ_SIGNAL_GRACE_SECONDS": "0.5"})
    signal_and_wait(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGKILL
    run = record(tmp_path)
    assert (run["status"], run["signal"]) == ("killed", "SIGKILL")
    assert run["signals_forwarded"] == ["SIGTERM"] and run["signals_escalated"] == ["SIGKILL"]


def test_100_mb_of_output_and_a_forking_child(tmp_path):
    code = ("import os, sys\n"
            "sys.stdout.buffer.write(b'x' * 100_000_000); sys.stdout.flush()\n"
            "pid = os.fork()\n"
            "if pid == 0:\n    print('grandchild', flush=True); os._exit(0)\n"
            "os.waitpid(pid, 0); print('parent', flush=True)\n")
    # a hang guard, not a speed limit (it was an asserted 240 s of wall-clock, which a loaded
    # machine can miss): the log of 100 MB must drain, not block the script
    proc = subprocess.run([PY, "-m", "popviz", "capture", "-o", "out", "--", PY, "-c", code],
                          cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=hang_guard(240))
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "out" / "capture.log").read_bytes()
    assert log.count(b"x") == 100_000_000
    assert b"grandchild\n" in log and b"parent\n" in log
    assert record(tmp_path)["status"] == "succeeded"


def test_sigterm_leaves_a_current_manifest(tmp_path):
    from test_capture_hooks import FAKE_ENV, NET

    code = NET + (
        "net = Net()\n"
        "model = poptorch.inferenceModel(net, poptorch.Options())\n"
        "for _ in range(7):\n"
        "    model(torch.randn(4, 4), torch.randint(0, 3, (4,)))\n"
        "print('ready', flush=True)\n"
        "import time; time.sleep(120)\n")
    proc = start_capture(tmp_path, code, env={**FAKE_ENV, "POPVIZ_SIGNAL_GRACE_SECONDS": f"{hang_guard(30):.0f}"})
    signal_and_wait(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM
    run = record(tmp_path)
    assert (run["status"], run["signal"], run["signals_forwarded"]) == ("killed", "SIGTERM", ["SIGTERM"])
    doc = json.loads((tmp_path / "out" / "inference" / "popviz-model.json").read_text())
    assert doc["status"] == "final"
    assert popviz_calls(tmp_path) == 7


def popviz_calls(tmp_path: Path) -> int:
    import popviz

    return popviz.load(tmp_path / "out")["inference"].host_io.calls
