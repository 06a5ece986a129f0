"""rlwh.readers.ascend_csv: the job's SQL read (ingest/ascend_memory_csv.sql through
rlwh.readers.csv_job) must give what the row-by-row read gives.

Each case is a small generated operator_memory.csv. The SQL read must take it whole
(no fallback) and its rows must equal _read_row_by_row's.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from rlwh.errors import SourceError
from rlwh.readers import ascend_csv, csv_job
from rlwh.readers.base import TableSink, us_text_to_ns_sql

HEADER = list(ascend_csv.COLUMNS)
US = '"1779785515596661.420\t"'  # as torch_npu writes times: quoted, with a trailing TAB


def row(name="aten::empty", kb="8.5", alloc=US, release=US, dur='"0.000\t"', mb="19071.576171875", **cells):
    """One data row as CSV cells (already quoted where needed), in HEADER order."""
    values = dict(zip(HEADER, [name, kb, alloc, release, release, dur, dur] + [mb] * 6 + ["6", "NPU:0"]))
    values.update({HEADER[int(k[1:])]: v for k, v in cells.items()})  # c3="..." overrides column 3
    return list(values.values())


def write_csv(path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    path.write_text("\n".join(",".join(cells) for cells in [header, *rows]) + "\n", encoding="utf-8")
    return path


def parts_rows(sink: TableSink) -> list[dict]:
    sink.close()
    parts = sink.tables().get("memory_records", [])
    return pq.read_table(parts).to_pylist() if parts else []


def fast_rows(path: Path, tmp_path: Path) -> list[dict]:
    """The job's SQL read alone; raises where read() would fall back."""
    sink = TableSink(tmp_path / "fast")
    csv_job.read_to_parquet(ascend_csv.JOB, "memory_records", path, ascend_csv.read_header(path),
                            sink.parquet_path("memory_records"))
    return parts_rows(sink)


def slow_rows(path: Path, tmp_path: Path) -> list[dict]:
    sink = TableSink(tmp_path / "slow")
    kept, bad = ascend_csv._read_row_by_row(path, ascend_csv.read_header(path), sink)
    assert bad == []
    return parts_rows(sink)


def read(path: Path, tmp_path: Path):
    tmp_path.mkdir(parents=True, exist_ok=True)  # a sink makes its folder, never the folders above it
    sink = TableSink(tmp_path / "read")
    outcome = ascend_csv.read(path, sink, {})
    return outcome, parts_rows(sink)


US_TEXTS = ["1.5", "1.25", "1.234", "1.2345", "1.23456", "1.2344999", "-1.2345", "-0.0005", "-0.0004", "7", "-7",
            "+4.25", "1.", "-2.", "0.000", "-0.000", "00012.5", "9223372036854775.807", "-9223372036854775.808",
            "-9223372036854775.8075"]
SIZES = ["0.5", "-0.5", "1.5", "-1.5", "2.5", "0.00048828125", "-0.00048828125", "-0.00048828124999999994",
         "0.00048828124999999994", "1e3", "1E-05", ".5", "5.", "+1.5", '" 2.5\t"', "0", "-0"]


def duration_text(t: str) -> str:
    """`t` as a duration, where it fits DECIMAL(18,3) (durations up to 31 years: the job reads
    them in 64 bits); a longer one is test_a_duration_over_31_years_reads_row_by_row's."""
    return f'" {t} "' if abs(float(t)) < 1e15 else '"0.000\t"'


CASES = {
    **{f"us {t!r}": [row(), row(alloc=f'"{t}\t"', release=t, dur=duration_text(t))] for t in US_TEXTS},
    **{f"size {s!r}": [row(), row(kb=s, mb=s)] for s in SIZES},
    "empty cells, quoted and not": [row(), row(kb="", release='""', dur="", mb='""', c13="", c14='""')],
    "rare time in the middle of a batch": [row(f"r{i}", alloc='"3.14159\t"' if i == 7 else US) for i in range(20)],
    "a name with a comma": [row('"a, b"'), row()],
    "a name with a newline": [row('"line 1\nline 2"'), row()],
    "a name like rows": [row('"x,8.5,1.000,,,,,1,1,1,,,,6,NPU:0\nforged,1.5,2.000,,,,,1,1,1,,,,6,x"'), row()],
    "a name with a quote": [row('"say ""hi"""'), row()],
    "non-ASCII text": [row("算子"), row("é")],
    "words other readers take for NULL": [row("NULL"), row("nan"), row("N/A"), row("null", c13="NaN")],
}


