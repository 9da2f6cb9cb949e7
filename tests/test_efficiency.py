"""Achieved efficiency (popviz/analysis/efficiency.py): FLOPs per cycle over the IPU's peak, per
stage and layer, on builder reports with exact figures and on an emulated model."""

from __future__ import annotations

import dataclasses

import jsonschema
import pytest

from popviz import testing
from popviz.analysis import pipeline
from popviz.model import Layer, LayerTable
from popviz.model.ipu_peak import FLOPS_PER_TILE_CYCLE
from popviz.render.json import schema

PEAK_MK2_FP16 = 128 * 1472  # FLOPs per cycle of one Mk2 IPU in float16 (IPU-M2000 datasheet)
FP16_INPUT = {"x": ((4, 128), "float16")}  # float16 host inputs: the model runs in float16


def with_flops(table: LayerTable, fwd: list[int | None], bwd: list[int | None]) -> LayerTable:
    return dataclasses.replace(table, layers=tuple(
        dataclasses.replace(x, fwd_flops=f, bwd_flops=b) for x, f, b in zip(table, fwd, bwd, strict=True)))


def three_layers(fwd_flops: int = PEAK_MK2_FP16 * 300, **kwargs) -> LayerTable:
    # 1000, 1000 and 2000 forward cycles (backward twice that): layers 0-1 on IPU0, 2 on IPU1
    table = testing.layer_table([1000, 1000, 2000], layers_per_ipu=[2, 1], **kwargs)
    return with_flops(table, [fwd_flops] * 3, [2 * fwd_flops] * 3)


def test_exact_figures_per_stage_and_layer():
    report = testing.layered_report(three_layers(), inputs=FP16_INPUT)
    out = pipeline.analyse(report)
    eff = out.metrics["efficiency"]
    flops = 3 * PEAK_MK2_FP16 * 300  # forward + backward of one layer: 169,574,400
    assert flops == 169_574_400
    assert {k: eff[k] for k in ("estimated", "architecture", "precision", "peak_flops_per_cycle",
                                "flops_counted", "flops_estimated")} == {
        "estimated": False, "architecture": "Mk2", "precision": "float16",
        "peak_flops_per_cycle": 188_416.0, "flops_counted": "forward+backward", "flops_estimated": True}
    # layers: 900 FLOP-cycles at peak (3 x 300) in 3,000 and 6,000 cycles
    assert eff["layers"] == [
        {"name": "layer.0", "stage": 0, "flops": flops, "cycles": 3000, "frac": 0.3},
        {"name": "layer.1", "stage": 0, "flops": flops, "cycles": 3000, "frac": 0.3},
        {"name": "layer.2", "stage": 1, "flops": flops, "cycles": 6000, "frac": 0.15}]
    # stages: the stage table's cycles per micro-batch (6,000 of layers + 62.5 of weight update)
    assert [row["cycles"] for row in out.metrics["stages"]] == [6062.5, 6062.5]
    assert eff["stages"] == [
        {"index": 0, "flops": 2 * flops, "cycles": 6062.5, "frac": 2 * flops / 6062.5 / 188_416},
        {"index": 1, "flops": flops, "cycles": 6062.5, "frac": flops / 6062.5 / 188_416}]
    assert round(eff["stages"][0]["frac"], 6) == 0.296907
    assert out.caption.splitlines()[-1] == (
        "achieved efficiency (forward+backward estimated FLOPs / Mk2 float16 peak): stage 0 30%, stage 1 15%, "
        "layers up to 30% (layer.0)")
    assert not [n for n in out.not_checked if n.check == "achieved efficiency"]


