"""The Ascend db export (ascend_pytorch_profiler_<rank>.db) on the real msinsight capture:
against sqlite3 queries written here, and against the text export of the same job (another
capture with the same allocation sequence, per the fixtures README); plus damaged copies."""

from __future__ import annotations

import csv
import os
import shutil
import sqlite3
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, copy_fixture, read_db

from rlwh.errors import SourceError
from rlwh.readers import ascend_db, ascend_trace
from rlwh.readers.base import TableSink

ROOT = FIXTURES / "real/ascend/msinsight-alexnet-level1"
RANKS = (0, 1)


def db_path(rank: int) -> Path:
    return ROOT / f"db/rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db"


def text_dir(rank: int) -> Path:
    return ROOT / f"text/rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT"


def sqlite_rows(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def read(reader, path: Path, tmp_path: Path, name: str = "parts"):
    sink = TableSink(tmp_path / name)
    outcome = reader.read(path, sink, {})
    sink.close()
    return outcome, {table: pq.read_table(parts).to_pylist() for table, parts in sink.tables().items()}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """Each rank's db export, read once."""
    out = {}
    for rank in RANKS:
        outcome, rows = read(ascend_db, db_path(rank), tmp_path_factory.mktemp(f"db{rank}"))
        assert outcome.status == "ok", outcome.message
        out[rank] = rows
    return out


@pytest.mark.parametrize("rank", RANKS)
def test_memory_records_spell_what_the_text_export_writes(rank, loaded):
    text = list(csv.DictReader(open(text_dir(rank) / "operator_memory.csv", newline="", encoding="utf-8")))
    rows = loaded[rank]["memory_records"]
    assert [r["name"] for r in rows] == [t["Name"] for t in text]  # cann:: included
    assert [r["size_bytes"] for r in rows] == [Fraction(t["Size(KB)"]) * 1024 for t in text]
    assert {r["device"] for r in rows} == {t["Device Type"] for t in text} == {f"NPU:{rank}"}
    # Which rows are GE's is the same on both sides: no stream, no active total.
    assert [r["stream_ptr"] is None for r in rows] == [t["Stream Ptr"] == "" for t in text]
    assert sum(r["name"].startswith("cann::") for r in rows) == 57


@pytest.mark.parametrize("rank", RANKS)
def test_memory_records_values_are_the_db_cells(rank, loaded):
    expected = sqlite_rows(db_path(rank), """
        select row_number() over (order by o.rowid), s.value, o.size, o.allocationTime, o.releaseTime,
          o.activeReleaseTime, o.duration, o.activeDuration, o.allocationTotalAllocated,
          o.allocationTotalReserved, o.allocationTotalActive, o.releaseTotalAllocated, o.releaseTotalReserved,
          o.releaseTotalActive, cast(o.streamPtr as text), 'NPU:' || o.deviceId
        from OP_MEMORY o join STRING_IDS s on s.id = o.name order by o.rowid""")
    got = [tuple(r.values()) for r in loaded[rank]["memory_records"]]
    assert [(g[0], g[1].removeprefix("cann::"), *g[2:]) for g in got] == expected


@pytest.mark.parametrize("rank", RANKS)
def test_memory_usage_and_module_memory(rank, loaded):
    usage = sqlite_rows(db_path(rank), """
        select s.value, m.timestamp, m.totalAllocated, m.totalReserved, m.totalActive, cast(m.streamPtr as text),
          'NPU:' || m.deviceId
        from MEMORY_RECORD m join STRING_IDS s on s.id = m.component order by m.rowid""")
    got = loaded[rank]["memory_usage"]
    assert [(r["component"], r["ts_ns"], r["total_allocated_bytes"], r["total_reserved_bytes"],
             r["total_active_bytes"], r["stream_ptr"], r["device"]) for r in got] == usage
    assert {r["component"] for r in got} == {"PTA", "GE", "PTA+GE"}  # the text export adds APP
    modules = sqlite_rows(db_path(rank), """
        select e.name, n.timestampNs, n.totalReserved from NPU_MODULE_MEM n join ENUM_MODULE e on e.id = n.moduleId
        order by n.rowid""")
    got = loaded[rank]["npu_module_memory"]
    # The text export writes AML for the module ENUM_MODULE calls AMP.
    assert [(r["module"], r["ts_ns"], r["total_reserved_bytes"]) for r in got] == [
        ("AML" if m == "AMP" else m, *rest) for m, *rest in modules]
    with open(text_dir(rank) / "npu_module_mem.csv", encoding="utf-8") as handle:
        text_modules = [r["Component"] for r in csv.DictReader(handle)]
    assert Counter(r["module"] for r in got) == Counter(text_modules)


@pytest.mark.parametrize("rank", RANKS)
def test_step_times_join_step_time_with_analysis_stages(rank, loaded):
    (step, start, end), = sqlite_rows(db_path(rank), "select id, startNs, endNs from STEP_TIME")
    analysis = db_path(rank).with_name("analysis.db")
    con = sqlite3.connect(f"file:{analysis}?mode=ro&immutable=1", uri=True)
    con.row_factory = sqlite3.Row
    stages = dict(con.execute("select * from StepTraceTime").fetchone())
    con.close()
    row, = loaded[rank]["step_times"]
    assert (row["step"], row["start_ns"], row["end_ns"]) == (step, start, end) and stages["step"] == str(step)
    for source, column in ascend_db.STAGES.items():
        value = Fraction(str(stages[source])) * 1000
        assert row[column] == round(value), column
    # The stages add up to the stage time, and the stage and its preparing fit in the step.
    assert row["computing_ns"] + row["communication_not_overlapped_ns"] + row["free_ns"] == row["stage_ns"]
    assert row["stage_ns"] + row["preparing_ns"] <= end - start


@pytest.mark.parametrize("rank", RANKS)
def test_cpu_ops_and_stacks_match_the_text_export(rank, loaded, tmp_path):
    _, text = read(ascend_trace, text_dir(rank) / "trace_view.json", tmp_path, "text")
    db = loaded[rank]
    assert Counter(o["name"] for o in db["cpu_ops"]) == Counter(o["name"] for o in text["cpu_ops"])
    text_stacks = {s["stack_id"]: s["stack"] for s in text["call_stacks"]}
    db_stacks = {s["stack_id"]: s["stack"] for s in db["call_stacks"]}
    assert db_stacks == text_stacks  # same frames, innermost first, same ids
    assert Counter((o["name"], db_stacks.get(o["stack_id"]), o["seq_no"], o["fwd_tid"] > 0) for o in db["cpu_ops"]) == \
        Counter((o["name"], text_stacks.get(o["stack_id"]), o["seq_no"], o["fwd_tid"] > 0) for o in text["cpu_ops"])
    assert sum(o["fwd_tid"] > 0 for o in db["cpu_ops"]) > 0  # backward ops keep their autograd link
    pids = sqlite_rows(db_path(rank), "select distinct globalTid from PYTORCH_API where type = 50001")
    assert {(o["pid"], o["tid"]) for o in db["cpu_ops"]} == {(g >> 32, g % (1 << 32)) for (g,) in pids}
    ops = sqlite_rows(db_path(rank), "select cast(startNs as integer),"
                                     " cast(endNs as integer) - cast(startNs as integer)"
                                     " from PYTORCH_API where type = 50001 order by rowid")
    assert [(o["ts_ns"], o["dur_ns"]) for o in db["cpu_ops"]] == ops


def test_overlap_ranges_as_the_text_export_names_them(loaded, tmp_path):
    _, text = read(ascend_trace, text_dir(0) / "trace_view.json", tmp_path, "text")
    text_overlap = Counter((r["name"], r["thread"]) for r in text["ranges"] if r["source"] == "overlap")
    assert Counter((r["name"], r["thread"]) for r in loaded[0]["ranges"]) == text_overlap
    assert sum(text_overlap.values()) == len(sqlite_rows(db_path(0), "select 1 from OVERLAP_ANALYSIS"))


def test_the_file_is_never_written(tmp_path):
    folder = tmp_path / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir()
    for name in ("ascend_pytorch_profiler_0.db", "analysis.db"):
        shutil.copy(db_path(0).with_name(name), folder / name)
        (folder / name).chmod(0o444)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    folder.chmod(0o555)  # a user other than root could create no journal or lock file here
    try:
        outcome, rows = read(ascend_db, folder / "ascend_pytorch_profiler_0.db", tmp_path)
    finally:
        folder.chmod(0o755)
    assert outcome.status == "ok" and len(rows["memory_records"]) == 184
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()} == before


