"""`popviz plan` end to end: the real CLI in a subprocess on bundles built by popviz.testing.

The small model (numbers checked by hand): embeddings (pinned first, 100 forward cycles,
100,000 B of weights), four encoder layers (1,000 cycles, 60,000 B weights, 20,000 B stashed
per micro-batch, 5,000 B temporaries) and a head (pinned last, 1,500 cycles, 10,000 B). Backward
costs twice the forward; training, G = 16, two IPUs of 638,976 B (Mk2, one tile each).
Now: layers_per_ipu [2, 2]: IPU0 = 300 + 3,000 + 3,000 = 6,300 cycles, IPU1 = 3,000 + 3,000 +
4,500 = 10,500. Best: [3, 1]: IPU0 9,300, IPU1 7,500. Time for G = 16 through the pipeline
(slots IPU0 forward | IPU1 forward + backward | IPU0 backward; the first and last pipeline cycles
hold one slot): now 2,100 + 16 × 10,500 + 4,200 = 174,300 cycles; planned 3,100 + 7,500 +
14 × 9,300 + 7,500 + 6,200 = 154,500: throughput 174,300 / 154,500 = +12.8%.
IPU0 then holds 100,000 + 3 × 60,000 + 3 × 20,000 × 3 (stash depth 2·2 − 1) + 5,000 = 465,000 B.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from popviz import testing
from popviz.sources.bundle import write_bundle

from conftest import assert_one_line_error, run_cli, unwrapped

NAMES = ["embeddings", "encoder.layer.0", "encoder.layer.1", "encoder.layer.2", "encoder.layer.3", "head"]


def flat(text: str) -> str:
    """Text with its line wrapping undone (prose wraps at the terminal width)."""
    return " ".join(text.split())


def small_layers(**kw):
    return testing.layer_table(
        [100, 1000, 1000, 1000, 1000, 1500], names=NAMES,
        roles=["embeddings", "layer", "layer", "layer", "layer", "head"],
        pins=["first", None, None, None, None, "last"], layers_per_ipu=[2, 2],
        weight_bytes=[100_000, 60_000, 60_000, 60_000, 60_000, 10_000],
        activation_bytes=[0, 20_000, 20_000, 20_000, 20_000, 0],
        temporary_bytes=[0, 5_000, 5_000, 5_000, 5_000, 0], **kw)


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small"
    write_bundle(testing.layered_report(small_layers(), name="train", tiles_per_ipu=1,
                                        gradient_accumulation=16), path)
    return path


def test_console_current_beside_proposed_with_code(small):
    proc = run_cli("plan", str(small), env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "plan for train (estimated: per-layer costs from the emulator's cost model)" in out
    assert "memory per IPU 624.0 KiB, budget 90% = 561.6 KiB; training; G = 16" in out
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s*(◀ )?\d+\s", line)]
    assert rows[0] == ["0", "2+1", "6,300", "336.9", "KiB", "54%", "3+1", "9,300", "454.1", "KiB", "73%"]
    assert rows[1] == ["◀", "1", "2+1", "10,500", "170.9", "KiB", "27%", "1+1", "7,500", "92.8", "KiB", "15%"]
    # ramp efficiency: 16 × 10,500 / 174,300 and 16 × 9,300 / 154,500; rates 1.33 GHz × 16 / time
    assert "slowest stage 10,500 → 9,300 cycles per micro-batch\nramp efficiency 96.4% → 96.3%\n" in out
    assert "predicted throughput +12.8% (122,088.4 → 137,734.6 micro-batches/s)" in flat(out)
    assert "  model.embeddings = poptorch.BeginBlock(model.embeddings, ipu_id=0)" in out
    assert "  model.encoder.layer[3] = poptorch.BeginBlock(model.encoder.layer[3], ipu_id=1)" in out
    # IPU0 keeps 465,000 - 5,000 B beside its temporaries: (575,078 - 460,000) / 638,976 = 0.18
    # of its memory is free, below PopTorch's default 0.6: 0.15; IPU1 keeps 0.6
    assert '  opts.setAvailableMemoryProportion({"IPU0": 0.15, "IPU1": 0.6})' in out
    # code and the command wrap at the width (after a comma; continuation lines): joined again
    assert "  IPUConfig(layers_per_ipu=[3, 1], ipus_per_replica=2, matmul_proportion=[0.15, 0.6])" in unwrapped(out)
    assert ("popviz capture --emulate --calls 1 --split layers_per_ipu=3,1 -o DIR -- python YOUR_SCRIPT.py"
            in unwrapped(out))
    assert max(len(line) for line in out.splitlines() if not line.startswith("  ")) <= 80


def test_json_has_the_exact_figures(small):
    proc = run_cli("plan", str(small), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["format"] == "popviz-plan-result" and doc["estimated"] is True
    assert doc["settings"]["budget_bytes"] == 575_078 and doc["settings"]["code_bytes"] == 0
    assert doc["current"]["layers_per_ipu"] == [2, 2] and doc["current"]["bottleneck_cycles"] == 10_500
    p = doc["proposed"]
    assert p["layers_per_ipu"] == [3, 1] and p["entries_per_ipu"] == [4, 2]
    assert [s["cycles"] for s in p["stages"]] == [9_300, 7_500]
    assert [s["memory_bytes"] for s in p["stages"]] == [465_000, 95_000]
    assert [s["stash_depth"] for s in p["stages"]] == [3, 1]
    assert doc["throughput_change_frac"] == pytest.approx(174_300 / 154_500 - 1)
    assert doc["current"]["ramp_efficiency_frac"] == pytest.approx(16 * 10_500 / 174_300)
    assert doc["placements"][:4] == [{"layer": n, "ipu": 0} for n in NAMES[:4]]
    assert doc["code"]["split_argument"] == "layers_per_ipu=3,1"
    assert doc["no_fit"] is None


def test_markdown_fences_tables_and_code(small):
    proc = run_cli("plan", str(small), "--markdown")
    assert proc.returncode == 0, proc.stderr
    md = proc.stdout
    assert md.startswith("## popviz plan: train\n")
    assert "```\nmodel.embeddings = poptorch.BeginBlock(model.embeddings, ipu_id=0)\n" in md
    assert "predicted throughput +12.8%" in md


def test_a_faster_split_that_overflows_the_headroom_is_not_proposed(small):
    # headroom 0.7 = 447,283 B: [3, 1] needs 465,000 B on IPU0, so [2, 2] stays
    proc = run_cli("plan", str(small), "--headroom", "0.7")
    assert proc.returncode == 0, proc.stderr
    assert "the current split is already the best that fits: nothing to change" in proc.stdout
    assert "BeginBlock" not in proc.stdout


def test_a_current_split_over_the_headroom_gets_the_split_that_fits_even_if_slower(tmp_path):
    # now [3, 1] (9,300 cycles) needs 465,000 B on IPU0 > 447,283 B (headroom 0.7): [2, 2] fits
    path = tmp_path / "over"
    table = small_layers()
    moved = tuple(dataclasses.replace(x, ipu=int(i >= 4), stage=int(i >= 4)) for i, x in enumerate(table))
    write_bundle(testing.layered_report(dataclasses.replace(table, layers=moved), name="train",
                                        tiles_per_ipu=1, gradient_accumulation=16), path)
    proc = run_cli("plan", str(path), "--headroom", "0.7", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    out = flat(proc.stdout)
    assert "already the best" not in out
    assert "predicted throughput -11.4% (137,734.6 → 122,088.4 micro-batches/s): the cost of fitting" in out
    assert "the current split does not fit its budget on IPU0; the plan does" in out
    assert "IPUConfig(layers_per_ipu=[2, 2]" in out


def test_max_ipus_reports_each_n(small):
    proc = run_cli("plan", str(small), "--max-ipus", "3", "--json")
    doc = json.loads(proc.stdout)
    assert doc["exact_ipus"] is False
    # 1 IPU: 300 + 4 x 3,000 + 4,500; 3 IPUs: [emb l0 l1 | l2 l3 | head] = 6,300 / 6,000 / 4,500
    assert {k: v["bottleneck_cycles"] for k, v in doc["by_ipus"].items()} == {
        "1": 16_800, "2": 9_300, "3": 6_300}
    # 3 IPUs, G = 16 over S = 5 slots (2,100 | 2,000 | 1,500 + 3,000 | 4,000 | 4,200): pipeline
    # cycles 2,100, 2,100, 4,500, 6,000, 12 × 6,300, 6,000, 4,500, 4,200, 4,200 = 109,200
    assert doc["by_ipus"]["3"]["ramp_efficiency_frac"] == pytest.approx(16 * 6_300 / 109_200)
    assert doc["proposed"]["layers_per_ipu"] == [2, 2, 0]
    assert doc["proposed"]["entries_per_ipu"] == [3, 2, 1]


def test_no_fit_says_by_how_much_and_what_closes_it(small):
    # headroom 0.3 = 191,692 B; the split needing least memory is [1, 3]: IPU0 100,000 + 60,000
    # + 20,000 x 3 + 5,000 = 225,000, IPU1 180,000 + 10,000 + 60,000 + 5,000 = 255,000 B
    proc = run_cli("plan", str(small), "--headroom", "0.3")
    assert proc.returncode == 1, proc.stderr
    out = flat(proc.stdout)
    assert ("the split needing the least memory (layers_per_ipu [1, 3]) misses by 61.8 KiB "
            "(63,308 bytes) on IPU1") in out
    assert "- halve the micro-batch: saves 31.7 KiB (32,500 bytes): not enough" in out
    # 4 IPUs, [emb | l0 | l1 | l2 l3 head]: the fullest is IPU3 with 175,000 B
    assert "- 4 IPUs: saves 78.1 KiB (80,000 bytes): fits" in out
    assert "offload" not in out  # no optimizer state: nothing to offload
    doc = json.loads(run_cli("plan", str(small), "--headroom", "0.3", "--json").stdout)
    assert doc["proposed"] is None
    assert doc["no_fit"]["overflow_bytes_per_ipu"] == [33_308, 63_308]
    assert doc["no_fit"]["memory_bytes_per_ipu"] == [225_000, 255_000]


def test_no_fit_with_optimizer_state_names_offloading_and_replicas(tmp_path):
    layers = small_layers(optimizer_bytes=[0, 200_000, 200_000, 200_000, 200_000, 0])
    path = tmp_path / "adam"
    write_bundle(testing.layered_report(layers, tiles_per_ipu=1, gradient_accumulation=16), path)
    proc = run_cli("plan", str(path))
    assert proc.returncode == 1
    out = flat(proc.stdout)
    # least memory: [2, 2]: IPU0 100,000 + 2 x 260,000 + 40,000 x 3 + 5,000 = 745,000 B
    assert "misses by 165.9 KiB (169,922 bytes) on IPU0" in out
    assert "- offload the optimizer state: saves 390.6 KiB (400,000 bytes): fits" in out
    assert "- 2 replicas sharing the optimizer state (2 × 2 IPUs): saves 195.3 KiB (200,000 bytes): fits" in out


def test_no_fit_levers_code_fits_80_columns(tmp_path):
    # each lever's how-to is one line of code per statement, broken after its first "(" when
    # longer than 78 characters: no terminal wraps a name in the middle at 80 columns
    layers = small_layers(optimizer_bytes=[0, 200_000, 200_000, 200_000, 200_000, 0])
    path = tmp_path / "adam"
    write_bundle(testing.layered_report(layers, tiles_per_ipu=1, gradient_accumulation=16), path)
    proc = run_cli("plan", str(path), env={"COLUMNS": "80"})
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    start = lines.index("  opts.replicationFactor(2)")
    assert lines[start + 1:start + 3] == [
        "  opts.TensorLocations.setOptimizerLocation(",
        "      poptorch.TensorLocationSettings().useReplicatedTensorSharding(True))"]
    assert "  half the DataLoader batch size, double G to keep the global batch" in lines


def test_write_plan_file_and_never_overwrite(small, tmp_path):
    dest = tmp_path / "plan.json"
    proc = run_cli("plan", str(small), "--write", str(dest))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(dest.read_text())
    assert doc == {"format": "popviz-plan", "format_version": 1, "engine": "train", "ipus": 2,
                   "layers_per_ipu": [3, 1],
                   "placements": [{"layer": f"encoder.layer.{i}", "ipu": int(i == 3)} for i in range(4)]}
    assert f"--split {dest}" in unwrapped(proc.stdout)
    before = dest.read_text()
    again = run_cli("plan", str(small), "--write", str(dest))
    assert_one_line_error(again, "plan.json exists", "never writes over")
    from popviz.plan_file import read_plan

    assert read_plan(dest).layers_per_ipu == (3, 1)
    assert dest.read_text() == before
    dest.write_text("{}")
    forced = run_cli("plan", str(small), "--write", str(dest), "--force")
    assert forced.returncode == 0, forced.stderr
    assert dest.read_text() == before


def test_rerun_command_from_the_capture_record(small, tmp_path):
    record = {"format": "popviz-run", "format_version": 1, "command": ["python", "bert.py", "--x", "a b"],
              "cwd": str(tmp_path), "status": "succeeded"}
    (small / "popviz-run.json").write_text(json.dumps(record))
    proc = run_cli("plan", str(small), cwd=tmp_path)
    # one call is enough for the split's estimate (not the whole script's loop on the CPU)
    assert ("  popviz capture --emulate --calls 1 --split layers_per_ipu=3,1 -o small-split -- python bert.py "
            "--x 'a b'") in unwrapped(proc.stdout)
    # run from elsewhere: the command runs in its own directory, with absolute paths
    dest = tmp_path / "p.json"
    away = run_cli("plan", str(small), "--write", str(dest), cwd=small)
    assert (f"  cd {tmp_path} && popviz capture --emulate --calls 1 --split {dest} -o {tmp_path / 'small-split'} "
            "-- python bert.py --x 'a b'") in unwrapped(away.stdout)
    # a report from another checkout (a sample, a colleague's capture): the script is found from
    # here, so it runs from here; a recorded directory that does not exist is never cd'ed into
    (tmp_path / "bert.py").write_text("")
    record["cwd"] = "/nonexistent/checkout"
    (small / "popviz-run.json").write_text(json.dumps(record))
    here = run_cli("plan", str(small), cwd=tmp_path)
    assert ("  popviz capture --emulate --calls 1 --split layers_per_ipu=3,1 -o small-split -- python bert.py"
            in unwrapped(here.stdout))
    assert "cd " not in here.stdout
    (tmp_path / "bert.py").unlink()
    lost = run_cli("plan", str(small), cwd=tmp_path)
    assert ("-- python bert.py --x 'a b' # from the directory holding bert.py (recorded: /nonexistent/checkout)"
            in " ".join(unwrapped(lost.stdout).split())) and "cd " not in lost.stdout
    # captured with --calls 3: the check runs as many (its loop figures then compare too)
    record.update(cwd=str(tmp_path), environment={"POPVIZ_EMULATOR_CALLS": "3"})
    (small / "popviz-run.json").write_text(json.dumps(record))
    thrice = run_cli("plan", str(small), cwd=tmp_path)
    assert "  popviz capture --emulate --calls 3 --split layers_per_ipu=3,1 -o small-split -- python bert.py" \
        in thrice.stdout


def test_the_check_of_a_bundled_sample_is_written_here_not_among_the_samples(tmp_path):
    from conftest import SAMPLES

    proc = run_cli("plan", str(SAMPLES / "bert_even_split"), cwd=tmp_path, env={"COLUMNS": "300"})
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in unwrapped(proc.stdout).splitlines() if "--split layers_per_ipu=" in ln]
    recorded = json.loads((SAMPLES / "bert_even_split" / "popviz-run.json").read_text())["cwd"]
    if Path(recorded).is_dir():  # run from there: the output named absolutely, here
        assert line.startswith(f"  cd {recorded} && ")
        assert " -o " + str(tmp_path / "bert_even_split-split") + " -- python examples/bert_pipeline.py" in line
    else:  # the machine the sample was made on: run from the script's directory, the output here
        assert " -o bert_even_split-split -- python examples/bert_pipeline.py" in line
        assert line.endswith(f"# from the directory holding examples/bert_pipeline.py (recorded: {recorded})")
    assert "--calls 1 " in line


def test_no_engine_with_layers_is_one_line_without_a_double_negative():
    from conftest import SAMPLES

    assert_one_line_error(run_cli("plan", str(SAMPLES / "bert_pipeline")),
                          "bert_pipeline: none of its engines (inference, training) has per-layer costs; "
                          "record them by running the model under the emulator")


def test_no_layers_is_one_line_saying_how_to_get_them(tmp_path):
    write_bundle(testing.pipeline_report([1000, 2000]), tmp_path / "r")
    assert_one_line_error(run_cli("plan", str(tmp_path / "r")), "no per-layer costs",
                          "popviz capture --emulate")


@pytest.mark.parametrize("args, needles", [
    (["--headroom", "1.5"], ["--headroom", "at most 1"]),
    (["--headroom", "x"], ["--headroom", "0.9"]),
    (["--ipus", "0"], ["--ipus", "at least 1"]),
    (["--ipus", "9"], ["9 IPUs for 6 layers"]),
    (["--engine", "nope"], ["no engine 'nope'", "train"]),
    (["--ipus", "2", "--max-ipus", "3"], ["not allowed with"]),
])
def test_bad_inputs_are_one_line(small, args, needles):
    assert_one_line_error(run_cli("plan", str(small), *args), *needles)


def test_missing_report_is_one_line(tmp_path):
    assert_one_line_error(run_cli("plan", str(tmp_path / "nothing")), "nothing")


def test_calibrated_plan_scales_layers_to_the_measured_stages(tmp_path):
    table = testing.bert_layers(4, hidden=256, seq=64, layers_per_ipu=[2, 2])
    est = testing.layered_report(table, name="training", gradient_accumulation=16, estimated=True,
                                 source="emulator")
    stage_fwd = [sum(x.fwd_cycles for x in table if x.ipu == i) for i in (0, 1)]
    # the real profile: every stage twice as slow as estimated, same memory
    real = testing.pipeline_report([2 * c for c in stage_fwd], name="training", gradient_accumulation=16,
                                   memory_level="ipu",
                                   memory_frac=[m / est.target.bytes_per_ipu for m in
                                                est.memory.per_ipu()["total_bytes_including_gaps"]])
    write_bundle(est, tmp_path / "est")
    write_bundle(real, tmp_path / "real")
    plain = json.loads(run_cli("plan", str(tmp_path / "est"), "--json").stdout)
    proc = run_cli("plan", str(tmp_path / "real"), "--calibrate", str(tmp_path / "est"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["layer_source"] == "calibrated"
    assert any(n.startswith("calibrated: measured per-stage figures spread by the emulator's per-layer "
                            "proportions") for n in doc["notes"])
    assert doc["current"]["bottleneck_cycles"] == 2 * plain["current"]["bottleneck_cycles"]
    assert doc["proposed"]["layers_per_ipu"] == plain["proposed"]["layers_per_ipu"]
    assert [s["memory_bytes"] for s in doc["current"]["stages"]] == \
        [s["memory_bytes"] for s in plain["current"]["stages"]]
    text = run_cli("plan", str(tmp_path / "real"), "--calibrate", str(tmp_path / "est")).stdout
    assert "(calibrated: measured per-stage figures spread by the emulator's per-layer proportions)" in flat(text)
    # a report that already has layers is refused
    assert_one_line_error(run_cli("plan", str(tmp_path / "est"), "--calibrate", str(tmp_path / "est")),
                          "already has per-layer costs")


def test_findings_name_the_plans_gain(small):
    from popviz.analysis import analyse
    from popviz.sources.discover import load

    result = analyse(load(small))
    engine = result.engines[0]
    pipe = next(f for f in engine.findings if f.code == "PIPE001")
    assert pipe.recommendation.endswith(
        "`popviz plan` finds a split with +13% throughput that fits: layers_per_ipu=[3, 1] with available memory proportions [0.15, 0.6] "
        "(their slower matmuls are not in that figure).")
    action = next(a for a in engine.plan.actions if a.code == "PIPE001")
    assert action.hint["layers_per_ipu"] == [3, 1]
    assert action.hint["throughput_gain_frac"] == pytest.approx(174_300 / 154_500 - 1)
    assert "popviz plan` finds a split with +13% throughput" in action.gain_text


def test_pins_that_leave_too_few_stages_are_a_usage_error():
    from popviz.analysis.layer_plan import make_plan
    from popviz.errors import UsageError

    t = testing.layer_table([1, 2, 3, 4], pins=["first", "first", "last", "last"], layers_per_ipu=[2, 2])
    r = testing.layered_report(t, tiles_per_ipu=1, gradient_accumulation=16)
    with pytest.raises(UsageError, match=r"3 IPUs: the pinned layers .* at most 2 stages"):
        make_plan(r, ipus=3)
    assert list(make_plan(r, max_ipus=3).by_ipus) == [1, 2, 3]


def test_cnn_plan_rebalances_a_front_heavy_split():
    """ResNet-like (testing.cnn_layers): blocks of 8.1-10.8 M cycles (forward + backward)."""
    from popviz.analysis.layer_plan import make_plan

    table = testing.cnn_layers(layers_per_ipu=[4, 2, 1, 1])
    plan = make_plan(testing.layered_report(table, gradient_accumulation=16))
    assert plan.current is not None and plan.proposed is not None
    # IPU0 now: stem 1,382,976 + 10,838,016 x 3 + 8,128,512
    assert plan.current.bottleneck_cycles == 42_025_536
    assert plan.proposed.layers_per_ipu == [2, 2, 2, 2]
    assert [s.cycles for s in plan.proposed.stages] == [23_059_008, 18_966_528, 18_966_528, 18_990_528]
    # G = 16 micro-batches through each pipeline, ramp included (what popviz.schedule.simulate
    # gives for the same stages): 677,366,592 cycles now, 413,710,272 planned; the ramp trims the
    # steady state's 42,025,536 / 23,059,008 = +82% to +64%
    assert plan.throughput_change_frac == pytest.approx(677_366_592 / 413_710_272 - 1)


def test_a_tied_projection_follows_the_embeddings():
    from popviz.analysis.layer_plan import make_plan
    from popviz.model import Layer, LayerTable

    base = small_layers()
    decoder = Layer("decoder", role="head", stage=0, ipu=0, fwd_cycles=400, bwd_cycles=800,
                    activation_bytes=1_000, tied_to="embeddings")
    table = LayerTable(layers=(*base.layers, decoder), source="emulator")
    plan = make_plan(testing.layered_report(table, tiles_per_ipu=1, gradient_accumulation=16))
    # the decoder's 1,200 cycles count on IPU0: 7,500 / 10,500 now; [3, 1] would give 10,500 /
    # 7,500, no faster, and holds more on IPU0: the current split stays
    assert plan.layer_names == NAMES
    assert [s.cycles for s in plan.current.stages] == [7_500, 10_500]
    assert plan.proposed.layers_per_ipu == [2, 2] and not plan.improves
    assert plan.placements()[-1] == ("decoder", 0)
    # as code, the decoder keeps a block of its own back on IPU0: "remove the others" must not
    # drop it into the last IPU's block, away from its tied weights
    from popviz.analysis.layer_plan import code_dict

    assert code_dict(plan)["begin_block"] == [
        "model.embeddings = poptorch.BeginBlock(model.embeddings, ipu_id=0)",
        "model.encoder.layer[2] = poptorch.BeginBlock(model.encoder.layer[2], ipu_id=1)",
        "model.decoder = poptorch.BeginBlock(model.decoder, ipu_id=0)"]
    assert plan.plan_file().placements == (("encoder.layer.0", 0), ("encoder.layer.1", 0),
                                           ("encoder.layer.2", 1), ("encoder.layer.3", 1))


def test_hostile_layer_names_are_data(tmp_path):
    names = ["emb\x1b[2J", "blocks.0", 'odd-name."x', "blocks.2"]
    t = testing.layer_table([10, 100, 100, 100], names=names, layers_per_ipu=[3, 1])
    path = tmp_path / "h"
    write_bundle(testing.layered_report(t, tiles_per_ipu=1, gradient_accumulation=16), path)
    proc = run_cli("plan", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout
    assert '  model["odd-name"]["\\"x"] = poptorch.BeginBlock(model["odd-name"]["\\"x"], ipu_id=1)' in proc.stdout
    import ast

    for line in json.loads(run_cli("plan", str(path), "--json").stdout)["code"]["begin_block"]:
        ast.parse(line)  # every line is Python


def test_calibrating_a_report_without_measured_stages_is_one_line(tmp_path):
    est = testing.layered_report(small_layers(), tiles_per_ipu=1, gradient_accumulation=16)
    write_bundle(est, tmp_path / "est")
    write_bundle(testing.pipeline_report([100, 200], execution=False), tmp_path / "real")
    assert_one_line_error(run_cli("plan", str(tmp_path / "real"), "--calibrate", str(tmp_path / "est")),
                          "no measured cycles per stage")


def test_training_and_validation_plan_the_training_engine(tmp_path):
    root = tmp_path / "run"
    write_bundle(testing.layered_report(small_layers(), name="training", tiles_per_ipu=1,
                                        gradient_accumulation=16), root / "training")
    inference = small_layers(backward_factor=0.0)
    write_bundle(testing.layered_report(inference, name="inference", mode="inference", tiles_per_ipu=1,
                                        device_iterations=8), root / "inference")
    default = run_cli("plan", str(root), "--json")
    assert default.returncode == 0 and json.loads(default.stdout)["engine"] == "training"
    assert default.stderr == ("popviz plan: planning training, the run's training engine (inference too: "
                              "--engine NAME)\n")
    write_bundle(testing.layered_report(small_layers(), name="other", tiles_per_ipu=1, gradient_accumulation=16),
                 root / "other")
    assert_one_line_error(run_cli("plan", str(root)), "several engines", "--engine")  # two training engines
    proc = run_cli("plan", str(root), "--engine", "inference", "--json")
    doc = json.loads(proc.stdout)
    # inference: forward only, one micro-batch in flight; D = 8 over S = N = 2 slots (3,100 |
    # 2,500): 8 pipeline cycles of 3,100 and one of 2,500
    assert doc["engine"] == "inference" and doc["settings"]["training"] is False
    assert doc["current"]["bottleneck_cycles"] == 3_500 and doc["proposed"]["bottleneck_cycles"] == 3_100
    assert [s["stash_depth"] for s in doc["proposed"]["stages"]] == [1, 1]
    assert doc["proposed"]["ramp_efficiency_frac"] == pytest.approx(8 * 3_100 / (8 * 3_100 + 2_500))


def test_a_pipeline_deeper_than_g_is_not_proposed():
    from popviz.analysis.layer_plan import make_plan

    # G = 2: N = 2 means S = 3 pipeline stages, N = 3 S = 5; PopTorch rejects G < S, so 1 IPU wins
    plan = make_plan(testing.layered_report(small_layers(), tiles_per_ipu=1, gradient_accumulation=2),
                     max_ipus=3)
    assert [v.fills_pipeline for v in plan.by_ipus.values()] == [True, False, False]
    assert len(plan.proposed.stages) == 1 and plan.proposed.bottleneck_cycles == 16_800
    # the deeper pipelines' figures are for the least G PopTorch accepts (G = S), not G = 2
    assert [v.micro_batches for v in plan.by_ipus.values()] == [2, 3, 5]
    from popviz.render import plan as render_plan

    text = "\n".join(render_plan.text_lines(plan, None, None, 200))
    assert ("at G=…: G = 2 is below their pipeline stages (S=3 on 2 IPUs, S=5 on 3 IPUs), which PopTorch refuses, "
            "so their figures are for G=S, not like for like with now's; the proposal is the fastest at G = 2") in text
    # on exactly 2 IPUs it is still the answer, with a note saying G must grow
    exact = make_plan(testing.layered_report(small_layers(), tiles_per_ipu=1, gradient_accumulation=2))
    assert exact.proposed.layers_per_ipu == [3, 1]
    assert "G = 2 is below the proposed pipeline's S = 3 stages: PopTorch rejects that; raise G to 3 " \
           "or more (the code below does; its ramp and rate are at G = 3)" in exact.notes
    v = exact.proposed  # its figures at G = 3: G x 9,300 over 33,600 cycles through the pipeline
    assert (v.micro_batches, round(v.ramp_efficiency_frac, 6), v.micro_batches_per_second) == (3, 0.830357, 118_750.0)
    # and the code does: the check command under the emulator would otherwise fail to compile
    from popviz.analysis.layer_plan import code_dict

    assert code_dict(exact)["pipeline_depth"] == ("opts.Training.gradientAccumulation(3)  # at least the 3 "
                                                  "pipeline stages")
    assert code_dict(plan)["pipeline_depth"] is None


def test_memory_findings_name_a_split_that_fits():
    from popviz.analysis import analyse
    from popviz.model import ReportSet

    # activations 60,000 B: now IPU0 = 100,000 + 120,000 + 120,000 x 3 + 5,000 = 585,000 B, 92% of
    # 638,976 and over the 90% budget; [1, 3] fits (345,000 / 375,000) at 13,500 cycles instead
    # of 10,500: G = 16 take 1,100 + 16 × 13,500 + 2,200 = 219,300 cycles instead of 174,300: -21%
    t = testing.layer_table(
        [100, 1000, 1000, 1000, 1000, 1500], names=NAMES,
        roles=["embeddings", "layer", "layer", "layer", "layer", "head"],
        pins=["first", None, None, None, None, "last"], layers_per_ipu=[2, 2],
        weight_bytes=[100_000, 60_000, 60_000, 60_000, 60_000, 10_000],
        activation_bytes=[0, 60_000, 60_000, 60_000, 60_000, 0],
        temporary_bytes=[0, 5_000, 5_000, 5_000, 5_000, 0])
    engine = analyse(ReportSet([testing.layered_report(t, tiles_per_ipu=1, gradient_accumulation=16)])).engines[0]
    text = ("`popviz plan` finds a split within 90% of each IPU's memory (the current one is not), at "
            "-21% throughput: layers_per_ipu=[1, 3] with available memory proportions [0.35, 0.3] "
        "(their slower matmuls are not in that figure).")
    mem = next(f for f in engine.findings if f.code == "MEM003")
    assert mem.recommendation.endswith(text)
    action = next(a for a in engine.plan.actions if a.code == "MEM003")
    assert action.hint["current_fits"] is False and action.hint["layers_per_ipu"] == [1, 3]


def test_the_hint_on_an_out_of_memory_split_does_not_call_its_modelled_rate_a_gain():
    """The current split of oom_model cannot run: the plan's 44% is against what it would do."""
    from popviz import load
    from popviz.analysis import analyse

    from conftest import SAMPLES

    engine = analyse(load(SAMPLES / "oom_model")).engines[0]
    mem = next(f for f in engine.findings if f.code == "MEM001")
    assert mem.recommendation.endswith(
        "`popviz plan` finds a split within 90% of each IPU's memory (the current one does not fit at all), 44% "
        "faster than the current split would be: layers_per_ipu=[3, 5] with available memory proportions [0.05, 0.15] "
        "(their slower matmuls are not in that figure).")


