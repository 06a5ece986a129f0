"""collectives: arrivals matched across ranks by a recorded seq, else by (step, group, name,
k-th occurrence), the waiting for the last arrival, and a rank that never arrived; on real
captures against the arrival order read from the raw files (tests/device_real.py)."""

from __future__ import annotations

import random

import duckdb
import pytest
from conftest import insert_rows
from device_real import arrival_order, db_collectives, kineto_nccl, text_collectives, warehouse

COLUMNS = ["rank_id", "step", "name", "kind", "collective", "group", "start_ns", "end_ns"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)


def _ops(con, rows):
    insert_rows(con, "device_ops", COLUMNS, rows, **KEY)


def test_random_arrivals_match_an_independent_pairing(attached_db):
    rng = random.Random(3)
    rows, expected = [], {}
    for step in (1, 2):
        for k in range(1, 6):
            for name in ("allreduce_a", "allgather_b"):
                ends = rng.randrange(10_000, 20_000)
                for rank in range(4):
                    arrive = rng.randrange(0, 9_000) + step * 100_000 + k * 20_000
                    if (step, k, name, rank) == (2, 5, "allgather_b", 3):
                        continue  # rank 3 never reached this one
                    rows.append((rank, step, name, "communication", "allreduce", "g0", arrive, arrive + ends))
                    expected.setdefault((step, name, k), {})[rank] = arrive
    rng.shuffle(rows)
    _ops(attached_db, rows + [(0, 1, "gemm", "compute", None, None, 0, 10)])  # kernels are no collective
    got = attached_db.execute("select step, name, seq, rank_id, arrive_ns, wait_ns, is_last from collectives"
                              ).fetchall()
    want = []
    for (step, name, k), arrivals in expected.items():
        last = max(arrivals.values())
        for rank in range(4):
            arrive = arrivals.get(rank)
            want.append((step, name, k, rank, arrive, None if arrive is None else last - arrive,
                         arrive is not None and arrive == last))
    assert sorted(got, key=str) == sorted(want, key=str)


def test_groups_never_mix_and_a_missing_rank_is_a_null_row(attached_db):
    _ops(attached_db, [(0, 1, "ar", "communication", "allreduce", "tp", 100, 200),
                       (1, 1, "ar", "communication", "allreduce", "tp", 150, 200),
                       (0, 1, "ar", "communication", "allreduce", "dp", 300, 400),
                       (2, 1, "ar", "communication", "allreduce", "dp", 310, 400),
                       (2, 1, "ar", "communication", "allreduce", "dp", 500, 600)])
    rows = attached_db.execute("""select "group", seq, rank_id, arrive_ns, wait_ns, is_last from collectives
                                  order by "group", seq, rank_id""").fetchall()
    assert rows == [("dp", 1, 0, 300, 10, False), ("dp", 1, 2, 310, 0, True),
                    ("dp", 2, 0, None, None, False), ("dp", 2, 2, 500, 0, True),
                    ("tp", 1, 0, 100, 50, False), ("tp", 1, 1, 150, 0, True)]


@pytest.mark.slow
@pytest.mark.parametrize("run, per_rank", [
    ("alexnet_text", lambda: {r: text_collectives(r) for r in (0, 1)}),
    ("alexnet_db", lambda: {r: db_collectives(r) for r in (0, 1)}),
    ("hta_pair", lambda: {r: kineto_nccl(r) for r in (0, 1)}),
])
def test_real_arrival_order(tmp_path_factory, run, per_rank):
    con = duckdb.connect(str(warehouse(tmp_path_factory)), read_only=True)
    rows = con.execute("""select name, seq, rank_id, arrive_ns, wait_ns, is_last, wait_capped, clock_offset_ns
                          from collectives where run = ? order by arrive_ns""", [run]).fetchall()
    mismatched = con.execute("""select arrive_ns, rank_id from collectives where run = ? and mismatched
                                order by all""", [run]).fetchall()
    con.close()
    instances = arrival_order(per_rank())
    # The Kineto pair spans two ProfilerSteps: occurrences count within the step. Its sends and
    # receives paired by order end before the other rank began: capped, never aligned.
    assert {offset for *_, offset in rows} == {0}
    got = {}
    for name, _seq, rank, arrive, wait, _last, capped, _offset in rows:
        got.setdefault(name, []).append((arrive, rank, wait, capped))
    want = {}
    for i in instances:
        for rank, arrive in i["arrivals"].items():
            want.setdefault(i["name"], []).append((arrive, rank, i["waits"][rank], rank in i["capped"]))
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in want.items()}
    assert sum(len(i["capped"]) for i in instances) == (6 if run == "hta_pair" else 0)
    assert mismatched == sorted((a, r) for i in instances if i["mismatched"] for r, a in i["arrivals"].items())
    last = sorted((a, r) for _n, _s, r, a, _w, is_last, _c, _o in rows if is_last)
    assert last == sorted((i["arrivals"][i["last_rank"]], i["last_rank"]) for i in instances)


