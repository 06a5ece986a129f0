"""memory_alloc_stack and memory_event_rows against an independent computation.

Generated ops and allocations with exact time ties, names absent from the trace,
allocations before the first op, and two captures of one rank.
"""

from __future__ import annotations

import random

import pytest
from conftest import insert_rows

from rlwh.warehouse import derive


def _setup(con, seed: int):
    rng = random.Random(seed)
    names = ["aten::empty", "aten::mul", "aten::add", "aten::zeros"]
    stacks = {1: "a.py(1): f\nb.py(2): g", 2: "c.py(3): h", 3: "d.py(4): k\ne.py(5): m\nf.py(6): n"}
    for stack_id, text in stacks.items():
        con.execute("insert into call_stacks values (?, ?, ?, ?)",
                    [stack_id, text, text.split("\n")[0], len(text.split("\n"))])
    ops = []
    for capture in ("cap_a", "cap_b"):
        for _ in range(300):
            ts = 1_000_000 + rng.randrange(0, 5_000) * 10  # coarse grid: many exact ties
            ops.append(("r", "actor", 3, capture, rng.choice(names), ts, rng.choice([5, 10, 50, None]),
                        rng.randrange(1, 4), rng.choice([None, 1, 2, 3])))
    insert_rows(con, "cpu_ops", ["run", "role", "rank_id", "capture", "name", "ts_ns", "dur_ns", "tid", "stack_id"],
                ops, source_id=1)
    allocs = []
    for capture in ("cap_a", "cap_b"):
        for row in range(1, 400):
            name = rng.choice(names + ["hccl::allreduce"])  # a name absent from the trace
            alloc = rng.choice([500_000, 999_999]) if row % 37 == 0 else 1_000_000 + rng.randrange(0, 5_100) * 10
            allocs.append(("r", "actor", 3, capture, row, name, rng.choice([512, 1024, -512]), alloc))
    columns = ["run", "role", "rank_id", "capture", "source_row", "name", "size_bytes", "alloc_ns"]
    for source_id, capture in ((2, "cap_a"), (3, "cap_b")):  # one CSV per capture, as ingest loads them
        insert_rows(con, "memory_records", columns, [a for a in allocs if a[3] == capture], source_id=source_id)
    return ops, allocs, stacks


def _expected(ops, allocs, stacks, stacked_only: bool):
    """Plain Python: for each allocation, the matching op by the documented rule."""
    result = {}
    for _run, _role, _rank, capture, row, name, _size, alloc in allocs:
        candidates = [o for o in ops if o[3] == capture and o[4] == name and o[5] <= alloc
                      and (not stacked_only or o[8] is not None)]
        if not candidates:
            result[(capture, row)] = None
            continue
        latest = max(o[5] for o in candidates)
        tied = [o for o in candidates if o[5] == latest]
        # Tie rule: an op with a stack first, then the longest, then the lowest tid, then stack_id.
        tied.sort(key=lambda o: (o[8] is None, -(o[6] if o[6] is not None else -1), o[7], o[8] or 0))
        best = tied[0]
        result[(capture, row)] = (best[5], best[6], best[8])
    return result


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_asof_rule_matches_independent_computation(attached_db, seed):
    ops, allocs, stacks = _setup(attached_db, seed)
    expected = _expected(ops, allocs, stacks, stacked_only=False)
    rows = attached_db.execute(
        "select capture, source_row, op_ts_ns, op_dur_ns, op_stack_id, gap_ns, in_op, alloc_ns,"
        " stack_id, stack_source, call_stack, call_stack_top from memory_alloc_stack"
    ).fetchall()
    positive = {(a[3], a[4]) for a in allocs if a[6] > 0}
    assert {(r[0], r[1]) for r in rows} == positive  # every allocation once, release rows excluded
    assert len(rows) == len(positive)
    for capture, row, op_ts, op_dur, op_stack, gap, in_op, alloc, stack_id, source, stack, top in rows:
        want = expected[(capture, row)]
        if want is None:
            assert (op_ts, op_stack, gap, in_op) == (None, None, None, None)
        else:
            assert (op_ts, op_dur, op_stack) == want
            assert gap == alloc - op_ts
            assert in_op == (alloc <= op_ts + (op_dur or 0))
        if op_stack is not None:  # no autograd nodes here: the op's own stack is the answer
            assert (stack_id, source) == (op_stack, "op")
        else:
            assert source in ("enclosing_op", None) and (stack_id is None) == (source is None)
        assert stack == (stacks[stack_id] if stack_id else None)
        assert top == (stacks[stack_id].split("\n")[0] if stack_id else None)


