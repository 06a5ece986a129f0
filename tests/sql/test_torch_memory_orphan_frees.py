"""torch_memory_orphan_frees: frees with no earlier allocation at their address, against a
per-address replay in Python of generated events (ties in time, several threads, devices
and captures, address reuse, events without an address)."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from conftest import insert_rows

COLUMNS = ["capture", "event_index", "ts_ns", "bytes", "addr", "device_type", "device_id", "tid"]
DEVICES = {(1, 0): "cuda:0", (1, 1): "cuda:1", (0, -1): "cpu", (20, 3): "npu:3"}


def _events(seed: int) -> list[tuple]:
    rng = random.Random(seed)
    events = []
    for capture in ("trace_a.json", "trace_b.json"):
        for index in range(400):
            device = rng.choice(list(DEVICES))
            addr = rng.choice([None, *range(0x100, 0x10C)])
            size = rng.choice([64, 128, 4096]) * rng.choice([1, -1])
            events.append((capture, index, 1_000 + rng.randrange(0, 150) * 10, size, addr, *device,
                           rng.choice([1, 2])))
    return events


def _expected(events) -> dict:
    """Replay each address in time order (file order on ties): a free whose predecessor at its
    address is none or another free is an orphan."""
    by_addr = defaultdict(list)
    for capture, index, ts, size, addr, device_type, device_id, _tid in events:
        if addr is not None:
            by_addr[(capture, DEVICES[(device_type, device_id)], addr)].append((ts, index, size))
    orphans = defaultdict(lambda: [0, 0])
    for (capture, device, _addr), rows in by_addr.items():
        previous = None
        for _ts, _index, size in sorted(rows):
            if size < 0 and (previous is None or previous < 0):
                orphans[(capture, device)][0] += 1
                orphans[(capture, device)][1] += -size
            previous = size
    return {key: tuple(value) for key, value in orphans.items()}


@pytest.mark.parametrize("seed", [1, 2])
def test_orphan_frees_match_a_replay_per_address(attached_db, seed):
    events = _events(seed)
    insert_rows(attached_db, "torch_memory_events", COLUMNS, events, run="r", role="actor", rank_id=2, source_id=1,
                total_allocated_bytes=0, total_reserved_bytes=0)
    got = attached_db.execute("""select run, role, rank_id, capture, device, orphan_frees, orphan_freed_bytes
                                 from torch_memory_orphan_frees""").fetchall()
    expected = _expected(events)
    assert expected  # the generated input has orphans to find
    assert sorted(got) == sorted(("r", "actor", 2, capture, device, count, freed)
                                 for (capture, device), (count, freed) in expected.items())


def test_no_orphans_when_every_free_follows_its_allocation(attached_db):
    insert_rows(attached_db, "torch_memory_events", COLUMNS,
                [("t", 0, 10, 100, 0xA, 1, 0, 1), ("t", 1, 20, -100, 0xA, 1, 0, 2), ("t", 2, 30, -5, None, 1, 0, 1)],
                run="r", role="actor", rank_id=0, source_id=1)
    assert attached_db.execute("select count(*) from torch_memory_orphan_frees").fetchone()[0] == 0
