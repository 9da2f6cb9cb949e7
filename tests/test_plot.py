"""popviz.plot and `popviz plot`: each figure's content, checked on the samples and built reports."""

from __future__ import annotations

import pytest

import popviz
from popviz import plot, testing

from conftest import SAMPLES, assert_one_line_error, run_cli

pytest.importorskip("matplotlib")


def _texts(fig) -> list[str]:
    out = [t.get_text() for t in fig.findobj(match=lambda a: hasattr(a, "get_text"))]
    return [t for t in out if t]


@pytest.fixture(scope="module")
def bert():
    return popviz.load(SAMPLES / "bert_pipeline")


def test_stages_marks_the_bottleneck_with_one_bar_per_stage(bert):
    fig = plot.stages(bert["training"])
    ax = fig.axes[0]
    assert len(ax.patches) == 4
    heights = [p.get_height() for p in ax.patches]
    # the sample's stage work (forward + backward, sync-free) over the 48 micro-batches of a call
    assert heights == pytest.approx([14_965_000 / 12, 13_870_000 / 12, 13_870_000 / 12, 22_265_000 / 12], rel=1e-12)
    colours = [p.get_facecolor() for p in ax.patches]
    assert colours[3] != colours[0] and colours[0] == colours[1] == colours[2]
    texts = _texts(fig)
    assert "1.86M\nbottleneck" in texts
    assert ax.get_title() == "training: cycles per stage (slowest / mean = 1.37)"
    frame = plot.stage_cycles(bert["training"])
    assert frame["bottleneck"].tolist() == [False, False, False, True]


def test_memory_stacks_categories_with_capacity_and_percentages(bert):
    fig = plot.memory(bert["training"])
    ax = fig.axes[0]
    texts = _texts(fig)
    assert ["83.1%", "62.0%", "62.0%", "71.0%"] == [t for t in texts if t.endswith("%")]
    assert "capacity 897 MiB" in texts
    # 7 categories + 'other' stacked on 4 IPUs
    assert len(ax.patches) == 8 * 4
    assert ax.get_xticklabels()[0].get_text() == "IPU0"


def test_tiles_heat_map_names_overflowing_tiles():
    oom = popviz.load(SAMPLES / "oom_compile")["training"]
    fig = plot.tiles(oom)
    titles = [a.get_title() for a in fig.axes if a.get_title()]
    assert titles[0] == "IPU0: fullest tile 108%, 40 overflowing, 1432 > 90%"
    assert titles[1] == "IPU1: fullest tile 74%, 0 overflowing, 0 > 90%"
    assert plot.tile_memory(oom)["overflowing"].sum() == 40


def test_timeline_draws_every_ipu_and_marks_the_bottleneck(bert):
    fig = plot.timeline(bert["training"])
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["IPU0", "IPU1", "IPU2", "IPU3  bottleneck"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"forward", "backward", "sync / idle", "host copy", "exchange"} <= set(legend)
    assert ax.get_title() == "training: execution trace of one call (1,264 steps)"


def test_timeline_of_a_long_trace_is_binned():
    report = testing.pipeline_report([1000, 1200], name="long", mode="inference", device_iterations=4000)
    frame = plot.steps_frame(report)
    assert len(frame[frame["ipu"] == 0]) > plot.MAX_BARS_PER_IPU
    fig = plot.timeline(report)
    bars = sum(len(c.get_paths()) for c in fig.axes[0].collections)
    assert bars <= 2 * plot.MAX_BARS_PER_IPU


def test_breakdown_shares_add_up_to_100(bert):
    shares = plot.time_shares(bert["training"])
    total = shares[[c for c in shares.columns if c.endswith("_pct")]].sum(axis=1)
    assert total.round(9).tolist() == [100.0] * 4
    fig = plot.breakdown(bert["training"])
    assert fig.axes[0].get_title() == "training: where each IPU's time goes"


def test_host_io_marks_the_current_output_mode(bert):
    frame = plot.output_modes(bert["training"])
    assert frame.set_index("output_mode")["output_bytes_per_call"].to_dict() == {
        "All": 196_800, "EveryN": 49_200, "Final": 4_100, "Sum": 4_100}
    fig = plot.host_io(bert["training"])
    assert "192.2 KiB\ncurrent" in _texts(fig)


def test_estimated_reports_say_so_in_the_title():
    report = popviz.load(SAMPLES / "mnist_pipeline")["training"]
    assert plot.stages(report).axes[0].get_title().endswith("(estimated)")
    assert plot.memory(report).axes[0].get_title().endswith("(estimated)")


def test_missing_data_is_one_line_naming_what_is_missing():
    oom = popviz.load(SAMPLES / "oom_compile")["training"]
    with pytest.raises(plot.PlotDataError, match="has no execution table"):
        plot.timeline(oom)
    emulated = popviz.load(SAMPLES / "mnist_pipeline")["training"]
    with pytest.raises(plot.PlotDataError, match="per-IPU memory only"):
        plot.tiles(emulated)


def test_compare_shows_relative_changes(bert):
    fig = plot.compare(bert["training"], bert["inference"])
    titles = [a.get_title() for a in fig.axes if a.get_visible()]
    assert any(t.startswith("imbalance (slowest / mean)") for t in titles)


def test_plot_command_writes_what_it_can_and_never_overwrites(tmp_path):
    out = tmp_path / "figs"
    proc = run_cli("plot", str(SAMPLES / "oom_compile"), "-o", str(out), env={"MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["training-host_io.png", "training-memory.png",
                                                     "training-tiles.png"]
    assert proc.stderr.count("skipped") == 3
    assert all((out / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in ("training-memory.png",))
    again = run_cli("plot", str(SAMPLES / "oom_compile"), "-o", str(out), env={"MPLBACKEND": "Agg"})
    assert_one_line_error(again, "training-memory.png", "never writes over")


def test_plot_command_svg_and_only(tmp_path):
    proc = run_cli("plot", str(SAMPLES / "bert_pipeline"), "-o", str(tmp_path), "--format", "svg",
                   "--only", "stages", env={"MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["inference-stages.svg", "training-stages.svg"]
    assert "<svg" in (tmp_path / "training-stages.svg").read_text()
    bad = run_cli("plot", str(SAMPLES / "bert_pipeline"), "-o", str(tmp_path / "x"), "--only", "pie")
    assert_one_line_error(bad, "'pie'")


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.iterdir() if p.is_dir()))
def test_every_figure_draws_or_says_why_for_every_sample(sample):
    for report in popviz.load(SAMPLES / sample):
        for name, fig in plot.figures(report).items():
            if isinstance(fig, plot.PlotDataError):
                assert report.label in fig.message and name in fig.message
            else:
                assert (fig.axes and fig.axes[0].get_title()) or fig.get_suptitle()
