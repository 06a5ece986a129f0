"""device_time: on Ascend equal to the profiler's step_trace_time to the ns (text: the CSV;
db: analysis.db's StepTraceTime), on Kineto equal to an interval computation written here
from the raw trace; on made-up rows, kernels overlapping on two streams count once."""

from __future__ import annotations

import duckdb
import pytest
from conftest import insert_rows
from device_real import (
    db_query,
    kineto,
    kineto_device_events,
    kineto_step_of,
    kineto_steps,
    ns,
    step_trace_time,
    warehouse,
)

COLUMNS = ["rank_id", "step", "device", "stream", "name", "kind", "start_ns", "end_ns"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)


def _union(intervals) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def test_overlapping_streams_count_once(fresh_db):
    insert_rows(fresh_db, "device_ops", COLUMNS, [
        (0, 1, "cuda:0", 7, "gemm", "compute", 100, 300),
        (0, 1, "cuda:0", 8, "gemm2", "compute", 200, 400),   # overlaps gemm on another stream
        (0, 1, "cuda:0", 9, "ncclKernel_AllReduce", "communication", 350, 600),
        (0, 1, "cuda:0", 7, "Memcpy HtoD", "memcpy", 650, 700),
    ], **KEY)
    insert_rows(fresh_db, "ranges", ["rank_id", "source", "domain", "name", "start_ns", "end_ns"],
                [(0, "torch_annotation", "default", "ProfilerStep#1", 0, 1000)], **KEY)
    row = fresh_db.execute("""select window_ns, compute_ns, communication_ns, overlapped_ns, exposed_communication_ns,
                              memcpy_ns, idle_ns, method from device_time""").fetchall()
    assert row == [(1000, 300, 250, 50, 200, 50, 1000 - 550, "intervals")]


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    c = duckdb.connect(str(warehouse(tmp_path_factory)), read_only=True)
    yield c
    c.close()


FIGURES = ("compute_ns", "exposed_communication_ns", "overlapped_ns", "communication_ns", "idle_ns")


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_ascend_text_equals_step_trace_time(con, rank):
    csv_row = step_trace_time("text", rank)
    expected = [(csv_row["Step"], csv_row["Computing"], csv_row["Communication(Not Overlapped)"],
                 csv_row["Overlapped"], csv_row["Communication"], csv_row["Free"])]
    rows = con.execute(f"select step, {', '.join(FIGURES)} from device_time where run = 'alexnet_text'"
                       " and rank_id = ?", [rank]).fetchall()
    assert rows == expected


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])  # rank 1's db has no OVERLAP_ANALYSIS: computed from TASK and COMMUNICATION_OP
def test_ascend_db_equals_step_trace_time(con, rank):
    (step, *figures), = db_query(rank, "select step, computing, communication_not_overlapped, overlapped,"
                                       " communication, free from StepTraceTime", "analysis.db")
    expected = [(int(str(step).removeprefix("step")), *(ns(repr(v)) for v in figures))]
    rows = con.execute(f"select step, {', '.join(FIGURES)} from device_time where run = 'alexnet_db'"
                       " and rank_id = ?", [rank]).fetchall()
    assert rows == expected


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_kineto_equals_an_interval_computation(con, rank):
    assert kineto(rank)["distributedInfo"]["rank"] == rank
    expected = []
    for n, start, end in kineto_steps(rank):
        sets = {"compute": [], "communication": [], "memcpy": [], "busy": []}
        for e in kineto_device_events(rank):
            if kineto_step_of(rank, e) != n:
                continue
            s, t = max(ns(e["ts"]), start), min(ns(e["ts"]) + ns(e["dur"]), end)
            if t <= s:
                continue
            kind = {"gpu_memcpy": "memcpy", "gpu_memset": "memset"}.get(
                e["cat"], "communication" if e["name"].startswith("nccl") else "compute")
            sets["busy"].append((s, t))
            if kind in sets:
                sets[kind].append((s, t))
        compute, comm = _union(sets["compute"]), _union(sets["communication"])
        overlapped = compute + comm - _union(sets["compute"] + sets["communication"])
        expected.append((n, end - start, compute, comm, overlapped, comm - overlapped, _union(sets["memcpy"]),
                         end - start - _union(sets["busy"])))
    rows = con.execute("""select step, window_ns, compute_ns, communication_ns, overlapped_ns, exposed_communication_ns,
                          memcpy_ns, idle_ns from device_time
                          where run = 'hta_pair' and rank_id = ? and step is not null order by step""",
                       [rank]).fetchall()
    assert rows == expected