@pytest.mark.parametrize("seed", [4, 5])
def test_rl_insight_rule_uses_only_stacked_ops(attached_db, seed):
    ops, allocs, stacks = _setup(attached_db, seed)
    expected = _expected(ops, allocs, stacks, stacked_only=True)
    rows = attached_db.execute(
        "select capture, source_row, call_stack, call_stack_top, size_kb from memory_event_rows").fetchall()
    assert len(rows) == len(allocs)  # RL-Insight keeps release rows too
    for capture, row, stack, top, _size_kb in rows:
        want = expected[(capture, row)]
        if want is None:
            assert (stack, top) == ("", "")
        else:
            assert stack == stacks[want[2]].replace("\n", ";\r\n")
            assert top == stacks[want[2]].split("\n")[0]


def test_allocation_before_first_op_keeps_its_row(attached_db):
    attached_db.execute("insert into cpu_ops (run, role, rank_id, capture, source_id, name, ts_ns, dur_ns)"
                        " values ('r', 'x', 0, 'c', 1, 'aten::empty', 100, 10)")
    attached_db.execute("insert into memory_records (run, role, rank_id, capture, source_id, source_row, name,"
                        " size_bytes, alloc_ns) values ('r', 'x', 0, 'c', 2, 1, 'aten::empty', 8, 99),"
                        " ('r', 'x', 0, 'c', 2, 2, 'aten::empty', 8, 100),"
                        " ('r', 'x', 0, 'c', 2, 3, 'aten::empty', 8, 111)")
    derive.refresh_all(attached_db)  # what rlwh ingest does after loading
    rows = attached_db.execute(
        "select source_row, op_ts_ns, gap_ns, in_op from memory_alloc_stack order by 1").fetchall()
    assert rows == [(1, None, None, None), (2, 100, 0, True), (3, 100, 11, False)]


def _nested_ops(rng, tid: int, start: int, end: int, depth: int, out: list) -> None:
    """Ops nested in time on one thread, as a real thread's are: children inside parents,
    siblings one after another, some touching (one starts as the other ends)."""
    t = start
    while t < end - 20:
        length = rng.randrange(10, max(11, (end - t) // 2))
        stack = rng.choice([None, 1, 2, 3, 4])
        out.append((tid, t, length, stack))
        if depth < 3 and length > 30 and rng.random() < 0.7:
            _nested_ops(rng, tid, t + rng.choice([0, 1, 5]), t + length - rng.choice([0, 2]), depth + 1, out)
        t += length + rng.choice([0, 0, 3, 17])


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_enclosing_op_rule_matches_independent_computation(attached_db, seed):
    """Allocations no same-name op explains (cann::* rows) take the innermost op with a
    stack whose [ts, ts + dur) holds them, on any thread: the latest start, then the lowest tid."""
    rng = random.Random(seed)
    stacks = {1: "a.py(1): f", 2: "b.py(2): g", 3: "c.py(3): h", 4: "d.py(4): k"}
    for stack_id, text in stacks.items():
        attached_db.execute("insert into call_stacks values (?, ?, ?, 1)", [stack_id, text, text])
    ops: list = []
    for tid in (1, 2, 3):
        _nested_ops(rng, tid, 1_000, 20_000, 0, ops)
    insert_rows(attached_db, "cpu_ops", ["tid", "ts_ns", "dur_ns", "stack_id"], ops, run="r", role="x", rank_id=0,
                capture="c", source_id=1, name="aten::op")
    allocs = [(row, 1_000 + rng.randrange(0, 19_500)) for row in range(1, 600)]
    insert_rows(attached_db, "memory_records", ["source_row", "alloc_ns"], allocs, run="r", role="x", rank_id=0,
                capture="c", source_id=2, name="cann::TransData", size_bytes=64)
    got = dict(((row, (sid, src)) for row, sid, src in attached_db.execute(
        "select source_row, stack_id, stack_source from memory_alloc_stack").fetchall()))
    for row, t in allocs:
        around = [o for o in ops if o[3] is not None and o[1] <= t < o[1] + o[2]]
        inner = {}
        for o in around:  # innermost per thread: the latest start, then the shortest
            if o[0] not in inner or (o[1], -o[2]) > (inner[o[0]][1], -inner[o[0]][2]):
                inner[o[0]] = o
        best = max(inner.values(), key=lambda o: (o[1], -o[0])) if inner else None
        want = (best[3], "enclosing_op") if best else (None, None)
        assert got[row] == want, (row, t)