def test_estimated_report_is_labelled_and_float32_uses_its_peak():
    report = testing.layered_report(three_layers(), inputs={"x": ((4, 128), "float16")}, estimated=True,
                                    architecture="Bow")
    eff = pipeline.analyse(report).metrics["efficiency"]
    assert eff["estimated"] is True and eff["peak_flops_per_cycle"] == 188_416.0
    assert pipeline.analyse(report).caption.splitlines()[-1].startswith(
        "estimated achieved efficiency (forward+backward FLOPs / Bow float16 peak): stage 0 30%")
    fp32 = testing.layered_report(three_layers(fwd_flops=PEAK_MK2_FP16 * 100), inputs=FP16_INPUT)
    fp32 = fp32.replace(config=dataclasses.replace(fp32.cfg, options={
        **fp32.cfg.options, "model": {"parameters": 10, "parameter_bytes": 40}}))
    eff = pipeline.analyse(fp32).metrics["efficiency"]
    assert eff["precision"] == "float32" and eff["peak_flops_per_cycle"] == 32 * 1472
    # a quarter of the float16 peak: 300 cycles at the float16 peak are 1,200 at the float32 one
    assert [round(r["frac"], 12) for r in eff["layers"]] == [0.4, 0.4, 0.2]


def test_inference_counts_the_forward_only():
    table = testing.layer_table([1000, 3000], layers_per_ipu=[1, 1], backward_factor=0.0)
    table = with_flops(table, [PEAK_MK2_FP16 * 100, PEAK_MK2_FP16 * 600], [0, 0])
    report = testing.layered_report(table, inputs=FP16_INPUT)
    eff = pipeline.analyse(report).metrics["efficiency"]
    assert report.cfg.mode == "inference" and eff["flops_counted"] == "forward"
    assert [(r["cycles"], round(r["frac"], 12)) for r in eff["layers"]] == [(1000, 0.1), (3000, 0.2)]


def test_a_report_without_flops_says_not_checked():
    report = testing.layered_report(testing.layer_table([1000, 2000], layers_per_ipu=[1, 1]),
                                    inputs=FP16_INPUT)
    out = pipeline.analyse(report)
    assert out.metrics["efficiency"] is None
    assert [(n.check, n.reason) for n in out.not_checked if n.check == "achieved efficiency"] == [
        ("achieved efficiency", "no FLOPs per layer in this report")]
    assert "achieved efficiency" not in (out.caption or "")


def test_unknown_precision_is_not_guessed():
    report = testing.layered_report(three_layers(), inputs={"x": ((4, 128), "float32")})
    out = pipeline.analyse(report)
    assert out.metrics["efficiency"] is None
    assert [n.reason for n in out.not_checked if n.check == "achieved efficiency"] == [
        "the model's precision is not recorded: its peak is unknown"]


def test_above_the_peak_is_never_shown_as_a_figure():
    # 6,000 cycles at peak in 3,000 would be 200%: FLOPs and cycles disagree (layer 2: 100%, stage 1: 99%)
    report = testing.layered_report(three_layers(fwd_flops=PEAK_MK2_FP16 * 2000), inputs=FP16_INPUT)
    out = pipeline.analyse(report)
    assert out.metrics["efficiency"] is None
    assert [n.reason for n in out.not_checked if n.check == "achieved efficiency"] == [
        "stage 0, layer layer.0, layer layer.1 would exceed the IPU's peak: the report's FLOPs and cycles disagree"]


def test_json_validates_against_schema_1():
    from popviz.analysis import analyse
    from popviz.model import ReportSet
    from popviz.render.json import result_to_dict

    doc = result_to_dict(analyse(ReportSet([testing.layered_report(three_layers(), inputs=FP16_INPUT)])))
    jsonschema.Draft202012Validator(schema()).validate(doc)
    assert doc["engines"][0]["metrics"]["pipeline"]["efficiency"]["layers"][0]["frac"] == 0.3


def test_layer_flops_are_optional_and_round_trip_a_bundle(tmp_path):
    from popviz.sources.bundle import read_bundle, write_bundle

    assert Layer("a").fwd_flops is None and Layer("a").bwd_flops is None
    with pytest.raises(Exception, match="fwd_flops must be a non-negative integer or null"):
        Layer("a", fwd_flops=-1)
    with pytest.raises(Exception, match="bwd_flops must be a non-negative integer or null"):
        Layer("a", bwd_flops=1.5)
    report = testing.layered_report(three_layers(), inputs=FP16_INPUT)
    write_bundle(report, tmp_path / "b")
    back = read_bundle(tmp_path / "b")
    assert [x.fwd_flops for x in back.layers] == [56_524_800] * 3
    assert LayerTable(layers=({"name": "old", "fwd_cycles": 5},)).layers[0].fwd_flops is None


