"""Every report page of the demo (and of a hostile run) in headless Chromium.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
messages separated by NUL on fds 3 and 4), which needs no websocket library and gives
console errors and uncaught exceptions as events. Chromium comes from Debian's
chromium package; when it is absent the module installs it with apt-get, and skips
loudly where that is impossible.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_report import HOSTILE, build_hostile_report, shared_demo

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _install_chromium() -> str | None:
    """apt-get install chromium, when this machine lets us (root and apt-get present)."""
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        try:
            subprocess.run(argv, env=env, capture_output=True, timeout=900, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
    return _find_chromium()


@pytest.fixture(scope="module")
def chromium() -> str:
    path = _find_chromium() or _install_chromium()
    if path is None:
        pytest.skip("!!! BROWSER TESTS SKIPPED: Chromium is not installed and `apt-get install chromium` "
                    "is not possible here (needs root and a package mirror). The report pages were NOT "
                    "checked in a browser. Install Debian's chromium package to run them. !!!")
    return path


class Browser:
    """A headless Chromium page driven over the DevTools pipe."""

    def __init__(self, executable: str, profile_dir: Path):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire_fds():  # Chromium reads commands on fd 3 and writes replies to fd 4
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        argv = [executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", f"--user-data-dir={profile_dir}", "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(argv, preexec_fn=wire_fds, pass_fds=(3, 4), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(domain, session=True)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: bool = False, timeout: float = 30) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read_message(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, page: Path, charts: bool) -> None:
        self.events.clear()
        self.call("Page.navigate", {"url": page.resolve().as_uri()}, session=True)
        self.wait_event("Page.loadEventFired")
        if charts:
            deadline = time.monotonic() + 30
            while self.evaluate("document.documentElement.getAttribute('data-rlwh-drawn')") != "true":
                if time.monotonic() > deadline or self.errors():
                    raise AssertionError(f"{page}: the charts were not drawn: {self.errors()}")
                time.sleep(0.1)

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads since the last open()."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(" ".join(str(a.get("value", a.get("description"))) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(params["entry"].get("text", ""))
        return found

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory):
    b = Browser(chromium, tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


CHARTS_DRAWN = """(() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  return {figures: document.querySelectorAll('.figure').length, plots: plots.length,
          with_svg: plots.filter(p => p.querySelector('svg.main-svg')).length,
          images: document.querySelectorAll('img').length};
})()"""

HOVER_PEAK_AND_CLICK = """(() => {
  const panel = window.rlwhPanels[0];
  const gd = panel.div, live = panel.d.live;
  Plotly.Fx.hover(gd, [{curveNumber: live.trace, pointNumber: live.peak}]);
  // op (its first text node: the cell also says how the stack was found), MiB, frames
  const rows = [...panel.root.querySelectorAll('.live-blocks tbody tr')].map(
    tr => [tr.cells[0].firstChild.textContent, tr.cells[1].textContent,
           [...tr.cells[2].querySelectorAll('.frame')].map(f => f.textContent).join('\\n')]);
  const bar = gd.data.findIndex(t => t.type === 'bar');
  const barPoint = gd.data[bar].customdata.findIndex(c => c[0] >= 0);
  const cd = gd.data[bar].customdata[barPoint];
  gd.emit('plotly_click', {points: [{curveNumber: bar, pointNumber: barPoint, data: gd.data[bar],
                                     x: gd.data[bar].x[barPoint]}]});
  return {rows: rows, liveAt: panel.root.querySelector('.live-at').textContent,
          stack: [...panel.root.querySelectorAll('.call-stack li')].map(li => li.textContent).join('\\n'),
          barOp: panel.d.names[cd[1]],
          hoverText: gd.data[live.trace].hovertext[live.peak]};
})()"""


def _pages(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*.html"))


def _check_every_page(browser: Browser, out: Path) -> None:
    pages = _pages(out)
    assert pages
    for page in pages:
        charts = "plotly.min.js" in page.read_text(encoding="utf-8")
        browser.open(page, charts)
        state = browser.evaluate(CHARTS_DRAWN)
        assert browser.errors() == [], f"{page}: console errors {browser.errors()}"
        assert state["images"] == 0, page
        assert state["plots"] == state["figures"], f"{page}: {state}"
        assert state["with_svg"] == state["plots"], f"{page}: a chart did not draw: {state}"


def test_every_demo_page_draws_without_errors(browser, tmp_path_factory):
    demo = shared_demo(tmp_path_factory)
    out, known = demo["out"], demo["known"]
    _check_every_page(browser, out)
    browser.open(known["page"], charts=True)
    got = browser.evaluate(HOVER_PEAK_AND_CLICK)
    assert browser.errors() == []
    assert [known["op"], f"{known['size_bytes'] / 1048576:.3f}"] == got["rows"][0][:2]
    assert known["op"] in got["hoverText"]
    assert got["stack"] in known["stacks"], got["stack"][:200]


def test_hostile_names_render_as_text(browser, tmp_path):
    out = build_hostile_report(tmp_path)
    _check_every_page(browser, out)
    memory = next(p for p in _pages(out) if "memory_timeline" in p.parts)
    browser.open(memory, charts=True)
    got = browser.evaluate(HOVER_PEAK_AND_CLICK)
    assert browser.errors() == []
    assert got["rows"][0][0] == HOSTILE
    assert got["rows"][0][2] == HOSTILE + " top"
    assert got["barOp"] == HOSTILE
    assert HOSTILE in got["stack"]
    # Plotly shows the escaped label as the literal text, never as markup.
    legend = browser.evaluate("[...document.querySelectorAll('.legendtext')].map(t => t.textContent)")
    assert HOSTILE in legend
    assert browser.evaluate("document.querySelectorAll('img').length") == 0
