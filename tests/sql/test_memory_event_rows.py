"""memory_event_rows: RL-Insight's MemoryEventRow shape and rule, against Python.

Its rule: the stack of the nearest same-name cpu_op at or before the allocation, among the
ops that carry a stack (ops without one are passed over), within the row's capture; units
as RL-Insight has them (KB, ms, MB as doubles) and its ";\\r\\n" stack spelling."""

from __future__ import annotations

import random

from conftest import insert_rows

STACKS = {11: "a.py(1): f\nb.py(2): g", 12: "c.py(3): h", 13: "d.py(4): k\ne.py(5): m"}
NAMES = ["aten::empty", "aten::mul", "aten::add"]
KEY = dict(run="r", role="rollout", rank_id=4)


def _input(seed: int):
    rng = random.Random(seed)
    ops, rows = [], []
    for capture in ("cap_a", "cap_b"):
        for ts in rng.sample(range(1_000, 9_000), 200):  # distinct times: the tie rule has its own tests
            ops.append((capture, rng.choice(NAMES), ts * 1000, rng.choice([None, 500]), 1,
                        rng.choice([None, None, *STACKS])))
        for row in range(1, 250):
            alloc = rng.randrange(500, 9_500) * 1000 + rng.randrange(0, 3) * 1000  # some at an op's own time
            duration = rng.choice([None, rng.randrange(1, 10**7)])
            rows.append((capture, row, rng.choice([*NAMES, "hccl::send"]), rng.choice([4096, 1536, -4096]), alloc,
                         duration, rng.choice([None, rng.randrange(10**9)]), rng.randrange(10**9),
                         rng.randrange(10**9), "NPU:2"))
    return ops, rows


def _expected(ops, rows):
    result = []
    for capture, row, name, size, alloc, duration, allocated, reserved, active, device in rows:
        stacked = [o for o in ops if o[0] == capture and o[1] == name and o[2] <= alloc and o[5] is not None]
        stack_id = max(stacked, key=lambda o: o[2])[5] if stacked else None
        text = STACKS.get(stack_id, "")
        result.append((name, KEY["role"], KEY["rank_id"], text.replace("\n", ";\r\n"), text.split("\n")[0],
                       size / 1024, alloc / 1e6, duration / 1e6 if duration is not None else 0.0,
                       None if allocated is None else allocated / 1048576, reserved / 1048576, active / 1048576,
                       device, KEY["run"], capture, row))
    return sorted(result, key=lambda r: (r[13], r[14]))


def test_event_rows_follow_rl_insights_rule_and_units(attached_db):
    for stack_id, text in STACKS.items():
        attached_db.execute("insert into call_stacks values (?, ?, ?, ?)",
                            [stack_id, text, text.split("\n")[0], text.count("\n") + 1])
    ops, rows = _input(21)
    insert_rows(attached_db, "cpu_ops", ["capture", "name", "ts_ns", "dur_ns", "tid", "stack_id"], ops,
                source_id=1, **KEY)
    for source_id, capture in ((2, "cap_a"), (3, "cap_b")):
        insert_rows(attached_db, "memory_records",
                    ["capture", "source_row", "name", "size_bytes", "alloc_ns", "duration_ns",
                     "alloc_total_allocated_bytes", "alloc_total_reserved_bytes", "alloc_total_active_bytes",
                     "device"], [r for r in rows if r[0] == capture], source_id=source_id, **KEY)
    got = attached_db.execute("""
        select name, role, rank_id, call_stack, call_stack_top, size_kb, start_time_ms, duration_ms,
               total_allocated_mb, total_reserved_mb, total_active_mb, device_type, run, capture, source_row
        from memory_event_rows order by capture, source_row""").fetchall()
    expected = _expected(ops, rows)
    assert sum(1 for r in expected if r[3]) > 50 and sum(1 for r in expected if not r[3]) > 20
    assert got == expected
