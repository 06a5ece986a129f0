"""device_ops from real captures: the AlexNet DDP job's text and db exports (2 NPUs) and
two NCCL ranks of one Kineto job, every expected figure read from the raw files with the
standard library (tests/device_real.py)."""

from __future__ import annotations

import duckdb
import pytest
from device_real import (
    db_collectives,
    db_query,
    kineto_device_events,
    kineto_nccl,
    kineto_step_of,
    ns,
    step_trace_time,
    text_collectives,
    text_kernels,
    warehouse,
)

pytestmark = pytest.mark.slow  # ingests three real runs (~25 s) once per session


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    c = duckdb.connect(str(warehouse(tmp_path_factory)), read_only=True)
    yield c
    c.close()


@pytest.mark.parametrize("rank", [0, 1])
def test_text_export_collectives_land_once_with_their_hccl_facts(con, rank):
    rows = con.execute(
        """select name, start_ns, end_ns, collective, "group", element_count, data_type, step, launch_op is not null
           from device_ops where run = 'alexnet_text' and rank_id = ? and kind = 'communication'
           order by start_ns""", [rank]).fetchall()
    assert [r[:3] for r in rows] == text_collectives(rank)
    assert {r[3] for r in rows} == {"allreduce"} and {r[4] for r in rows} == {"Group 0"}
    assert {r[6] for r in rows} == {"FP32"} and all(r[5] > 0 for r in rows)
    assert {r[7] for r in rows} == {step_trace_time("text", rank)["Step"]}  # ProfilerStep#50
    assert all(r[8] for r in rows)  # each linked to the op that launched it
    # communication.json and the Plane rows describe the same ops: nothing lands twice, so
    # their summed time is the profiler's own Communication figure.
    assert sum(r[2] - r[1] for r in rows) == step_trace_time("text", rank)["Communication"]


@pytest.mark.parametrize("rank", [0, 1])
def test_text_export_kernels_are_the_ascend_hardware_kernel_rows(con, rank):
    rows = con.execute("""select name, start_ns, end_ns from device_ops
                          where run = 'alexnet_text' and rank_id = ? and kind = 'compute' order by all""",
                       [rank]).fetchall()
    assert rows == text_kernels(rank)


@pytest.mark.parametrize("rank", [0, 1])
def test_db_export_kernels_and_collectives(con, rank):
    kernels = db_query(rank, "select t.startNs, t.endNs from TASK t join COMPUTE_TASK_INFO c using (globalTaskId)"
                             " order by 1, 2")
    rows = con.execute("""select start_ns, end_ns from device_ops
                          where run = 'alexnet_db' and rank_id = ? and kind = 'compute' order by all""",
                       [rank]).fetchall()
    assert rows == kernels
    collectives = con.execute(
        """select name, start_ns, end_ns, "group", device from device_ops
           where run = 'alexnet_db' and rank_id = ? and kind = 'communication' order by start_ns""",
        [rank]).fetchall()
    assert [r[:3] for r in collectives] == db_collectives(rank)
    group, = db_query(rank, "select distinct s.value from COMMUNICATION_OP o join STRING_IDS s on s.id = o.groupName")
    assert {r[3] for r in collectives} == {group[0]} and {r[4] for r in collectives} == {f"NPU:{rank}"}
    # A collective's own tasks (COMMUNICATION_TASK_INFO) never land beside it.
    inside = con.execute(
        """select count(*) from device_ops d where run = 'alexnet_db' and rank_id = ? and kind = 'other'
           and exists (select 1 from device_ops c where c.run = d.run and c.rank_id = d.rank_id
                       and c.kind = 'communication' and d.start_ns >= c.start_ns and d.end_ns <= c.end_ns
                       and d.source_type in ('Notify Wait', 'Write Value', 'SDMA'))""", [rank]).fetchone()[0]
    assert inside == 0


@pytest.mark.parametrize("rank", [0, 1])
def test_kineto_kernels_memcpy_memset_and_nccl(con, rank):
    events = kineto_device_events(rank)
    kinds = {"gpu_memcpy": "memcpy", "gpu_memset": "memset"}
    expected = sorted(
        (e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]),
         kinds.get(e["cat"], "communication" if e["name"].startswith("nccl") else "compute"),
         f"cuda:{e['args']['device']}", e["args"]["stream"], e["args"]["correlation"], kineto_step_of(rank, e))
        for e in events)
    rows = con.execute(
        """select name, start_ns, end_ns, kind, device, stream, correlation_id, step from device_ops
           where run = 'hta_pair' and rank_id = ? order by all""", [rank]).fetchall()
    assert rows == expected
    nccl = con.execute("""select name, start_ns, end_ns from device_ops where run = 'hta_pair' and rank_id = ?
                          and kind = 'communication' and collective = 'sendrecv' order by start_ns""",
                       [rank]).fetchall()
    assert nccl == kineto_nccl(rank)


def test_every_device_row_has_a_kind_and_an_interval(con):
    bad = con.execute("""select count(*) from device_ops where kind not in
                         ('compute', 'communication', 'memcpy', 'memset', 'other') or end_ns < start_ns""").fetchone()
    assert bad == (0,)
