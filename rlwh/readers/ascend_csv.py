"""operator_memory.csv -> memory_records.

The reading is the job's SQL (ingest/ascend_memory_csv.sql, run by rlwh.readers.csv_job):
read_csv with a type for each field, the renames and unit conversions in a SELECT. When
it cannot read a row (a cut row, a cell that is no number, a line over 2 MB), a row-by-row
Python read with Decimal arithmetic keeps every good row, numbers each bad one and marks
the file partial. Both give the same rows for a file both can read (tests hold them to it).
"""

from __future__ import annotations

import csv
from decimal import InvalidOperation
from pathlib import Path

import duckdb
import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers import csv_job
from rlwh.readers.base import ReadOutcome, TableSink, rows_outcome, scaled
from rlwh.readers.csv_header import header_cells

# CSV header -> (memory_records column, kind). Kinds: time/duration in us -> ns,
# kb -> bytes, mb -> bytes, text.
COLUMNS = {
    "Name": ("name", "text"),
    "Size(KB)": ("size_bytes", "kb"),
    "Allocation Time(us)": ("alloc_ns", "us"),
    "Release Time(us)": ("release_ns", "us"),
    "Active Release Time(us)": ("active_release_ns", "us"),
    "Duration(us)": ("duration_ns", "us"),
    "Active Duration(us)": ("active_duration_ns", "us"),
    "Allocation Total Allocated(MB)": ("alloc_total_allocated_bytes", "mb"),
    "Allocation Total Reserved(MB)": ("alloc_total_reserved_bytes", "mb"),
    "Allocation Total Active(MB)": ("alloc_total_active_bytes", "mb"),
    "Release Total Allocated(MB)": ("release_total_allocated_bytes", "mb"),
    "Release Total Reserved(MB)": ("release_total_reserved_bytes", "mb"),
    "Release Total Active(MB)": ("release_total_active_bytes", "mb"),
    "Stream Ptr": ("stream_ptr", "text"),
    "Device Type": ("device", "text"),
}
REQUIRED = ("Name", "Size(KB)", "Allocation Time(us)")
_SCALE = {"kb": 1024, "mb": 1048576, "us": 1000}
JOB = "ascend_memory_csv"
BATCH_ROWS = 65536

SCHEMA = pa.schema(
    [("source_row", pa.int64())]
    + [(col, pa.string() if kind == "text" else pa.int64()) for col, kind in COLUMNS.values()]
)


def read_header(path: Path) -> list[str]:
    """The CSV's column names; raises SourceError when a required one is missing."""
    header = [h.strip() for h in header_cells(path)]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise SourceError(f"{path}: missing column(s) {', '.join(missing)} in the header (row 0)")
    return header


def _convert(text: str, kind: str):
    text = text.strip()
    if text == "":
        return None
    if kind == "text":
        return text
    return scaled(text, _SCALE[kind])


def _read_row_by_row(path: Path, header: list[str], sink: TableSink) -> tuple[int, list[str]]:
    """Keep every row that converts; return (rows kept, descriptions of bad rows)."""
    index = {h: i for i, h in enumerate(header)}
    bad: list[str] = []
    batch: list[dict] = []
    kept = 0
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as handle:
        reader = csv.reader(handle)
        next(reader)
        row_number = 0
        while True:
            row_number += 1
            try:
                cells = next(reader)
            except StopIteration:
                break
            except (csv.Error, UnicodeDecodeError) as exc:
                bad.append(f"row {row_number}: {exc}")
                continue
            try:
                "".join(cells).encode("utf-8")
            except UnicodeEncodeError as exc:
                bad.append(f"row {row_number}: not UTF-8 text ({exc.reason})")
                continue
            if len(cells) != len(header):
                bad.append(f"row {row_number}: {len(cells)} cells, the header has {len(header)}")
                continue
            record: dict[str, object] = {"source_row": row_number}
            try:
                for name, (column, kind) in COLUMNS.items():
                    record[column] = _convert(cells[index[name]], kind) if name in index else None
            except (InvalidOperation, ValueError) as exc:
                bad.append(f"row {row_number}: column {name!r}: cannot read {cells[index[name]]!r} ({exc})")
                continue
            batch.append(record)
            if len(batch) >= BATCH_ROWS:
                sink.write("memory_records", pa.RecordBatch.from_pylist(batch, SCHEMA))
                kept += len(batch)
                batch = []
    if batch:
        sink.write("memory_records", pa.RecordBatch.from_pylist(batch, SCHEMA))
        kept += len(batch)
    return kept, bad


def read_in_place(con: duckdb.DuckDBPyConnection, paths: list[Path], context: dict,
                  scratch: Path) -> list[ReadOutcome]:
    """Read a batch in the warehouse's own connection (rlwh.ingest.in_place) by the job's
    SQL; raises when a file is not as the job expects (its `read` then takes it alone)."""
    csv_job.read_batch_into(con, JOB, "memory_records", paths, [read_header(p) for p in paths])
    return [ReadOutcome() for _ in paths]


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    header = read_header(path)
    part = sink.parquet_path("memory_records")
    try:
        csv_job.read_to_parquet(JOB, "memory_records", path, header, part, context.get("memory_limit"))
        return ReadOutcome()
    except (duckdb.Error, csv_job.Unreadable):
        part.unlink(missing_ok=True)
    try:
        kept, bad = _read_row_by_row(path, header, sink)
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not UTF-8 text near byte {exc.start}") from exc
    return rows_outcome(path, kept, bad)
