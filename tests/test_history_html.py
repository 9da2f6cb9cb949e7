"""`popviz history show --html FILE`: the trend dashboard (issue 43). The page's structure from
its text (a chart per metric and engine, each point's hover text with its run, configuration and
environment, steps and environment changes flagged, estimated points told apart, names from the
history escaped, no script), then the page in a real headless Chromium: nothing requested, the
engine filter hides the other engine's charts, a screenshot."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import time

import pytest
from cdp import Browser

from popviz.ci import history
from popviz.ci.baseline import EngineMetrics

from conftest import assert_one_line_error, run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
         "--no-default-browser-check", "--hide-scrollbars", "--mute-audio", "--host-resolver-rules=MAP * ~NOTFOUND"]


def runs(db) -> None:
    """Eight runs, two engines: training steps +20% at run 5 (where device_iterations went 4 -> 8),
    inference is estimated; the Poplar SDK changes at run 7; labels are hostile markup."""
    for i in range(8):
        env = {"poplar_sdk": "3.2.0" if i < 6 else "3.3.0", "popviz": "0.1.0", "ipu_architecture": "Mk2", "host": "ci-1"}
        d = 4 if i < 4 else 8
        es = [EngineMetrics("training", None, "pva", False, {"device_iterations": d},
                            {"pipeline.cycles_per_micro_batch": 1000.0 if i < 4 else 1200.0,
                             "memory.ipu0.used_bytes": 2.0**20}, environment=env),
              EngineMetrics("inference", None, "emulator", True, {"device_iterations": d},
                            {"pipeline.cycles_per_micro_batch": 500.0, "memory.ipu0.used_bytes": 2.0**19},
                            environment=env)]
        history.add(db, es, label=f"<b>c{i}</b>")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("dash")
    db = root / "h.db"
    runs(db)
    out = root / "trends.html"
    proc = run_cli("history", "show", "--db", str(db), "--html", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == f"popviz: wrote {out}\n"
    return out, json.loads(proc.stdout)


def test_a_chart_per_metric_with_steps_points_and_hover_text(page):
    out, doc = page
    text = out.read_text()
    assert "<script" not in text and "http://" not in text and "https://" not in text and "<link" not in text
    charts = re.findall(r'<div class="chart"><h3>([^<]+)</h3>', text)
    assert charts == ["pipeline.cycles_per_micro_batch", "memory.ipu0.used_bytes"] * 2  # inference, training
    assert re.findall(r'<section class="engine e(\d)"><h2>([^<]+)</h2>', text) == [("0", "inference"),
                                                                                  ("1", "training")]
    assert text.count('<circle class="pt estimated"') == 16 and text.count('<circle class="pt"') == 16
    [step] = re.findall(r'<line class="step (\w+)"[^>]*><title>([^<]+)</title>', text)
    assert step == ("regressed", "step at #5 (&lt;b&gt;c4&lt;/b&gt;): 1,000 → 1,200 (+20.00%, regressed)")
    assert "regressed +20.00%" in text
    env_lines = re.findall(r'<line class="env"[^>]*><title>([^<]+)</title>', text)
    assert env_lines == ["environment changed at #7 (&lt;b&gt;c6&lt;/b&gt;)"] * 4  # every chart of both engines
    tips = [html.unescape(t) for t in re.findall(r'<circle class="pt"[^>]*><title>([^<]+)</title>', text)]
    assert tips[4] == ("#5 (<b>c4</b>) · 1,200 (pipeline.cycles_per_micro_batch)\n"
                       f"added {doc['runs'][4]['added_at']}\nmeasured\nconfiguration: device_iterations: 8\n"
                       "environment: Poplar SDK 3.2.0; popviz 0.1.0; IPU architecture Mk2; host ci-1")
    assert "<b>c4</b>" not in text  # the label is data: escaped everywhere
    assert "#7 (&lt;b&gt;c6&lt;/b&gt;) inference, training: Poplar SDK 3.2.0 → 3.3.0" in text
    assert doc["environment_changes"] == [
        {"run": 7, "label": "<b>c6</b>", "engine": e, "changes": ["Poplar SDK 3.2.0 → 3.3.0"]}
        for e in ("inference", "training")]


def test_show_marks_the_run_where_the_environment_changed(tmp_path):
    db = tmp_path / "h.db"
    runs(db)
    proc = run_cli("history", "show", "--db", str(db), env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    k = lines.index("environment changed from the engine's previous run (explains steps too):")
    assert lines[k + 1] == "  #7 (<b>c6</b>) inference, training: Poplar SDK 3.2.0 → 3.3.0"
    md = run_cli("history", "show", "--db", str(db), "--markdown").stdout
    assert "- #7 (&lt;b&gt;c6&lt;/b&gt;) inference, training: Poplar SDK 3.2.0 → 3.3.0" in md


def test_html_never_overwrites_without_force(page, tmp_path):
    out, _ = page
    before = out.read_bytes()
    db = out.parent / "h.db"
    assert_one_line_error(run_cli("history", "show", "--db", str(db), "--html", str(out)), str(out.name))
    assert out.read_bytes() == before
    assert run_cli("history", "show", "--db", str(db), "--html", str(out), "--force").returncode == 0


@pytest.mark.skipif(CHROMIUM is None and os.environ.get("CI") != "true", reason="chromium is not installed")
def test_the_page_in_chromium_requests_nothing_and_its_engine_filter_works(page, tmp_path):
    out, _ = page
    browser = Browser(CHROMIUM, tmp_path / "profile", FLAGS)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        browser.send("Network.enable", session=session)
        browser.send("Page.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride", {"width": 1200, "height": 1400, "deviceScaleFactor": 1,
                                                            "mobile": False}, session=session)
        browser.send("Page.navigate", {"url": out.as_uri()}, session=session)
        browser.wait_for("Page.loadEventFired", session)
        time.sleep(0.3)

        def probe(expression: str):
            return browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                session=session)["result"]["value"]

        visible = ("Array.from(document.querySelectorAll('section.engine')).filter(function (s) {"
                   " return s.offsetParent !== null; }).map(function (s) { return s.querySelector('h2').textContent; })")
        assert probe(visible) == ["inference", "training"]
        boxes = probe("Array.from(document.querySelectorAll('.chart svg')).map(function (e) {"
                      " var r = e.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; })")
        assert len(boxes) == 4 and all(w >= 450 and h >= 150 for w, h in boxes), boxes
        assert probe("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
        probe("document.querySelector('label[for=engine-1]').click(), 0")  # a user clicks "training"
        assert probe(visible) == ["training"]
        probe("document.querySelector('label[for=engine-all]').click(), 0")
        assert probe(visible) == ["inference", "training"]
        requested = [e["params"]["request"]["url"] for e in browser.events
                     if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == session]
        assert requested == [out.as_uri()]
    finally:
        browser.close()
    import base64

    png = base64.b64decode(shot)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 30_000
    (tmp_path / "dashboard.png").write_bytes(png)
