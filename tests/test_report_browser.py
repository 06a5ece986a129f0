"""Every report page of the demo (and of a hostile run) in headless Chromium.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
messages separated by NUL on fds 3 and 4), which needs no websocket library and gives
console errors and uncaught exceptions as events. Chromium comes from Debian's
chromium package, which .ci/run installs: without it these tests fail in CI and skip,
saying why, elsewhere.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from test_report import HOSTILE, build_hostile_report, shaped_report, shared_alexnet_report, shared_demo

pytestmark = pytest.mark.slow  # starts a browser; the demo report it reads takes an ingest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's chromium, which .ci/run installs; the tests themselves install nothing."""
    path = _find_chromium()
    if path is None:
        reason = ("Chromium is not installed, so the report pages were NOT checked in a browser: "
                  "`apt-get install chromium fonts-dejavu-core fonts-liberation` (as .ci/run does) runs them")
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI must check them
        pytest.skip(reason)
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
        # A cold start beside another pytest worker on 2 busy cores took over 30 s once.
        target = self.call("Target.createTarget", {"url": "about:blank"}, timeout=180)["targetId"]
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

    def viewport(self, width: int, height: int) -> None:
        """What a person at a `width` x `height` window sees (the next open() lays out at it)."""
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=True)

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


def test_the_collectives_page_with_slowest_links_draws_without_errors(browser, tmp_path_factory):
    page = shared_alexnet_report(tmp_path_factory)
    _check_every_page(browser, page.parent)
    browser.open(page, charts=True)
    rows = browser.evaluate("""[...document.querySelectorAll('table')].filter(
      t => t.querySelector('th') && [...t.querySelectorAll('th')].some(h => h.textContent === '× median')
    ).map(t => t.querySelectorAll('tbody tr').length)""")
    assert rows == [10]  # the ten slowest of the step's 14 links


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
    legend = browser.evaluate("[...document.querySelectorAll('.legendtext, .legend2text')].map(t => t.textContent)")
    assert HOSTILE in legend
    assert browser.evaluate("document.querySelectorAll('img').length") == 0


# ---------------------------------------------------------------- what a person sees

# Every word of a frame (a run without spaces or "/") on one line: frames wrap at "/" and
# spaces only. Returns the words that were split across lines.
SPLIT_WORDS = """(root => {
  const split = [];
  root.querySelectorAll('.frame').forEach(frame => {
    frame.childNodes.forEach(node => {
      if (node.nodeType !== Node.TEXT_NODE) return;
      for (const m of node.textContent.matchAll(/[^\\s\\/]+\\/?/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (tops.size > 1) split.push(m[0]);
      }
    });
  });
  return split;
})"""

MEMORY_LAYOUT = """(() => {
  const box = e => { const r = e.getBoundingClientRect(); return {l: r.left, r: r.right, t: r.top, b: r.bottom,
                                                                   w: r.width, h: r.height}; };
  const panel = window.rlwhPanels[0], root = panel.root;
  const rows = [...root.querySelectorAll('.live-blocks tbody tr')];
  const cells = rows.flatMap(tr => [...tr.cells]).map(box);
  const first = rows[0].cells[2], b = panel.d.live.hover[panel.d.live.peak][0], blocks = panel.d.blocks;
  const user = blocks.user[b], top = blocks.top[b];
  const expected = (user >= 0 ? panel.d.tops[user] : '') + (top !== user || user < 0 ? panel.top(top) : '');
  rows[0].click();  // the stack of the largest block
  const stack = root.querySelector('.call-stack');
  return {width: document.documentElement.clientWidth, height: window.innerHeight,
          scrollWidth: document.documentElement.scrollWidth, cells: cells, firstWhere: box(first),
          firstWhereText: first.textContent, expected: expected, hasUser: user >= 0,
          inspector: box(root.querySelector('.inspector')),
          stack: box(stack), stackFrames: stack.querySelectorAll('li').length,
          split: (SPLIT_WORDS)(root)};
})()""".replace("(SPLIT_WORDS)", SPLIT_WORDS)


