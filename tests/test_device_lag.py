"""device_time and device_idle on a generated GPU trace that runs more than a step behind its
host (rlwh.synth.timelines.write_lagging_device_trace): the steps' spans overlap on the device,
yet no instant counts in two steps and no instant where some kernel ran is idle. Expected
figures come from the raw file with the standard library (tests/device_real.py)."""

from __future__ import annotations

import duckdb
import pytest
from device_real import device_activity, device_clock_steps, step_windows, union

from rlwh.config import Config
from rlwh.ingest.runner import ingest
from rlwh.synth.timelines import write_lagging_device_trace


@pytest.fixture(scope="module")
def lagging(tmp_path_factory):
    root = tmp_path_factory.mktemp("lag")
    trace = write_lagging_device_trace(root / "lag" / "rank0" / "trace.json.gz")
    ingest(root / "lag", Config(db_path=root / "w.duckdb", workers=1), run="lag")
    con = duckdb.connect(str(root / "w.duckdb"), read_only=True)
    yield con, str(trace), [a for a in device_activity(str(trace)) if a["e"] > a["s"]]
    con.close()


def _spans(acts) -> dict:
    spans: dict = {}
    for a in acts:
        lo, hi = spans.get(a["step"], (a["s"], a["e"]))
        spans[a["step"]] = (min(lo, a["s"]), max(hi, a["e"]))
    return spans


def test_the_device_lags_by_more_than_a_step_and_steps_overlap(lagging):
    _, trace, acts = lagging
    spans = _spans(acts)
    first_launch = {a["step"]: min(b["launch"] for b in acts if b["step"] == a["step"]) for a in acts}
    # step 3's first kernel starts after the host launched step 5's first one
    assert spans[3][0] > first_launch[5]
    ordered = sorted(spans.values())
    assert sum(b[0] < a[1] for a, b in zip(ordered, ordered[1:])) >= 4


def test_busy_summed_over_steps_is_the_union_of_the_device_activity(lagging):
    con, _, acts = lagging
    busy, = con.execute("select sum(window_ns - idle_ns) from device_time where run = 'lag'").fetchone()
    own_spans = sum(union([(a["s"], a["e"]) for a in acts if a["step"] == s]) for s in _spans(acts))
    assert own_spans > 1.03 * union((a["s"], a["e"]) for a in acts)  # each step's own work would count twice
    assert abs(busy - union((a["s"], a["e"]) for a in acts)) <= 0.005 * busy


def test_every_step_row_is_the_device_activity_in_its_window(lagging):
    con, trace, _ = lagging
    rows = con.execute("""select step, device, window_ns, compute_ns, communication_ns, overlapped_ns,
                          exposed_communication_ns, memcpy_ns, idle_ns from device_time where run = 'lag'""").fetchall()
    assert {(step, int(device.split(":")[1])): tuple(f) for step, device, *f in rows} == device_clock_steps(trace)


def test_idle_is_never_time_when_some_kernel_ran(lagging):
    con, _, acts = lagging
    idle = dict(con.execute("select step, idle_ns from device_idle where run = 'lag'").fetchall())
    for (step, _device), pieces in step_windows(acts).items():
        window = sum(b - a for a, b in pieces)
        ran = union([(max(a["s"], lo), min(a["e"], hi)) for a in acts for lo, hi in pieces
                     if a["s"] < hi and a["e"] > lo])
        assert idle[step] <= window - ran
    assert sum(idle.values()) > 0  # the streams do wait now and then
    times = dict(con.execute("select step, idle_ns from device_time where run = 'lag'").fetchall())
    assert times == idle