def test_without_a_profile_the_ramp_is_weighed_by_the_estimates_layers_as_plan_does():
    """oom_model never ran (no execution profile), but its estimate has per-layer cycles: IPU0 is
    the slowest stage in every pipeline cycle it works in, so the ramp costs almost nothing. The
    count bound (80%, 'raise G to 18') would contradict the plan's 99.9%."""
    from popviz import load
    from popviz.analysis import analyse
    from popviz.analysis.layer_plan import make_plan

    from conftest import SAMPLES

    report = load(SAMPLES / "oom_model")["training"]
    engine = analyse(load(SAMPLES / "oom_model")).engines[0]
    p = engine.metrics["pipeline"]
    assert (p["ramp_efficiency_basis"], round(p["ramp_efficiency_frac"], 4), p["ramp_efficiency_count_frac"],
            p["micro_batches_for_target"]) == ("model", 0.9986, 0.8, 8)
    assert "PIPE003" not in {f.code for f in engine.findings}
    assert engine.outputs["pipeline"].caption == ("ramp efficiency 99.9% weighed by the estimate's per-layer cycles "
                                                  "(no execution profile; S = 3; count bound G/(G+S-1) 80.0%)\n"
                                                  "estimated achieved efficiency (forward+backward FLOPs / Mk2 float32 "
                                                  "peak): layers up to 25% (layers.7)")
    plan = make_plan(report)
    assert round(plan.current.ramp_efficiency_frac, 4) == 0.9986
    assert any("ramp efficiency 99.9% (model 99.9%" in n for n in plan.notes)