@pytest.mark.parametrize("width", [1400, 1920])
def test_memory_page_shows_who_holds_the_peak_without_scrolling(browser, tmp_path_factory, width):
    demo = shared_demo(tmp_path_factory)
    browser.viewport(width, 900)
    try:
        browser.open(demo["known"]["page"], charts=True)
        got = browser.evaluate(MEMORY_LAYOUT)
    finally:
        browser.viewport(1400, 900)
    assert browser.errors() == []
    assert got["scrollWidth"] <= got["width"], "the page scrolls sideways"
    for cell in got["cells"]:
        assert cell["l"] >= 0 and cell["r"] <= got["width"], cell  # no column cut at the right edge
    where = got["firstWhere"]
    assert where["b"] <= got["height"] and where["r"] <= got["width"], where  # the answer, in the first screen
    assert got["hasUser"] and got["firstWhereText"] == got["expected"]  # user_frame, then call_stack_top, whole
    assert got["inspector"]["w"] >= 440, got["inspector"]
    assert got["stackFrames"] > 1 and got["stack"]["w"] >= 440
    assert got["split"] == [], f"frames broken inside a word: {got['split'][:5]}"


MEMORY_FIGURE = """(() => {
  const panel = window.rlwhPanels[0], gd = panel.div, full = gd._fullData, layout = gd._fullLayout;
  const bars = full.filter(t => t.type === 'bar');
  const color = t => t.type === 'bar' ? t.marker.color : (t.mode === 'markers' ? t.marker.color : t.line.color);
  const live = full[panel.d.live.trace], peak = full.find(t => t.name === 'peak');
  const widths = [...gd.querySelectorAll('.barlayer .point path')].map(p => p.getBoundingClientRect().width);
  const liveRow = gd.querySelector('.xy .nsewdrag, .nsewdrag').getBoundingClientRect();
  return {barColors: bars.map(color), barNames: bars.map(t => t.name), peak: color(peak), live: color(live),
          widths: widths, xrange: layout.xaxis.range, yrange: layout.yaxis.range,
          peakMib: Math.max(...live.y), liveRowHeight: layout.yaxis._length,
          tail: [...gd.querySelectorAll('.shapelayer path')].length,
          opsLegendTop: gd.querySelector('g.legend2').getBoundingClientRect().top,
          plotsBottom: Math.max(...[...gd.querySelectorAll('.nsewdrag')].map(d => d.getBoundingClientRect().bottom)),
          opsInLegend: [...gd.querySelectorAll('g.legend2 .legend2text')].map(x => x.textContent)};
})()"""


def test_memory_chart_colors_bars_and_axes(browser, tmp_path_factory):
    shaped = shaped_report(tmp_path_factory)
    browser.open(shaped["run"] / "memory_timeline" / "actor-rank0.html", charts=True)
    got = browser.evaluate(MEMORY_FIGURE)
    assert browser.errors() == []
    colors = got["barColors"]
    assert got["barNames"][-1] == "other ops" and len(colors) == 9
    assert len({*colors, got["peak"], got["live"]}) == len(colors) + 2, got
    assert got["widths"] and all(1 <= w <= 40 for w in got["widths"]), sorted(got["widths"])[:3]
    assert got["opsInLegend"] == got["barNames"] and got["opsLegendTop"] > got["plotsBottom"]  # under the bars
    assert got["xrange"][1] < 40  # the allocations' 39 ms, not the release 150 s later
    assert got["tail"] >= 2  # the peak's line and the shaded tail
    # live bytes fill their own row: not a flat line under totals 25x larger
    assert got["yrange"][1] <= 1.3 * got["peakMib"], got
    assert got["liveRowHeight"] >= 150


TICKS = """[...document.querySelectorAll('.js-plotly-plot')].map(gd => ({
  ticks: [...gd.querySelectorAll('.xtick text')].map(t => t.textContent),
  type: gd._fullLayout.xaxis.type,
  marks: [...gd.querySelectorAll('.barlayer .point path, .scatterlayer .point')]
           .map(p => p.getBoundingClientRect()).filter(r => r.width >= 1 || r.height >= 1).length,
  rows: gd._fullLayout.yaxis._categories.length}))"""


# The width in px of every bar of each chart's first trace (the role's spans).
SPAN_WIDTHS = """[...document.querySelectorAll('.js-plotly-plot')].map(gd =>
  [...gd.querySelectorAll('.barlayer .trace')[0].querySelectorAll('.point path')]
    .map(p => p.getBoundingClientRect().width))"""


