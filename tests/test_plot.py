"""popviz.plot and `popviz plot`: each figure's content, checked on the samples and built reports."""

from __future__ import annotations

import re

import pytest

import popviz
from popviz import plot, testing
from popviz.model.frames import MissingDataError, share_column

from conftest import SAMPLES, assert_one_line_error, run_cli

pytest.importorskip("matplotlib")
from matplotlib.colors import to_hex


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
    # the sample's stage work (forward + backward, sync-free) over the 48 micro-batches of a call,
    # in whole cycles (14_965_000 / 12, 13_870_000 / 12, 13_870_000 / 12, 22_265_000 / 12, rounded)
    assert heights == [1_247_083, 1_155_833, 1_155_833, 1_855_417]
    colours = [p.get_facecolor() for p in ax.patches]
    assert colours[3] != colours[0] and colours[0] == colours[1] == colours[2]
    texts = _texts(fig)
    assert "1.86M\nbottleneck" in texts
    assert ax.get_title() == "training: cycles per stage (slowest / mean = 1.37)"
    frame = plot.stage_cycles(bert["training"])
    assert frame["bottleneck"].tolist() == [False, False, False, True]


def test_stages_sharing_an_ipu_get_one_bar_per_ipu():
    r = testing.pipeline_report([1000, 1000, 1000], stage_ipus=[0, 1, 0], gradient_accumulation=64)
    fig = plot.stages(r)
    ax = fig.axes[0]
    assert [p.get_height() for p in ax.patches] == [6016, 3008]  # 385000 / 64, 192500 / 64 in whole cycles
    assert [t.get_text() for t in ax.get_xticklabels()] == ["IPU0 · stages 0, 2\nB1\nB3", "IPU1 · stage 1\nB2"]
    assert ax.get_title().replace("\n", " ") == "training: cycles per IPU (stages share IPUs) (slowest / mean = 1.33)"
    assert "mean over IPUs: 4.51k" in _texts(fig)


def test_memory_stacks_categories_with_capacity_and_percentages(bert):
    fig = plot.memory(bert["training"])
    ax = fig.axes[0]
    texts = _texts(fig)
    labels = [t for t in ax.texts if "%" in t.get_text()]
    assert [t.get_text() for t in labels] == ["83.1%\n17 tiles > 90%", "62.0%", "62.0%", "71.0%"]
    # the IPU with nearly full tiles is labelled in the palette's highlight colour
    assert [to_hex(t.get_color()) for t in labels] == [plot.PALETTE["highlight"].lower()] + ["#000000"] * 3
    assert "capacity 897 MiB" in texts
    # 7 categories + 'other' + gaps stacked on 4 IPUs; the stack is as tall as the bytes used
    assert len(ax.patches) == 9 * 4
    tops = {}
    for p in ax.patches:
        x = round(p.get_x() + p.get_width() / 2)
        tops[x] = max(tops.get(x, 0), p.get_y() + p.get_height())
    used = bert["training"].memory_by_ipu()["used_bytes"] / 2**20
    assert [tops[i] for i in range(4)] == pytest.approx(used.tolist(), rel=1e-12)
    assert ax.get_xticklabels()[0].get_text() == "IPU0"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:2] == ["capacity 897 MiB", "gaps"] and legend[-1] == "variable"  # top-down like the stack


def test_tiles_heat_map_names_overflowing_tiles():
    oom = popviz.load(SAMPLES / "oom_compile")["training"]
    fig = plot.tiles(oom)
    titles = [a.get_title() for a in fig.axes if a.get_title()]
    assert titles[0] == "IPU0: fullest tile 108% · 40 overflowing · 1,472 above 90%"
    assert titles[1] == "IPU1: fullest tile 74% · 0 overflowing · 0 above 90%"
    # 40 crosses on IPU0 (1,432 tiles over 90% are too many to circle: colour alone marks them)
    marks = [len(c.get_offsets()) for c in fig.axes[0].collections]
    assert marks == [40]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["tile overflowing"]
    assert plot.tile_memory(oom)["overflowing"].sum() == 40


def test_timeline_draws_every_ipu_and_marks_the_bottleneck(bert):
    fig = plot.timeline(bert["training"])
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["IPU0", "IPU1", "IPU2", "IPU3  bottleneck"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"forward", "backward", "sync / idle", "host copy", "exchange"} <= set(legend)
    assert ax.get_title() == "training: execution trace of one call, 1,264 steps"


