"""The pytest plugin's history (issue 43): ``@pytest.mark.popviz(history=True)`` and
``popviz_capture.assert_history()`` compare a test's run with the median of its last runs in
``--popviz-history DB`` (a SQLite file or a postgresql:// URL) and append it with
``--popviz-history-add``: a first run passes (nothing to compare with), a wider layer then fails
with compare's table, and the engines are kept under the test's id."""

from __future__ import annotations

import os
import textwrap
import uuid

import pytest

from popviz.ci import history

pytest_plugins = ["pytester"]

MODEL = textwrap.dedent('''
    import pytest
    import torch
    import poptorch

    HIDDEN = {hidden}


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(64, HIDDEN)
            self.b = torch.nn.Linear(HIDDEN, 4)

        def forward(self, x):
            with poptorch.Block("first", ipu_id=0):
                x = torch.relu(self.a(x))
            with poptorch.Block("second", ipu_id=1):
                return self.b(x)


    @pytest.mark.popviz(history=True)
    def test_tracked():
        opts = poptorch.Options().deviceIterations(4)
        opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.Stage("first").ipu(0),
                                                              poptorch.Stage("second").ipu(1)))
        model = poptorch.inferenceModel(Net(), opts)
        model(torch.randn(8, 64))
''')


def outcomes(result) -> dict[str, int]:
    return {k: v for k, v in result.parseoutcomes().items() if k in ("passed", "failed", "errors")}


@pytest.mark.slow  # three inner pytest runs, each capturing under the emulator
@pytest.mark.timeout(900)
def test_history_marker_on_a_sqlite_file_then_on_postgresql(pytester, monkeypatch):
    pytest.importorskip("torch")
    pytester.makepyfile(test_model=MODEL.format(hidden=64))
    db = pytester.path / "perf.db"
    args = ("--popviz-emulate", "-p", "no:cacheprovider", "--popviz-history", str(db), "--popviz-history-add")
    monkeypatch.setenv("POPVIZ_HISTORY_LABEL", "c1")
    first = pytester.runpytest_subprocess(*args)
    assert outcomes(first) == {"passed": 1}, first.stdout.str()
    h = history.read(db)
    assert [(r.id, r.label) for r in h.runs] == [(1, "c1")]
    assert list(h.engines) == [(1, "test_model.py::test_tracked/inference")]
    monkeypatch.setenv("POPVIZ_HISTORY_LABEL", "c2")
    pytester.makepyfile(test_model=MODEL.format(hidden=4096))  # a teammate widens the layer
    wider = pytester.runpytest_subprocess(*args)
    assert outcomes(wider) == {"failed": 1}, wider.stdout.str()
    wider.stdout.fnmatch_lines(["popviz: FAIL: regression in test_model.py::test_tracked/inference *"])
    assert [r.label for r in history.read(db).runs] == ["c1", "c2"]  # added, then failed: main's history goes on

    import pg_server

    url = os.environ.get(pg_server.ENV)
    if not url:
        if os.environ.get("CI") == "true":
            raise RuntimeError("CI must give the tests a PostgreSQL server (.ci/run exports POPVIZ_TEST_POSTGRES)")
        pytest.skip("no PostgreSQL server given (POPVIZ_TEST_POSTGRES; .ci/run starts one)")
    pg = pg_server.create_database(url, f"popviz_p_{uuid.uuid4().hex[:10]}")
    on_pg = pytester.runpytest_subprocess("--popviz-emulate", "-p", "no:cacheprovider", "--popviz-history", pg,
                                          "--popviz-history-add")
    assert outcomes(on_pg) == {"passed": 1}, on_pg.stdout.str()
    [(_run, engine)] = list(history.read(pg).engines)
    assert engine == "test_model.py::test_tracked/inference"
