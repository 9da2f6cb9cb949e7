"""Fault injection on `popviz emulate` and `popviz capture --emulate`, with real processes on a
small real file system (a 2 MiB tmpfs): reports to a disk that is full from the start, and a
script that fills the disk after its engine's first report was written (its update at exit then
fails). Each case asserts exit code 2 and the one line naming the path and `No space left on
device`, and that no half-written report is left under a real name. Timeouts only guard against
a hang."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from faults_util import HANG_GUARD_SECONDS, PY, fill, leftovers, snapshot, tmpfs

from conftest import run_cli, unwrapped

NO_SPACE = "No space left on device"

SCRIPT = """
import os, sys
import torch
import poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)

opts = poptorch.Options()
opts.modelName("net")
model = poptorch.inferenceModel(Net(), opts)
model(torch.randn(4, 4))
if sys.argv[1:] == ["fill"]:  # the disk fills after the compile's report: the update at exit fails
    st = os.statvfs(".")
    assert st.f_blocks * st.f_frsize <= 8 * 2**20, "not the small test file system: refusing to fill it"
    fd = os.open("hog", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, bytes(4096))
    except OSError:
        pass
    print("filled", flush=True)
model(torch.randn(4, 4))
print("done", flush=True)
"""

PROFILE = {"POPLAR_ENGINE_OPTIONS": json.dumps({"autoReport.all": "true", "autoReport.directory": "reports"})}


@pytest.fixture
def full(tmp_path):
    with tmpfs(tmp_path / "fs") as mount:
        (mount / "train.py").write_text(SCRIPT)
        yield mount


def emulate(cwd: Path, *script_args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("emulate", "--", PY, "train.py", *script_args, cwd=cwd,
                   env={**PROFILE, "OMP_NUM_THREADS": "1"}, timeout=HANG_GUARD_SECONDS)


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    return unwrapped(proc.stderr.strip()).splitlines()[-1]


def test_emulate_to_a_full_disk_is_exit_2_and_leaves_no_report(full):
    fill(full)
    proc = emulate(full)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "done" not in proc.stdout  # stopped at the compile
    line = last_line(proc)
    assert line.startswith("popviz: error: could not write the estimated report to reports/net: reports/net/")
    assert f"cannot be written ({NO_SPACE}); free some space" in line and ".tmp" not in line
    assert "warning" not in proc.stderr  # said once: the exit does not try again
    assert not (full / "reports" / "net").exists() and leftovers(full) == []


def test_emulate_whose_update_at_exit_fails_keeps_the_first_report_and_exits_2(full):
    proc = emulate(full, "fill")
    assert proc.returncode == 2, proc.stderr  # the script itself exited 0
    assert proc.stdout.splitlines()[-2:] == ["filled", "done"]
    line = last_line(proc)
    assert line.startswith("popviz: error: could not write the estimated report to reports/net: reports/net/")
    assert NO_SPACE in line
    assert leftovers(full) == []
    kept = snapshot(full / "reports")
    (full / "hog").unlink()
    out = run_cli("analyse", "--json", "reports", cwd=full, timeout=HANG_GUARD_SECONDS)
    assert out.returncode == 0, out.stderr  # the compile's report, whole
    assert [e["name"] for e in json.loads(out.stdout)["engines"]] == ["net"]
    assert snapshot(full / "reports") == kept


def test_capture_emulate_whose_update_at_exit_fails_says_disk_full(full):
    proc = subprocess.run([PY, "-m", "popviz", "capture", "--emulate", "-o", "run", "--", PY, "train.py", "fill"],
                          cwd=full, capture_output=True, text=True, timeout=HANG_GUARD_SECONDS,
                          env={**os.environ, "COLUMNS": "100", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2, proc.stderr
    line = last_line(proc)  # the first thing that could not be saved (the hooks' record of the engine)
    assert line.startswith("popviz: error: run/net/") and f"({NO_SPACE})" in line, line
    run = json.loads((full / "run" / "popviz-run.json").read_text())
    assert (run["status"], run["ended"], run["exit_code"], run["popviz_exit_code"]) == ("succeeded", "disk full", 0, 2)
    assert {"path": "net/popviz-report.json", "bytes_written": None,
            "error": f"the estimated report was not updated ({NO_SPACE}): the one written at compile is kept"} \
        in run["write_errors"]
    assert leftovers(full) == []
