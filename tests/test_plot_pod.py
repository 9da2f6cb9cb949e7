"""Figures of many IPUs (a POD's): one row per stage or IPU at a fixed height, bars as
collections, every IPU's tiles in one map, a binned timeline; and `popviz plot` drawing them on
several processes with the same files as on one."""

from __future__ import annotations

import numpy as np
import pytest

from popviz import plot, testing

from conftest import assert_one_line_error, run_cli

pytest.importorskip("matplotlib")
from matplotlib.collections import PolyCollection


@pytest.fixture(scope="module")
def pod20():
    """20 stages on 20 IPUs (more than plot's MANY_BARS = 16); IPU3 has 5 tiles at 120% and 6 at 95%."""
    return testing.pipeline_report([1000 + 10 * i for i in range(20)], hot_tiles={3: [(5, 1.2), (6, 0.95)]})


def _collections(ax):
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_stages_of_many_stages_are_rows_with_their_numbers_at_the_bars_ends(pod20):
    fig = plot.stages(pod20)
    ax = fig.axes[0]
    assert tuple(fig.get_size_inches()) == pytest.approx((9.5, 0.22 * 20 + 2.0))
    (bars,) = _collections(ax)
    assert len(bars.get_paths()) == 20 and not ax.patches
    frame = plot.stage_cycles(pod20)
    widths = [p.vertices[:, 0].max() for p in bars.get_paths()]
    assert widths == frame["cycles_per_micro_batch"].astype(float).tolist()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "stage 0 · IPU0 · B1" and labels[19] == "stage 19 · IPU19 · B20"
    ends = [t.get_text() for t in ax.texts]
    assert len(ends) == 20 and ends[19].startswith("3.61k · bottleneck")  # 3607 cycles per micro-batch
    assert ax.get_ylim() == (19.5, -0.5)  # stage 0 at the top


def test_memory_of_many_ipus_is_a_row_per_ipu_with_its_pressure_at_the_end(pod20):
    fig = plot.memory(pod20)
    ax = fig.axes[0]
    assert tuple(fig.get_size_inches()) == pytest.approx((10.5, 0.22 * 20 + 1.6))
    frame = plot.memory_by_ipu(pod20)
    stacks = _collections(ax)
    assert len(stacks) == 7 + 1 + 1  # seven categories, "other", gaps
    right = np.max([[p.vertices[:, 0].max() for p in c.get_paths()] for c in stacks], axis=0)
    assert right == pytest.approx((frame["used_bytes"] / 2**20).tolist())  # the stack ends at the used bytes
    ends = [t.get_text() for t in ax.texts]
    assert ends[3] == "50.4% · 5 tiles OOM" and ends[0] == "50.0%"
    assert [t.get_text() for t in ax.get_yticklabels()][:2] == ["IPU0", "IPU1"]


def test_tiles_of_many_ipus_are_one_map_with_every_ipu_and_no_overflow_lost(pod20):
    fig = plot.tiles(pod20)
    ax = fig.axes[0]
    (image,) = ax.images
    grid = np.asarray(image.get_array())
    from popviz.plot.memory import MAX_TILE_COLUMNS

    assert MAX_TILE_COLUMNS == 736 and grid.shape == (20, 736)  # 1,472 tiles in pairs
    tiles = plot.tile_memory(pod20)
    ipu3 = tiles[tiles["ipu"] == 3].sort_values("tile")["used_pct"].to_numpy()
    assert grid[3].tolist() == pytest.approx(np.maximum(ipu3[0::2], ipu3[1::2]).tolist())  # the fuller of each pair
    rows = [t.get_text() for t in ax.texts]
    assert rows[3] == f"fullest {ipu3.max():.0f}% · 5 overflowing · 11 above 90%" and len(rows) == 20
    assert "each column the fullest of 2 tiles" in ax.get_title()


