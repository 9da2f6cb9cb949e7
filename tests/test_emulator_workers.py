"""An estimate's host cost stays bounded (issue 41, item 3): DataLoader workers capped under
``--calls``, and every process the script started ended when the emulator stops it."""

from __future__ import annotations

import os
import resource
import sys
import uuid
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from popviz.emulator import workers  # noqa: E402

from conftest import run_cli, unwrapped  # noqa: E402

SCRIPT = Path(__file__).parent / "custom_op_scripts" / "many_workers.py"


def _with_marker(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if marker.encode() in environ:
                found.append(int(entry))
    return found


def test_worker_cap():
    assert [workers.worker_cap(n) for n in (1, 2, 5)] == [0, 2, 5]


def test_a_dataloader_is_capped_only_while_a_call_limit_is_set(monkeypatch, capsys):
    data = torch.utils.data.TensorDataset(torch.arange(8.0))
    workers.install()
    try:
        monkeypatch.delenv("POPVIZ_EMULATOR_CALLS", raising=False)
        assert torch.utils.data.DataLoader(data, num_workers=3).num_workers == 3
        monkeypatch.setenv("POPVIZ_EMULATOR_CALLS", "1")
        loader = torch.utils.data.DataLoader(data, batch_size=4, num_workers=64, persistent_workers=True,
                                             prefetch_factor=4)
        assert (loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (0, None, False)
        assert [b[0].tolist() for b in loader] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
        monkeypatch.setenv("POPVIZ_EMULATOR_CALLS", "2")
        loader = torch.utils.data.DataLoader(data, 4, False, None, None, 16)  # num_workers positional
        assert (loader.num_workers, loader.prefetch_factor) == (2, 1)
        with pytest.raises(ValueError, match="prefetch_factor"):  # the script's own mistakes stay its own
            torch.utils.data.DataLoader(data, num_workers=0, prefetch_factor=2)
        err = unwrapped(capsys.readouterr().err).splitlines()  # the message wraps at the terminal's width
        assert err == ["popviz emulator: --calls 1: a DataLoader with num_workers=64 loads in the script's "
                       "process (num_workers 0): an estimate needs 1 batch(es); later DataLoaders likewise"]
    finally:
        workers.uninstall()
    assert workers.end_descendants() == []  # disarmed outside an emulated process


@pytest.mark.slow  # two emulated captures of a 64-worker script, ~1 min each on a loaded machine
@pytest.mark.parametrize("calls", [1, 2])
def test_a_64_worker_estimate_stays_bounded_and_leaves_no_process(tmp_path, calls):
    marker = uuid.uuid4().hex
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = run_cli("capture", "--emulate", "--calls", str(calls), "-o", str(tmp_path / "cap"), "--",
                   sys.executable, str(SCRIPT), "64", cwd=tmp_path, env={"POPVIZ_TEST_MARKER": marker},
                   timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert _with_marker(marker) == []  # no worker, no process of the script's own survives
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # one combined batch is 2 x 4 x 8 samples of 1 MiB: 64 MiB; 64 workers x 2 batches ahead would be 8 GiB
    assert max(peak_kib, before) < 2_000_000, peak_kib  # one process's estimate; 64 workers would be many GB
    if calls == 1:
        assert "workers 0 pid" in proc.stdout
        assert "--calls 1: a DataLoader with num_workers=64 loads in the script's process" in unwrapped(proc.stderr)
        assert "ended 1 process(es) the script started" in unwrapped(proc.stderr)  # its own sleeping child
    else:
        assert "workers 2 pid" in proc.stdout
        assert "keeps 2 worker(s), one batch ahead each" in unwrapped(proc.stderr)
        assert "ended 3 process(es) the script started" in unwrapped(proc.stderr)  # two workers and the child
