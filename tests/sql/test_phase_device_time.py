"""phase_device_time: the device's figures for the work launched inside each named range;
on made-up rows two phases of one worker, on real GPU traces against the user annotations
and device activity read here from the raw files (tests/device_real.py)."""

from __future__ import annotations

import duckdb
import pytest
from conftest import insert_rows
from device_real import KINETO_TRACES, base_ns, device_activity, kineto_warehouse, union, user_annotations

COLUMNS = ["rank_id", "step", "device", "stream", "name", "kind", "start_ns", "end_ns", "launch_ts_ns"]
KEY = dict(run="r", role="worker", capture="c", source_id=1)


def test_two_phases_of_one_worker(attached_db):
    """generate_sequences launches a gemm that runs after the range ends; update_actor a gemm and an
    allreduce half hidden behind it."""
    insert_rows(attached_db, "ranges", ["rank_id", "source", "domain", "name", "start_ns", "end_ns"],
                [(5, "nvtx", "default", "generate_sequences", 0, 100),
                 (5, "nvtx", "default", "update_actor", 100, 300)], **KEY)
    insert_rows(attached_db, "device_ops", COLUMNS, [
        (5, None, "cuda:5", 7, "gemm", "compute", 50, 150, 10),
        (5, None, "cuda:5", 7, "gemm", "compute", 200, 300, 120),
        (5, None, "cuda:5", 8, "ncclAllReduce", "communication", 250, 400, 130),
        (5, None, "cuda:5", 7, "gemm", "compute", 500, 600, 400),  # launched after both ranges
    ], **KEY)
    rows = attached_db.execute("""select phase, activities, window_ns, compute_ns, communication_ns,
                                  exposed_communication_ns, idle_ns from phase_device_time order by phase""").fetchall()
    assert rows == [("generate_sequences", 1, 100, 100, 0, 0, 0), ("update_actor", 2, 200, 100, 150, 100, 0)]


def test_a_range_written_on_two_threads_counts_its_work_once(attached_db):
    """The same range (name and times) on two threads is one row, each kernel counted once
    (issue 42: activities too high where the work was joined once per copy)."""
    insert_rows(attached_db, "ranges", ["rank_id", "source", "domain", "name", "start_ns", "end_ns", "tid"],
                [(5, "torch_annotation", "default", "update_actor", 0, 100, tid) for tid in (1, 2)], **KEY)
    insert_rows(attached_db, "device_ops", COLUMNS, [
        (5, None, "cuda:5", 7, "gemm", "compute", 50, 150, 10),
        (5, None, "cuda:5", 7, "gemm", "compute", 150, 200, 20),
    ], **KEY)
    rows = attached_db.execute("select phase, activities, window_ns, compute_ns from phase_device_time").fetchall()
    assert rows == [("update_actor", 2, 150, 150)]


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    c = duckdb.connect(str(kineto_warehouse(tmp_path_factory)), read_only=True)
    yield c
    c.close()


def _phases(relative: str) -> dict:
    """(name, start, end) of each CPU user annotation (not ProfilerStep#) -> the figures of the
    device activity launched inside it (its start where unlinked)."""
    acts = [a for a in device_activity(relative) if a["e"] > a["s"]]
    out = {}
    for name, start, end in user_annotations(relative):
        if str(name).startswith("ProfilerStep#"):
            continue
        if end <= start:
            continue
        mine = [a for a in acts if start <= (a["s"] if a["launch"] is None else a["launch"]) < end]
        if not mine:
            continue
        base = base_ns(relative)  # the view's times are epoch ns
        spans = {k: [(a["s"], a["e"]) for a in mine if a["kind"] == k] for k in ("compute", "communication")}
        compute = union(spans["compute"])
        window = max(a["e"] for a in mine) - min(a["s"] for a in mine)
        out[(name, base + start, base + end)] = (len(mine), window, compute, union(spans["communication"]),
                                        union(spans["compute"] + spans["communication"]) - compute,
                                        window - union((a["s"], a["e"]) for a in mine))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("run", ["index_resolver", "ns_resolution", "trace_diff", "trace_diff_test", "amd", "mtia",
                                 "sampled_rank0", "sampled_rank1"])
def test_real_user_annotations(con, run):
    rows = con.execute("""select phase, start_ns, end_ns, activities, window_ns, compute_ns, communication_ns,
                          exposed_communication_ns, idle_ns from phase_device_time where run = ?""", [run]).fetchall()
    got = {(name, start, end): tuple(rest) for name, start, end, *rest in rows}
    expected = _phases(KINETO_TRACES[run])
    assert expected and got == expected
