"""memory_blocks, memory_timeline, memory_peak, memory_peak_breakdown, memory_unreleased."""

from __future__ import annotations

import random

from conftest import insert_rows

KEY = dict(run="r", role="actor_update", rank_id=0, capture="c", source_id=1)


def _ascend(con, rows):
    """rows: (source_row, name, size_bytes, alloc_ns, release_ns)."""
    insert_rows(con, "memory_records", ["source_row", "name", "size_bytes", "alloc_ns", "release_ns"], rows,
                device="NPU:0", **KEY)


def test_release_applies_before_alloc_at_equal_time(attached_db):
    _ascend(attached_db, [(1, "a", 100, 10, 20), (2, "b", 50, 20, 30)])
    rows = attached_db.execute(
        "select ts_ns, event, delta_bytes, live_bytes from memory_timeline order by ts_ns, delta_bytes > 0").fetchall()
    assert rows == [(10, "alloc", 100, 100), (20, "release", -100, 0), (20, "alloc", 50, 50), (30, "release", -50, 0)]
    assert attached_db.execute("select peak_live_bytes, peak_at_ns from memory_peak").fetchone() == (100, 10)


def test_peak_breakdown_adds_up_to_the_peak(attached_db):
    rng = random.Random(7)
    rows = []
    for i in range(1, 500):
        alloc = rng.randrange(0, 1000)
        release = rng.choice([None, alloc + rng.randrange(0, 200)])
        rows.append((i, rng.choice(["x", "y", "z"]), rng.randrange(1, 1000), alloc, release))
    _ascend(attached_db, rows)
    # Independent live-bytes sweep: releases before allocs at equal times.
    events = sorted([(a, 1, s) for _, _, s, a, r in rows] + [(r, 0, -s) for _, _, s, a, r in rows if r is not None])
    live, peak, peak_at = 0, -1, None
    for ts, _, delta in events:
        live += delta
        if live > peak:
            peak, peak_at = live, ts
    assert attached_db.execute("select peak_live_bytes, peak_at_ns from memory_peak").fetchone() == (peak, peak_at)
    total = attached_db.execute("select sum(live_bytes), sum(share_of_peak) from memory_peak_breakdown").fetchone()
    assert total[0] == peak and abs(total[1] - 1.0) < 1e-9
    unreleased = attached_db.execute("select sum(blocks), sum(unreleased_bytes) from memory_unreleased").fetchone()
    assert unreleased == (sum(1 for r in rows if r[4] is None), sum(r[2] for r in rows if r[4] is None))


def test_allocator_peak_is_the_reported_total(attached_db):
    insert_rows(attached_db, "memory_records",
                ["source_row", "name", "size_bytes", "alloc_ns", "release_ns", "alloc_total_allocated_bytes",
                 "release_total_allocated_bytes"],
                [(1, "a", 10, 1, 5, 1000, 990), (2, "b", 10, 2, None, 2000, None)], device="NPU:0", **KEY)
    row = attached_db.execute("select allocator_peak_bytes, allocator_peak_at_ns from memory_peak").fetchone()
    assert row == (2000, 2)


def _torch(con, events):
    """events: (event_index, ts_ns, bytes, addr)."""
    insert_rows(con, "torch_memory_events", ["event_index", "ts_ns", "bytes", "addr"], events,
                device_type=1, device_id=0, total_allocated_bytes=0, total_reserved_bytes=0, **KEY)


def test_torch_pairs_alloc_with_next_free_at_same_address(attached_db):
    _torch(attached_db, [
        (0, 5, -64, 0xA0),   # freed before any allocation: an orphan, not a block
        (1, 10, 100, 0xA1),
        (2, 12, 200, 0xA2),
        (3, 15, -100, 0xA1),
        (4, 15, 300, 0xA1),  # address reused at the same ns as the free
        (5, 20, -200, 0xA2),
        (6, 30, 400, 0xA3),  # never freed
    ])
    blocks = attached_db.execute(
        "select device, source, origin_row, alloc_ns, release_ns, size_bytes from memory_blocks order by origin_row"
    ).fetchall()
    assert blocks == [
        ("cuda:0", "torch", 1, 10, 15, 100),
        ("cuda:0", "torch", 2, 12, 20, 200),
        ("cuda:0", "torch", 4, 15, None, 300),
        ("cuda:0", "torch", 6, 30, None, 400),
    ]
    orphans = attached_db.execute("select device, orphan_frees, orphan_freed_bytes from torch_memory_orphan_frees")
    assert orphans.fetchall() == [("cuda:0", 1, 64)]
    timeline = attached_db.execute(
        "select ts_ns, live_bytes from memory_timeline order by ts_ns, delta_bytes > 0, origin_row").fetchall()
    assert timeline == [(10, 100), (12, 300), (15, 200), (15, 500), (20, 300), (30, 700)]
    assert attached_db.execute("select peak_live_bytes, peak_at_ns from memory_peak").fetchone() == (700, 30)
    assert attached_db.execute("select sum(blocks) from memory_unreleased").fetchone()[0] == 2