def test_a_call_of_many_steps_is_binned_even_when_no_ipu_has_many(monkeypatch):
    import popviz.plot.trace as trace

    r = testing.pipeline_report([1000] * 4)
    steps = plot.steps_frame(r)
    assert len(steps) <= trace.MAX_STEPS_DRAWN == 20_000
    ax = plot.timeline(r).axes[0]
    assert not ax.images  # drawn step by step
    monkeypatch.setattr(trace, "MAX_STEPS_DRAWN", len(steps) - 1)
    ax = plot.timeline(r).axes[0]
    (image,) = ax.images
    assert image.get_array().shape[1] == plot.MAX_BARS_PER_IPU  # 4 IPUs: the fine bins
    assert "3,000 time bins per IPU" in ax.get_title()


def test_figures_drawn_on_two_processes_are_the_files_drawn_on_one(tmp_path):
    from popviz.plot.files import write_figures

    r = testing.pipeline_report([1000, 2000, 1500])
    got = {}
    for jobs in (1, 2):
        out = tmp_path / f"j{jobs}"
        out.mkdir()
        seen = []
        done = write_figures(r, {n: out / f"{n}.png" for n in plot.FIGURE_NAMES}, jobs=jobs,
                             on_done=lambda name, err, seen=seen: seen.append(name))
        assert [n for n, _ in done] == seen == list(plot.FIGURE_NAMES)  # in the order asked
        assert {n: str(e) for n, e in done if e is not None} == {
            "liveness": "liveness: engine 'training' has no liveness steps (a profile whose libpva has no "
                        "livenessProgramSteps, or a report from before they were read)"}
        got[jobs] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert sorted(got[1]) == sorted(f"{n}.png" for n in plot.FIGURE_NAMES if n != "liveness")
    assert got[1] == got[2]  # byte for byte


def test_a_figure_that_cannot_be_written_fails_after_the_others_are_written(tmp_path):
    from popviz.errors import UsageError
    from popviz.plot.files import write_figures

    r = testing.pipeline_report([1000, 2000])
    (tmp_path / "memory.png").write_bytes(b"mine")
    written = []
    with pytest.raises(UsageError, match="memory.png exists"):
        write_figures(r, {n: tmp_path / f"{n}.png" for n in ("timeline", "memory", "breakdown")}, jobs=2,
                      on_done=lambda name, err: written.append(name))
    assert written == ["timeline", "breakdown"]
    assert (tmp_path / "memory.png").read_bytes() == b"mine"  # never written over
    assert (tmp_path / "breakdown.png").stat().st_size > 1000


def test_plot_jobs_must_be_a_positive_number(tmp_path):
    proc = run_cli("plot", "sample_reports/mnist_pipeline", "-o", str(tmp_path / "f"), "--jobs", "0")
    assert_one_line_error(proc, "--jobs takes a whole number of processes, 1 or more, not '0'")


KILLED_SCRIPT = r"""
import sys, time
from popviz import plot, testing
from popviz.plot.files import write_figures

real = plot._DRAW["timeline"]

def slow(report):  # a figure whose file is half written when the parent is killed
    fig = real(report)
    def savefig(fh, **kwargs):
        fh.write(b"half a figure")
        fh.flush()
        print("writing", flush=True)
        time.sleep(60)
    fig.savefig = savefig
    return fig

plot._DRAW["timeline"] = plot._DRAW["stages"] = slow
r = testing.pipeline_report([1000, 2000])
write_figures(r, {"timeline": sys.argv[1] + "/t.png", "stages": sys.argv[1] + "/s.png"}, jobs=2)
"""


def test_killing_plot_ends_its_drawing_processes_and_leaves_no_partial_file(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import hang_guard

    proc = subprocess.Popen([sys.executable, "-c", KILLED_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "writing\n" and proc.stdout.readline() == "writing\n"
        workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                     text=True).stdout.split()]
        assert len(workers) == 2 and [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + hang_guard(30)

        def alive(pid: int) -> bool:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    return fh.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
            except FileNotFoundError:
                return False

        while any(alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(p) for p in workers)
        assert list(tmp_path.iterdir()) == []  # each worker removed its temporary file as it ended
    finally:
        proc.kill()
