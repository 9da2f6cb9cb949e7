"""A minimal Chrome DevTools Protocol client over --remote-debugging-pipe (tests only).

Chromium reads commands on fd 3 and writes replies and events on fd 4, each a JSON message
ended by a NUL byte. Enough to open a page, record every network request the page makes, run
a script in it and take a screenshot, with no third-party package.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from conftest import hang_guard, hang_guard_message


class Browser:
    def __init__(self, executable: str, profile: Path, flags: list[str], stderr: Any = subprocess.DEVNULL) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds() -> None:  # in the child: the pipe ends at fds 3 and 4 (kept open by pass_fds)
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen([executable, *flags, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                                      "about:blank"], pass_fds=(3, 4), preexec_fn=fds,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError(hang_guard_message("a reply from chromium", deadline - self._asked))
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise EOFError("chromium closed the pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        self._asked = time.monotonic()
        deadline = self._asked + hang_guard(timeout)
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str, timeout: float = 60) -> None:
        self._asked = time.monotonic()
        deadline = self._asked + hang_guard(timeout)
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self.events):
            self.events.append(self._read(deadline))

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (OSError, EOFError, TimeoutError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=hang_guard(20))
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass


PAGE_PROBE = """JSON.stringify({
  svg: document.querySelectorAll('svg').length,
  table: document.querySelectorAll('table').length,
  table_rows: document.querySelectorAll('tbody tr').length,
  svg_boxes: Array.from(document.querySelectorAll('figure > svg')).map(function (e) {
    var r = e.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; }),
  svg_texts: Array.from(document.querySelectorAll('figure > svg')).map(function (e) {
    return e.querySelectorAll('text').length; }),
  broken_images: Array.from(document.images).filter(function (i) { return !i.complete || !i.naturalWidth; }).length,
  fonts: Array.from(document.fonts).map(function (f) { return f.family; }),
  overflow_x: document.documentElement.scrollWidth - document.documentElement.clientWidth
})"""
"""What the page shows, measured in the browser: element counts, each figure's rendered size and
text elements, images that did not load, web fonts (there should be none) and how far the page
is wider than the window (> 0: something does not wrap)."""


def open_page(executable: str, profile: Path, flags: list[str], url: str,
              width: int = 1200, height: int = 2400, netlog: Path | None = None,
              pdf: bool = False) -> dict[str, Any]:
    """Load ``url``; return the URLs the page requested (DevTools ``Network.requestWillBeSent``),
    what ``PAGE_PROBE`` measured, and a PNG screenshot (bytes). With ``netlog``, Chromium also
    writes its own network log there (read it with ``read_netlog`` after this returns); with
    ``pdf``, the page printed to A4 (``pdf``: bytes)."""
    if netlog is not None:
        flags = [*flags, f"--log-net-log={netlog}", "--net-log-capture-mode=Everything"]
    browser = Browser(executable, profile, flags)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        browser.send("Network.enable", session=session)
        browser.send("Page.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        browser.send("Page.navigate", {"url": url}, session=session)
        browser.wait_for("Page.loadEventFired", session)
        time.sleep(0.5)  # let anything the load triggers start
        counts = browser.send("Runtime.evaluate", {"expression": PAGE_PROBE, "returnByValue": True},
                              session=session)["result"]["value"]
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
        printed = None
        if pdf:  # as the browser prints it (A4, the page's print CSS)
            printed = base64.b64decode(browser.send("Page.printToPDF", {
                "paperWidth": 8.27, "paperHeight": 11.69, "printBackground": False}, session=session,
                timeout=600)["data"])
        requested = [e["params"]["request"]["url"] for e in browser.events
                     if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == session]
        return {"requested": requested, **json.loads(counts), "screenshot": base64.b64decode(shot),
                "pdf": printed}
    finally:
        browser.close()


def read_netlog(path: Path) -> dict[str, Any]:
    """From Chromium's --log-net-log file: the URLs requested on behalf of a file:// page (their
    network isolation key is the page's file:// site), every URL requested by anyone, and how many
    DNS queries went out. A log cut short by a killed browser is closed before parsing."""
    text = path.read_text(encoding="utf-8").rstrip().rstrip(",")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = json.loads(text + "]}")
    names = {v: k for k, v in doc["constants"]["logEventTypes"].items()}
    page, every, dns = [], [], 0
    for event in doc["events"]:
        name = names.get(event["type"], "")
        params = event.get("params") or {}
        if name == "DNS_TRANSACTION_QUERY":
            dns += 1
        if name == "URL_REQUEST_START_JOB" and "url" in params:
            every.append(params["url"])
            if str(params.get("network_isolation_key", "")).startswith("file://"):
                page.append(params["url"])
    return {"page_requests": page, "all_requests": every, "dns_queries": dns}