@pytest.mark.parametrize("rows", CASES.values(), ids=CASES.keys())
def test_sql_read_matches_row_by_row(tmp_path, rows):
    path = write_csv(tmp_path / "operator_memory.csv", rows)
    fast = fast_rows(path, tmp_path)
    assert fast == slow_rows(path, tmp_path)
    assert [r["source_row"] for r in fast] == list(range(1, len(rows) + 1))


def test_a_blank_time_goes_row_by_row_and_reads_as_null(tmp_path):
    """read_csv takes no TAB alone for a DECIMAL: the row-by-row read takes the file."""
    path = write_csv(tmp_path / "operator_memory.csv", [row(release='"\t"', dur='" "'), row()])
    with pytest.raises(duckdb.ConversionException):
        fast_rows(path, tmp_path)
    outcome, rows = read(path, tmp_path)
    assert outcome.status == "ok" and rows == slow_rows(path, tmp_path)
    assert (rows[0]["release_ns"], rows[0]["duration_ns"]) == (None, None)


def test_a_duration_over_31_years_reads_row_by_row(tmp_path):
    """A duration past DECIMAL(18,3) (1e15 us) is no real one, yet it loses nothing: the SQL
    read refuses the file and the row-by-row read takes it, exact to the ns."""
    path = write_csv(tmp_path / "operator_memory.csv", [row(dur='" 9223372036854775.807 "'), row()])
    with pytest.raises(duckdb.ConversionException):
        fast_rows(path, tmp_path)
    outcome, rows = read(path, tmp_path)
    assert outcome.status == "ok" and rows == slow_rows(path, tmp_path)
    assert rows[0]["duration_ns"] == 9223372036854775807


def test_values_by_hand(tmp_path):
    """The rounding rules spelled out, in case both paths drift together."""
    path = write_csv(tmp_path / "operator_memory.csv", [
        row(kb="0.5", alloc='"1.2345\t"', release="-1.2345", dur="2.5", mb="-0.5"),
        row(kb="-0.00048828124999999994", alloc='"1779785515596661.42\t"', release="", dur="-0.0005"),
    ])
    rows = fast_rows(path, tmp_path)
    assert [(r["size_bytes"], r["alloc_ns"], r["release_ns"], r["duration_ns"], r["alloc_total_active_bytes"])
            for r in rows] == [(512, 1235, -1235, 2500, -524288), (0, 1779785515596661420, None, -1, 19997997056)]


def test_reordered_columns(tmp_path):
    rows = [row("first"), row("second", kb="1.5")]
    path = write_csv(tmp_path / "operator_memory.csv", [r[::-1] for r in rows], header=HEADER[::-1])
    fast = fast_rows(path, tmp_path)
    assert fast == slow_rows(path, tmp_path)
    assert [(r["name"], r["size_bytes"], r["device"]) for r in fast] == [("first", 8704, "NPU:0"),
                                                                        ("second", 1536, "NPU:0")]


def test_extra_and_missing_columns(tmp_path):
    header = ["Extra", "Name", "Size(KB)", "Allocation Time(us)", "Other"]
    path = write_csv(tmp_path / "operator_memory.csv", [["x", "a", "1.5", US, "y"], ["", "b", "2", "3", ""]], header)
    fast = fast_rows(path, tmp_path)
    assert fast == slow_rows(path, tmp_path)
    assert fast[1] == {"source_row": 2, "name": "b", "size_bytes": 2048, "alloc_ns": 3000,
                       **{c: None for c, _ in list(ascend_csv.COLUMNS.values())[3:]}}