def test_role_timeline_one_readable_axis_per_clock(browser, tmp_path_factory):
    # One chart per role: the demo's three epoch roles (actor_update's Ascend and PyTorch captures lie months
    # apart: a linear axis with the gap collapsed), the shaped run's two epoch roles then its session clock.
    for page, axes in ((shared_demo(tmp_path_factory)["out"] / "demo-run" / "role_timeline.html",
                        ["date", "linear", "date"]),
                       (shaped_report(tmp_path_factory)["run"] / "role_timeline.html", ["date", "date", "linear"])):
        browser.viewport(1400, 900)
        browser.open(page, charts=True)
        plots = browser.evaluate(TICKS)
        assert browser.errors() == []
        assert [p["type"] for p in plots] == axes, page  # epoch, then the nsys session clock
        # Roles run minutes apart and their spans last milliseconds: each on its own axis,
        # every span is a bar a few pixels wide, not a sliver.
        widths = browser.evaluate(SPAN_WIDTHS)
        assert all(w >= 4 for chart in widths for w in chart), f"{page}: {widths}"
        for p in plots:
            assert p["ticks"], page
            for tick in p["ticks"]:
                assert not re.search(r"\d[kMGT]\b", tick), f"{page}: unreadable tick {tick!r}"
            assert p["marks"] >= p["rows"], f"{page}: a (role, rank) row shows nothing: {p}"


def test_compare_page_has_no_empty_chart(browser, tmp_path_factory):
    for page in (shared_demo(tmp_path_factory)["out"] / "demo-run" / "memory_compare.html",
                 shaped_report(tmp_path_factory)["run"] / "memory_compare.html"):
        browser.open(page, charts=True)
        charts = browser.evaluate("""[...document.querySelectorAll('.js-plotly-plot')].map(gd =>
          [...gd.querySelectorAll('.subplot.xy, g.subplot')].length === 0 ? [] :
          gd._fullData.map(t => [...gd.querySelectorAll('.barlayer .trace')][gd._fullData.indexOf(t)]
            .querySelectorAll('.point path').length))""")
        assert browser.errors() == []
        assert charts, page
        for bars in charts:
            assert bars and all(n > 0 for n in bars), f"{page}: an empty chart {charts}"


GMM = """[...document.querySelectorAll('.js-plotly-plot')].map(gd => {
  const r = e => e.getBoundingClientRect();
  const bar = r(gd.querySelector('.modebar')), plot = r(gd.querySelector('.nsewdrag'));
  const overlap = bar.width > 0 && bar.left < plot.right && bar.right > plot.left && bar.top < plot.bottom &&
                  bar.bottom > plot.top;
  return {overlap: overlap, zmax: gd._fullData[0].zmax, zmin: gd._fullData[0].zmin,
          ticks: [...gd.querySelectorAll('.ytick text')].map(t => t.textContent)};
})"""


def test_gmm_heatmaps_share_a_scale_and_keep_the_toolbar_off_the_cells(browser, tmp_path_factory):
    browser.open(shaped_report(tmp_path_factory)["run"] / "gmm_heatmap.html", charts=True)
    maps = browser.evaluate(GMM)
    assert browser.errors() == []
    assert len(maps) == 2
    assert {(m["zmin"], m["zmax"]) for m in maps} == {(0, 240)}
    for m in maps:
        assert not m["overlap"], "the toolbar covers cells"
        assert m["ticks"] == ["0", "1"]


def test_run_summary_stays_short_with_many_sources(browser, tmp_path_factory):
    demo = shared_demo(tmp_path_factory)
    browser.open(demo["out"] / "demo-run" / "index.html", charts=False)
    got = browser.evaluate("""({height: document.documentElement.scrollHeight,
      folded: document.querySelectorAll('details.sources').length,
      rows: document.querySelectorAll('table.sources tbody tr').length,
      visible: [...document.querySelectorAll('table.sources tbody tr')].filter(tr => tr.checkVisibility()).length})""")
    assert got["rows"] > 100 and got["folded"] >= 3, got
    assert got["visible"] <= 10, got  # the ok files folded away; failed and partial ones in sight
    assert got["height"] < 2500, got