def test_cut_db_fails_naming_file_and_sizes(tmp_path):
    data = db_path(0).read_bytes()
    cut = tmp_path / "ascend_pytorch_profiler_0.db"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match=rf"ascend_pytorch_profiler_0\.db: cut short: the header says 209 pages "
                                          rf"of 4096 bytes \({len(data)} bytes\), the file has {len(data) // 2}"):
        read(ascend_db, cut, tmp_path)


def test_damaged_table_keeps_the_others(tmp_path):
    damaged = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copy(db_path(0), damaged)
    damaged.chmod(0o644)
    con = sqlite3.connect(damaged)
    con.execute("update MEMORY_RECORD set totalReserved = 'lots' where rowid = 3")
    con.commit()
    con.close()
    outcome, rows = read(ascend_db, damaged, tmp_path)
    assert outcome.status == "partial"
    assert "MEMORY_RECORD row 3: totalReserved: 'lots' is not an integer" in outcome.message
    assert len(rows["memory_usage"]) == 989 and len(rows["memory_records"]) == 184


def test_not_sqlite_fails(tmp_path):
    path = tmp_path / "ascend_pytorch_profiler_0.db"
    path.write_bytes(b"PK\x03\x04" + bytes(200))
    with pytest.raises(SourceError, match="not an SQLite database"):
        read(ascend_db, path, tmp_path)