def test_many_rows_keep_counting(tmp_path):
    rows = [row(f"r{i}", alloc=f'"{i}.{i % 7}\t"' if i % 50 == 0 else US) for i in range(500)]
    path = write_csv(tmp_path / "operator_memory.csv", rows)
    fast = fast_rows(path, tmp_path)
    assert fast == slow_rows(path, tmp_path)
    assert [r["source_row"] for r in fast] == list(range(1, 501)) and fast[100]["alloc_ns"] == 100_200


def test_quoted_newlines(tmp_path):
    """A quoted name holding newlines and commas: still one row each."""
    forged = "\n".join(",".join(row("forged")) for _ in range(3)).replace('"', '""')
    rows = [row(f'"n{i}\n{forged if i % 3 == 0 else ""}."') for i in range(200)]
    path = write_csv(tmp_path / "operator_memory.csv", rows)
    fast = fast_rows(path, tmp_path)
    assert len(fast) == 200 and fast == slow_rows(path, tmp_path)
    assert fast[3]["name"].count("forged") == 3


@pytest.mark.parametrize("text", ["abc", "1.2.3", "--1.234", "-+1.5", "1e3", "0x1.234", ".123", "-.5", "1 2.345",
                                  "١.234", "9223372036854775.808", "9223372036854775.8075", "99999999999999999999"])
def test_times_the_strict_sql_refuses_read_as_the_row_by_row_read(tmp_path, text):
    """The trace's strict rule refuses these; in the CSV, the job's read takes what Decimal
    takes (1e3, .123) and sends the rest to the row-by-row read: either way, its rows."""
    with pytest.raises(duckdb.Error):
        duckdb.execute(f"select {us_text_to_ns_sql('t', strict=True)} from (select ?::varchar t)", [text]).fetchall()
    path = write_csv(tmp_path / "operator_memory.csv", [row("a"), row("b", alloc=f'"{text}\t"'), row("c")])
    sink = TableSink(tmp_path / "slow")
    kept, bad = ascend_csv._read_row_by_row(path, ascend_csv.read_header(path), sink)
    outcome, rows = read(path, tmp_path)
    assert rows == parts_rows(sink)
    assert (outcome.status == "partial") == bool(bad) and kept == len(rows)


@pytest.mark.parametrize("text", US_TEXTS + ["", "12", "-12.5", "0.0005", "1.9995", "1.99949"])
def test_time_text_as_the_strict_sql(text, tmp_path):
    sql = us_text_to_ns_sql("t", strict=True)
    expected = duckdb.execute(f"select {sql} from (select ?::varchar t)", [text]).fetchone()[0]
    path = write_csv(tmp_path / "operator_memory.csv", [row(alloc=f'"{text}\t"'), row(alloc=f'" {text}"')])
    outcome, rows = read(path, tmp_path)
    assert [r["alloc_ns"] for r in rows] == [expected, expected]


def test_a_bad_number_makes_the_file_partial_and_names_the_row(tmp_path):
    rows = [row("a"), row("b", kb="abc"), row("c", mb="inf"), row("c2", c8="nan"), row("d")]
    path = write_csv(tmp_path / "operator_memory.csv", rows)
    outcome, rows = read(path, tmp_path)
    assert outcome.status == "partial"
    assert "kept 2 rows, skipped 3" in outcome.message
    assert "row 2: column 'Size(KB)': cannot read 'abc'" in outcome.message
    assert "row 3: column 'Allocation Total Allocated(MB)': cannot read 'inf'" in outcome.message
    assert "row 4: column 'Allocation Total Reserved(MB)': cannot read 'nan'" in outcome.message
    assert [(r["source_row"], r["name"]) for r in rows] == [(1, "a"), (5, "d")]
    assert len(list((tmp_path / "read" / "memory_records").iterdir())) == 1  # the SQL read's part is gone


def test_a_short_row_makes_the_file_partial(tmp_path):
    path = write_csv(tmp_path / "operator_memory.csv", [row("a"), ["cut", "1.0"], row("c")])
    outcome, rows = read(path, tmp_path)
    assert outcome.status == "partial" and "row 2: 2 cells, the header has 15" in outcome.message
    assert [(r["source_row"], r["name"]) for r in rows] == [(1, "a"), (3, "c")]


