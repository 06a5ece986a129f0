"""device_idle: each idle gap of device_time's windows charged to host wait, kernel wait or
other, HTA's rule on the device's gaps; on made-up rows each cause, on the real GPU traces
against the gaps computed here from the raw files (tests/device_real.py)."""

from __future__ import annotations

import duckdb
import pytest
from conftest import insert_rows
from device_real import KINETO_TRACES, device_activity, kineto_warehouse, step_windows

COLUMNS = ["rank_id", "step", "device", "stream", "name", "kind", "start_ns", "end_ns", "launch_ts_ns"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)


def test_each_cause(attached_db):
    insert_rows(attached_db, "device_ops", COLUMNS, [
        (0, 1, "cuda:0", 7, "a", "compute", 100, 200, 10),
        (0, 1, "cuda:0", 7, "b", "compute", 220, 300, 250),   # launched at 250, after the device ran dry at 200: host
        (0, 1, "cuda:0", 7, "c", "compute", 310, 400, 20),    # queued long before, 10 ns gap: kernel wait
        (0, 1, "cuda:0", 8, "d", "compute", 350, 500, 30),    # overlaps c on another stream: no gap
        (0, 1, "cuda:0", 7, "e", "compute", 900, 950, 40),    # queued, 400 ns gap: waited on something (other)
        (0, 1, "cuda:0", 7, "f", "compute", 1000, 1100, None),  # no launch linked: other, unlinked
        (0, 1, "cuda:0", 9, "g", "compute", 1100, 1200, 5),   # starts as f ends: no gap
    ], **KEY)
    attached_db.execute("insert into internal.settings values ('kernel_wait_ns', '30')")
    row = attached_db.execute("""select gaps, idle_ns, host_wait_ns, kernel_wait_ns, other_wait_ns, unlinked_ns
                                 from device_idle""").fetchall()
    assert row == [(4, 20 + 10 + 400 + 50, 20, 10, 400 + 50, 50)]
    idle, = attached_db.execute("select idle_ns from device_time").fetchone()
    assert idle == 480


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    c = duckdb.connect(str(kineto_warehouse(tmp_path_factory)), read_only=True)
    yield c
    c.close()


def _breakdown(relative: str, threshold: int = 30_000) -> dict:
    """(step, device) -> (gaps, idle, host, kernel, other) from the raw trace: the device's activity
    (every step's) sorted by start (earliest launch first at one start), a gap where one starts after
    all before ended, charged by that one; each gap cut into the steps' windows it crosses."""
    acts = [a for a in device_activity(relative) if a["e"] > a["s"]]
    windows = step_windows(acts)
    out = {key: [0, 0, 0, 0, 0] for key in windows}
    for device in {a["device"] for a in acts}:
        mine = sorted((a for a in acts if a["device"] == device),
                      key=lambda a: (a["s"], a["launch"] is None, a["launch"] or 0, a["e"]))
        busy_until = None
        for a in mine:
            if busy_until is not None and a["s"] > busy_until:
                gap = a["s"] - busy_until
                if a["launch"] is not None and a["launch"] > busy_until:
                    cause = 2
                elif a["launch"] is not None and gap < threshold:
                    cause = 3
                else:
                    cause = 4
                for key, pieces in windows.items():
                    for lo, hi in pieces if key[1] == device else ():
                        part = min(a["s"], hi) - max(busy_until, lo)
                        if part > 0:
                            out[key][0] += 1
                            out[key][1] += part
                            out[key][cause] += part
            busy_until = a["e"] if busy_until is None else max(busy_until, a["e"])
    return {key: tuple(v) for key, v in out.items()}


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(KINETO_TRACES))
def test_real_gaps(con, run):
    rows = con.execute("""select step, device, gaps, idle_ns, host_wait_ns, kernel_wait_ns, other_wait_ns
                          from device_idle where run = ?""", [run]).fetchall()
    got = {(step, int(device.split(":")[1])): tuple(rest) for step, device, *rest in rows}
    assert got == _breakdown(KINETO_TRACES[run])
    # the gaps are device_time's idle, to the ns
    pairs = con.execute("""select i.idle_ns, t.idle_ns from device_idle i join device_time t
                           on i.run = t.run and i.capture = t.capture and i.device = t.device
                           and i.step is not distinct from t.step where i.run = ?""", [run]).fetchall()
    assert pairs and all(a == b for a, b in pairs)
