"""memory_record.csv, npu_module_mem.csv and step_trace_time.csv on the real msinsight
capture, against a reading written here with the csv module and exact fractions, plus
damaged copies (a cut file, a missing column, a bad cell)."""

from __future__ import annotations

import csv
import math
import shutil
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, copy_fixture, read_db

from rlwh.errors import SourceError
from rlwh.readers import ascend_usage, csv_job
from rlwh.readers.base import TableSink

TEXT = FIXTURES / "real/ascend/msinsight-alexnet-level1/text"
OUTPUTS = [TEXT / f"rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT" for r in (0, 1)]


def exact(text: str, factor: int) -> int | None:
    """Decimal text times factor, half away from zero, via Fraction (not the reader's Decimal)."""
    text = text.strip(" \t\r")
    if not text:
        return None
    value = Fraction(text) * factor
    rounded = math.floor(abs(value) + Fraction(1, 2))  # Fraction.__floor__: exact int
    return -rounded if value < 0 else rounded


def csv_dicts(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def read(function, path: Path, tmp_path: Path):
    sink = TableSink(tmp_path / "parts")
    outcome = function(path, sink, {})
    sink.close()
    parts = [p for ps in sink.tables().values() for p in ps]
    return outcome, (pq.read_table(parts).to_pylist() if parts else [])


@pytest.mark.parametrize("output", OUTPUTS, ids=["rank0", "rank1"])
def test_memory_record_rows_are_exact(output, tmp_path):
    expected = [
        {
            "source_row": i,
            "component": r["Component"],
            "ts_ns": exact(r["Timestamp(us)"], 1000),
            "total_allocated_bytes": exact(r["Total Allocated(MB)"], 1 << 20),
            "total_reserved_bytes": exact(r["Total Reserved(MB)"], 1 << 20),
            "total_active_bytes": exact(r["Total Active(MB)"], 1 << 20),
            "stream_ptr": r["Stream Ptr"] or None,
            "device": r["Device Type"],
        }
        for i, r in enumerate(csv_dicts(output / "memory_record.csv"), start=1)
    ]
    outcome, rows = read(ascend_usage.read_memory_record, output / "memory_record.csv", tmp_path)
    assert outcome.status == "ok"
    assert rows == expected
    assert {r["component"] for r in rows} == {"APP", "PTA", "GE", "PTA+GE"}
    # APP rows leave allocated and active empty: NULL, not 0.
    assert all(r["total_allocated_bytes"] is None for r in rows if r["component"] == "APP")
    # MB cells are exact byte counts: nothing was rounded away.
    cells = [Fraction(r["Total Reserved(MB)"]) * (1 << 20) for r in csv_dicts(output / "memory_record.csv")]
    assert all(c.denominator == 1 for c in cells)


@pytest.mark.parametrize("output", OUTPUTS, ids=["rank0", "rank1"])
def test_npu_module_mem_rows_are_exact(output, tmp_path):
    expected = [
        (i, r["Component"], exact(r["Timestamp(us)"], 1000), exact(r["Total Reserved(MB)"], 1 << 20), r["Device"])
        for i, r in enumerate(csv_dicts(output / "npu_module_mem.csv"), start=1)
    ]
    outcome, rows = read(ascend_usage.read_npu_module_mem, output / "npu_module_mem.csv", tmp_path)
    assert outcome.status == "ok"
    got = [(r["source_row"], r["module"], r["ts_ns"], r["total_reserved_bytes"], r["device"]) for r in rows]
    assert got == expected
    assert len({r["module"] for r in rows}) == 77


def test_step_trace_time_stages_in_ns(tmp_path):
    outcome, rows = read(ascend_usage.read_step_trace_time, OUTPUTS[0] / "step_trace_time.csv", tmp_path)
    assert outcome.status == "ok"
    # The file: 50,8873.756000000001,101963.203,4028.6750000000175,105991.87800000001,25744.050000000003,136581.0,0,...
    assert rows == [{
        "source_row": 1, "step": 50, "computing_ns": 8_873_756, "communication_not_overlapped_ns": 101_963_203,
        "overlapped_ns": 4_028_675, "communication_ns": 105_991_878, "free_ns": 25_744_050, "stage_ns": 136_581_000,
        "bubble_ns": 0, "communication_not_overlapped_exclude_receive_ns": 101_963_203, "preparing_ns": 17_902_500,
    }]


def test_times_keep_every_ns_a_double_would_lose(tmp_path):
    path = tmp_path / "memory_record.csv"
    path.write_text("Component,Timestamp(us),Total Reserved(MB),Device Type\r\n"
                    'PTA,"1779785515596661.421\t",1.5,NPU:3\r\n', encoding="utf-8")
    _, rows = read(ascend_usage.read_memory_record, path, tmp_path)
    assert rows[0]["ts_ns"] == 1779785515596661421
    assert float("1779785515596661.421") * 1000 != 1779785515596661421
    assert rows[0]["total_reserved_bytes"] == 1572864 and rows[0]["device"] == "NPU:3"


def test_cut_file_keeps_complete_rows_and_names_the_cut_row(tmp_path):
    source = OUTPUTS[0] / "memory_record.csv"
    data = source.read_bytes()
    cut = tmp_path / "memory_record.csv"
    cut.write_bytes(data[: data.index(b"\n", len(data) // 2) + 20])  # 20 bytes into a row
    whole = data[: data.index(b"\n", len(data) // 2) + 1].count(b"\n") - 1  # complete data rows
    outcome, rows = read(ascend_usage.read_memory_record, cut, tmp_path)
    assert outcome.status == "partial"
    assert len(rows) == whole
    assert str(cut) in outcome.message and f"row {whole + 1}:" in outcome.message


def test_missing_column_fails_naming_it(tmp_path):
    rows = list(csv.reader(open(OUTPUTS[0] / "npu_module_mem.csv", newline="", encoding="utf-8")))
    damaged = tmp_path / "npu_module_mem.csv"
    with open(damaged, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([r[:1] + r[2:] for r in rows])  # drop Timestamp(us)
    missing = r"npu_module_mem\.csv: missing column\(s\) Timestamp in the header \(row 0\)"
    with pytest.raises(SourceError, match=missing):
        read(ascend_usage.read_npu_module_mem, damaged, tmp_path)


def test_bad_cell_is_named_and_the_rest_land(tmp_path):
    damaged = tmp_path / "memory_record.csv"
    shutil.copy(OUTPUTS[1] / "memory_record.csv", damaged)
    lines = damaged.read_bytes().split(b"\r\n")
    lines[7] = lines[7].replace(b".", b"x", 1)  # data row 7: its time cell
    damaged.write_bytes(b"\r\n".join(lines))
    outcome, rows = read(ascend_usage.read_memory_record, damaged, tmp_path)
    assert outcome.status == "partial"
    assert "row 7: column 'Timestamp(us)'" in outcome.message
    assert len(rows) == len(csv_dicts(OUTPUTS[1] / "memory_record.csv")) - 1
    assert 7 not in {r["source_row"] for r in rows}


def test_units_come_from_the_header(tmp_path):
    path = tmp_path / "npu_module_mem.csv"
    path.write_text("Component,Timestamp(ns),Total Reserved(KB),Device\nHCCL,17,1.5,NPU:0\n", encoding="utf-8")
    _, rows = read(ascend_usage.read_npu_module_mem, path, tmp_path)
    assert (rows[0]["ts_ns"], rows[0]["total_reserved_bytes"]) == (17, 1536)


def test_empty_file_fails(tmp_path):
    path = tmp_path / "step_trace_time.csv"
    path.write_bytes(b"")
    with pytest.raises(SourceError, match="empty file"):
        read(ascend_usage.read_step_trace_time, path, tmp_path)


@pytest.mark.slow
def test_ingest_lands_every_row_and_replaces_a_changed_file(tmp_path, config):
    from rlwh.ingest.runner import ingest

    profile = copy_fixture("real/ascend/msinsight-alexnet-level1/text", tmp_path / "profiles")
    summary = ingest(profile, config)
    assert summary.failed == 0
    con = read_db(config)
    try:
        kinds = dict(con.execute("select path, kind || ' ' || status from sources where path like '%.csv'").fetchall())
        counts = con.execute("""select (select count(*) from memory_usage), (select count(*) from npu_module_memory),
                                (select count(*) from step_times)""").fetchone()
        keys = con.execute("select distinct rank_id, device from memory_usage order by 1").fetchall()
        step_rows = con.execute("select rank_id, step, computing_ns from step_times order by 1").fetchall()
    finally:
        con.close()
    out = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
    assert kinds[f"{out}/memory_record.csv"] == "ascend_memory_record_csv ok"
    assert kinds[f"{out}/npu_module_mem.csv"] == "ascend_npu_module_mem_csv ok"
    assert kinds[f"{out}/step_trace_time.csv"] == "ascend_step_trace_csv ok"
    assert counts == (2 * 1004, 2 * 1078, 2)
    assert keys == [(0, "NPU:0"), (1, "NPU:1")]
    assert step_rows == [(0, 50, 8_873_756), (1, 50, 8_878_295)]
    # A changed memory_record.csv replaces exactly its own rows; the rest are skipped.
    path = profile / out / "memory_record.csv"
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:11]))
    summary = ingest(profile, config)
    results = {r.rel_path: r.status for r in summary.results}
    assert results[f"{out}/memory_record.csv"] == "ok" and results[f"{out}/npu_module_mem.csv"] == "unchanged"
    con = read_db(config)
    try:
        assert con.execute("select rank_id, count(*) from memory_usage group by 1 order by 1").fetchall() == [
            (0, 10), (1, 1004)]
    finally:
        con.close()


@pytest.mark.parametrize("name, fmt", [("memory_record.csv", ascend_usage.MEMORY_RECORD),
                                       ("npu_module_mem.csv", ascend_usage.NPU_MODULE_MEM),
                                       ("step_trace_time.csv", ascend_usage.STEP_TRACE_TIME)])
def test_the_jobs_sql_takes_the_real_files_and_equals_the_row_by_row_read(name, fmt, tmp_path):
    path = OUTPUTS[0] / name
    header, plan = ascend_usage.read_header(path, fmt)
    part = tmp_path / "fast.parquet"
    assert ascend_usage._sql_reads(path, header, plan, fmt)
    # raises where read() would fall back
    csv_job.read_to_parquet(ascend_usage.JOBS[fmt.table], fmt.table, path, header, part)
    sink = TableSink(tmp_path / "rows")
    kept, bad = ascend_usage._read_rows(path, header, plan, fmt, sink)
    sink.close()
    assert bad == [] and kept > 0
    assert pq.read_table(part).to_pylist() == pq.read_table(sink.tables()[fmt.table]).to_pylist()


def test_the_jobs_sql_reads_rare_cells_exact(tmp_path):
    path = tmp_path / "memory_record.csv"
    path.write_text("Component,Timestamp(us),Total Reserved(MB),Device Type\n"
                    "PTA,1779785515596661.4215,0.1,NPU:0\n"     # a 4th decimal rounds; 0.1 MB is not whole bytes
                    "PTA, 17 ,-0.0000004768,NPU:0\n", encoding="utf-8")
    header, _ = ascend_usage.read_header(path, ascend_usage.MEMORY_RECORD)
    csv_job.read_to_parquet("ascend_memory_record_csv", "memory_usage", path, header, tmp_path / "f.parquet")
    rows = pq.read_table(tmp_path / "f.parquet").to_pylist()
    assert [(r["ts_ns"], r["total_reserved_bytes"]) for r in rows] == [
        (1779785515596661422, exact("0.1", 1 << 20)), (17000, exact("-0.0000004768", 1 << 20))]


def test_other_units_and_blank_lines_go_row_by_row(tmp_path):
    """The job's SQL names the units torch_npu writes; other units, a second spelling of a
    field and a blank line (a numbered row in the row-by-row read) leave it to that read."""
    fmt = ascend_usage.NPU_MODULE_MEM
    cases = {"units.csv": "Component,Timestamp(ns),Total Reserved(KB),Device\nHCCL,17,1.5,NPU:0\n",
             "both.csv": "Component,Module,Timestamp(us),Total Reserved(MB),Device\nHCCL,x,1.5,1,NPU:0\n",
             "blank.csv": "Component,Timestamp(us),Total Reserved(MB),Device\nHCCL,1.5,1,NPU:0\n\nHCCL,2.5,1,NPU:0\n",
             "plain.csv": "Component,Timestamp(us),Total Reserved(MB),Device\nHCCL,1.5,1,NPU:0\n"}
    taken = {}
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        header, plan = ascend_usage.read_header(path, fmt)
        taken[name] = ascend_usage._sql_reads(path, header, plan, fmt)
    assert taken == {"units.csv": False, "both.csv": False, "blank.csv": False, "plain.csv": True}
    _, rows = read(ascend_usage.read_npu_module_mem, tmp_path / "blank.csv", tmp_path)
    assert [(r["source_row"], r["ts_ns"]) for r in rows] == [(1, 1500), (3, 2500)]


@pytest.mark.parametrize("step", ["50.5", "0x10", "1e2"])
def test_a_step_that_is_no_whole_number_is_a_bad_row(step, tmp_path):
    """read_csv would round or decode these; the row-by-row read names the row instead."""
    source = (OUTPUTS[0] / "step_trace_time.csv").read_bytes().split(b"\r\n")
    path = tmp_path / "step_trace_time.csv"
    path.write_bytes(b"\r\n".join([source[0], source[1], source[1].replace(b"50,", step.encode() + b",", 1)]))
    outcome, rows = read(ascend_usage.read_step_trace_time, path, tmp_path)
    assert outcome.status == "partial" and f"row 2: column 'Step': cannot read '{step}'" in outcome.message
    assert [r["step"] for r in rows] == [50]