def test_the_check_command_says_it_checks_the_split_not_the_memory_proportions():
    from popviz import load
    from popviz.analysis.layer_plan import make_plan
    from popviz.render import plan as render_plan

    from conftest import SAMPLES

    plan = make_plan(load(SAMPLES / "oom_model")["training"])
    assert plan.available_memory_proportion == [0.05, 0.15]
    text = " ".join(render_plan.text_lines(plan, "popviz capture --emulate --split layers_per_ipu=3,5 -- x", None, 200))
    assert ("(it checks the split; the memory proportions above apply once the script sets them, and their "
            "slower matmuls are not in this plan's cycles)") in text


def tied_head_table(layers_per_ipu):
    """Embeddings, six encoder layers, a head whose transform runs after the last layer, its
    decoder tied to the embeddings (back on IPU0, as its weights are there) and the loss."""
    from popviz.model import Layer, LayerTable

    names = ["embeddings", *(f"encoder.layer.{i}" for i in range(6)), "cls.transform", "loss"]
    base = testing.layer_table(
        [100, *[1000] * 6, 500, 100], names=names, roles=["embeddings", *["layer"] * 6, "head", "loss"],
        pins=["first", *[None] * 6, None, "last"], layers_per_ipu=layers_per_ipu,
        weight_bytes=[100_000, *[60_000] * 6, 10_000, 0], activation_bytes=[0, *[20_000] * 6, 1_000, 0],
        temporary_bytes=[0, *[5_000] * 6, 0, 0])
    decoder = Layer("cls.decoder", role="head", stage=len(layers_per_ipu), ipu=0, fwd_cycles=400,
                    bwd_cycles=800, activation_bytes=1_000, tied_to="embeddings")
    layers = list(base.layers)
    layers.insert(8, decoder)
    return LayerTable(layers=tuple(layers), source="emulator")


