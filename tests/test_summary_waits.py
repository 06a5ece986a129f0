"""`rlwh summary` says who waits for whom: the rank the others waited for at each step's
collectives, who waited and how long, and where each rank's device time went."""

from __future__ import annotations

import pytest
from conftest import insert_rows, migrated_file

from rlwh.report.summary import summarize

COLUMNS = ["rank_id", "step", "device", "name", "kind", "collective", "group", "start_ns", "end_ns"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)


@pytest.mark.slow
def test_summary_names_the_rank_waited_for_and_who_waited(config):
    config.db_path.parent.mkdir(parents=True)
    con = migrated_file(config.db_path)
    con.execute("insert into runs values ('r', '/p', now(), now())")
    # Rank 2 reaches the step's first allreduce 7 ms after rank 0 and 4 ms after rank 1.
    insert_rows(con, "device_ops", COLUMNS, [
        (0, 3, "cuda:0", "gemm", "compute", None, None, 0, 1_000_000),
        (0, 3, "cuda:0", "ncclKernel_AllReduce", "communication", "allreduce", "0", 1_000_000, 9_000_000),
        (1, 3, "cuda:1", "ncclKernel_AllReduce", "communication", "allreduce", "0", 4_000_000, 9_000_000),
        (2, 3, "cuda:2", "ncclKernel_AllReduce", "communication", "allreduce", "0", 8_000_000, 9_000_000),
    ], **KEY)
    con.close()
    sections = {s.title.split(":")[0]: s.result for s in summarize(config, "r").sections}
    waits = sections["Who waits for whom"]
    row = dict(zip(waits.columns, waits.rows[0]))
    assert (row["step"], row["waited_for_rank"], row["others_waited_ms"], row["late_at_first_ms"]) == (3, 2, 11.0, 7.0)
    assert row["who_waited"] == "rank 0 7.0 ms, rank 1 4.0 ms" and row["flag"] == "straggler"
    device = sections["Where the device time went, per rank (summed over steps; device_time)"]
    assert [r[1] for r in device.rows] == [0, 1, 2]
    # rank 0's device idled nowhere between its kernels (gemm ends as its allreduce starts); why the
    # others idled: device_idle's columns beside device_time's
    assert device.columns[-3:] == ["host_wait_ms", "kernel_wait_ms", "other_wait_ms"]
    assert dict(zip(device.columns, device.rows[0]))["idle_ms"] == 0.0


@pytest.mark.slow
def test_summary_shows_the_clock_offsets_and_the_true_waits(config):
    """Rank 1's clock reads a second ahead: the summary shows the second as its offset, and the
    waits are the milliseconds rank 0 sat in the allreduces, not the second between the clocks."""
    config.db_path.parent.mkdir(parents=True)
    con = migrated_file(config.db_path)
    con.execute("insert into runs values ('r', '/p', now(), now())")
    skew = 1_000_000_000
    rows = []
    for k in range(3):  # rank 1 arrives 2 ms late at each; both leave together, 1 ms after it joined
        t = k * 100_000_000
        rows += [(0, 1, "cuda:0", "ncclKernel_AllReduce", "communication", "allreduce", "0", t, t + 3_000_000),
                 (1, 1, "cuda:1", "ncclKernel_AllReduce", "communication", "allreduce", "0",
                  t + 2_000_000 + skew, t + 3_000_000 + skew)]
    insert_rows(con, "device_ops", COLUMNS, rows, **KEY)
    con.close()
    sections = {s.title.split(":")[0]: s.result for s in summarize(config, "r").sections}
    clocks = sections["Clocks across ranks"]
    assert [(r[1], r[4], r[7]) for r in clocks.rows] == [(0, 0.0, "aligned"), (1, 1000.0, "aligned")]
    waits = dict(zip(sections["Who waits for whom"].columns, sections["Who waits for whom"].rows[0]))
    assert (waits["waited_for_rank"], waits["others_waited_ms"], waits["who_waited"]) == (1, 6.0, "rank 0 6.0 ms")


@pytest.mark.slow
def test_summary_shows_device_time_per_phase(config):
    config.db_path.parent.mkdir(parents=True)
    con = migrated_file(config.db_path)
    con.execute("insert into runs values ('r', '/p', now(), now())")
    insert_rows(con, "ranges", ["rank_id", "source", "domain", "name", "start_ns", "end_ns"],
                [(5, "nvtx", "default", "update_actor", 0, 2_000_000)], **KEY)
    insert_rows(con, "device_ops", COLUMNS + ["launch_ts_ns"], [
        (5, None, "cuda:5", "gemm", "compute", None, None, 1_000_000, 3_000_000, 10),
        (5, None, "cuda:5", "ncclKernel_AllReduce", "communication", "allreduce", "0", 2_000_000, 4_000_000, 20),
    ], **KEY)
    con.close()
    sections = {s.title.split(" (")[0]: s.result for s in summarize(config, "r").sections}
    phases = sections["Device time per phase range"]
    row = dict(zip(phases.columns, phases.rows[0]))
    assert (row["phase"], row["rank_id"], row["compute_ms"], row["communication_ms"], row["exposed_comm_ms"]) == (
        "update_actor", 5, 2.0, 2.0, 1.0)


def test_summary_says_how_many_instances_were_left_out(config):
    """Rank 1's clock gains 0.3 ms per allreduce: from the third on, the recorded arrivals would
    have rank 0 wait longer than it sat in the allreduce (0.8 ms). Those 18 are charged to nobody
    and counted; the waits shown are those of the first two (0.3 + 0.6 ms)."""
    config.db_path.parent.mkdir(parents=True)
    con = migrated_file(config.db_path)
    con.execute("insert into runs values ('r', '/p', now(), now())")
    rows = []
    for k in range(20):
        t, drift = k * 10_000_000, 300_000 * k
        rows += [(0, 1, "cuda:0", "ncclKernel_AllReduce", "communication", "allreduce", "0", t, t + 800_000),
                 (1, 1, "cuda:1", "ncclKernel_AllReduce", "communication", "allreduce", "0",
                  t + 300_000 + drift, t + 800_000 + drift)]
    insert_rows(con, "device_ops", COLUMNS, rows, **KEY)
    con.close()
    sections = {s.title.split(":")[0]: s.result for s in summarize(config, "r").sections}
    waits = dict(zip(sections["Who waits for whom"].columns, sections["Who waits for whom"].rows[0]))
    assert (waits["waited_for_rank"], waits["others_waited_ms"], waits["who_waited"], waits["left_out"],
            waits["arrived_last_at"]) == (1, 0.9, "rank 0 0.9 ms", 18, "2 of 2")


def test_summary_and_compare_open_the_warehouse_once(config, monkeypatch):
    """summary asks a question a section (14 here) and compare 6, each command on one
    read-only connection: an open costs 20-40 ms (summary took 0.9 s on a warehouse of 63
    rows, one open a question), and every answer comes from the same published file."""
    from rlwh.report.compare_runs import compare_runs
    from rlwh.warehouse import catalog

    config.db_path.parent.mkdir(parents=True)
    con = migrated_file(config.db_path)
    con.execute("insert into runs values ('r', '/p', now(), now()), ('s', '/p', now(), now())")
    con.close()
    opened = []
    connect = catalog.connect_read
    monkeypatch.setattr(catalog, "connect_read", lambda *args, **kw: opened.append(args) or connect(*args, **kw))
    assert len(summarize(config, "r").sections) > 10 and len(opened) == 1
    compare_runs(config, "r", "s")
    assert len(opened) == 2
