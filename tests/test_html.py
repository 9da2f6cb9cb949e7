"""`popviz analyse --html`: a self-contained page, opened in a real headless Chromium.

The page must render its tables and figures with no request leaving it. Two independent records
say what was requested: the DevTools protocol's network events on the page (every URL the page
asked for), and Chromium's own network log (--log-net-log: every request the network stack saw,
those made for the page told apart by their file:// isolation key). A control page with one
external image shows that both checks catch a request. Chromium resolves no host name at all
(--host-resolver-rules), so its own background requests cannot leave the machine either.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from cdp import open_page, read_netlog

from conftest import SAMPLES, assert_one_line_error, run_cli

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
if CHROMIUM is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI must have chromium for the HTML test: .ci/run installs Debian's chromium")
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
         "--disable-domain-reliability", "--disable-client-side-phishing-detection", "--no-pings",
         "--no-default-browser-check", "--metrics-recording-only", "--hide-scrollbars", "--mute-audio",
         # Chromium still looks up Google's update/time hosts on its own: resolve no name at all, so
         # the browser itself sends nothing off the machine (the page under test is a file:// URL)
         "--host-resolver-rules=MAP * ~NOTFOUND"]


def load(page: Path, tmp: Path, **kwargs) -> dict:
    """Open the page in Chromium through the DevTools protocol, with Chromium's network log on."""
    netlog = tmp / "netlog.json"
    seen = open_page(CHROMIUM, tmp / "profile", FLAGS, page.as_uri(), netlog=netlog, **kwargs)
    return {**seen, **read_netlog(netlog)}


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
    assert "<script" not in html and "<link" not in html and "@import" not in html and "@font-face" not in html
    assert re.findall(r"url\((?!#)", html) == []  # only references inside the page (clip paths)
    assert re.findall(r"(?:src|href)=\"(?!#|data:)", html) == []  # images inline, links within the page
    assert "http://" not in html.replace("http://www.w3.org/", "")  # only XML namespace names
    assert html.count("<svg") == 12  # six figures for each of the two engines


def test_summary_names_the_worst_finding_and_ranks_fixes_by_gain(page):
    html = page.read_text(encoding="utf-8")
    summary = html[html.index('<section class="summary">'):html.index("</section>")]
    assert "worst finding: <span class=\"badge warning\">warning</span> <strong>PIPE004</strong>" in summary
    rows = re.findall(r"<tr><td>(\w+)</td><td class=\"num\">(\d)</td><td class=\"\w+\">\w+</td><td>(\w+)</td>"
                      r"<td>[^<]*</td><td>([^<]*)</td></tr>", summary)
    assert rows == [
        ("inference", "1", "PIPE004", "up to +191% throughput"),
        ("training", "1", "PIPE001", "up to +30% throughput"),
        ("training", "2", "PIPE003", "about +5% throughput (estimated)"),
        ("training", "3", "HIO002", "under +0.1% throughput, 192,700 B (188.2 KiB) less per call"),
        ("training", "4", "MEM002", "gain not estimated"),
        ("training", "5", "MEM004", "gain not estimated"),
    ]
    # each finding repeats its gain beside its title
    assert '<strong>PIPE001</strong> Unbalanced pipeline: stage 3 (IPU3) is the bottleneck <span class="gain">' \
           "estimated gain: up to +30% throughput</span>" in html


def test_page_renders_in_chromium_with_no_request_leaving_it(page, tmp_path):
    seen = load(page, tmp_path, pdf=True)
    assert seen["requested"][0] == page.as_uri(), "the page load itself is recorded"
    assert external(seen["requested"], page) == []
    assert seen["page_requests"] == []  # Chromium's network log: nothing fetched for the page
    assert seen["dns_queries"] == 0
    # the summary, then per engine the pipeline, memory, host I/O and throughput tables:
    # 6 + 2 × (4 + 4 + 2 + 1) rows
    assert (seen["svg"], seen["table"], seen["table_rows"]) == (12, 9, 28)
    # every figure is drawn at a readable size, its titles and labels as text
    assert len(seen["svg_boxes"]) == 12 and all(w >= 300 and h >= 150 for w, h in seen["svg_boxes"])
    assert all(n >= 5 for n in seen["svg_texts"])
    assert seen["broken_images"] == 0 and seen["fonts"] == []
    assert seen["overflow_x"] <= 0  # everything wraps in a 1,200-pixel window
    shot = tmp_path / "report.png"
    shot.write_bytes(seen["screenshot"])
    assert seen["screenshot"][:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    printed = seen["pdf"]
    assert printed[:5] == b"%PDF-"
    pages = len(re.findall(rb"/Type\s*/Page[^s]", printed))
    assert 6 <= pages <= 30, pages  # figures kept whole (page-break-inside: avoid), nothing clipped away


def test_long_gains_and_hints_wrap_instead_of_widening_the_page(tmp_path):
    """oom_model's findings carry popviz plan's hint in their gain (about 150 characters): it
    wraps inside the card (it ran off the page with white-space: nowrap)."""
    out = tmp_path / "oom.html"
    proc = run_cli("analyse", str(SAMPLES / "oom_model"), "--html", str(out), env={"MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr  # findings fail only with --fail-on
    page = out.read_text(encoding="utf-8")
    assert "44% faster than the current split would be" in page
    assert "<code>popviz plan" in page and "`popviz" not in page  # popviz's own command as code, no backticks
    seen = load(out, tmp_path)
    assert seen["overflow_x"] <= 0


def test_both_network_checks_catch_an_external_request(tmp_path):
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    seen = load(control, tmp_path)
    assert external(seen["requested"], control) == ["http://127.0.0.1:9/x.png"]
    assert seen["page_requests"] == ["http://127.0.0.1:9/x.png"]
    assert seen["broken_images"] == 1


def test_html_never_overwrites(page):
    proc = run_cli("analyse", str(SAMPLES / "bert_pipeline"), "--html", str(page))
    assert_one_line_error(proc, page.name, "never writes over", "--force")


def test_html_force_replaces_a_file_but_not_a_directory(tmp_path):
    out = tmp_path / "page.html"
    out.write_text("old page")
    proc = run_cli("analyse", str(SAMPLES / "oom_compile"), "--html", str(out), "--force", env={"MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]  # no temporary file left
    (tmp_path / "dir.html").mkdir()
    proc = run_cli("analyse", str(SAMPLES / "oom_compile"), "--html", str(tmp_path / "dir.html"), "--force")
    assert_one_line_error(proc, "dir.html exists and is not a regular file")


def test_an_html_finding_without_an_estimate_does_not_say_estimated_gain_twice():
    from popviz.analysis.findings import Finding
    from popviz.render.html import _finding

    f = Finding("HIO003", "warning", "host_io", "Device iterations too low", "evidence", "recommendation")
    assert "estimated gain: gain not estimated" not in _finding(f, "gain not estimated")
    assert '<span class="gain">gain not estimated</span>' in _finding(f, "gain not estimated")
    assert '<span class="gain">estimated gain: up to +26%</span>' in _finding(f, "up to +26%")
