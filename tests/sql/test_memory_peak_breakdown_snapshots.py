"""memory_peak_breakdown (and memory_peak) on a generated memory snapshot with every kind of
block: traced, allocated before recording and freed in the trace, allocated before
recording and held at snapshot time (with and without frames). The oracle is
tests/test_real_snapshots.expected, plain Python over the raw pickle."""

from __future__ import annotations

import pickle
import random

import duckdb
import pytest
from test_real_snapshots import expected

from rlwh.config import Config
from rlwh.ingest.runner import ingest

NATIVE = [{"filename": "??", "line": 0, "name": "torch::unwind::unwind()"},
          {"filename": "CUDACachingAllocator.cpp", "line": 0, "name": "c10::cuda::malloc"}]


def _frames(line: int) -> list[dict]:
    return NATIVE + [{"filename": "/home/me/proj/model.py", "line": line, "name": "forward"},
                     {"filename": "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", "line": 1790,
                      "name": "_call_impl"}]


def _snapshot(seed: int) -> dict:
    rng = random.Random(seed)
    held, trace, t = {}, [], 1_700_000_000_000_000
    before = {0x1000 * (i + 1): rng.choice([512, 4096, 1 << 20]) for i in range(12)}  # allocated before recording
    live = dict(before)
    kept = set(sorted(before)[:6])  # the weights: held from before recording to the snapshot
    for i in range(300):
        t += rng.choice([0, 1, 5])  # equal times happen
        if len(live) > len(kept) and rng.random() < 0.45:
            addr = rng.choice(sorted(set(live) - kept))
            size = live.pop(addr)
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": addr, "size": size, "stream": 0, "frames": [], "time_us": t})
        else:
            addr = 0x100000 + 0x1000 * i
            live[addr] = rng.choice([512, 8192, 1 << 20])
            trace.append({"action": "alloc", "addr": addr, "size": live[addr], "stream": 0,
                          "frames": _frames(10 + i % 4), "time_us": t})
    for n, (addr, size) in enumerate(sorted(live.items())):
        frames = [] if addr in before and n % 2 else _frames(99 if addr in before else 0)
        held[addr] = {"address": addr, "size": size, "requested_size": size, "state": "active_allocated",
                      "frames": frames}
    blocks = list(held.values()) + [{"address": 1 << 40, "size": 1 << 20, "requested_size": 0, "state": "inactive",
                                     "frames": []}]
    segment = {"device": 0, "address": 0, "total_size": 1 << 41, "allocated_size": sum(held_b["size"] for held_b in
               held.values()), "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "large",
               "is_expandable": False, "frames": [], "blocks": blocks}
    return {"segments": [segment], "device_traces": [trace]}


@pytest.mark.slow
def test_breakdown_at_the_allocators_peak_against_the_raw_pickle(tmp_path):
    root = tmp_path / "run" / "actor" / "rank0"
    root.mkdir(parents=True)
    path = root / "snapshot.pickle"
    path.write_bytes(pickle.dumps(_snapshot(3), protocol=4))
    ingest(tmp_path / "run", Config(db_path=tmp_path / "w.duckdb", workers=1))
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    want = expected(path)[0]
    assert con.execute("select status from sources").fetchone()[0] == "ok"
    assert con.execute("select allocator_peak_bytes, allocator_peak_at_ns, peak_live_bytes from memory_peak"
                       ).fetchone() == (want["allocator_peak"], want["allocator_peak_at_ns"], want["traced_peak"])
    rows = con.execute("select call_stack_top, user_frame, live_bytes, share_of_peak, allocated_before_recording "
                       "from memory_peak_breakdown").fetchall()
    tops, before = {}, {}
    for top, _user, live, _share, early in rows:
        (before if early else tops)[top] = (before if early else tops).get(top, 0) + live
    assert tops == dict(+want["tops"]) and before == dict(+want["before"])
    assert sum(r[2] for r in rows) == want["allocator_peak"]  # trace and segment sizes agree here
    assert abs(sum(r[3] for r in rows) - 1) < 1e-9
    assert {r[0] for r in rows if r[4]} == {None, "/home/me/proj/model.py(99): forward"}
    assert {r[1] for r in rows if not r[4]} <= {f"/home/me/proj/model.py({n}): forward" for n in range(10, 14)}
