"""`popviz analyse --html`: a self-contained page, opened in a real headless Chromium.

The page must render its tables and figures with no request leaving it: Chromium's network log
(--log-net-log) of the page load lists every URL it requested, and the only one allowed is the
page's own file:// URL. A control page with one external image shows the check can fail.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from cdp import open_page

from conftest import SAMPLES, assert_one_line_error, run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
if CHROMIUM is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI must have chromium for the HTML test: .ci/run installs Debian's chromium")
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
         "--hide-scrollbars", "--mute-audio",
         # Chromium still looks up Google's update/time hosts on its own: resolve no name at all, so
         # the browser itself sends nothing off the machine (the page under test is a file:// URL)
         "--host-resolver-rules=MAP * ~NOTFOUND"]


def load(page: Path, tmp: Path) -> dict:
    """Open the page in Chromium through the DevTools protocol: what it requested, its element
    counts and a screenshot."""
    return open_page(CHROMIUM, tmp / "profile", FLAGS, page.as_uri())


def external(urls: list[str], page: Path) -> list[str]:
    return sorted({u for u in urls if u != page.as_uri() and not u.startswith(("data:", "about:"))})


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("html") / "report.html"
    proc = run_cli("analyse", str(SAMPLES / "bert_pipeline"), "--html", str(out), env={"MPLBACKEND": "Agg"},
                   timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_page_is_self_contained(page):
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert re.findall(r"url\((?!#)", html) == []  # only references inside the page (clip paths)
    assert "src=" not in html and "href=\"http" not in html
    assert html.count("<svg") == 12  # six figures for each of the two engines
    assert "worst finding" in html and "PIPE001" in html


def test_page_renders_in_chromium_with_no_request_leaving_it(page, tmp_path):
    seen = load(page, tmp_path)
    assert seen["requested"][0] == page.as_uri(), "the page load itself is recorded"
    assert external(seen["requested"], page) == []
    assert seen["svg"] == 12 and seen["table"] >= 7
    shot = tmp_path / "report.png"
    shot.write_bytes(seen["screenshot"])
    assert seen["screenshot"][:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_the_network_check_catches_an_external_request(tmp_path):
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    assert external(load(control, tmp_path)["requested"], control) == ["http://127.0.0.1:9/x.png"]


def test_html_never_overwrites(page):
    proc = run_cli("analyse", str(SAMPLES / "bert_pipeline"), "--html", str(page))
    assert_one_line_error(proc, page.name, "never writes over")
