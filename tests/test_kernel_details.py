"""kernel_details.csv and communication.json: the device rows of an Ascend text export that
has no trace_view.json, and ignored (never a second copy) where it has one. Expected
figures come from the raw files with the standard library (tests/device_real.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import duckdb
import pytest
from conftest import copy_fixture
from device_real import ALEXNET, communication_groups, kernel_details, step_trace_time, text_kernels

from rlwh.config import Config
from rlwh.ingest.runner import ingest

OUTPUT = "ASCEND_PROFILER_OUTPUT"


def _text_export(tmp_path: Path, keep_trace: bool) -> Path:
    profile = copy_fixture(f"{ALEXNET}/text", tmp_path / "alexnet")
    for path in profile.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    if not keep_trace:
        for trace in profile.glob(f"*/{OUTPUT}/trace_view.json"):
            trace.unlink()
    return profile


def _reader(config: Config) -> duckdb.DuckDBPyConnection:
    """The warehouse opened read-only once for all of a test's queries (an open costs ~25 ms)."""
    return duckdb.connect(str(config.db_path), read_only=True)


@pytest.fixture(scope="module")
def without_trace(tmp_path_factory) -> Iterator[duckdb.DuckDBPyConnection]:
    """The text export without its trace_view.json files, ingested once for this file's
    tests (run "kd", in-process as conftest's config), read on one connection."""
    tmp = tmp_path_factory.mktemp("without-trace")
    config = Config(db_path=tmp / "wh" / "warehouse.duckdb", workers=1, lock_timeout=5)
    ingest(_text_export(tmp, keep_trace=False), config, run="kd")
    with _reader(config) as con:
        yield con


def _rows(con: duckdb.DuckDBPyConnection, sql, params=()):
    """The query's rows, on a cursor of its own."""
    with con.cursor() as cursor:
        return cursor.execute(sql, list(params)).fetchall()


@pytest.mark.parametrize("rank", [0, 1])
def test_every_kernel_details_row_lands_once_with_its_kind_step_and_group(without_trace, rank):
    raw = kernel_details(rank)
    groups = communication_groups(rank)
    expected = sorted(
        (r["Name"], r["start_ns"], r["end_ns"], int(r["Step Id"]),
         "communication" if r["Accelerator Core"] == "HCCL" else "compute",
         groups[r["Name"]] if r["Accelerator Core"] == "HCCL" else None)
        for r in raw)
    rows = _rows(without_trace, """select name, start_ns, end_ns, step, kind, "group" from device_ops
                            where rank_id = ? order by all""", [rank])
    assert rows == expected
    assert len(groups) == 4 and all(r[5] is not None for r in rows if r[4] == "communication")


def test_sources_say_which_file_the_device_rows_came_from(without_trace):
    rows = dict(_rows(without_trace, """select regexp_extract(path, '[^/]+$'),
                                        any_value(status || ': ' || coalesce(message, ''))
                                 from sources where path like '%kernel_details%' or path like '%communication.json'
                                 group by 1"""))
    assert rows["kernel_details.csv"] == "ok: "
    assert rows["communication.json"] == "ok: "  # its transfers; the csv's reader reads its groups too


def test_straggler_from_kernel_details_is_the_rank_late_at_the_first_allreduce(without_trace):
    firsts = {rank: min(r["start_ns"] for r in kernel_details(rank) if r["Accelerator Core"] == "HCCL")
              for rank in (0, 1)}
    late_rank = max(firsts, key=firsts.get)
    late_by = firsts[late_rank] - min(firsts.values())
    rank_id, waited = _rows(without_trace, "select rank_id, waited_for_ns from stragglers where is_straggler")[0]
    assert rank_id == late_rank == 1
    assert waited >= late_by > 1_000_000  # charged at least the first allreduce's wait (5.6 ms)