def test_timeline_of_a_long_trace_is_binned_and_keeps_every_kind_of_work():
    import numpy as np
    from matplotlib.colors import to_rgba

    report = testing.pipeline_report([1000, 1200], name="long", mode="inference", device_iterations=4000)
    frame = plot.steps_frame(report)
    assert len(frame[frame["ipu"] == 0]) > plot.MAX_BARS_PER_IPU
    fig = plot.timeline(report)
    ax = fig.axes[0]
    assert ax.get_title() == (f"long: execution trace of one call, {len(frame):,} steps; 3,000 time bins per IPU, "
                              "each stacked by what it ran")
    (image,) = ax.get_images()
    pixels = np.asarray(image.get_array())
    band = plot.trace.BAND_PIXELS
    assert pixels.shape == (2 * band, plot.MAX_BARS_PER_IPU, 4)
    shares = report.time_shares()
    for row in range(2):
        body = pixels[row * band + 1:(row + 1) * band - 1].reshape(-1, 4)
        drawn = body[body[:, 3] > 0]
        for part, colour in (("compute", plot.PALETTE["forward"]), ("sync / idle", plot.PALETTE["sync / idle"])):
            rgba = np.rint(np.array(to_rgba(colour)) * 255)
            frac = (drawn == rgba).all(axis=1).mean()
            # the stacked bins show each IPU's share of forward work and of waiting, to a pixel's rounding
            assert frac == pytest.approx(shares.loc[row, share_column(part)] / 100, abs=0.03)


def test_breakdown_shares_add_up_to_100(bert):
    shares = plot.time_shares(bert["training"])
    total = shares[[c for c in shares.columns if c.endswith("_pct")]].sum(axis=1)
    assert total.round(9).tolist() == [100.0] * 4
    fig = plot.breakdown(bert["training"])
    ax = fig.axes[0]
    assert ax.get_title() == "training: where each IPU's time goes"
    # one bar per IPU and part present, as wide as the part's share
    parts = [c for c in shares.columns if c.endswith("_pct") and shares[c].any()]
    assert len(ax.patches) == 4 * len(parts) == 16
    assert [p.get_width() for p in ax.patches] == pytest.approx(
        [v for c in parts for v in shares[c]], rel=1e-12)
    assert [t.get_text() for t in ax.texts] == ["58%", "53%", "53%", "86%", "42%", "47%", "47%", "14%"]


def test_host_io_marks_the_current_output_mode(bert):
    frame = plot.output_modes(bert["training"])
    assert frame.set_index("output_mode")["output_bytes_per_call"].to_dict() == {
        "All": 196_800, "EveryN": 49_200, "Final": 4_100, "Sum": 4_100}
    # EveryN's N: D, the alternative that returns once per call (the model's own N when it uses EveryN)
    d = bert["training"].cfg.device_iterations
    period = frame.set_index("output_mode")["return_period"]
    assert period["EveryN"] == d and period[["All", "Final", "Sum"]].isna().all()
    fig = plot.host_io(bert["training"])
    assert "192.2 KiB\ncurrent" in _texts(fig)
    assert fig.axes[0].get_xticklabels()[1].get_text().startswith(f"EveryN({d})\n")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "output KiB per call"
    assert [p.get_height() for p in ax.patches] == [196_800 / 1024, 49_200 / 1024, 4_100 / 1024, 4_100 / 1024]
    assert [to_hex(p.get_facecolor()) for p in ax.patches][:2] == [plot.PALETTE["highlight"].lower(),
                                                                   plot.PALETTE["base"].lower()]


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