def test_rank_dir_with_both_exports_loads_the_text_one(tmp_path):
    folder = tmp_path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    folder.mkdir(parents=True)
    shutil.copy(db_path(0), folder / db_path(0).name)
    shutil.copy(text_dir(0) / "operator_memory.csv", folder / "operator_memory.csv")
    outcome, rows = read(ascend_db, folder / db_path(0).name, tmp_path)
    assert outcome.status == "ignored" and rows == {}
    assert "operator_memory.csv" in outcome.message and "text export" in outcome.message
    assert os.path.basename(str(db_path(0))) in outcome.message


def _ingest(profile: Path, config):
    from rlwh.ingest.runner import ingest

    summary = ingest(profile, config)
    con = read_db(config)
    return summary, con


@pytest.mark.slow
def test_ingest_of_both_exports_lands_the_same_memory_records(tmp_path, config):
    """The db and text exports of the job, as two runs: the same allocation sequence per rank."""
    db_summary, con = _ingest(copy_fixture("real/ascend/msinsight-alexnet-level1/db", tmp_path / "a"), config)
    con.close()
    text_summary, con = _ingest(copy_fixture("real/ascend/msinsight-alexnet-level1/text", tmp_path / "b"), config)
    try:
        assert db_summary.failed == 0 and text_summary.failed == 0
        sources = dict(con.execute("select path, kind || ' ' || status from sources where run = 'db'").fetchall())
        assert sources["rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"] == "ascend_db ok"
        assert sources["rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/analysis.db"] == "ignored ignored"
        sequence = """select rank_id, list(name order by source_row), list(size_bytes order by source_row),
                      list(distinct device) from memory_records where run = ? group by 1 order by 1"""
        assert con.execute(sequence, ["db"]).fetchall() == con.execute(sequence, ["text"]).fetchall()
        counts = """select (select count(*) from cpu_ops where run = ?),
                      (select count(*) from memory_usage where run = ?),
                      (select count(*) from npu_module_memory where run = ?),
                      (select count(*) from step_times where run = ?)"""
        assert con.execute(counts, ["db"] * 4).fetchone() == (1720, 1980, 2156, 2)
        assert con.execute(counts, ["text"] * 4).fetchone() == (1720, 2008, 2156, 2)  # + 28 APP rows
        assert con.execute("select count(*) from memory_alloc_stack where run = 'db'").fetchone()[0] == 368
    finally:
        con.close()


