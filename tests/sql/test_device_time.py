"""device_time: on Ascend equal to the profiler's step_trace_time to the ns (text: the CSV;
db: analysis.db's StepTraceTime), on Kineto equal to an interval computation written here
from the raw trace on the device's clock (each step's own activity in its own span), with no
device work dropped where the GPU runs behind the CPU; on made-up rows, kernels overlapping
on two streams count once."""

from __future__ import annotations

import duckdb
import pytest
from conftest import insert_rows
from device_real import (
    KINETO_TRACES,
    db_query,
    device_activity,
    device_clock_steps,
    kineto,
    kineto_device_events,
    kineto_step_of,
    kineto_steps,
    kineto_warehouse,
    ns,
    step_trace_time,
    union,
    warehouse,
)

COLUMNS = ["rank_id", "step", "device", "stream", "name", "kind", "start_ns", "end_ns"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)


def test_overlapping_streams_count_once(attached_db):
    insert_rows(attached_db, "device_ops", COLUMNS, [
        (0, 1, "cuda:0", 7, "gemm", "compute", 100, 300),
        (0, 1, "cuda:0", 8, "gemm2", "compute", 200, 400),   # overlaps gemm on another stream
        (0, 1, "cuda:0", 9, "ncclKernel_AllReduce", "communication", 350, 600),
        (0, 1, "cuda:0", 7, "Memcpy HtoD", "memcpy", 650, 700),
    ], **KEY)
    insert_rows(attached_db, "ranges", ["rank_id", "source", "domain", "name", "start_ns", "end_ns"],
                [(0, "torch_annotation", "default", "ProfilerStep#1", 0, 1000)], **KEY)
    row = attached_db.execute("""select window_ns, compute_ns, communication_ns, overlapped_ns,
                                 exposed_communication_ns, memcpy_ns, idle_ns, method from device_time""").fetchall()
    # the window is the step's device span, 100..700, not the CPU's ProfilerStep range
    assert row == [(600, 300, 250, 50, 200, 50, 600 - 550, "intervals")]


def test_a_kernel_running_after_the_cpu_step_ended_counts_in_its_step(attached_db):
    """The GPU behind the CPU: step 1's CPU range ends at 100, its kernels run 150..400 (launched
    inside it), step 2's CPU range is 100..200 and its kernel runs 450..500."""
    insert_rows(attached_db, "device_ops", COLUMNS + ["launch_ts_ns"], [
        (0, 1, "cuda:0", 7, "gemm", "compute", 150, 300, 10),
        (0, 1, "cuda:0", 7, "gemm", "compute", 320, 400, 20),
        (0, 2, "cuda:0", 7, "gemm", "compute", 450, 500, 120),
    ], **KEY)
    insert_rows(attached_db, "ranges", ["rank_id", "source", "domain", "name", "start_ns", "end_ns"],
                [(0, "torch_annotation", "default", "ProfilerStep#1", 0, 100),
                 (0, "torch_annotation", "default", "ProfilerStep#2", 100, 200)], **KEY)
    rows = attached_db.execute("select step, window_ns, compute_ns, idle_ns from device_time order by step").fetchall()
    assert rows == [(1, 250, 230, 20), (2, 50, 50, 0)]


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
    for n, _start, _end in kineto_steps(rank):
        spans = []
        sets = {"compute": [], "communication": [], "memcpy": []}
        for e in kineto_device_events(rank):
            s, t = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            if kineto_step_of(rank, e) != n or t <= s:
                continue
            kind = {"gpu_memcpy": "memcpy", "gpu_memset": "memset"}.get(
                e["cat"], "communication" if e["name"].startswith("nccl") else "compute")
            spans.append((s, t))
            if kind in sets:
                sets[kind].append((s, t))
        window = max(t for _, t in spans) - min(s for s, _ in spans)
        compute, comm = union(sets["compute"]), union(sets["communication"])
        overlapped = compute + comm - union(sets["compute"] + sets["communication"])
        expected.append((n, window, compute, comm, overlapped, comm - overlapped, union(sets["memcpy"]),
                         window - union(spans)))
    rows = con.execute("""select step, window_ns, compute_ns, communication_ns, overlapped_ns, exposed_communication_ns,
                          memcpy_ns, idle_ns from device_time
                          where run = 'hta_pair' and rank_id = ? and step is not null order by step""",
                       [rank]).fetchall()
    assert rows == expected


@pytest.fixture(scope="module")
def kineto_con(tmp_path_factory):
    c = duckdb.connect(str(kineto_warehouse(tmp_path_factory)), read_only=True)
    yield c
    c.close()


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(KINETO_TRACES))
def test_kineto_steps_on_the_device_clock(kineto_con, run):
    """Every real GPU trace: each (step, device) row equals the device's activity in the step's window."""
    rows = kineto_con.execute("""select step, device, window_ns, compute_ns, communication_ns, overlapped_ns,
                                 exposed_communication_ns, memcpy_ns, idle_ns from device_time where run = ?""",
                              [run]).fetchall()
    expected = device_clock_steps(KINETO_TRACES[run])
    assert {(step, int(device.split(":")[1])): tuple(figures) for step, device, *figures in rows} == expected


@pytest.mark.slow
@pytest.mark.parametrize("run", sorted(KINETO_TRACES))
def test_no_device_work_is_dropped(kineto_con, run):
    """The busy time device_time keeps equals the union of every kernel, copy and set on the device
    (the ns-resolution trace, whose GPU runs a step behind its CPU, kept 11% of it on the CPU's steps)."""
    acts = [a for a in device_activity(KINETO_TRACES[run]) if a["e"] > a["s"]]
    kept, = kineto_con.execute("select sum(window_ns - idle_ns) from device_time where run = ?", [run]).fetchone()
    everything = sum(union((a["s"], a["e"]) for a in acts if a["device"] == d) for d in {a["device"] for a in acts})
    assert abs(kept - everything) <= 0.005 * everything