def test_a_line_over_2mb_goes_row_by_row_as_before(tmp_path):
    path = write_csv(tmp_path / "operator_memory.csv", [row("a"), row("n" * 2_000_000), row("c")])
    outcome, rows = read(path, tmp_path)
    assert outcome.status == "partial" and "row 2: field larger than field limit" in outcome.message
    assert [r["name"] for r in rows] == ["a", "c"]


def test_good_files_read_ok(tmp_path):
    path = write_csv(tmp_path / "operator_memory.csv", [row("a"), row("b", kb="")])
    outcome, rows = read(path, tmp_path)
    assert outcome.status == "ok" and outcome.message is None
    assert [(r["name"], r["size_bytes"]) for r in rows] == [("a", 8704), ("b", None)]
    header_only = write_csv(tmp_path / "header_only.csv", [])
    assert read(header_only, tmp_path / "h") == (ascend_csv.ReadOutcome(), [])
    (tmp_path / "empty.csv").write_bytes(b"")
    with pytest.raises(SourceError, match="empty file"):
        read(tmp_path / "empty.csv", tmp_path / "e")


def _decimal_ns(text: str) -> int | None:
    """µs text as exact ns by Python's Decimal, half away from zero; None where the result
    leaves BIGINT (the row is then bad)."""
    from decimal import ROUND_HALF_UP, Decimal

    ns = int((Decimal(text.strip()) * 1000).to_integral_value(rounding=ROUND_HALF_UP))
    return ns if -(2**63) <= ns < 2**63 else None


EDGE_TIMES = ["1779785515596661", "1779785515596661.4", "1779785515596661.42", "1779785515596661.420",
              "1779785515596661.4205", "1779785515596661.4204999", "1779785515596661.99951", "-1779785515596661.4205",
              "-0.0015", "-0.0014", "0", "-0", "0.5", "12.3456789", "9223372036854775.807", "-9223372036854775.808",
              "99999999999999999.999", "9223372036854775.808", "123456789012345678901"]


@pytest.mark.parametrize("text", EDGE_TIMES)
def test_edge_times_are_exact_to_the_ns(tmp_path, text):
    """No fraction, 1-2 fraction digits, more than 3, negative, huge: every time column
    reads as Decimal's exact ns (ROUND_HALF_UP), the SQL read or the row-by-row one; a
    time beyond BIGINT makes its row bad, named, and the others stay."""
    cell = f'"{text}\t"'
    path = write_csv(tmp_path / "operator_memory.csv",
                     [row("a"), row("b", alloc=cell, release=cell, dur=cell), row("c")])
    outcome, rows = read(path, tmp_path)
    expected = _decimal_ns(text)
    if expected is None:
        assert outcome.status == "partial" and "row 2:" in outcome.message
        assert [r["name"] for r in rows] == ["a", "c"]
        return
    assert outcome.status == "ok", outcome.message
    got = rows[1]
    assert [got[c] for c in ("alloc_ns", "release_ns", "active_release_ns", "duration_ns", "active_duration_ns")] \
        == [expected] * 5
    assert rows[0]["alloc_ns"] == 1779785515596661420


def test_the_jobs_field_types_make_no_duckdb_of_their_own(monkeypatch):
    """Each CSV job's `fields` (a VALUES list) is asked of the process's one constants DuckDB
    (rlwh.sqltext.constant_rows): a DuckDB made for each job cost an Ascend ingest 20-27 ms a job."""
    from rlwh.sqltext import constant_rows

    constant_rows("select 1")  # the process's constants DuckDB, made once
    made = []
    connect = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *args, **kw: made.append(args) or connect(*args, **kw))
    csv_job.field_types.cache_clear()
    jobs = ("ascend_memory_record_csv", "ascend_npu_module_mem_csv", "ascend_step_trace_csv")
    fields = {job: dict(csv_job.field_types(job)) for job in jobs}
    assert made == []
    assert fields["ascend_memory_record_csv"]["Timestamp(us)"] == "DECIMAL(20,3)"  # as the job's SQL spells it
    assert all(fields.values())