TIED_CODE = [
    "model.embeddings = poptorch.BeginBlock(model.embeddings, ipu_id=0)",
    "model.encoder.layer[2] = poptorch.BeginBlock(model.encoder.layer[2], ipu_id=1)",
    "model.encoder.layer[4] = poptorch.BeginBlock(model.encoder.layer[4], ipu_id=2)",
    # the tied decoder goes back to IPU0, beside the embeddings' weights; the loss after it
    # returns to the last IPU: without these two lines both would run in layer[4]'s block
    "model.cls.decoder = poptorch.BeginBlock(model.cls.decoder, ipu_id=0)",
    "model.loss = poptorch.BeginBlock(model.loss, ipu_id=2)",
]


def test_code_places_a_tied_projection_after_the_last_layer(tmp_path):
    path = tmp_path / "tied"
    write_bundle(testing.layered_report(tied_head_table([3, 2, 1]), name="train", tiles_per_ipu=1,
                                        gradient_accumulation=16), path)
    # now IPU0 = 300 + 3 × 3,000 + the decoder's 1,200 = 10,500 cycles; [2, 2, 2]: 7,500, 6,000
    # and 6,000 + 1,500 + 300 = 7,800
    proc = run_cli("plan", str(path), env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    start = out.index("as code (PopTorch: put BeginBlock on these modules, remove the others):")
    assert out[start + 1:start + 6] == [f"  {line}" for line in TIED_CODE]
    assert out[start + 6].startswith("  opts.setAvailableMemoryProportion(")
    assert ("  IPUConfig(layers_per_ipu=[2, 2, 2], ipus_per_replica=3, matmul_proportion=[0.1, 0.35, 0.5])"
            in unwrapped(proc.stdout).splitlines())

    doc = json.loads(run_cli("plan", str(path), "--json").stdout)
    assert doc["code"]["begin_block"] == TIED_CODE
    assert [(p["layer"], p["ipu"]) for p in doc["placements"]][-3:] == [("cls.transform", 2), ("cls.decoder", 0),
                                                                         ("loss", 2)]
    md = run_cli("plan", str(path), "--markdown").stdout
    assert "```\n" + "\n".join(TIED_CODE) + "\nopts.setAvailableMemoryProportion(" in md


def test_code_keeps_a_tied_head_that_ends_the_model_on_ipu0():
    """As examples/bert_pipeline.py --mlm: the tied MLM head is the model's last part."""
    from popviz.analysis.layer_plan import code_dict, make_plan
    from popviz.model import Layer, LayerTable

    base = small_layers()
    layers = [x for x in base.layers if x.name != "head"]
    mlm = Layer("mlm", role="head", stage=2, ipu=0, fwd_cycles=1_500, bwd_cycles=3_000,
                weight_bytes=10_000, tied_to="embeddings")
    table = LayerTable(layers=(*layers, mlm), source="emulator")
    plan = make_plan(testing.layered_report(table, tiles_per_ipu=1, gradient_accumulation=16))
    # now IPU0 = 300 + 2 × 3,000 + the head's 4,500 = 10,800, IPU1 6,000; [1, 3]: 7,800 / 9,000
    assert [s.cycles for s in plan.current.stages] == [10_800, 6_000]
    assert plan.proposed.layers_per_ipu == [1, 3] and plan.improves
    assert code_dict(plan)["begin_block"] == [
        "model.embeddings = poptorch.BeginBlock(model.embeddings, ipu_id=0)",
        "model.encoder.layer[1] = poptorch.BeginBlock(model.encoder.layer[1], ipu_id=1)",
        "model.mlm = poptorch.BeginBlock(model.mlm, ipu_id=0)"]


def test_a_plan_of_a_likely_pessimistic_estimate_says_to_check_its_split_on_hardware():
    import dataclasses

    from popviz.analysis.layer_plan import make_plan

    report = testing.layered_report(testing.cnn_layers(layers_per_ipu=[4, 2, 1, 1]), gradient_accumulation=16)
    assert not any("pessimistic" in n for n in make_plan(report).notes)
    report.config = dataclasses.replace(report.cfg, options={"emulator": {"small_products_share": 0.94}})
    report.provenance = dataclasses.replace(report.provenance, estimated=True)
    assert [n for n in make_plan(report).notes if "pessimistic" in n] == [
        "the estimate is likely pessimistic: 94% of its operation cycles are small matmuls or convolutions, which "
        "public hardware traces ran several times faster, so the slowest stage here may not be the slowest on an "
        "IPU (docs/emulator.md, B10: the estimate picked the Linear stage, the trace shows the convolution stages); "
        "check a split on hardware"]


def test_asking_for_fewer_ipus_says_what_it_costs_and_still_gives_the_split():
    from conftest import SAMPLES

    proc = run_cli("plan", str(SAMPLES / "bert_even_split"), "--ipus", "2")
    assert proc.returncode == 0, proc.stderr
    text = flat(proc.stdout)
    assert "predicted throughput -37.2% (338.0 → 212.2 micro-batches/s): the best split on 2 IPUs (now 4); it " \
           "frees 2 IPUs" in text
    assert "nothing to change" not in text
    assert "IPUConfig(layers_per_ipu=[5, 7], ipus_per_replica=2" in text


def test_asking_for_more_ipus_says_how_many_more_it_takes():
    from conftest import SAMPLES

    proc = run_cli("plan", str(SAMPLES / "bert_planned"), "--ipus", "8")
    assert proc.returncode == 0, proc.stderr
    assert "predicted throughput +89.8% (365.3 → 693.2 micro-batches/s): the best split on 8 IPUs (now 4); it " \
           "takes 4 more IPUs per replica" in flat(proc.stdout)


def test_halving_the_micro_batch_saves_at_most_what_the_activations_take():
    # bert_even_split's least-memory split puts the tied MLM head on IPU0: its logits are stashed
    # once, not at stage 0's depth, and halve with the micro-batch (was: saves 337.4 MiB of the 303
    # MiB that are not code, "fits")
    from conftest import SAMPLES

    proc = run_cli("plan", str(SAMPLES / "bert_even_split"), "--headroom", "0.1")
    assert proc.returncode == 1, proc.stderr  # no split fits
    text = flat(proc.stdout)
    assert "0 333.8 MiB 37% 244.1 MiB" in text
    assert "- halve the micro-batch: saves 90.9 MiB (95,363,586 bytes): not enough" in text


def test_a_failed_compile_says_so_instead_of_asking_for_the_emulator(tmp_path):
    # mistake_di.py: deviceIterations(2) for 4 pipeline stages; the capture recorded the error and
    # nothing else (no memory, no execution, no layers)
    error = ("Error: 'poptorch_cpp_error': poptorch.Options().deviceIterations must be greater than or equal "
             "to the number of pipeline stages (4) when using PopTorch.PipelinedExecution.")
    r = testing.pipeline_report([1000] * 4, mode="inference", memory_level=None, execution=False)
    r = r.replace(provenance=dataclasses.replace(r.provenance, notes=(f"compilation failed: {error}",)))
    write_bundle(r, tmp_path / "r")
    proc = run_cli("plan", str(tmp_path / "r"))
    assert_one_line_error(proc, "inference: compile failed before any estimate: poptorch.Options()"
                          ".deviceIterations must be greater than or equal to the number of pipeli…; "
                          "fix it, capture again")
    assert "popviz capture --emulate" not in proc.stderr and len(unwrapped(proc.stderr).strip()) <= 160 + len("popviz: error: ")
    # a short error is quoted whole
    r = r.replace(provenance=dataclasses.replace(r.provenance, notes=("compilation failed: Error: 'x': bad G",)))
    write_bundle(r, tmp_path / "s")
    assert_one_line_error(run_cli("plan", str(tmp_path / "s")),
                          "inference: compile failed before any estimate: bad G; fix it, capture again")


SKIPS_IPU1 = """
import torch, poptorch

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(256, 256); self.b = torch.nn.Linear(256, 256); self.c = torch.nn.Linear(256, 10)
        self.loss = torch.nn.CrossEntropyLoss()
    def forward(self, x, y):
        with poptorch.Block(ipu_id=0):
            x = self.a(x)
        with poptorch.Block(ipu_id=2):
            x = self.b(x)
        with poptorch.Block(ipu_id=3):
            x = self.c(x)
            return x, self.loss(x, y)

opts = poptorch.Options().deviceIterations(4)
opts.Training.gradientAccumulation(8)
m = M()
tm = poptorch.trainingModel(m, opts, poptorch.optim.SGD(m.parameters(), lr=0.1))
tm(torch.randn(32 * 8, 256), torch.randint(0, 10, (32 * 8,)))
"""


def test_plan_names_the_stages_when_the_report_skips_an_ipu(tmp_path):
    """Blocks on IPUs 0, 2 and 3: the table's rows were labelled IPU 0, 1, 2, and the note's
    'IPU3 2.8% full' was set beside no model figure."""
    import sys

    pytest.importorskip("torch")
    (tmp_path / "skip.py").write_text(SKIPS_IPU1)
    capture = run_cli("capture", "--emulate", "--calls", "1", "-o", str(tmp_path / "cap"), "--",
                      sys.executable, "skip.py", cwd=tmp_path, timeout=300)
    assert capture.returncode == 0, capture.stderr
    out = run_cli("plan", str(tmp_path / "cap"), env={"COLUMNS": "100"}).stdout
    assert "\nstage  layers  cycles/µb" in out
    assert "\nstages: now on IPU0, IPU2, IPU3; a plan puts stage k on IPU k\n" in out
    assert re.search(r"IPU3 \d+\.\d% full \(model \d+\.\d%\)", flat(out))
    # PopTorch reserves IPUs 0-3 for it: two IPUs free two, not one ("now 3; it frees 1" before)
    two = flat(run_cli("plan", str(tmp_path / "cap"), "--ipus", "2").stdout)
    assert "the best split on 2 IPUs (now 3 of the 4 PopTorch reserves); it frees 2 IPUs per replica" in two


def test_a_split_over_three_ipus_says_to_round_them_up():
    """PopTorch refuses 3 IPUs unless autoRoundNumIPUs(True): the plan's code includes it."""
    from conftest import SAMPLES

    proc = run_cli("plan", str(SAMPLES / "bert_planned"), "--ipus", "3")
    assert proc.returncode == 0, proc.stderr
    assert "\n  opts.autoRoundNumIPUs(True)  # 3 IPUs: PopTorch reserves 4\n" in proc.stdout
    doc = json.loads(run_cli("plan", str(SAMPLES / "bert_planned"), "--ipus", "3", "--json").stdout)
    assert doc["code"]["auto_round_num_ipus"] == "opts.autoRoundNumIPUs(True)  # 3 IPUs: PopTorch reserves 4"
    four = json.loads(run_cli("plan", str(SAMPLES / "bert_planned"), "--json").stdout)
    assert four["code"]["auto_round_num_ipus"] is None


def test_default_budget_is_the_fill_analyse_warns_above():
    """A split `popviz plan` proposes at its default budget must not draw MEM003 once captured:
    the CLI's default, the planner's and the memory analysis's threshold are one fraction."""
    import argparse

    from popviz.analysis.planner import DEFAULT_HEADROOM_FRAC
    from popviz.analysis.thresholds import IPU_FULL_FRAC
    from popviz.commands.plan import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["r"]).headroom == DEFAULT_HEADROOM_FRAC == IPU_FULL_FRAC == 0.9


