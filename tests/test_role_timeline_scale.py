"""The role timeline at 16 ranks: where the device bars outnumber what the page draws, each
lane is drawn as busy time per bin, and what it draws adds up to device_time.

The run: 2 roles x 8 ranks, each rank 1,500 compute kernels (some on a second stream,
overlapping) and 300 collectives, over 30 ms: about 80,000 device bars, four times what a
page draws. Expectations are the unions of each rank's kernels, computed here in Python.
"""

from __future__ import annotations

import json
import random
import re

import duckdb
import pyarrow as pa
import pytest
from conftest import migrated_file

from rlwh import report
from rlwh.config import Config
from rlwh.warehouse import derive

# A run wider than a page draws, built once for the file: its size is the point, so it is
# `make test`'s, not the fast loop's.
pytestmark = pytest.mark.slow

RUN = "wide"
T0 = 1_760_000_000_000_000_000
ROLES = ("actor_update", "rollout")


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    start = None
    for s, e in sorted(intervals):
        if end is None or s > end:
            if end is not None:
                total += end - start
            start, end = s, e
        else:
            end = max(end, e)
    return total + (end - start if end is not None else 0)


def _ops() -> list[dict]:
    rng = random.Random(16)
    rows = []
    for role in ROLES:
        for rank in range(8):
            t = T0 + rank * 50_000
            for k in range(1500):
                start = t + rng.randrange(2_000, 20_000)
                dur = rng.randrange(1_000, 12_000)
                rows.append({"role": role, "rank_id": rank, "kind": "compute", "stream": 7 + (k % 5 == 0),
                             "start_ns": start, "end_ns": start + dur})
                if k % 5 == 0:
                    cstart = start + dur // 2
                    rows.append({"role": role, "rank_id": rank, "kind": "communication", "stream": 20,
                                 "start_ns": cstart, "end_ns": cstart + rng.randrange(2_000, 9_000)})
                t = start + (dur if k % 5 else 0)
    return rows


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wide")
    config = Config(db_path=tmp / "w.duckdb", workers=1, reports_dir=tmp / "reports")
    ops = _ops()
    con = migrated_file(config.db_path)
    con.execute("insert into runs values (?, '/profiles/wide', now()::timestamp, now()::timestamp)", [RUN])
    table = pa.Table.from_pylist([{**op, "run": RUN, "capture": f"{op['role']}/rank{op['rank_id']}", "source_id": 1,
                                   "step": 1, "device": f"cuda:{op['rank_id']}", "name": f"k_{op['kind']}"}
                                  for op in ops])
    con.register("new_ops", table)
    con.execute("insert into device_ops by name select * from new_ops")
    def mine(role, rank):
        return [o for o in ops if (o["role"], o["rank_id"]) == (role, rank)]

    spans = pa.Table.from_pylist([{"run": RUN, "role": role, "rank_id": rank, "capture": f"{role}/rank{rank}",
                                   "source_id": 2, "source": "mstx", "domain": "default", "name": role,
                                   "start_ns": min(o["start_ns"] for o in mine(role, rank)),
                                   "end_ns": max(o["end_ns"] for o in mine(role, rank)),
                                   "pid": 1, "tid": 1, "clock": "epoch"} for role in ROLES for rank in range(8)])
    con.register("new_spans", spans)
    con.execute("insert into ranges by name select * from new_spans")
    derive.refresh_all(con)
    con.close()
    report.build_report(config, out=tmp / "reports")
    page = (tmp / "reports" / RUN / "role_timeline.html").read_text(encoding="utf-8")
    figures = [json.loads(m) for m in re.findall(
        r'<script type="application/json" id="role-timeline-\d+-data">(.*?)</script>', page, re.S)]
    return {"ops": ops, "db": config.db_path, "page": page, "figures": figures}


def test_the_run_has_more_device_bars_than_a_page_draws(wide):
    from rlwh.report.context import MAX_SPANS

    islands = 0
    for role in ROLES:
        for rank in range(8):
            for kind in ("compute", "communication"):
                spans = sorted((o["start_ns"], o["end_ns"]) for o in wide["ops"]
                               if (o["role"], o["rank_id"], o["kind"]) == (role, rank, kind))
                end = None
                for s, e in spans:
                    islands += end is None or s > end
                    end = e if end is None or s > end else max(end, e)
    assert islands > MAX_SPANS  # and about as many idle gaps between them


