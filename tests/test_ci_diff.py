"""popviz compare explains a regression: the per-layer, per-program-type and per-memory-category
diff, ranked by the regressed figure, and the environment diff, in every output; baselines carry
both, and older baselines still compare and say what they lack. Reports built with
popviz.testing, written as real bundles, through the real CLI."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from popviz import escape, testing
from popviz.ci.baseline import from_reports
from popviz.ci.compare import compare
from popviz.ci.diff import breakdown, diff_items, environment, environment_changes
from popviz.model.parts import Provenance
from popviz.sources.bundle import write_bundle

from conftest import assert_one_line_error, run_cli, unwrapped

FWD = [10_000] * 8


def write(path, *, slow_layer=None, sdk="3.3.0", names=None, weight=1_000_000, big_weight_layer=None):
    fwd = list(FWD)
    if slow_layer is not None:
        fwd[slow_layer] = 16_000
    weights = [weight] * 8
    if big_weight_layer is not None:
        weights[big_weight_layer] = 40_000_000
    layers = testing.layer_table(fwd, layers_per_ipu=[2, 2, 2, 2], weight_bytes=weights, names=names)
    report = testing.layered_report(layers, name="training", gradient_accumulation=16, device_iterations=2)
    report = report.replace(provenance=Provenance(source="bundle", tool=f"Poplar SDK {sdk}",
                                                  versions={"poplar": sdk, "popviz": "0.1.0", "torch": "2.13.0"}))
    write_bundle(report, path / "training")
    return path


def test_a_slower_layer_is_named_first_and_the_sdk_change_beside_the_verdict(tmp_path):
    base, new = write(tmp_path / "base"), write(tmp_path / "new", slow_layer=5, sdk="3.4.0")
    proc = run_cli("compare", str(base), str(new), env={"COLUMNS": "80"})
    assert proc.returncode == 1, proc.stderr
    lines = unwrapped(proc.stdout).splitlines()
    assert lines[0].startswith("popviz: FAIL: regression in training pipeline.cycles_per_micro_batch (60,625 → 78,812")
    # beside the verdict: the environment, then what changed, the slower layer first
    assert lines[1] == "environment changed: Poplar SDK 3.3.0 → 3.4.0"
    assert lines[2] == "what changed in training, ranked by cycles:"
    assert lines[3] == "  layer layer.5 cycles +60.0% (+18,000)"  # 30,000 → 48,000 (forward and backward)
    assert lines[4] == "  program type Sync cycles +32.9% (+724,960)"  # the other IPUs wait for it
    assert all(len(line) <= 80 for line in lines[1:])

    md = run_cli("compare", str(base), str(new), "--markdown")
    assert "**Environment changed:** Poplar SDK 3.3.0 → 3.4.0" in md.stdout
    assert "| layer | `layer.5` | grown | cycles +60.0% (+18,000) |" in md.stdout
    assert md.stdout.index("layer.5") < md.stdout.index("| engine | metric |")

    junit = tmp_path / "j.xml"
    assert run_cli("compare", str(base), str(new), "--junit", str(junit)).returncode == 1
    suite = ET.parse(junit).getroot()
    assert [(p.get("name"), p.get("value")) for p in suite.iter("property")] == [
        ("environment.poplar_sdk", "3.3.0 → 3.4.0")]
    failure = suite.find("testcase[@name='pipeline.cycles_per_micro_batch']/failure")
    assert failure.text.splitlines()[1:] == [
        "environment changed: Poplar SDK 3.3.0 → 3.4.0",
        "largest changes: layer layer.5 cycles +60.0% (+18,000); program type Sync cycles +32.9% (+724,960); "
        "program type OnTileExecute cycles +7.5% (+582,000)"]

    doc = json.loads(run_cli("compare", str(base), str(new), "--json").stdout)
    assert doc["environment"] == [{"field": "poplar_sdk", "label": "Poplar SDK", "base": "3.3.0", "new": "3.4.0"}]
    first = doc["breakdown"][0]
    assert first == {"engine": "training", "kind": "layer", "name": "layer.5", "status": "grown",
                     "base": {"cycles": 30000.0, "memory_bytes": 1000000.0, "code_bytes": 0.0},
                     "new": {"cycles": 48000.0, "memory_bytes": 1000000.0, "code_bytes": 0.0},
                     "measure": "cycles", "delta": 18000.0, "change_pct": 60.0}
    assert [d["name"] for d in doc["breakdown"] if d["kind"] == "layer"] == ["layer.5"]  # the others did not move
    assert doc["breakdown_notes"] == [] and doc["environment_notes"] == []
    import jsonschema

    from popviz.render.json import schema

    full = schema()
    jsonschema.validate(doc, {**full["$defs"]["compare_explained"], "$defs": full["$defs"]})


def test_baselines_carry_the_breakdown_and_older_ones_say_what_they_lack(tmp_path):
    base, new = write(tmp_path / "base"), write(tmp_path / "new", slow_layer=2)
    saved = tmp_path / "baseline.json"
    assert run_cli("baseline", "save", str(base), "-o", str(saved)).returncode == 0
    doc = json.loads(saved.read_text())
    assert doc["format_version"] == 1  # added keys only: older readers ignore them
    engine = doc["engines"][0]
    assert engine["environment"] == {"poplar_sdk": "3.3.0", "popviz": "0.1.0", "torch": "2.13.0",
                                     "ipu_architecture": "Mk2"}
    assert engine["breakdown"]["layers"]["layer.2"] == {"cycles": 30000.0, "memory_bytes": 1000000.0,
                                                        "code_bytes": 0.0}
    out = unwrapped(run_cli("compare", str(saved), str(new), env={"COLUMNS": "80"}).stdout).splitlines()
    assert out[1:3] == ["what changed in training, ranked by cycles:", "  layer layer.2 cycles +60.0% (+18,000)"]

    for e in doc["engines"]:  # as popviz before the breakdown wrote it
        del e["breakdown"], e["environment"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    proc = run_cli("compare", str(old), str(new), env={"COLUMNS": "200"})
    assert proc.returncode == 1
    assert ("BASE does not record its environment (Poplar SDK, popviz, PopTorch, torch, IPU architecture, "
            "host): an older baseline, or a history's median") in proc.stdout
    assert ("BASE does not record what each layer and program type costs (a baseline saved by an older popviz, "
            "or a history's median): no per-layer diff; popviz baseline save records it") in proc.stdout
    assert "what changed" not in proc.stdout


def test_a_malformed_breakdown_in_a_baseline_is_one_line(tmp_path):
    base = write(tmp_path / "base")
    saved = tmp_path / "baseline.json"
    assert run_cli("baseline", "save", str(base), "-o", str(saved)).returncode == 0
    doc = json.loads(saved.read_text())
    doc["engines"][0]["breakdown"]["layers"]["layer.0"]["cycles"] = -5
    saved.write_text(json.dumps(doc))
    assert_one_line_error(run_cli("compare", str(saved), str(base)), "baseline.json", "impossible cycles",
                          "layer 'layer.0'", "save a new one")
    doc["engines"][0]["breakdown"] = {"layers": {"layer.0": {"cycles": 1.0}}}
    doc["engines"][0]["environment"] = {"poplar_sdk": ["3.3"]}
    saved.write_text(json.dumps(doc))
    assert_one_line_error(run_cli("compare", str(saved), str(base)), "invalid environment field poplar_sdk")


def test_a_memory_regression_ranks_by_memory(tmp_path):
    base = from_reports(write(tmp_path / "base"))
    new = from_reports(write(tmp_path / "new", big_weight_layer=6))
    c = compare(base, new, [])
    assert any(r.metric.startswith("memory.") for r in c.regressions)
    assert not any(r.metric.startswith("pipeline.") for r in c.regressions)
    layers = [d for d in c.breakdown if d["kind"] == "layer"]
    assert [(d["name"], d["measure"], d["delta"]) for d in layers] == [("layer.6", "memory_bytes", 39_000_000.0)]
    assert c.explained("training")[0]["name"] == "layer.6"


def test_added_and_removed_items_rank_by_what_they_cost():
    base = {"a": {"cycles": 100.0}, "b": {"cycles": 50.0}, "c": {"cycles": 10.0}}
    new = {"a": {"cycles": 100.5}, "c": {"cycles": 30.0}, "d": {"cycles": 70.0}}
    got = [(d["name"], d["status"], d["delta"]) for d in diff_items("e", "program_types", base, new, "cycles")]
    # a moved 0.5%: under MIN_CHANGE_PCT, not listed; the added d costs most, the removed b saves 50
    assert got == [("d", "added", 70.0), ("c", "grown", 20.0), ("b", "removed", -50.0)]


def test_environment_from_provenance_and_run_record():
    report = testing.pipeline_report([1000, 1000]).replace(
        provenance=Provenance(source="pva", tool="Poplar SDK 3.3.0", versions={"poptorch": "3.3.0"}))
    env = environment(report, {"hostname": "ipu-pod-7", "versions": {"torch": "2.0.1", "poptorch": "ignored"}})
    assert env == {"poplar_sdk": "3.3.0", "poptorch": "3.3.0", "torch": "2.0.1", "ipu_architecture": "Mk2",
                   "host": "ipu-pod-7"}
    changes = environment_changes(env, {**env, "host": "ipu-pod-8", "poplar_sdk": "3.4.0"})
    assert [(c["label"], c["base"], c["new"]) for c in changes] == [("Poplar SDK", "3.3.0", "3.4.0"),
                                                                    ("host", "ipu-pod-7", "ipu-pod-8")]
    assert environment_changes(env, None) == []
    parts = breakdown(report)
    assert set(parts) == {"program_types", "memory_categories"}  # no layer table: no layers part


def test_layer_names_are_data_in_every_output(tmp_path):
    names = [f"layer.{i}" for i in range(8)]
    names[5] = "evil\x1b]52;c;SGVsbG8=\x07|`*name"
    base, new = write(tmp_path / "base", names=names), write(tmp_path / "new", names=names, slow_layer=5)
    out = run_cli("compare", str(base), str(new), env={"COLUMNS": "80"}).stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "  layer evil\ufffd]52;c;SGVsbG8=\ufffd|`*name cycles +60.0% (+18,000)" in out
    md = run_cli("compare", str(base), str(new), "--markdown").stdout
    row = next(line for line in md.splitlines() if "evil" in line)
    assert "\x1b" not in md and row.startswith(f"| layer | {escape.md(names[5])} | grown | ")
    assert len(re.findall(r"(?<!\\)\|", row)) == 5  # four cells: the name's "|" is escaped


def test_an_item_listed_for_another_figure_ranks_by_it_and_says_it():
    from popviz.ci.diff import describe

    base = {"moved": {"cycles": 1000.0, "memory_bytes": 2**20, "code_bytes": 0.0},
            "slower": {"cycles": 1000.0, "memory_bytes": 2**20, "code_bytes": 0.0}}
    new = {"moved": {"cycles": 1002.0, "memory_bytes": 3 * 2**20, "code_bytes": 0.0},  # 2 cycles: jitter
           "slower": {"cycles": 1500.0, "memory_bytes": 2**20, "code_bytes": 0.0}}
    items = diff_items("e", "layers", base, new, "cycles")
    assert [describe(d) for d in items] == ["layer slower cycles +50.0% (+500)",
                                            "layer moved memory 1.0 MiB → 3.0 MiB"]