def test_max_ipus_beyond_the_layers_tries_as_many_as_they_fill(small):
    """--max-ipus N tries 1..N (docs/plan.md): with fewer layers than N it tries 1..layers and
    says so (it was an error)."""
    proc = run_cli("plan", str(small), "--max-ipus", "12", env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "note: --max-ipus 12: 6 layers fill at most 6 IPUs (one layer per IPU), so 1 to 6 are tried" \
        in proc.stdout
    # the per-IPU column divides by the IPUs PopTorch reserves (3 of them reserve 4)
    assert ("per IPU: over the IPUs PopTorch reserves (3 reserve 4, 5 reserve 8, 6 reserve 8: IPU counts round "
            "up to a power of two)") in proc.stdout
    doc = json.loads(run_cli("plan", str(small), "--max-ipus", "12", "--json").stdout)
    three = next(r for r in proc.stdout.splitlines() if re.match(r"^3 ", r)).split()
    mbps = next(v for k, v in doc["by_ipus"].items() if k == "3")["micro_batches_per_second"]
    assert three[3] == f"{mbps:,.1f}" and three[4] == f"{mbps / 4:,.2f}"
    # --ipus N beyond the layers stays an error: that exact split cannot exist
    assert run_cli("plan", str(small), "--ipus", "12").returncode == 2
