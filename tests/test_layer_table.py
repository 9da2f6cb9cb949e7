"""The per-layer table of a Report (for popviz plan): checks and the bundle round trip."""
import pytest

from popviz import testing
from popviz.model import Layer, LayerTable, ModelError
from popviz.sources.bundle import read_bundle, write_bundle


def test_roundtrip(tmp_path):
    r = testing.single_ipu_report()
    lt = LayerTable(layers=(Layer("emb", role="embeddings", pin="first", fwd_cycles=10, weight_bytes=4),
                            Layer("enc.0", stage=0, ipu=0, fwd_cycles=100, bwd_cycles=200, activation_bytes=7)),
                    depth=2, micro_batch_size=8)
    r = r.replace(layers=lt)
    write_bundle(r, tmp_path / "b")
    back = read_bundle(tmp_path / "b")
    assert back.layers == lt and back == r
    assert list(lt.frame()["fwd_cycles"]) == [10, 100]

@pytest.mark.parametrize("kw", [dict(fwd_cycles=-1), dict(role="x"), dict(pin="middle"), dict(ipu=True), dict(weight_bytes=1.5)])
def test_bad(kw):
    with pytest.raises(ModelError):
        Layer("a", **kw)

def test_dup():
    with pytest.raises(ModelError):
        LayerTable(layers=(Layer("a"), Layer("a")))


def test_version_1_bundle_without_layers_reads(tmp_path):
    import json

    write_bundle(testing.single_ipu_report(), tmp_path)
    meta_path = tmp_path / "popviz-report.json"
    meta = json.loads(meta_path.read_text())
    meta["format_version"] = 1
    del meta["layers"]
    meta_path.write_text(json.dumps(meta))
    assert read_bundle(tmp_path).layers is None


def test_bad_layers_in_a_bundle_is_a_one_line_error(tmp_path):
    import json

    from popviz.errors import CorruptReportError

    write_bundle(testing.single_ipu_report(), tmp_path)
    meta_path = tmp_path / "popviz-report.json"
    meta = json.loads(meta_path.read_text())
    meta["layers"] = {"layers": [{"name": "a", "fwd_cycles": -5}]}
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CorruptReportError, match="fwd_cycles must be a non-negative integer"):
        read_bundle(tmp_path)
