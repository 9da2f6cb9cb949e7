"""Fuzzing the CI surfaces (issue 23): random damage to a valid baseline, history, budgets file
and plan file. Whatever the damage, reading returns what it should or raises a PopvizError with
one line, and what is read compares and renders (console, Markdown, JUnit, strict JSON)
without failing.

Budget: ``POPVIZ_FUZZ_EXAMPLES`` examples per test (default 40, as tests/test_fuzz.py); set it
higher for a long run, e.g. ``POPVIZ_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz_ci.py``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import EXAMPLES, json_values, paths, set_path

from popviz import testing
from popviz.errors import PopvizError

FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 40,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
hostile_values = json_values | st.sampled_from([
    -5e9, 10**400, 2**62, 1e308, "\x1b]52;c;eA==\x07", "<script>x</script>", "\n::warning::x", "[/x]",
    {"a": {"b": [1]}}, "fatal", "PIPE001", "memory.ipu0.used_bytes"])


def refused_in_one_line(exc: PopvizError) -> None:
    assert "\n" not in exc.message and exc.message


def render_everything(c) -> None:
    from popviz.ci import render

    render.text(c, width=80)
    render.markdown(c, all_rows=True)
    ET.fromstring(render.junit(c).split("?>", 1)[1])

    def refuse(token):
        raise AssertionError(token)

    json.loads(render.as_json(c), parse_constant=refuse)


@pytest.fixture(scope="module")
def engines():
    import tempfile

    from popviz.ci.baseline import from_reports
    from popviz.sources.bundle import write_bundle

    with tempfile.TemporaryDirectory() as tmp:
        d = write_bundle(testing.pipeline_report([1000, 3000, 2000], name="train", tiles_per_ipu=8,
                                                 gradient_accumulation=8), Path(tmp) / "r" / "train")
        return from_reports(d.parent)


@FUZZ
@given(data=st.data())
def test_damaged_baseline(engines, data, tmp_path_factory):
    from popviz.ci.baseline import document, read
    from popviz.ci.compare import compare

    doc = json.loads(json.dumps(document(engines, "r")))
    where = data.draw(st.sampled_from(paths(doc)))
    doc = set_path(doc, where, data.draw(hostile_values))
    path = tmp_path_factory.mktemp("b") / "base.json"
    path.write_text(json.dumps(doc))
    try:
        base = read(path)
    except PopvizError as exc:
        refused_in_one_line(exc)
        return
    try:
        c = compare(base, engines, [], allow_mixed=True)
    except PopvizError as exc:
        refused_in_one_line(exc)
        return
    render_everything(c)


COLUMNS = {"runs": ("label", "added_at", "id"), "engines": ("engine", "name", "instance", "source", "estimated",
                                                             "config"), "metrics": ("metric", "value", "engine")}


@FUZZ
@given(data=st.data())
def test_damaged_history(engines, data, tmp_path_factory):
    from popviz.ci import history, history_view
    from popviz.ci.trend import trends

    db = tmp_path_factory.mktemp("h") / "h.db"
    for label in ("a", "b", "c"):
        history.add(db, engines, label=label)
    table = data.draw(st.sampled_from(sorted(COLUMNS)))
    column = data.draw(st.sampled_from(COLUMNS[table]))
    value = data.draw(st.none() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=20)
                      | st.sampled_from(["{", "[1]", '{"stages": 5}', "\x1b]0;t\x07", "NaN"]))
    con = sqlite3.connect(db)
    try:
        con.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = (SELECT min(rowid) FROM {table})", (value,))
        con.commit()
    except sqlite3.DatabaseError:
        return  # a constraint SQLite itself keeps
    finally:
        con.close()
    try:
        h = history.read(db)
        found = trends(h, [], [])
        history.median_side(db, allow_mixed=True)
    except PopvizError as exc:
        refused_in_one_line(exc)
        return
    history_view.markdown(found, h.runs, all_rows=True)
    json.loads(history_view.as_json(found, h.runs, "h.db"))


budget_keys = st.sampled_from(["memory.*", "memory.*.used_pct", "pipeline.imbalance_ratio", "nothing.*", "[/x]",
                               "pipeline.utilisation_pct", "*"]) | st.text(max_size=10)
budget_values = st.sampled_from(["<= 85", ">= 0", "<= 100", "== 1", "< -1", "<= 1e999", "9" * 40, "<=", "x"]) \
    | st.integers() | st.booleans() | st.floats()


@FUZZ
@given(table=st.dictionaries(budget_keys, budget_values, min_size=1, max_size=3))
def test_damaged_budgets(engines, table, tmp_path_factory):
    from popviz.ci.compare import Comparison, check_budgets
    from popviz.ci.thresholds import load_budgets

    path = tmp_path_factory.mktemp("t") / "budgets.toml"
    path.write_text("".join(f"{json.dumps(k)} = {json.dumps(v) if not isinstance(v, float) else repr(v)}\n"
                            for k, v in table.items()).replace("inf", "1e999").replace("nan", "0"))
    try:
        budgets = load_budgets(str(path))
        c = Comparison(budgets=check_budgets(engines, budgets))
    except PopvizError as exc:
        refused_in_one_line(exc)
        return
    assert c.budgets  # a budget that matched nothing would have been refused
    render_everything(c)


@FUZZ
@given(data=st.data())
def test_damaged_plan_file(data, tmp_path_factory):
    from popviz.plan_file import FORMAT, FORMAT_VERSION, read_plan

    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "engine": "train", "ipus": 2,
           "layers_per_ipu": [3, 1], "placements": [{"layer": f"l{i}", "ipu": int(i == 3)} for i in range(4)]}
    where = data.draw(st.sampled_from(paths(doc)))
    doc = set_path(doc, where, data.draw(hostile_values))
    path = tmp_path_factory.mktemp("p") / "plan.json"
    path.write_text(json.dumps(doc))
    try:
        plan = read_plan(path)
    except PopvizError as exc:
        refused_in_one_line(exc)
        return
    assert sum(plan.layers_per_ipu) >= 1 and len(plan.layers_per_ipu) == plan.ipus