SEQ_COLUMNS = COLUMNS + ["seq", "seq_is_global"]


def test_a_recorded_seq_matches_ranks_whatever_their_steps_and_kernel_names(attached_db):
    # Rank 1's profiler counts its steps one later and NCCL picked another algorithm there;
    # rank 0 runs seq 7 as two kernels. By order within (step, name), nothing would meet.
    insert_rows(attached_db, "device_ops", SEQ_COLUMNS, [
        (0, 3, "ncclDevKernel_AllReduce_RING", "communication", "allreduce", "0", 100, 150, 7, True),
        (0, 3, "ncclDevKernel_AllReduce_RING", "communication", "allreduce", "0", 160, 300, 7, True),
        (1, 4, "ncclDevKernel_AllReduce_TREE", "communication", "allreduce", "0", 180, 300, 7, True),
        (0, 3, "ncclDevKernel_AllGather_RING", "communication", "allgather", "0", 400, 500, 8, True),
        (1, 4, "ncclDevKernel_AllGather_RING", "communication", "allgather", "0", 390, 500, 8, True),
        (1, 4, "ncclDevKernel_AllGather_RING", "communication", "allgather", "0", 600, 700, 9, True),
    ], **KEY)
    rows = attached_db.execute("""select step, name, seq, rank_id, arrive_ns, end_ns, wait_ns, is_last
                                  from collectives order by seq, rank_id""").fetchall()
    assert rows == [
        (3, "ncclDevKernel_AllReduce_RING", 7, 0, 100, 300, 80, False),
        (3, "ncclDevKernel_AllReduce_RING", 7, 1, 180, 300, 0, True),
        (3, "ncclDevKernel_AllGather_RING", 8, 0, 400, 500, 0, True),
        (3, "ncclDevKernel_AllGather_RING", 8, 1, 390, 500, 10, False),
        (4, "ncclDevKernel_AllGather_RING", 9, 0, None, None, None, False),  # rank 0's capture stopped
        (4, "ncclDevKernel_AllGather_RING", 9, 1, 600, 700, 0, True),
    ]
    waited = attached_db.execute("select step, rank_id, waited_for_ns from stragglers order by step").fetchall()
    # Step 3: rank 1 kept rank 0 waiting 80 at seq 7, rank 0 kept rank 1 waiting 10 at seq 8.
    assert waited == [(3, 1, 80), (4, 1, 0)]


def test_send_and_recv_never_meet_by_a_recorded_seq(attached_db):
    """Point-to-point sequence numbers count per pair of ranks: the order rule applies."""
    insert_rows(attached_db, "device_ops", SEQ_COLUMNS, [
        (0, 1, "ncclDevKernel_SendRecv", "communication", "sendrecv", "0", 100, 200, 5, True),
        (1, 1, "ncclDevKernel_SendRecv", "communication", "sendrecv", "0", 120, 200, 9, True),
    ], **KEY)
    rows = attached_db.execute("select seq, rank_id, wait_ns from collectives order by rank_id").fetchall()
    assert rows == [(1, 0, 20), (1, 1, 0)]


def test_a_seq_a_rank_recorded_in_two_captures_is_matched_by_order(attached_db):
    """A restarted process numbers its collectives from 1 again: within one capture the
    recorded seq is the key, across two of one rank it is not (order within the step is)."""
    rows = [(0, 1, "nccl_ar", "communication", "allreduce", "0", 100, 200, 1, True, "a"),
            (1, 1, "nccl_ar", "communication", "allreduce", "0", 130, 200, 1, True, "b"),
            (0, 2, "nccl_ar", "communication", "allreduce", "0", 500, 600, 1, True, "a2"),  # rank 0 restarted
            (1, 2, "nccl_ar", "communication", "allreduce", "0", 540, 600, 2, True, "b")]
    for *row, capture in rows:
        insert_rows(attached_db, "device_ops", SEQ_COLUMNS, [tuple(row)], **{**KEY, "capture": capture})
    got = attached_db.execute("""select step, seq, seq_is_global, rank_id, arrive_ns, wait_ns from collectives
                                 order by step, rank_id""").fetchall()
    assert got == [(1, 1, False, 0, 100, 30), (1, 1, False, 1, 130, 0),
                   (2, 1, False, 0, 500, 40), (2, 1, False, 1, 540, 0)]
