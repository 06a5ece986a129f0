"""stragglers: each collective's waiting charged to its last arriver, the step's straggler
the rank charged most; rank_skew.is_straggler follows it where collectives exist. Checked
against an independent charging in Python, and on real captures against the arrival order
read from the raw files (tests/device_real.py)."""

from __future__ import annotations

import random

import duckdb
import pytest
from conftest import insert_rows
from device_real import (
    arrival_order,
    db_collectives,
    kineto_device_events,
    kineto_nccl,
    kineto_step_of,
    kineto_steps,
    ns,
    text_collectives,
    warehouse,
)

COLUMNS = ["rank_id", "step", "name", "kind", "collective", "group", "start_ns", "end_ns"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)


def _charge(instances: list[dict], durations: list[dict] | None = None) -> dict:
    """The rule, written independently: the last arriver (lowest rank on a tie) is charged the others'
    waiting, each rank's wait at most its own collective's duration."""
    charged: dict[int, list[int]] = {}
    for i, arrivals in enumerate(instances):
        last = max(arrivals.values())
        last_rank = min(r for r, a in arrivals.items() if a == last)
        entry = charged.setdefault(last_rank, [0, 0])
        entry[0] += sum(min(last - a, durations[i][r]) if durations else last - a for r, a in arrivals.items())
        entry[1] += 1
    rank = min(charged, key=lambda r: (-charged[r][0], r))
    first = min(instances, key=lambda a: min(a.values()))
    return {"rank_id": rank, "waited_for_ns": charged[rank][0], "last_at": charged[rank][1],
            "late_ns": first[rank] - min(first.values()), "collectives": len(instances)}


def test_random_steps_match_an_independent_charging(fresh_db):
    rng = random.Random(11)
    rows, by_step = [], {}
    for step in range(1, 6):
        instances = []
        for k in range(1, 8):
            arrivals = {rank: rng.randrange(0, 3_000_000) + k * 10_000_000 for rank in range(4)}
            if k == 1:
                arrivals[step % 4] += 5_000_000  # one late rank at the first collective (ops stay in order)
            instances.append(arrivals)
            # every rank leaves the collective soon after the last one joined, as a collective does
            ends = {r: max(arrivals.values()) + rng.randrange(5, 2_000) for r in arrivals}
            rows += [(r, step, "ar", "communication", "allreduce", "dp", a, ends[r]) for r, a in arrivals.items()]
        by_step[step] = _charge(instances)
    insert_rows(fresh_db, "device_ops", COLUMNS, rows, **KEY)
    got = {s: dict(zip(("rank_id", "waited_for_ns", "last_at", "late_ns", "collectives"), rest))
           for s, *rest in fresh_db.execute(
               "select step, rank_id, waited_for_ns, last_at, late_ns, collectives from stragglers").fetchall()}
    assert got == by_step
    assert all(r for (r,) in fresh_db.execute("select is_straggler from stragglers").fetchall())  # > 1 ms


def test_threshold_and_rank_skew_follow_the_waiting(fresh_db):
    # Rank 1 arrives 0.5 ms late; its step is otherwise the shorter one.
    insert_rows(fresh_db, "device_ops", COLUMNS,
                [(0, 1, "ar", "communication", "allreduce", "dp", 1_000_000, 2_000_000),
                 (1, 1, "ar", "communication", "allreduce", "dp", 1_500_000, 2_000_000)], **KEY)
    assert fresh_db.execute("select rank_id, waited_for_ns, is_straggler from stragglers").fetchall() == [
        (1, 500_000, False)]
    fresh_db.execute("insert into internal.settings values ('straggler_wait_ns', '400000')")
    # Rank 0 waited, so its stage time is the longer: the span rule would name it.
    insert_rows(fresh_db, "step_times", ["rank_id", "source_row", "step", "stage_ns"],
                [(0, 1, 1, 2_000_000), (1, 1, 1, 1_500_000)], **KEY)
    assert fresh_db.execute("select is_straggler from stragglers").fetchall() == [(True,)]
    rows = fresh_db.execute("select rank_id, is_straggler, straggler_rule from rank_skew order by rank_id").fetchall()
    assert rows == [(0, False, "collectives"), (1, True, "collectives")]


def test_roles_without_collectives_keep_the_span_rule(fresh_db):
    insert_rows(fresh_db, "step_times", ["rank_id", "source_row", "step", "computing_ns",
                                         "communication_not_overlapped_ns", "free_ns", "stage_ns"],
                [(0, 1, 1, 0, 0, 0, 100), (1, 1, 1, 0, 0, 0, 150)], **KEY)
    rows = fresh_db.execute("select rank_id, is_straggler, straggler_rule from rank_skew order by rank_id").fetchall()
    assert rows == [(0, False, "span_vs_median"), (1, True, "span_vs_median")]


@pytest.mark.slow
@pytest.mark.parametrize("run, per_rank", [
    ("alexnet_text", lambda: {r: text_collectives(r) for r in (0, 1)}),
    ("alexnet_db", lambda: {r: db_collectives(r) for r in (0, 1)}),
])
def test_alexnet_names_the_rank_late_at_the_first_allreduce(tmp_path_factory, run, per_rank):
    con = duckdb.connect(str(warehouse(tmp_path_factory)), read_only=True)
    row = con.execute("select rank_id, waited_for_ns, late_ns, last_at, collectives, is_straggler from stragglers"
                      " where run = ?", [run]).fetchall()
    skew = con.execute("select rank_id from rank_skew where run = ? and is_straggler", [run]).fetchall()
    con.close()
    instances = arrival_order(per_rank())
    expected = _charge([i["arrivals"] for i in instances], [i["durations"] for i in instances])
    first = instances[0]
    late_rank = max(first["arrivals"], key=first["arrivals"].get)
    assert expected["rank_id"] == late_rank  # the rank that held the first allreduce back
    assert row == [(expected["rank_id"], expected["waited_for_ns"], expected["late_ns"], expected["last_at"],
                    expected["collectives"], True)]
    assert skew == [(late_rank,)]


@pytest.mark.slow
def test_nccl_pair_per_profiler_step(tmp_path_factory):
    con = duckdb.connect(str(warehouse(tmp_path_factory)), read_only=True)
    rows = con.execute("select step, rank_id, waited_for_ns, last_at, collectives from stragglers"
                       " where run = 'hta_pair' order by step").fetchall()
    con.close()
    steps = kineto_steps(0)
    expected = []
    for n, _start, _end in steps:
        # The NCCL kernels of a step on both ranks, matched by order (the launch of each lies in the step).
        per_rank = {r: [k for k in kineto_nccl(r) if _in_step(r, k, n)] for r in (0, 1)}
        instances = [i for i in arrival_order(per_rank) if not i["mismatched"]]  # never charged
        charge = _charge([i["arrivals"] for i in instances], [i["durations"] for i in instances])
        expected.append((n, charge["rank_id"], charge["waited_for_ns"], charge["last_at"], charge["collectives"]))
    assert rows == expected


def _in_step(rank, kernel, n) -> bool:
    name, start, _ = kernel
    event = next(e for e in kineto_device_events(rank) if e["name"] == name and ns(e["ts"]) == start)
    return kineto_step_of(rank, event) == n