def test_compare_shows_relative_changes_coloured_by_direction():
    base = testing.pipeline_report([1000, 1000, 1000, 1000], name="training", output_mode="All")
    new = testing.pipeline_report([1000, 2000, 1000, 1000], name="training", output_mode="Final")
    fig = plot.compare(base, new)
    panels = {a.get_title().split("\n")[0]: a for a in fig.axes if a.get_visible()}
    slow = panels["slowest stage, cycles / micro-batch"]
    assert slow.get_title() == "slowest stage, cycles / micro-batch\n+100.0% · worse"
    # forward + backward (2x) per micro-batch, and the weight update (half the forward) over G = 16
    assert [p.get_height() for p in slow.patches] == [3 * 1000 + 500 / 16, 3 * 2000 + 1000 / 16]
    assert to_hex(slow.patches[1].get_facecolor()) == plot.PALETTE["highlight"].lower()  # worse
    out = panels["output bytes per call"]  # All, then Final: fewer bytes, better
    assert to_hex(out.patches[1].get_facecolor()) == plot.PALETTE["new"].lower()
    assert out.get_title().endswith("· better")
    rate = panels["samples / s (the system)"]  # the metric compare gates on: slower, worse
    assert rate.get_title().endswith("· worse") and rate.patches[0].get_height() > rate.patches[1].get_height()
    # the same report twice: no change flagged
    same = plot.compare(base, base)
    assert {a.get_title().split("\n")[1] for a in same.axes if a.get_visible()} == {"+0.0% · same", "+0.0 pp · same"}
    assert fig.get_suptitle() == "training → training: key metrics"  # in-memory reports: no run to name
    # read from two runs: the figure says which is base and which new (a reviewer could not tell)
    even, planned = (popviz.load(SAMPLES / n)["training"] for n in ("bert_even_split", "bert_planned"))
    assert plot.compare(even, planned).get_suptitle() == (
        "training: base bert_even_split → new bert_planned: key metrics (estimated)")
    assert plot.key_metrics(new)["pipeline.imbalance_ratio"] == pytest.approx(6062.5 / ((3 * 3031.25 + 6062.5) / 4))


