"""docs/notebooks/quickstart.ipynb runs top to bottom in a real Jupyter kernel (nbclient)."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = ROOT / "docs" / "notebooks" / "quickstart.ipynb"


def test_notebook_is_committed_without_outputs():
    doc = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in doc["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)


def test_notebook_executes(monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o for o in outputs if o.output_type == "execute_result" and "text/html" in o.get("data", {})]
    assert any("worst finding" in o["data"]["text/html"] for o in html)  # the Result's rich view
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 8  # timeline, stages, memory, tiles, breakdown, host_io, compare, OOM tiles
    texts = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "timeline: engine 'training' has no execution table (the compile ran out of memory" in texts
    assert "PIPE001 up to +30% throughput" in texts  # the plan, ranked by gain
    frames = [o["data"]["text/html"] for o in html if "<table" in o["data"]["text/html"]
              and "worst finding" not in o["data"]["text/html"]]
    stage_frame = next(t for t in frames if "cycles_per_micro_batch" in t and "idle_pct" in t)  # stage_cycles()
    assert "e+0" not in stage_frame and "<td>1247083</td>" in stage_frame  # whole cycles, not 1.247083e+06
