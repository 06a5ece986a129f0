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
    waiting; an instance where a rank's wait would be longer than its own collective lasted (clocks
    that disagree) is charged to nobody and counted as left out."""
    charged: dict[int, list[int]] = {}
    judged = []
    for i, arrivals in enumerate(instances):
        last = max(arrivals.values())
        if durations and any(last - a > durations[i][r] for r, a in arrivals.items()):
            continue
        judged.append(arrivals)
        last_rank = min(r for r, a in arrivals.items() if a == last)
        entry = charged.setdefault(last_rank, [0, 0])
        entry[0] += sum(last - a for a in arrivals.values())
        entry[1] += 1
    rank = min(charged, key=lambda r: (-charged[r][0], r))
    first = min(judged, key=lambda a: min(a.values()))
    return {"rank_id": rank, "waited_for_ns": charged[rank][0], "last_at": charged[rank][1],
            "late_ns": first[rank] - min(first.values()), "collectives": len(judged),
            "left_out": len(instances) - len(judged)}


def test_random_steps_match_an_independent_charging(attached_db):
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
    insert_rows(attached_db, "device_ops", COLUMNS, rows, **KEY)
    got = {s: dict(zip(("rank_id", "waited_for_ns", "last_at", "late_ns", "collectives", "left_out"), rest))
           for s, *rest in attached_db.execute("select step, rank_id, waited_for_ns, last_at, late_ns, collectives,"
                                               " left_out from stragglers").fetchall()}
    assert got == by_step
    assert all(r for (r,) in attached_db.execute("select is_straggler from stragglers").fetchall())  # > 1 ms


def test_threshold_and_rank_skew_follow_the_waiting(attached_db):
    # Rank 1 arrives 0.5 ms late; its step is otherwise the shorter one.
    insert_rows(attached_db, "device_ops", COLUMNS,
                [(0, 1, "ar", "communication", "allreduce", "dp", 1_000_000, 2_000_000),
                 (1, 1, "ar", "communication", "allreduce", "dp", 1_500_000, 2_000_000)], **KEY)
    assert attached_db.execute("select rank_id, waited_for_ns, is_straggler from stragglers").fetchall() == [
        (1, 500_000, False)]
    attached_db.execute("insert into internal.settings values ('straggler_wait_ns', '400000')")
    # Rank 0 waited, so its stage time is the longer: the span rule would name it.
    insert_rows(attached_db, "step_times", ["rank_id", "source_row", "step", "stage_ns"],
                [(0, 1, 1, 2_000_000), (1, 1, 1, 1_500_000)], **KEY)
    assert attached_db.execute("select is_straggler from stragglers").fetchall() == [(True,)]
    rows = attached_db.execute("select rank_id, is_straggler, straggler_rule from rank_skew order by rank_id"
                               ).fetchall()
    assert rows == [(0, False, "collectives"), (1, True, "collectives")]


def test_roles_without_collectives_keep_the_span_rule(attached_db):
    insert_rows(attached_db, "step_times", ["rank_id", "source_row", "step", "computing_ns",
                                            "communication_not_overlapped_ns", "free_ns", "stage_ns"],
                [(0, 1, 1, 0, 0, 0, 100), (1, 1, 1, 0, 0, 0, 150)], **KEY)
    rows = attached_db.execute("select rank_id, is_straggler, straggler_rule from rank_skew order by rank_id"
                               ).fetchall()
    assert rows == [(0, False, "span_vs_median"), (1, True, "span_vs_median")]


@pytest.mark.slow
@pytest.mark.parametrize("run, per_rank", [
    ("alexnet_text", lambda: {r: text_collectives(r) for r in (0, 1)}),
    ("alexnet_db", lambda: {r: db_collectives(r) for r in (0, 1)}),
])
def test_alexnet_names_the_rank_late_at_the_first_allreduce(tmp_path_factory, run, per_rank):
    con = duckdb.connect(str(warehouse(tmp_path_factory)), read_only=True)
    row = con.execute("select rank_id, waited_for_ns, late_ns, last_at, collectives, left_out, is_straggler"
                      " from stragglers where run = ?", [run]).fetchall()
    skew = con.execute("select rank_id from rank_skew where run = ? and is_straggler", [run]).fetchall()
    con.close()
    instances = arrival_order(per_rank())
    expected = _charge([i["arrivals"] for i in instances], [i["durations"] for i in instances])
    first = instances[0]
    late_rank = max(first["arrivals"], key=first["arrivals"].get)
    assert expected["rank_id"] == late_rank  # the rank that held the first allreduce back
    assert row == [(expected["rank_id"], expected["waited_for_ns"], expected["late_ns"], expected["last_at"],
                    expected["collectives"], expected["left_out"], True)]
    assert skew == [(late_rank,)]


@pytest.mark.slow
def test_nccl_pair_per_profiler_step(tmp_path_factory):
    con = duckdb.connect(str(warehouse(tmp_path_factory)), read_only=True)
    rows = con.execute("select step, rank_id, waited_for_ns, last_at, collectives, left_out from stragglers"
                       " where run = 'hta_pair' order by step").fetchall()
    con.close()
    steps = kineto_steps(0)
    expected = []
    for n, _start, _end in steps:
        # The NCCL kernels of a step on both ranks, matched by order (the launch of each lies in the step).
        per_rank = {r: [k for k in kineto_nccl(r) if _in_step(r, k, n)] for r in (0, 1)}
        matched = arrival_order(per_rank)
        instances = [i for i in matched if not i["mismatched"]]  # never charged
        charge = _charge([i["arrivals"] for i in instances], [i["durations"] for i in instances])
        expected.append((n, charge["rank_id"], charge["waited_for_ns"], charge["last_at"], charge["collectives"],
                         charge["left_out"] + len(matched) - len(instances)))
    assert rows == expected


def _in_step(rank, kernel, n) -> bool:
    name, start, _ = kernel
    event = next(e for e in kineto_device_events(rank) if e["name"] == name and ns(e["ts"]) == start)
    return kineto_step_of(rank, event) == n


def _skewed_pair(skew_at) -> tuple[list[tuple], list[dict], list[dict]]:
    """Two ranks, 20 allreduces in step 1: rank 1 truly arrives 0.3 ms after rank 0 and both
    leave together 0.5 ms later; rank 1's clock reads skew_at(k) ns ahead at the k-th.
    Returns the device_ops rows and each instance's recorded arrivals and durations."""
    rows, arrivals, durations = [], [], []
    for k in range(20):
        t = 1_000_000_000 + k * 10_000_000
        times = {0: (t, t + 800_000), 1: (t + 300_000 + skew_at(k), t + 800_000 + skew_at(k))}
        rows += [(r, 1, "ar", "communication", "allreduce", "dp", s, e) for r, (s, e) in times.items()]
        arrivals.append({r: s for r, (s, _) in times.items()})
        durations.append({r: e - s for r, (s, e) in times.items()})
    return rows, arrivals, durations