def test_plot_command_writes_what_it_can_and_never_overwrites(tmp_path):
    out = tmp_path / "figs"
    proc = run_cli("plot", str(SAMPLES / "oom_compile"), "-o", str(out), env={"MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["training-host_io.png", "training-memory.png",
                                                     "training-tiles.png"]
    assert proc.stderr.count("skipped") == 4  # the sample predates liveness: "skipped liveness" too
    assert all((out / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in ("training-memory.png",))
    again = run_cli("plot", str(SAMPLES / "oom_compile"), "-o", str(out), env={"MPLBACKEND": "Agg"})
    assert_one_line_error(again, "training-memory.png", "never writes over", "--force")
    # --force replaces the figures, removes one the data no longer supports, leaves other files
    (out / "training-memory.png").write_bytes(b"old")
    (out / "training-timeline.png").write_bytes(b"from an earlier run")
    (out / "notes.txt").write_text("mine")
    forced = run_cli("plot", str(SAMPLES / "oom_compile"), "-o", str(out), "--force", env={"MPLBACKEND": "Agg"})
    assert forced.returncode == 0, forced.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "training-host_io.png", "training-memory.png",
                                                     "training-tiles.png"]
    assert (out / "training-memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"removed the old {out / 'training-timeline.png'}" in forced.stderr


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


def test_dataframe_accessors_on_the_report(bert):
    training = bert["training"]
    stages = training.stage_cycles()
    assert list(stages.columns) == ["stage", "ipu", "blocks", "cycles_per_micro_batch", "total_cycles", "idle_pct",
                                    "bottleneck"]
    # one call of D = 4 weight updates of G = 12 micro-batches
    assert stages["total_cycles"].tolist() == [4 * 14_965_000, 4 * 13_870_000, 4 * 13_870_000, 4 * 22_265_000]
    assert (stages["total_cycles"] / 48).round().tolist() == stages["cycles_per_micro_batch"].tolist()
    assert stages["idle_pct"].tolist() == pytest.approx([100 * (1 - t / 22_265_000) for t in
                                                         (14_965_000, 13_870_000, 13_870_000, 22_265_000)])
    mem = training.memory_by_ipu()
    frame = training.memory.frame
    gaps = (frame["total_bytes_including_gaps"] - frame["total_bytes_excluding_gaps"]).groupby(frame["ipu"]).sum()
    assert mem["gaps_bytes"].tolist() == gaps.tolist()
    assert mem["used_bytes"].tolist() == frame.groupby("ipu")["total_bytes_including_gaps"].sum().tolist()
    assert mem["tiles_over_90pct"].tolist() == [17, 0, 0, 0]
    steps = training.steps()
    assert steps.iloc[0].to_dict() == {"ipu": 0, "program": "input/begin", "program_type": "StreamCopyBegin",
                                       "cycles": 1000, "start_cycle": 0, "end_cycle": 1000, "category": "host copy"}
    assert len(steps) == 1_264 and set(steps["category"]) == {"forward", "backward", "weight update", "exchange",
                                                              "host copy", "sync / idle"}
    assert training.output_modes()["output_bytes_per_call"].tolist() == [196_800, 49_200, 4_100, 4_100]
    shares = training.time_shares()
    assert list(shares.columns) == ["ipu", "compute_pct", "exchange_pct", "sync_idle_pct", "host_copy_pct",
                                    "other_pct"]
    assert training.tile_memory()["used_pct"].max() == pytest.approx(97.0, abs=0.05)
    oom = popviz.load(SAMPLES / "oom_compile")["training"]
    with pytest.raises(MissingDataError, match="^engine 'training' has no execution table \\(the compile ran out"):
        oom.steps()


def test_a_memory_only_report_draws_memory_and_says_why_for_the_rest():
    report = testing.pipeline_report([1000, 2000, 1000, 1000], memory_frac=[0.7, 0.95, 0.5, 0.4],
                                     memory_level="ipu", execution=False, with_config=False, with_host_io=False,
                                     name="memonly")
    drawn = plot.figures(report)
    fig = drawn.pop("memory")
    labels = [t for t in fig.axes[0].texts if "%" in t.get_text()]
    assert [t.get_text() for t in labels] == ["70.0%", "95.0%", "50.0%", "40.0%"]
    # per-IPU figures only: an IPU above the analysis's 80% is the one under pressure
    assert [to_hex(t.get_color()) for t in labels] == ["#000000", plot.PALETTE["highlight"].lower(), "#000000",
                                                       "#000000"]
    assert {name: err.message for name, err in drawn.items()} == {
        "timeline": "timeline: engine 'memonly' has no execution table (no execution profile was recorded: the "
                    "engine did not run, or execution profiling was off)",
        "stages": "stages: engine 'memonly' has no per-stage cycles (no configuration in this report, so no "
                  "stages; popviz capture records them)",
        "tiles": "tiles: engine 'memonly' has per-IPU memory only (its source gives no per-tile figures)",
        "breakdown": "breakdown: engine 'memonly' has no execution table (no execution profile was recorded: the "
                     "engine did not run, or execution profiling was off)",
        "host_io": "host_io: engine 'memonly' has no recorded output mode and batching (record them by running "
                   "under popviz capture)",
        "liveness": "liveness: engine 'memonly' has no liveness steps (a profile whose libpva has no "
                    "livenessProgramSteps, or a report from before they were read)",
    }


def test_a_small_model_keeps_its_memory_bars_readable():
    report = popviz.load(SAMPLES / "mnist_pipeline")["training"]
    ax = plot.memory(report).axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert "capacity 897 MiB per IPU (off the scale)" in texts
    assert ax.get_ylim()[1] < 100  # MiB: the bars fill the axis, not 2% of it
    assert not [line for line in ax.get_lines() if line.get_linestyle() == "--"]


def test_host_io_without_tensor_sizes_counts_copies():
    report = testing.pipeline_report([1000, 1000], output_mode="All", with_host_io=False)
    ax = plot.host_io(report).axes[0]
    assert ax.get_ylabel() == "copies of each output per call"
    # G = 16, D = 1: All returns 16 copies, Final and Sum one (EveryN needs D > 1)
    assert [p.get_height() for p in ax.patches] == [16, 1, 1]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["All\n(16 per call)", "Final\n(1 per call)", "Sum\n(1 per call)"]
    assert "sizes not recorded" in ax.get_title()


def test_an_emulated_capture_of_the_example_plots(tmp_path, mnist_capture):
    run, _ = mnist_capture
    out = tmp_path / "figs"
    proc = run_cli("plot", str(run), "-o", str(out), env={"MPLBACKEND": "Agg", "COLUMNS": "80"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    expected = sorted(f"{e}-{n}.png" for e in ("inference", "training")
                      for n in ("timeline", "stages", "memory", "breakdown", "host_io", "liveness"))
    assert sorted(p.name for p in out.iterdir()) == expected
    assert proc.stderr.count("skipped tiles") == 2
    assert "the emulator does not estimate single tiles" in " ".join(proc.stderr.split())  # wrapped at 80 columns
    assert max(len(line) for line in proc.stderr.splitlines() if "written to" not in line) <= 80  # (a path stays whole)
    assert proc.stdout.split() == [str(out / n) for n in
                                   sorted(expected, key=lambda n: (n.split("-")[0], plot.FIGURE_NAMES.index(
                                       n.split("-")[1][:-4])))]
    training = popviz.load(run)["training"]
    fig = plot.stages(training)
    assert fig.axes[0].get_title().startswith("training: cycles per stage") and "(estimated)" in fig.axes[0].get_title()
    assert len(fig.axes[0].patches) == 4
    assert "bottleneck" in " ".join(_texts(fig))


def test_every_figure_draws_into_the_callers_axes(bert):
    from matplotlib.figure import Figure

    training = bert["training"]
    for draw in (plot.timeline, plot.stages, plot.memory, plot.tiles, plot.breakdown, plot.host_io):
        mine = Figure()
        ax = mine.add_subplot()
        assert draw(training, ax=ax) is mine
        assert ax.has_data() or ax.images, draw.__name__
    mine = Figure()
    assert plot.compare(training, training, ax=mine.add_subplot()) is mine


def test_figures_take_a_report_a_one_engine_set_or_a_path_and_say_so_otherwise(bert, tmp_path):
    from popviz.errors import UsageError

    both = popviz.load(SAMPLES / "mnist_pipeline")
    for draw in (plot.timeline, plot.stages, plot.memory, plot.breakdown, plot.host_io, plot.stage_cycles,
                 plot.key_metrics):
        with pytest.raises(UsageError, match=rf"^popviz.plot.{draw.__name__} draws one engine and this set holds 2 "
                                             r"\('inference', 'training'\); pick one: reports\['inference'\]$"):
            draw(both)
        with pytest.raises(UsageError, match=rf"^popviz.plot.{draw.__name__} takes a Report"):
            draw(None)
    from popviz.sources.bundle import write_bundle

    one = write_bundle(testing.pipeline_report([1000, 1200]), tmp_path / "one")
    assert plot.stage_cycles(one)["total_cycles"].tolist() == plot.stage_cycles(popviz.load(one)[0])["total_cycles"].tolist()
    assert plot.stages(str(one)) is not None and plot.stages(popviz.load(one)) is not None


def test_compare_refuses_two_different_engines_as_popviz_compare_does(bert):
    from popviz.errors import UsageError

    with pytest.raises(UsageError, match="'training' and 'inference' are different engines"):
        plot.compare(bert["training"], bert["inference"])
    assert plot.compare(bert["training"], bert["inference"], allow_different_engines=True) is not None


def test_html_says_once_which_figure_was_not_drawn_and_why():
    from popviz.render.html import render

    page = render(popviz.analyse(popviz.load(SAMPLES / "mnist_pipeline")), standalone=False)
    lines = re.findall(r'<p class="muted">tiles: not drawn[^<]*</p>', page)
    assert lines == ['<p class="muted">tiles: not drawn — engine &#x27;inference&#x27; has per-IPU memory '
                     'only (the emulator does not estimate single tiles)</p>',
                     '<p class="muted">tiles: not drawn — engine &#x27;training&#x27; has per-IPU memory '
                     'only (the emulator does not estimate single tiles)</p>']


def test_stages_tied_for_slowest_are_all_the_bottleneck_and_a_balanced_pipeline_has_none():
    tied = plot.stage_cycles(testing.pipeline_report([1000, 1200, 1200, 900]))
    assert tied["bottleneck"].tolist() == [False, True, True, False]
    balanced = testing.pipeline_report([1000] * 4)
    assert not plot.stage_cycles(balanced)["bottleneck"].any()
    labels = [t.get_text() for t in plot.stages(balanced).axes[0].texts]
    assert not any("bottleneck" in t for t in labels)
    # stage 1 (141,444 cycles) above stage 2 (140,166); stage 0 (107,087) computes no gradient of the
    # images its first convolution reads
    mnist = popviz.load(SAMPLES / "mnist_pipeline")["training"]
    assert plot.stage_cycles(mnist)["bottleneck"].tolist() == [False, True, False, False]
    ticks = [t.get_text() for t in plot.timeline(mnist).axes[0].get_yticklabels()]
    assert ticks == ["IPU0", "IPU1  bottleneck", "IPU2", "IPU3"]


def test_an_out_of_memory_compile_has_no_stage_cycles_and_the_table_says_why():
    oom = popviz.load(SAMPLES / "oom_compile")["training"]
    for table in (oom.stage_cycles, oom.ipu_cycles, lambda: plot.stage_cycles(oom)):
        with pytest.raises(MissingDataError, match=r"^(stages: )?engine 'training' has no execution table \(the "
                                                   r"compile ran out of memory, so the engine never ran\)$"):
            table()


def test_legends_on_the_callers_axes_sit_beside_them_and_zero_categories_are_left_out(bert):
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    plot.memory(bert["training"], ax=ax)
    legend = ax.get_legend()
    assert legend.get_bbox_to_anchor().bounds[0] > ax.get_window_extent().x1 - 1  # right of the axes
    inference = popviz.load(SAMPLES / "mnist_pipeline")["inference"]
    labels = [t.get_text() for t in plot.memory(inference).legends[0].get_texts()]
    assert labels == ["temporaries", "weights", "codeAndExchange"]  # no empty optimizer state or stash
    mine = Figure()
    mine.suptitle("my grid")
    plot.tiles(bert["training"], ax=mine.add_subplot())
    assert mine.get_suptitle() == "my grid"


def test_a_memory_category_keeps_its_colour_whatever_the_sizes():
    from popviz.plot._style import MEMORY_COLOURS, memory_colours

    small_weights = memory_colours(["temporaries", "weights", "codeAndExchange"])
    big_weights = memory_colours(["weights", "codeAndExchange", "temporaries"])
    assert small_weights == big_weights == {"weights": MEMORY_COLOURS[0], "temporaries": MEMORY_COLOURS[4],
                                            "codeAndExchange": MEMORY_COLOURS[5]}
    # plain SGD has no optimizer state: the others keep their colours
    assert memory_colours(["weights", "optimizerState", "activationStash"])["activationStash"] == \
        memory_colours(["weights", "activationStash"])["activationStash"] == MEMORY_COLOURS[3]
    assert memory_colours(["vertexCode", "variable", "controlCode"]) == {
        "controlCode": MEMORY_COLOURS[0], "variable": MEMORY_COLOURS[1], "vertexCode": MEMORY_COLOURS[2]}
    # drawn: the legend's colour of each category is the one memory_colours gives
    from matplotlib.colors import to_hex

    fig = plot.memory(popviz.load(SAMPLES / "mnist_pipeline")["training"])
    box = fig.axes[0].get_legend() or fig.legends[0]
    legend = {t.get_text(): to_hex(h.get_facecolor()) for t, h in zip(box.get_texts(), box.legend_handles, strict=True)
              if hasattr(h, "get_facecolor")}
    expected = memory_colours([c for c in legend if c in ("weights", "optimizerState", "gradientAccumulators",
                                                          "activationStash", "temporaries", "codeAndExchange")])
    assert {c: legend[c] for c in expected} == {c: v.lower() for c, v in expected.items()}


def test_every_report_dataframe_says_where_its_figures_come_from():
    """A notebook table of an estimated report kept no label once shown or exported (a reviewer):
    each Report method's DataFrame carries engine, source and estimated in ``attrs``."""
    estimated = popviz.load(SAMPLES / "mnist_pipeline")["training"]
    for frame in (estimated.steps(), estimated.stage_cycles(), estimated.ipu_cycles(), estimated.memory_by_ipu(),
                  estimated.time_shares(), estimated.output_modes()):
        assert frame.attrs == {"engine": "training", "source": "emulator", "estimated": True}
    measured = testing.pipeline_report([1000, 2000])
    assert measured.stage_cycles().attrs["estimated"] is False


def test_a_single_report_analysed_in_a_notebook_is_titled_by_its_engine():
    """``popviz.analyse(training)`` (the docs' notebook call) was headed "popviz analysis of None"."""
    from popviz.render import markdown

    training = popviz.load(SAMPLES / "mnist_pipeline")["training"]
    result = popviz.analyse(training)
    assert "<h1>popviz analysis of <code>training</code></h1>" in result._repr_html_()
    assert markdown.render(result).startswith("# popviz analysis of `training`")
    assert "None" not in result._repr_html_().split("</h1>")[0]
