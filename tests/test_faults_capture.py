"""Fault injection on `popviz capture`, with real processes: its log filling the disk, a script
that fills the disk, SIGKILL and SIGINT at chosen moments (an engine built and never called, a
bundle whose metadata was never written). Each case asserts the exit code, the message, the run
record and what `popviz analyse` then says. Timeouts only guard against a hang."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from faults_util import HANG_GUARD_SECONDS, PY, tmpfs
from test_capture_hooks import FAKE_ENV, NET

from conftest import assert_one_line_error, hang_guard, run_cli, unwrapped

NO_SPACE = "No space left on device"

SPAM = ("import sys\n"
        "for i in range(40):\n"
        "    sys.stdout.write('line %d ' % i + 'x' * 100_000 + '\\n'); sys.stdout.flush()\n"
        "print('done', flush=True)\n")


FILL_THIS_DISK = (
    "import os\n"
    "st = os.statvfs('.')\n"
    "assert st.f_blocks * st.f_frsize <= 8 * 2**20, 'not the small test file system: refusing to fill it'\n"
    "fd = os.open('hog', os.O_WRONLY | os.O_CREAT)\n"
    "try:\n"
    "    while True: os.write(fd, bytes(65536))\n"
    "except OSError: pass\n")
"""The script's own writes fill the file system of its working directory (the test's 2 MiB tmpfs,
checked first: never a real disk)."""


@pytest.fixture
def full(tmp_path):
    with tmpfs(tmp_path / "fs") as mount:
        yield mount


def capture(cwd: Path, code: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "popviz", "capture", *extra, "-o", "run", "--", PY, "-c", code], cwd=cwd,
                          capture_output=True, text=True, timeout=HANG_GUARD_SECONDS,
                          env={**os.environ, "COLUMNS": "100", **(env or {})})


def record(run: Path) -> dict:
    return json.loads((run / "popviz-run.json").read_text())


def test_a_log_that_fills_the_disk_neither_hangs_nor_stops_the_script(full):
    proc = capture(full, SPAM)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.count("\n") == 41 and proc.stdout.endswith("done\n")  # all of it shown
    lines = unwrapped(proc.stderr.strip()).splitlines()  # lines broken between words at 100 columns
    assert f"popviz capture: run/capture.log cannot be written ({NO_SPACE}) after" in unwrapped(proc.stderr)
    assert "the script keeps running" in proc.stderr
    assert lines[-1].startswith(f"popviz: error: run/capture.log: cannot be written ({NO_SPACE}) after ")
    run = record(full / "run")
    assert (run["status"], run["ended"], run["exit_code"], run["popviz_exit_code"]) == ("succeeded", "disk full", 0, 2)
    [error] = run["write_errors"]
    assert (error["path"], error["error"]) == ("capture.log", NO_SPACE)
    log = (full / "run" / "capture.log").read_bytes()
    assert len(log) == error["bytes_written"]  # cut back to its last whole write
    assert not (full / "run" / ".popviz-run.reserve").exists()


def test_a_script_that_fills_the_disk_still_gets_its_run_ended(full):
    code = FILL_THIS_DISK
    proc = capture(full, code)
    assert proc.returncode == 0, proc.stderr
    run = record(full / "run")  # written in the space set aside when the run started
    assert (run["status"], run["ended"], run["write_errors"]) == ("succeeded", "completed", [])
    assert run["ended_at"] and not (full / "run" / ".popviz-run.reserve").exists()


def test_hooks_that_cannot_save_their_record_are_not_a_never_called_engine(full):
    code = NET + (
        "import os\n"
        "model = poptorch.inferenceModel(Net(), poptorch.Options())\n"
        "model(torch.randn(4, 4), torch.randint(0, 3, (4,)))\n"
        + FILL_THIS_DISK +
        "for _ in range(3):\n"
        "    model(torch.randn(4, 4), torch.randint(0, 3, (4,)))\n")
    proc = capture(full, code, env=FAKE_ENV)
    assert proc.returncode == 2, proc.stderr
    assert "NEVER CALLED" not in proc.stderr
    assert "record not finalised: counts stop at its last update" in " ".join(proc.stderr.split())
    last = unwrapped(proc.stderr.strip()).splitlines()[-1]  # the first thing that could not be saved
    assert last.startswith("popviz: error: run/") and NO_SPACE in last, last
    run = record(full / "run")
    assert run["ended"] == "disk full" and run["exit_code"] == 0
    assert {"path": "inference/popviz-model.json", "bytes_written": None,
            "error": f"not finalised ({NO_SPACE})"} in run["write_errors"]
    (full / "hog").unlink()
    out = run_cli("analyse", "--json", "run", cwd=full, timeout=HANG_GUARD_SECONDS)
    assert out.returncode == 0, out.stderr
    [warning] = [w for w in json.loads(out.stdout)["warnings"] if "the capture ended with a disk full" in w]
    assert "inference/popviz-model.json" in warning and "could not be saved whole" in warning


ZERO_CALLS = NET + ("model = poptorch.inferenceModel(Net(), poptorch.Options())\n"
                    "print('ready', flush=True)\n"
                    "import time; time.sleep(600)\n")


def start(tmp_path: Path, code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    proc = subprocess.Popen([PY, "-m", "popviz", "capture", "-o", "run", "--", PY, "-c", code], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env}, start_new_session=True)
    line = proc.stdout.readline()
    assert line == "ready\n", (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def no_run001(tmp_path: Path) -> dict:
    out = run_cli("analyse", "--json", "--fail-on", "error", "run", cwd=tmp_path, timeout=HANG_GUARD_SECONDS)
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert "RUN001" not in out.stdout
    return doc


def test_sigkill_of_the_whole_capture_is_not_a_never_called_engine(tmp_path):
    proc = start(tmp_path, ZERO_CALLS, FAKE_ENV)
    os.killpg(proc.pid, signal.SIGKILL)  # popviz and the script at once (a CI runner's cancel)
    proc.wait(timeout=HANG_GUARD_SECONDS)
    proc.communicate(timeout=HANG_GUARD_SECONDS)
    assert record(tmp_path / "run")["status"] == "running"
    doc = no_run001(tmp_path)
    assert any("the capture was interrupted (popviz was killed" in w for w in doc["warnings"])
    text = run_cli("analyse", "run", cwd=tmp_path, timeout=HANG_GUARD_SECONDS).stdout
    assert "the capture was interrupted (popviz was killed) before the script called this engine" in \
        " ".join(text.split())


def test_sigint_while_an_engine_has_no_call_reads_as_interrupted(tmp_path):
    proc = start(tmp_path, ZERO_CALLS, {**FAKE_ENV, "POPVIZ_SIGNAL_GRACE_SECONDS": f"{hang_guard(60):.0f}"})
    os.kill(proc.pid, signal.SIGINT)  # to popviz alone: forwarded to the script
    proc.wait(timeout=HANG_GUARD_SECONDS)
    _, err = proc.communicate(timeout=HANG_GUARD_SECONDS)
    assert proc.returncode == 128 + signal.SIGINT, err
    run = record(tmp_path / "run")
    assert (run["status"], run["signal"], run["ended"]) == ("killed", "SIGINT", "interrupted")
    assert "not reached: the script was killed by SIGINT before it called this engine" in " ".join(err.split())
    no_run001(tmp_path)


def test_sigkill_before_a_bundle_s_metadata_leaves_an_engine_that_is_reported(tmp_path):
    code = ("import os, signal\n"
            "from popviz import testing\n"
            "from popviz.sources import bundle\n"
            "real = os.replace\n"
            "def killed_at_metadata(src, dst):\n"  # the tables renamed into place, not yet the metadata
            "    if os.path.basename(dst) == bundle.METADATA_FILE:\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "    real(src, dst)\n"
            "os.replace = killed_at_metadata\n"
            "d = os.path.join(os.environ['POPVIZ_CAPTURE_DIR'], 'training')\n"
            "os.makedirs(d)\n"
            "open(os.path.join(d, 'notes.txt'), 'w').close()\n"  # not empty: written in place, tables first
            "bundle.write_bundle(testing.pipeline_report([1000, 2000], tiles_per_ipu=8), d)\n")
    proc = capture(tmp_path, code)
    assert proc.returncode == 128 + signal.SIGKILL, proc.stderr
    out = run_cli("analyse", "run", cwd=tmp_path, timeout=HANG_GUARD_SECONDS)
    assert_one_line_error(out, "run/training holds execution.parquet, memory.parquet, runs.parquet but no "
                               "popviz-report.json (a bundle whose write was interrupted")


def test_a_disk_too_full_to_keep_the_run_record_refuses_to_start(full):
    from faults_util import fill

    fill(full, leave_kib=60)  # the record fits, not the 256 KiB set aside to say how the run ended
    proc = capture(full, "open('ran', 'w').close()")
    assert_one_line_error(proc, "run: cannot set 256 KiB aside for the run record to say how the run ended "
                                f"({NO_SPACE}); free some space")
    assert not (full / "ran").exists()  # the script never started
    assert sorted(p.name for p in (full / "run").iterdir()) == ["popviz-run.json"]
    assert record(full / "run")["status"] == "error"