def test_a_constant_skew_is_corrected_and_every_wait_is_the_true_one(attached_db):
    rows, _, _ = _skewed_pair(lambda k: 1_000_000_000)  # one second ahead
    insert_rows(attached_db, "device_ops", COLUMNS, rows, **KEY)
    assert attached_db.execute("select bool_and(aligned) from clock_offsets").fetchone() == (True,)
    got = attached_db.execute("select rank_id, waited_for_ns, last_at, collectives, left_out from stragglers"
                              ).fetchall()
    assert got == [(1, 20 * 300_000, 20, 20, 0)]


def test_a_drifting_clock_leaves_out_the_instances_whose_waits_exceed_the_stay(attached_db):
    """Rank 1's clock gains 0.3 ms per collective: no single offset explains it, so nothing is
    aligned, and wherever the recorded arrivals ask rank 0 to wait longer than it sat in the
    allreduce (impossible on one clock) the instance is charged to nobody."""
    rows, arrivals, durations = _skewed_pair(lambda k: 300_000 * k)
    insert_rows(attached_db, "device_ops", COLUMNS, rows, **KEY)
    assert attached_db.execute("select bool_or(aligned) from clock_offsets").fetchone() == (False,)
    expected = _charge(arrivals, durations)
    got = attached_db.execute("select rank_id, waited_for_ns, last_at, collectives, left_out from stragglers"
                              ).fetchall()
    assert got == [(expected["rank_id"], expected["waited_for_ns"], expected["last_at"], expected["collectives"],
                    expected["left_out"])]
    assert expected["left_out"] > 10 and got[0][0] == 1
    # Every wait charged fits in the stay of the rank that waited.
    assert expected["waited_for_ns"] <= sum(min(d.values()) for d in durations)