@pytest.mark.parametrize("lane", ["compute", "communication"])
def test_what_the_page_draws_adds_up_to_device_time(wide, lane):
    drawn: dict[tuple[str, int], int] = {}
    for figure in wide["figures"]:
        role = next(t["name"] for t in figure["data"] if t["name"] in ROLES)
        for trace in figure["data"]:
            if trace["name"] == f"device {lane} (busy per bin)":
                for y, busy in zip(trace["y"], trace["customdata"]):
                    rank = int(re.match(r"rank (\d+) ·", y).group(1))
                    drawn[(role, rank)] = drawn.get((role, rank), 0) + busy
    expected = {(role, rank): _union([(o["start_ns"], o["end_ns"]) for o in wide["ops"]
                                      if (o["role"], o["rank_id"], o["kind"]) == (role, rank, lane)])
                for role in ROLES for rank in range(8)}
    assert drawn == expected
    con = duckdb.connect(str(wide["db"]), read_only=True)
    measured = dict(((r, k), v) for r, k, v in con.execute(
        f"select role, rank_id, sum({lane}_ns)::bigint from device_time where run = ? group by all", [RUN]).fetchall())
    con.close()
    assert measured == expected


def test_bars_are_bins_and_the_page_says_so(wide):
    from rlwh.report.timeline import BINS

    assert "busy time per bin" in wide["page"] and "longest of" not in wide["page"]
    for figure in wide["figures"]:
        for trace in figure["data"]:
            if trace["name"].startswith("device "):
                assert trace["name"].endswith("(busy per bin)")
                per_rank: dict[str, int] = {}
                for y in trace["y"]:
                    per_rank[y] = per_rank.get(y, 0) + 1
                assert max(per_rank.values()) <= BINS
        idle = [t for t in figure["data"] if t["name"] == "device idle (busy per bin)"]
        assert idle and all(v > 0 for v in idle[0]["customdata"])



def test_every_rank_has_its_phase_lane_and_its_table_rows(wide):
    """16 ranks: each has a phase lane and a row in each table; device_time's compute is the union
    of the rank's own kernels, the phase's that of every kernel the rank started inside the range
    (phase_device_time matches work on (run, rank_id), whichever capture: here both roles run on
    ranks 0-7 at once, so a phase counts the other role's kernels too)."""
    from test_report_role_timeline import page_tables

    for figure in wide["figures"]:
        rows = figure["layout"]["yaxis"]["categoryarray"]
        assert [r for r in rows if r.endswith(" · phases")] == [f"rank {k} · phases" for k in range(8)]
    ops = wide["ops"]
    for table in page_tables(wide["page"], "phase_device_time"):
        role = table["role"]
        got = {int(r["rank_id"]): r["compute_ns"] for r in table["rows"]}
        expected = {}
        for rank in range(8):
            mine = [o for o in ops if (o["role"], o["rank_id"]) == (role, rank)]
            start, end = min(o["start_ns"] for o in mine), max(o["end_ns"] for o in mine)
            expected[rank] = _union([(o["start_ns"], o["end_ns"]) for o in ops if o["rank_id"] == rank
                                     and o["kind"] == "compute" and start <= o["start_ns"] < end])
        assert got == expected
    tables = page_tables(wide["page"], "device_time, device_idle")
    assert sorted(t["role"] for t in tables) == list(ROLES)
    for table in tables:
        assert {int(r["rank_id"]): r["compute_ns"] for r in table["rows"]} == {
            rank: _union([(o["start_ns"], o["end_ns"]) for o in ops
                          if (o["role"], o["rank_id"], o["kind"]) == (table["role"], rank, "compute")])
            for rank in range(8)}
    clocks = page_tables(wide["page"], "clock_offsets")
    assert [sorted(int(r["rank_id"]) for r in t["rows"]) for t in clocks] == [list(range(8))] * 2
