"""Fuzzing the readers and every analysis: random damage to a valid bundle's metadata and tables,
and to a real capture's popviz-model.json. Whatever the input, popviz.load() returns Reports or
raises a PopvizError, and analysing and rendering (console, Markdown, JSON valid against schema 1)
what it returns never fails.

Budget: ``POPVIZ_FUZZ_EXAMPLES`` examples per test (default 40, a few seconds each test); set it
higher for a long run, e.g. ``POPVIZ_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz.py``. A crash
found here becomes a case in tests/corpus/make_corpus.py.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import popviz
from popviz.analysis import analyse
from popviz.errors import PopvizError
from popviz.render import console, markdown
from popviz.render import json as render_json

EXAMPLES = int(os.environ.get("POPVIZ_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 40,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
    | st.sampled_from(["../x", "/abs", "[/link]x", "Final", "EveryN", "training", "pva", "tile"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a JSON document."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


def set_path(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    doc[path[0]] = set_path(doc[path[0]], path[1:], value)
    return doc


def must_load_or_refuse(directory: Path) -> None:
    from jsonschema import validate

    try:
        reports = popviz.load(directory)
    except PopvizError as exc:
        assert "\n" not in exc.message
        return
    result = analyse(reports)
    console.render(result, file=io.StringIO(), width=80)
    markdown.render(result)
    validate(json.loads(render_json.render(result)), render_json.schema())


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory) -> Path:
    from popviz import testing
    from popviz.sources.bundle import write_bundle

    d = tmp_path_factory.mktemp("base") / "training"
    report = testing.pipeline_report([1000, 3000, 2000], tiles_per_ipu=8, output_mode="EveryN",
                                     output_return_period=2, device_iterations=4,
                                     available_memory_proportion={0: 0.3})
    write_bundle(report, d)
    return d


@FUZZ
@given(data=st.data())
def test_damaged_bundle_metadata(bundle_dir, data):
    doc = json.loads((bundle_dir / "popviz-report.json").read_text())
    path = data.draw(st.sampled_from(paths(doc)[1:]))
    doc = set_path(doc, path, data.draw(json_values))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "training"
        shutil.copytree(bundle_dir, d)
        (d / "popviz-report.json").write_text(json.dumps(doc))
        must_load_or_refuse(d)


@FUZZ
@given(data=st.data())
def test_damaged_bundle_tables(bundle_dir, data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    file = data.draw(st.sampled_from(["memory.parquet", "execution.parquet", "runs.parquet"]))
    frame = pq.read_table(bundle_dir / file).to_pandas()
    column = data.draw(st.sampled_from(list(frame.columns)))
    row = data.draw(st.integers(0, len(frame) - 1))
    value = data.draw(st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=True, allow_infinity=True)
                      | st.text(max_size=6))
    frame = frame.astype({column: "object"})
    frame.loc[row, column] = value
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "training"
        shutil.copytree(bundle_dir, d)
        try:
            table = pa.Table.from_pandas(frame, preserve_index=False)
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            return  # a value Parquet itself cannot hold in that column
        pq.write_table(table, d / file)
        must_load_or_refuse(d)


@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory) -> Path:
    """A real capture (fake PopTorch in tests/fake_poptorch) of a two-stage pipeline."""
    from test_capture_hooks import FAKE_ENV, PIPELINE

    from conftest import run_cli

    tmp = tmp_path_factory.mktemp("capture")
    (tmp / "train.py").write_text(PIPELINE)
    proc = run_cli("capture", "-o", "out", "--", os.sys.executable, "train.py", cwd=tmp, env=FAKE_ENV)
    assert proc.returncode == 0, proc.stderr
    return tmp / "out" / "training"


@FUZZ
@given(data=st.data())
def test_damaged_capture_manifest(manifest_dir, data):
    doc = json.loads((manifest_dir / "popviz-model.json").read_text())
    path = data.draw(st.sampled_from(paths(doc)[1:]))
    doc = set_path(doc, path, data.draw(json_values))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "training"
        d.mkdir()
        (d / "popviz-model.json").write_text(json.dumps(doc))
        must_load_or_refuse(d)