def test_with_a_trace_the_csv_is_ignored_and_each_kernel_lands_once(tmp_path, config):
    profile = _text_export(tmp_path, keep_trace=True)
    ingest(profile, config, run="both")
    with _reader(config) as con:
        computes = {rank: _rows(con, "select name, start_ns, end_ns from device_ops where rank_id = ?"
                                     " and kind = 'compute' order by all", [rank]) for rank in (0, 1)}
        reasons = {m for (m,) in _rows(con, "select distinct message from sources where path like '%kernel_details%'"
                                            " or path like '%communication.json'")}
    for rank, compute in computes.items():
        assert compute == text_kernels(rank)
        # kernel_details.csv lists the same kernels (names, and starts within its µs rounding).
        listed = sorted((r["Name"], r["start_ns"]) for r in kernel_details(rank) if r["Accelerator Core"] != "HCCL")
        assert [r[0] for r in sorted(compute, key=lambda r: (r[0], r[1]))] == [n for n, _ in listed]
        assert all(abs(a[1] - b[1]) <= 1000 for a, b in zip(sorted(compute, key=lambda r: (r[0], r[1])), listed))
    assert len(reasons) == 2 and any("read with trace_view.json beside it" in (r or "") for r in reasons)


def test_a_broken_communication_json_keeps_the_kernels_and_names_the_place(tmp_path, config):
    profile = _text_export(tmp_path, keep_trace=False)
    beside = next(profile.glob(f"rank0*/{OUTPUT}/communication.json"))
    beside.write_text('{"step50": {"collective": {"hcom_x@1": ')
    ingest(profile, config, run="broken")
    with _reader(config) as con:
        status, message = _rows(con, "select status, message from sources where rank_id = 0 "
                                     "and path like '%kernel_details.csv'")[0]
        count, grouped = _rows(con, """select count(*), count("group") from device_ops where rank_id = 0""")[0]
    assert status == "partial"
    assert "communication.json: not JSON at line 1 column" in message
    assert count == len(kernel_details(0)) and grouped == 0


def test_a_changed_communication_json_reads_its_kernel_details_again(tmp_path, config):
    profile = _text_export(tmp_path, keep_trace=False)
    ingest(profile, config, run="again")
    beside = next(profile.glob(f"rank0*/{OUTPUT}/communication.json"))
    text = beside.read_text()
    beside.write_text(text.replace("@17522688603477080586", "@renamed"))
    ingest(profile, config, run="again")
    with _reader(config) as con:
        assert _rows(con, """select distinct "group" from device_ops where rank_id = 0 and kind = 'communication'""") \
            == [("renamed",)]


def test_a_level0_export_and_a_bad_row(tmp_path, config):
    """Profiler level 0 writes fewer columns (Type and Accelerator Core N/A, no Stream ID);
    a row that cannot be read is named, and every other row lands."""
    output = tmp_path / "p" / "rank3" / "x_ascend_pt" / OUTPUT
    output.mkdir(parents=True)
    (output / "kernel_details.csv").write_text(
        "Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim\n"
        "50,trans_TransData_0,N/A,N/A,1736405443881410.320\t,50.621,0,0\n"
        "50,hcom_allReduce__868_0_1,N/A,HCCL,1736405443909176.934\t,72994.438,320.026,0\n"
        "50,Conv2D1,N/A,N/A,1736405443881672.085\t,not-a-number,99.142,0\n")
    ingest(tmp_path / "p", config, run="l0")
    with _reader(config) as con:
        status, message = _rows(con, "select status, message from sources where path like '%kernel_details.csv'")[0]
        device_ops = _rows(con, """select rank_id, step, name, kind, collective, start_ns, end_ns, source_type
                                   from device_ops order by start_ns""")
    assert status == "partial" and "row 3" in message and "Duration(us)" in message
    assert device_ops == [
        (3, 50, "trans_TransData_0", "compute", None, 1736405443881410320, 1736405443881410320 + 50621, "kernel"),
        (3, 50, "hcom_allReduce__868_0_1", "communication", "allreduce", 1736405443909176934,
         1736405443909176934 + 72994438, "HCCL"),
    ]


@pytest.mark.parametrize("rank", [0, 1])
def test_device_time_without_a_trace_is_step_trace_time_to_the_ns(without_trace, rank):
    want = step_trace_time("text", rank)
    got = _rows(without_trace, """select step, compute_ns, communication_ns, overlapped_ns, exposed_communication_ns,
                                  idle_ns, method from device_time where rank_id = ?""", [rank])
    assert got == [(want["Step"], want["Computing"], want["Communication"], want["Overlapped"],
                    want["Communication(Not Overlapped)"], want["Free"], "step_trace_time")]
