"""Generated memory input for the tests of the memory views, and a plain-Python replay of it.

Ascend operator_memory.csv rows (allocations, release rows with a negative size, GE's
cann::* rows, blocks never released, many time ties) on two captures and two devices of
one rank. The replay is the documented rule written out in Python, not the views' SQL.
"""

from __future__ import annotations

import random
from collections import defaultdict

from conftest import insert_rows

KEY = dict(run="r", role="actor_update", rank_id=1)
COLUMNS = ["capture", "source_id", "source_row", "name", "size_bytes", "alloc_ns", "release_ns", "device",
           "alloc_total_allocated_bytes", "alloc_total_reserved_bytes",
           "release_total_allocated_bytes", "release_total_reserved_bytes"]
NAMES = ["aten::empty", "aten::mul", "cann::matmul", "aten::zeros"]


def ascend_rows(seed: int, per_capture: int = 300) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for source_id, capture in ((1, "rank1/a_ascend_pt"), (2, "rank1/b_ascend_pt")):
        for row in range(1, per_capture + 1):
            alloc = 1_000_000 + rng.randrange(0, 200) * 10  # coarse: many ties
            release = rng.choice([None, alloc + rng.randrange(0, 60) * 10])
            size = rng.randrange(1, 50) * 512 * (-1 if row % 23 == 0 else 1)  # every 23rd is a release row
            rows.append(dict(zip(COLUMNS, (
                capture, source_id, row, rng.choice(NAMES), size, alloc, release, rng.choice(["NPU:0", "NPU:1"]),
                rng.randrange(10**6, 10**9), rng.randrange(10**9, 2 * 10**9),
                None if release is None else rng.randrange(10**6, 10**9),
                None if release is None else rng.randrange(10**9, 2 * 10**9)))))
    return rows


def insert_ascend(con, rows: list[dict]) -> None:
    insert_rows(con, "memory_records", COLUMNS, [tuple(r[c] for c in COLUMNS) for r in rows], **KEY)


def blocks(rows: list[dict]) -> list[dict]:
    """Allocation rows are blocks; release rows (negative size) are not."""
    return [r for r in rows if r["size_bytes"] > 0]


def replay(rows: list[dict]) -> dict:
    """Per (capture, device): the events in the documented order (time, releases first, CSV row)
    with the running live bytes, as (ts, is_alloc, row, delta, live, block)."""
    events = defaultdict(list)
    for b in blocks(rows):
        key = (b["capture"], b["device"])
        events[key].append((b["alloc_ns"], 1, b["source_row"], b["size_bytes"], b))
        if b["release_ns"] is not None:
            events[key].append((b["release_ns"], 0, b["source_row"], -b["size_bytes"], b))
    replayed = {}
    for key, found in events.items():
        live, out = 0, []
        for ts, is_alloc, row, delta, block in sorted(found, key=lambda e: e[:3]):
            live += delta
            out.append((ts, is_alloc, row, delta, live, block))
        replayed[key] = out
    return replayed


def peaks(rows: list[dict]) -> dict:
    """Per (capture, device): (peak_live_bytes, the first time it was reached)."""
    result = {}
    for key, events in replay(rows).items():
        best = max(e[4] for e in events)
        result[key] = (best, next(e[0] for e in events if e[4] == best))
    return result