def test_the_emulator_reads_its_peaks_from_the_model_layer():
    from popviz.emulator import hardware as hw

    for arch, spec in hw.SPECS.items():
        assert spec.fp16_flops_per_tile_cycle == FLOPS_PER_TILE_CYCLE[arch]["float16"]
        assert spec.fp32_flops_per_tile_cycle == FLOPS_PER_TILE_CYCLE[arch]["float32"]
    assert hw.SPECS["Mk2"].flops_per_cycle(2) == PEAK_MK2_FP16


def test_emulated_layers_carry_the_measured_flops():
    torch = pytest.importorskip("torch")
    import popviz.emulator as poptorch

    h = 16

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(h, 2 * h)
            self.down = torch.nn.Linear(2 * h, h)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.ModuleList(Block() for _ in range(4))
            poptorch.BeginBlock(self.body[2], "second", ipu_id=1)

        def forward(self, x, target):
            for block in self.body:
                x = block(x)
            return x, torch.nn.functional.mse_loss(x, target)

    opts = poptorch.Options()
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.SameAsIpu))
    opts.Training.gradientAccumulation(4)
    model = Model()
    ex = poptorch.trainingModel(model, opts, optimizer=poptorch.optim.SGD(model.parameters(), lr=0.1))
    model.half()  # float16 host inputs: the report records the model's precision
    x = torch.randn(4 * 8, h, generator=torch.Generator().manual_seed(0)).half()
    ex.compile(x, x.clone())
    report = ex.popvizReport()
    blocks = {x.name: x for x in report.layers if x.name.startswith("body.")}
    per_block = 2 * 8 * h * 2 * h * 2  # two products of 8 rows x 16 x 32 per micro-batch of 8
    assert [blocks[f"body.{i}"].fwd_flops for i in range(4)] == [per_block] * 4
    # the cost model's backward: two products per product, for the gradients autodiff grows; the
    # first block's input needs none, so its first product computes the weight's gradient alone
    assert [blocks[f"body.{i}"].bwd_flops for i in range(4)] == [3 * per_block // 2] + [2 * per_block] * 3
    out = pipeline.analyse(report)
    eff = out.metrics["efficiency"]
    assert eff is not None, out.not_checked
    assert eff["estimated"] is True and eff["precision"] == "float16"
    fracs = [r["frac"] for r in eff["layers"] + eff["stages"] if r["frac"] is not None]
    assert fracs and all(0 < f <= 1 for f in fracs)


def test_a_measured_profile_without_flops_says_not_checked():
    report = testing.pipeline_report([1000, 2000], source="pva", inputs=FP16_INPUT)
    out = pipeline.analyse(report)
    assert out.metrics["efficiency"] is None
    assert [n.reason for n in out.not_checked if n.check == "achieved efficiency"] == [
        "no FLOPs per layer in this report"]


def test_the_stages_plot_shows_each_stage_share_of_the_peak():
    pytest.importorskip("matplotlib")
    from popviz import plot

    fig = plot.stages(testing.layered_report(three_layers(), inputs=FP16_INPUT, estimated=True))
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert [t.splitlines()[-1] for t in texts] == ["30% of peak", "15% of peak"]
    assert ax.get_xlabel() == ("estimated achieved efficiency: forward+backward FLOPs per cycle / "
                               "Mk2 float16 peak")
    plain = plot.stages(testing.layered_report(testing.layer_table([1000, 2000], layers_per_ipu=[1, 1]),
                                               inputs=FP16_INPUT))
    assert not any("of peak" in t.get_text() for t in plain.axes[0].texts) and plain.axes[0].get_xlabel() == ""


def test_a_calibrated_profile_counts_the_estimate_flops_against_measured_cycles():
    report = testing.layered_report(three_layers(source="calibrated"), inputs=FP16_INPUT, source="pva")
    out = pipeline.analyse(report)
    eff = out.metrics["efficiency"]
    assert eff["estimated"] is False and eff["flops_estimated"] is True
    assert [r["frac"] for r in eff["layers"]] == [0.3, 0.3, 0.15]
    assert "achieved efficiency (forward+backward estimated FLOPs / Mk2 float16 peak)" in out.caption
