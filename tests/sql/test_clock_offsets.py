"""clock_offsets: each rank's clock offset from the collectives' end times, applied to the
arrivals only where the raw times are impossible and the offsets explain it; collectives
never charges a wait longer than the collective. Generated ranks whose clocks are a second
apart, and the real captures against their raw files (tests/device_real.py)."""

from __future__ import annotations

import random
import statistics

import duckdb
import pytest
from conftest import insert_rows
from device_real import db_collectives, kineto_nccl, text_collectives, warehouse

COLUMNS = ["rank_id", "step", "name", "kind", "collective", "group", "start_ns", "end_ns"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)
SKEW = {0: 0, 1: 1_000_000_000, 2: -3_500_000}  # how far each rank's clock reads ahead of the truth


def _skewed_job(rng):
    """Ranks that arrive at each allreduce at their own true time and all leave it within 2 µs
    of the last arrival; each rank writes its times on its own clock (truth + SKEW)."""
    rows, truth = [], []
    for k in range(1, 9):
        arrivals = {r: k * 50_000_000 + rng.randrange(0, 4_000_000) for r in SKEW}
        last = max(arrivals.values())
        ends = {r: last + rng.randrange(1_000, 3_000) for r in SKEW}
        truth.append((k, arrivals, ends))
        rows += [(r, 1, "ar", "communication", "allreduce", "dp", arrivals[r] + SKEW[r], ends[r] + SKEW[r])
                 for r in SKEW]
    return rows, truth


def test_a_second_of_skew_is_found_and_the_waits_are_the_true_ones(attached_db):
    rows, truth = _skewed_job(random.Random(5))
    insert_rows(attached_db, "device_ops", COLUMNS, rows, **KEY)
    got = attached_db.execute("""select rank_id, instances, offset_ns, aligned, applied_offset_ns,
                                        impossible_after_shift
                                 from clock_offsets order by rank_id""").fetchall()
    expected = []
    for r in SKEW:  # the median over instances of (end on r) - (end on rank 0), both on their own clocks
        diffs = sorted((ends[r] + SKEW[r]) - (ends[0] + SKEW[0]) for _, _, ends in truth)
        offset = diffs[(len(diffs) - 1) // 2]  # the lower median: a value one instance recorded
        expected.append((r, len(truth), offset, True, offset, 0))
    assert got == expected
    assert all(abs(offset - SKEW[r]) < 3_000 for r, _, offset, *_ in got)  # within the ends' noise
    waits = attached_db.execute("select seq, rank_id, wait_ns, wait_capped from collectives"
                                " order by seq, rank_id").fetchall()
    offsets = {r: offset for r, _, offset, *_ in got}
    want = []
    for k, arrivals, ends in truth:
        shifted = {r: arrivals[r] + SKEW[r] - offsets[r] for r in SKEW}
        last = max(shifted.values())
        want += [(k, r, min(last - shifted[r], ends[r] - arrivals[r]), last - shifted[r] > ends[r] - arrivals[r])
                 for r in SKEW]
    assert waits == want
    assert max(w for _, _, w, _ in waits) < 5_000_000  # not the second the raw clocks said
    assert not any(c for *_, c in waits)


def test_possible_times_stay_as_recorded(attached_db):
    """A rank 0.5 ms late whose clock agrees: nothing is impossible, nothing shifted."""
    insert_rows(attached_db, "device_ops", COLUMNS,
                [(0, 1, "ar", "communication", "allreduce", "dp", 1_000_000, 2_000_000),
                 (1, 1, "ar", "communication", "allreduce", "dp", 1_500_000, 2_000_050)], **KEY)
    assert attached_db.execute("select rank_id, offset_ns, impossible_instances, aligned, applied_offset_ns"
                               " from clock_offsets order by rank_id").fetchall() == [
        (0, 0, 0, False, 0), (1, 50, 0, False, 0)]
    assert attached_db.execute("select rank_id, arrive_ns, wait_ns, clock_offset_ns from collectives"
                               " order by rank_id").fetchall() == [(0, 1_000_000, 500_000, 0), (1, 1_500_000, 0, 0)]


def test_a_wait_longer_than_the_collective_is_capped_and_flagged(attached_db):
    """Two ops paired by order that are not one operation: rank 0's ended before rank 1's began,
    and no single offset explains the two instances (one says +5 ms, the other -5 ms)."""
    insert_rows(attached_db, "device_ops", COLUMNS,
                [(0, 1, "sr", "communication", "sendrecv", "pp", 0, 1_000_000),
                 (1, 1, "sr", "communication", "sendrecv", "pp", 5_000_000, 6_000_000),
                 (0, 1, "sr", "communication", "sendrecv", "pp", 20_000_000, 21_000_000),
                 (1, 1, "sr", "communication", "sendrecv", "pp", 15_000_000, 16_000_000)], **KEY)
    assert attached_db.execute("select aligned from clock_offsets").fetchall() == [(False,), (False,)]
    rows = attached_db.execute("select seq, rank_id, wait_ns, wait_capped from collectives"
                               " order by seq, rank_id").fetchall()
    assert rows == [(1, 0, 1_000_000, True), (1, 1, 0, False), (2, 0, 0, False), (2, 1, 1_000_000, True)]
    # No rank is charged for an instance whose waits had to be capped: both are left out.
    assert attached_db.execute("select rank_id, waited_for_ns, collectives, left_out from stragglers").fetchall() == [
        (None, 0, 0, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("run, per_rank", [
    ("alexnet_text", lambda: {r: text_collectives(r) for r in (0, 1)}),
    ("alexnet_db", lambda: {r: db_collectives(r) for r in (0, 1)}),
    ("hta_pair", lambda: {r: kineto_nccl(r) for r in (0, 1)}),
])
def test_real_offsets_are_the_median_end_difference(tmp_path_factory, run, per_rank):
    """Two ranks on one host (AlexNet) and a sampled NCCL pair: the offset is the median end
    difference of the instances matched by (name, k-th occurrence in the step), read from the raw
    files; none of them is aligned."""
    con = duckdb.connect(str(warehouse(tmp_path_factory)), read_only=True)
    got = con.execute("select rank_id, instances, offset_ns, aligned from clock_offsets where run = ? order by rank_id",
                      [run]).fetchall()
    con.close()
    ops = per_rank()
    steps = {"hta_pair": _kineto_steps_of}.get(run, lambda _r, rows: [None] * len(rows))
    ends = {}
    for rank, rows in ops.items():
        seen: dict[tuple, int] = {}
        ordered = sorted(rows, key=lambda r: r[1])
        for (name, _start, end), step in zip(ordered, steps(rank, ordered)):
            seen[(step, name)] = seen.get((step, name), 0) + 1
            ends.setdefault(rank, {})[(step, name, seen[(step, name)])] = end
    shared = sorted(set(ends[0]) & set(ends[1]))
    diffs = sorted(ends[1][k] - ends[0][k] for k in shared)
    assert got == [(0, len(shared), 0, False), (1, len(shared), diffs[(len(diffs) - 1) // 2], False)]
    assert statistics.median_low(diffs) == got[1][2]


def _kineto_steps_of(rank, rows):
    from device_real import kineto_device_events, kineto_step_of, ns

    events = {(e["name"], ns(e["ts"])): e for e in kineto_device_events(rank)}
    return [kineto_step_of(rank, events[(name, start)]) for name, start, _ in rows]