@pytest.mark.slow
def test_rank_dir_with_both_exports_says_which_it_loaded(tmp_path, config):
    profile = copy_fixture("real/ascend/msinsight-alexnet-level1/text", tmp_path / "p")
    for rank in RANKS:
        out = profile / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT"
        shutil.copy(db_path(rank), out / db_path(rank).name)
    summary, con = _ingest(profile, config)
    try:
        assert summary.failed == 0
        status, message = con.execute(
            "select status, message from sources where path like '%ascend_pytorch_profiler_0.db'").fetchone()
        assert status == "ignored" and "operator_memory.csv" in message and "is loaded instead" in message
        assert con.execute("select count(*) from memory_records").fetchone()[0] == 2 * 184
    finally:
        con.close()
    again, con = _ingest(profile, config)
    con.close()
    assert {r.status for r in again.results} == {"unchanged"}


def test_mstx_rows_of_pytorch_api_become_ranges(tmp_path):
    """The fixture has no mstx rows: a copy gets a range and a mark as torch_npu writes them
    (PYTORCH_API type 50004, ENUM_API_TYPE 'mstx', the message in STRING_IDS)."""
    path = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copy(db_path(0), path)
    path.chmod(0o644)
    con = sqlite3.connect(path)
    (mstx,), = con.execute("select id from ENUM_API_TYPE where name = 'mstx'").fetchall()
    (top,), = con.execute("select max(id) from STRING_IDS").fetchall()
    con.executemany("insert into STRING_IDS values (?, ?)", [(top + 1, "rollout"), (top + 2, "weights synced")])
    global_tid = (3136493 << 32) + 3136500
    con.executemany("insert into PYTORCH_API (startNs, endNs, globalTid, name, type) values (?, ?, ?, ?, ?)", [
        ("1736410576400000000", "1736410576500000123", global_tid, top + 1, mstx),
        ("1736410576450000000", "1736410576450000000", global_tid, top + 2, mstx)])
    con.commit()
    con.close()
    outcome, rows = read(ascend_db, path, tmp_path)
    assert outcome.status == "ok"
    assert [(r["name"], r["start_ns"], r["end_ns"], r["pid"], r["tid"], r["domain"])
            for r in rows["ranges"] if r["source"] == "mstx"] == [
        ("rollout", 1736410576400000000, 1736410576500000123, 3136493, 3136500, "default"),
        ("weights synced", 1736410576450000000, 1736410576450000000, 3136493, 3136500, "default")]
    assert len(rows["cpu_ops"]) == 860  # mstx rows are no cpu_ops


def test_an_export_without_optional_columns_still_lands(tmp_path):
    """Other torch_npu versions write fewer columns: a missing optional one is NULL, a table
    without a column its rows need is skipped and named."""
    path = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copy(db_path(0), path)
    path.chmod(0o644)
    con = sqlite3.connect(path)
    con.execute("alter table OP_MEMORY drop column activeReleaseTime")
    con.execute("alter table OP_MEMORY drop column activeDuration")
    con.execute("alter table MEMORY_RECORD drop column timestamp")
    con.commit()
    con.close()
    outcome, rows = read(ascend_db, path, tmp_path)
    assert outcome.status == "partial" and "MEMORY_RECORD: no column(s) timestamp, so not read" in outcome.message
    assert "memory_usage" not in rows
    text = list(csv.DictReader(open(text_dir(0) / "operator_memory.csv", newline="", encoding="utf-8")))
    assert [r["name"] for r in rows["memory_records"]] == [t["Name"] for t in text]
    assert {r["active_release_ns"] for r in rows["memory_records"]} == {None}
    assert sum(r["release_ns"] is not None for r in rows["memory_records"]) > 100


def test_bad_step_row_is_named(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    for name in ("ascend_pytorch_profiler_0.db", "analysis.db"):
        shutil.copy(db_path(0).with_name(name), folder / name)
        (folder / name).chmod(0o644)
    con = sqlite3.connect(folder / "ascend_pytorch_profiler_0.db")
    con.execute("insert into STEP_TIME values ('next', 1, 2)")
    con.commit()
    con.close()
    outcome, rows = read(ascend_db, folder / "ascend_pytorch_profiler_0.db", tmp_path)
    assert outcome.status == "partial" and "STEP_TIME row 2: id: 'next' is not an integer" in outcome.message
    assert [r["step"] for r in rows["step_times"]] == [50] and rows["step_times"][0]["computing_ns"] == 8_903_431
