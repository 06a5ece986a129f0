"""memory_blocks: one row per block from each source (Ascend rows, PyTorch events paired by
address, memory-snapshot trace blocks), against the pairing rule replayed in Python."""

from __future__ import annotations

import random
from collections import defaultdict

from conftest import insert_rows
from memory_input import KEY, ascend_rows, blocks, insert_ascend

TORCH = ["event_index", "ts_ns", "bytes", "addr", "device_type", "device_id", "tid", "op_name",
         "total_allocated_bytes", "total_reserved_bytes"]


def _torch_events(seed: int) -> list[tuple]:
    rng = random.Random(seed)
    return [(i, 500 + rng.randrange(0, 100) * 10, rng.choice([256, 1024, 4096]) * rng.choice([1, 1, -1]),
             rng.choice([None, *range(0xA0, 0xA8)]), 1, rng.choice([0, 1]), rng.choice([7, 8]),
             rng.choice(["aten::empty", "aten::add"]), rng.randrange(10**6), rng.randrange(10**7))
            for i in range(300)]


def _torch_blocks(events) -> list[tuple]:
    """Each allocation with an address ends at the next event at its (device, addr) in time
    order, file order on ties: a free releases it, an allocation means the release went unseen."""
    by_addr = defaultdict(list)
    for e in events:
        if e[3] is not None:
            by_addr[(e[5], e[3])].append(e)
    result = []
    for (device_id, _addr), found in by_addr.items():
        found.sort(key=lambda e: (e[1], e[0]))
        for here, after in zip(found, [*found[1:], None]):
            if here[2] <= 0:
                continue
            freed = after is not None and after[2] < 0
            result.append(("torch", f"cuda:{device_id}", here[0], here[7], here[1],
                           None if after is None else after[1], here[2], here[8], here[9],
                           after[8] if freed else None, after[9] if freed else None, "torch",
                           # inferred: the next event at its address is another alloc (never released: false)
                           after is not None and after[2] > 0, "epoch"))
    return result


SNAPSHOT = ["device", "device_index", "clock", "alloc_seq", "release_seq", "alloc_ns", "release_ns",
            "release_action", "addr", "size_bytes"]
SNAPSHOT_ROWS = [
    ("cuda:0", 0, "epoch", 3, 9, 1_700, 1_900, "free_completed", 0x10, 512),
    ("cuda:0", 0, "epoch", 4, 6, 1_750, 1_800, "alloc", 0x20, 1024),  # ended by the next alloc at its address
    ("cuda:0", 0, "epoch", 5, None, 1_760, None, None, 0x30, 2048),    # never freed
    ("cuda:0", 0, "epoch", None, 2, None, 1_650, "free_completed", 0x40, 64),  # allocated before the trace
    ("cuda:1", 1, "sequence", 1, 2, None, None, "free_completed", 0x50, 128),  # a snapshot with no times
]

COLUMNS = ("source, device, origin_row, name, alloc_ns, release_ns, size_bytes, alloc_total_allocated_bytes, "
           "alloc_total_reserved_bytes, release_total_allocated_bytes, release_total_reserved_bytes, allocator, "
           "release_inferred, clock")


def test_blocks_of_every_source(attached_db):
    rows = ascend_rows(11, per_capture=150)
    insert_ascend(attached_db, rows)
    events = _torch_events(12)
    insert_rows(attached_db, "torch_memory_events", TORCH, events, capture="trace.json", source_id=5, **KEY)
    insert_rows(attached_db, "snapshot_trace_blocks", SNAPSHOT, SNAPSHOT_ROWS, capture="snap.pickle", source_id=6,
                **KEY)

    ascend = sorted(("ascend", b["device"], b["source_row"], b["name"], b["alloc_ns"], b["release_ns"],
                     b["size_bytes"], b["alloc_total_allocated_bytes"], b["alloc_total_reserved_bytes"],
                     b["release_total_allocated_bytes"], b["release_total_reserved_bytes"],
                     "GE" if b["name"].startswith("cann::") else "PTA", False, "epoch", b["capture"])
                    for b in blocks(rows))
    got = attached_db.execute(f"select {COLUMNS}, capture from memory_blocks where source = 'ascend' "
                              "order by all").fetchall()
    assert got == ascend

    torch = _torch_blocks(events)
    assert any(b[12] for b in torch) and any(b[5] is None for b in torch)  # inferred releases and live blocks
    got = attached_db.execute(f"select {COLUMNS} from memory_blocks where source = 'torch' order by all").fetchall()
    assert got == sorted(torch)

    # Every trace block, a free with no alloc too (allocated before recording: alloc_ns NULL).
    snapshot = sorted((("snapshot", device, alloc_seq, None, alloc_ns if clock == "epoch" else alloc_seq,
                        release_ns if clock == "epoch" else release_seq, size, None, None, None, None, "snapshot",
                        action == "alloc", clock)
                       for device, _i, clock, alloc_seq, release_seq, alloc_ns, release_ns, action, _a, size
                       in SNAPSHOT_ROWS), key=repr)
    got = attached_db.execute(f"select {COLUMNS} from memory_blocks where source = 'snapshot'").fetchall()
    assert sorted(got, key=repr) == snapshot
    before = attached_db.execute("select origin_row, release_ns from memory_blocks where source = 'snapshot' "
                                 "and allocated_before_recording").fetchall()
    assert before == [(None, 1_650)]
    keys = attached_db.execute("select distinct run, role, rank_id from memory_blocks").fetchall()
    assert keys == [(KEY["run"], KEY["role"], KEY["rank_id"])]
