"""The role timeline page's phase, clock and device tables and its phase lanes: what the
page holds equals a query of the views it names (phase_device_time, clock_offsets,
device_time, device_idle), on the demo report (Ascend, two ranks whose clocks are a second
apart) and on a real two-rank Kineto capture with user annotations (HTA's sampled ranks);
on the real one the phase table also equals the annotations and kernels read from the raw
JSON here (tests/device_real.py).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest
from device_real import HTA_PAIR, device_activity, union, user_annotations, warehouse
from test_report import shared_demo

from rlwh import report
from rlwh.config import Config

pytestmark = pytest.mark.slow  # each fixture ingests

MS_COLUMNS = ("window_ns", "compute_ns", "communication_ns", "exposed_communication_ns", "memcpy_ns", "idle_ns")


class _Tables(HTMLParser):
    """The page's tables of view figures: per table its view, role, columns and rows, a cell
    being its data-ns (the exact figure) where it has one, else its text."""

    def __init__(self):
        super().__init__()
        self.tables: list[dict] = []
        self._open = False
        self._cell: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "data-view" in a:
            self._open = True
            self.tables.append({"view": a["data-view"], "role": a["data-role"], "columns": [], "rows": []})
        elif self._open and tag == "th":
            self.tables[-1]["columns"].append(a["data-column"])
        elif self._open and tag == "tr":
            self.tables[-1]["rows"].append([])
        elif self._open and tag == "td":
            self._cell = {"ns": a.get("data-ns"), "text": ""}

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.tables[-1]["rows"][-1].append(self._cell)
            self._cell = None
        elif tag == "table":
            self._open = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data


def page_tables(page: Path | str, view: str) -> list[dict]:
    """Every table of `view` on the page (a path, or its text): its role, its rows as dicts by
    the view's column names (a cell's exact ns where it has one, else its text) and the texts shown."""
    parser = _Tables()
    parser.feed(page.read_text(encoding="utf-8") if isinstance(page, Path) else page)
    out = []
    for table in parser.tables:
        if table["view"] != view:
            continue
        rows = [r for r in table["rows"] if r]  # the header's row has no td
        value = lambda c: int(c["ns"]) if c["ns"] is not None else c["text"].strip()  # noqa: E731
        out.append({"role": table["role"],
                    "rows": [dict(zip(table["columns"], map(value, r))) for r in rows],
                    "texts": [dict(zip(table["columns"], (c["text"].strip() for c in r))) for r in rows]})
    return out


def figures(page: Path) -> list[dict]:
    return [json.loads(m) for m in re.findall(
        r'<script type="application/json" id="role-timeline-\d+-data">(.*?)</script>', page.read_text(encoding="utf-8"),
        re.S)]


def _query(db: Path, sql: str, params: list) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    d = shared_demo(tmp_path_factory)
    return {"db": d["config"].db_path, "run": "demo-run", "page": d["out"] / "demo-run" / "role_timeline.html"}


@pytest.fixture(scope="module")
def hta(tmp_path_factory):
    db = warehouse(tmp_path_factory)
    out = tmp_path_factory.mktemp("hta_report")
    report.build_report(Config(db_path=db, workers=1), out=out, run="hta_pair")
    return {"db": db, "run": "hta_pair", "page": out / "hta_pair" / "role_timeline.html"}


@pytest.fixture(params=["demo", "hta"])
def built(request):
    return request.getfixturevalue(request.param)


def _phase_rows(built) -> dict:
    return {(t["role"], r["phase"], int(r["rank_id"])): (r["ranges"], r["activities"], *(r[c] for c in MS_COLUMNS))
            for t in page_tables(built["page"], "phase_device_time") for r in t["rows"]}


def test_the_phase_table_is_the_view(built):
    got = _phase_rows(built)
    expected = {(role, phase, rank): tuple(rest) for role, phase, rank, *rest in _query(built["db"], """
        select role, phase, rank_id, count(*), sum(activities), sum(window_ns), sum(compute_ns),
          sum(communication_ns), sum(exposed_communication_ns), sum(memcpy_ns), sum(idle_ns)
        from phase_device_time where run = ? group by all""", [built["run"]])}
    assert expected and got == expected
    for t in page_tables(built["page"], "phase_device_time"):
        for row, text in zip(t["rows"], t["texts"]):
            assert text["compute_ns"] == f"{row['compute_ns'] / 1e6:,.3f}"  # the ms shown is the ns, rounded


def test_the_phase_table_is_the_raw_trace(hta):
    """Per (annotation name, rank): its ranges that launched device work, and the figures of that
    work, from the raw JSON (each range's own unions, summed over the phase's ranges)."""
    expected: dict[tuple, list[int]] = {}
    for rank, relative in enumerate(HTA_PAIR):
        acts = [a for a in device_activity(relative) if a["e"] > a["s"]]
        ranges = {(name, start, end) for name, start, end in user_annotations(relative)
                  if not str(name).startswith("ProfilerStep#")}
        for name, start, end in ranges:
            mine = [a for a in acts if start <= (a["s"] if a["launch"] is None else a["launch"]) < end]
            if end <= start or not mine:
                continue
            sets = {k: [(a["s"], a["e"]) for a in mine if a["kind"] == k] for k in ("compute", "communication",
                                                                                     "memcpy")}
            compute = union(sets["compute"])
            window = max(a["e"] for a in mine) - min(a["s"] for a in mine)
            figures_ = [1, len(mine), window, compute, union(sets["communication"]),
                        union(sets["compute"] + sets["communication"]) - compute, union(sets["memcpy"]),
                        window - union((a["s"], a["e"]) for a in mine)]
            total = expected.setdefault(("hta_pair", name, rank), [0] * len(figures_))
            for k, v in enumerate(figures_):
                total[k] += v
    assert len(expected) > 30
    assert _phase_rows(hta) == {k: tuple(v) for k, v in expected.items()}


def test_the_clock_table_is_the_view(built):
    got = {(t["role"], int(r["rank_id"])): (int(r["reference_rank"]), r["instances"], r["offset_ns"],
                                             r["end_spread_ns"], r["impossible_instances"],
                                             r["impossible_after_shift"], r["aligned"] == "yes", r["applied_offset_ns"])
           for t in page_tables(built["page"], "clock_offsets") for r in t["rows"]}
    expected = {(role, rank): tuple(rest) for role, rank, *rest in _query(built["db"], """
        select role, rank_id, reference_rank, instances, offset_ns, end_spread_ns, impossible_instances,
          impossible_after_shift, aligned, applied_offset_ns
        from clock_offsets where run = ?""", [built["run"]])}
    assert expected and got == expected


def test_the_device_table_is_the_views(built):
    got = {(t["role"], int(r["rank_id"])): tuple(r[c] for c in (
        "steps", "window_ns", "busy_ns", "compute_ns", "communication_ns", "exposed_communication_ns", "memcpy_ns",
        "idle_ns", "gap_ns", "host_wait_ns", "kernel_wait_ns", "other_wait_ns", "unlinked_ns"))
        for t in page_tables(built["page"], "device_time, device_idle") for r in t["rows"]}
    device = {(role, rank): tuple(rest) for role, rank, *rest in _query(built["db"], """
        select role, rank_id, count(distinct step), sum(window_ns), sum(window_ns - idle_ns), sum(compute_ns),
          sum(communication_ns), sum(exposed_communication_ns), sum(memcpy_ns), sum(idle_ns)
        from device_time where run = ? group by all""", [built["run"]])}
    idle = {(role, rank): tuple(rest) for role, rank, *rest in _query(built["db"], """
        select role, rank_id, sum(idle_ns), sum(host_wait_ns), sum(kernel_wait_ns), sum(other_wait_ns),
          sum(unlinked_ns)
        from device_idle where run = ? group by all""", [built["run"]])}
    assert device and set(idle) == set(device)
    assert got == {key: device[key] + idle[key] for key in device}


def _utc(ns_: int) -> str:
    moment = datetime.fromtimestamp(ns_ // 1_000_000_000, timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f".{ns_ % 1_000_000_000:09d}"


def test_every_phase_range_is_drawn_on_the_aligned_clock(built):
    """Each range of phase_device_time is one bar on its rank's phase lane, starting at its recorded
    start less the rank's clock_offsets.applied_offset_ns (on the demo, rank 1's second): where
    the axis is a date, its base is that time (to the µs Plotly keeps); its hover says it to the ns."""
    shifts = dict(((role, rank), shift) for role, rank, shift in _query(built["db"], """
        select role, rank_id, applied_offset_ns from clock_offsets where run = ?""", [built["run"]]))
    expected = {(role, rank, start, end) for role, rank, start, end in _query(built["db"], """
        select distinct role, rank_id, start_ns, end_ns from phase_device_time where run = ?""", [built["run"]])}
    drawn, dates = set(), 0
    for figure in figures(built["page"]):
        role = next(t["name"] for t in figure["data"] if t["type"] == "bar")  # the spans trace comes first
        for trace in figure["data"]:
            if trace["name"] != "phase ranges (CPU side)":
                continue
            for y, (start, end), base, hover in zip(trace["y"], trace["customdata"], trace["base"],
                                                    trace["hovertext"]):
                rank = int(re.match(r"rank (\d+) · phases", y).group(1))
                drawn.add((role, rank, start, end))
                at = start - shifts.get((role, rank), 0)
                assert f"CPU range from {_utc(at)} UTC" in hover
                if isinstance(base, str):
                    assert base == _utc(at)[:26]
                    dates += 1
    assert expected and drawn == expected and dates
    if built["run"] == "demo-run":
        assert {shifts[(role, 1)] > 999_000_000 for role in ("actor_update", "rollout")} == {True}


def test_each_chart_says_whether_its_clocks_are_aligned(built):
    aligned = dict(_query(built["db"], "select role, bool_and(aligned) from clock_offsets where run = ? group by all",
                          [built["run"]]))
    notes = re.findall(r'<h2>([^<]+) · epoch clock \(UTC\)</h2>\s*<p class="note">([^<]*)</p>',
                       built["page"].read_text(encoding="utf-8"))
    said = {role: note for role, note in notes if role in aligned}
    assert set(said) == set(aligned)
    for role, note in said.items():
        assert ("Clocks aligned:" in note) == aligned[role] and ("Clocks drawn as recorded" in note) != aligned[role]
    assert set(aligned.values()) == ({True} if built["run"] == "demo-run" else {False})
