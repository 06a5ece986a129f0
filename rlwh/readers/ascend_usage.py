"""memory_record.csv, npu_module_mem.csv and step_trace_time.csv -> memory_usage,
npu_module_memory and step_times.

The reading is each job's SQL (ingest/ascend_*_csv.sql, run by rlwh.readers.csv_job):
read_csv with a type per field, the renames and unit conversions in a SELECT. A header
in other units than the job names, or anything it cannot read (a cut row, a cell that is
no number, a blank line), sends the file to a csv.reader pass with Decimal arithmetic
that keeps every good row and numbers the bad ones. Units come from each header's suffix
("(us)", "(MB)", "(KB)"), so a profiler version that changes a unit still lands exact ns
and bytes; step_trace_time.csv's stage columns have no suffix and are microseconds.
"""

from __future__ import annotations

import csv
import mmap
import re
from dataclasses import dataclass
from decimal import InvalidOperation
from pathlib import Path

import duckdb
import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers import csv_job
from rlwh.readers.base import ReadOutcome, TableSink, rows_outcome, scaled
from rlwh.readers.csv_header import header_cells

BATCH_ROWS = 65536
_SPACE = " \t\r\n"
_UNIT = re.compile(r"^(.*?)\s*\((us|ns|ms|s|B|KB|MB|GB)\)$")
# Unit -> (kind, factor to ns or bytes).
_FACTORS = {"ns": ("time", 1), "us": ("time", 1000), "ms": ("time", 10**6), "s": ("time", 10**9),
            "B": ("size", 1), "KB": ("size", 1024), "MB": ("size", 1 << 20), "GB": ("size", 1 << 30)}


@dataclass(frozen=True)
class Column:
    """One table column: the header names (without unit) it may come from and its kind."""

    name: str
    headers: tuple[str, ...]
    kind: str  # text | time | size | int
    required: bool = False
    default_unit: str | None = None  # for headers written without a unit suffix


@dataclass(frozen=True)
class Format:
    table: str
    columns: tuple[Column, ...]

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([("source_row", pa.int64())] + [
            (c.name, pa.string() if c.kind == "text" else pa.int64()) for c in self.columns])


MEMORY_RECORD = Format("memory_usage", (
    Column("component", ("Component", "Tag"), "text", required=True),
    Column("ts_ns", ("Timestamp",), "time", required=True),
    Column("total_allocated_bytes", ("Total Allocated",), "size"),
    Column("total_reserved_bytes", ("Total Reserved",), "size", required=True),
    Column("total_active_bytes", ("Total Active",), "size"),
    Column("stream_ptr", ("Stream Ptr",), "text"),
    Column("device", ("Device Type", "Device"), "text", required=True),
))
NPU_MODULE_MEM = Format("npu_module_memory", (
    Column("module", ("Component", "Module"), "text", required=True),
    Column("ts_ns", ("Timestamp",), "time", required=True),
    Column("total_reserved_bytes", ("Total Reserved",), "size", required=True),
    Column("device", ("Device", "Device Type"), "text", required=True),
))


def _stage(name: str, header: str, required: bool = False) -> Column:
    return Column(name, (header,), "time", required=required, default_unit="us")


STEP_TRACE_TIME = Format("step_times", (
    Column("step", ("Step",), "int", required=True),
    _stage("computing_ns", "Computing", required=True),
    _stage("communication_not_overlapped_ns", "Communication(Not Overlapped)", required=True),
    _stage("overlapped_ns", "Overlapped"),
    _stage("communication_ns", "Communication"),
    _stage("free_ns", "Free", required=True),
    _stage("stage_ns", "Stage"),
    _stage("bubble_ns", "Bubble"),
    _stage("communication_not_overlapped_exclude_receive_ns", "Communication(Not Overlapped and Exclude Receive)"),
    _stage("preparing_ns", "Preparing"),
))


def _plan(path: Path, header: list[str], fmt: Format) -> list[tuple[Column, int | None, int]]:
    """(column, cell index or None, factor) for every column; SourceError when a required one is missing."""
    by_name: dict[str, tuple[int, str | None]] = {}
    for i, cell in enumerate(header):
        match = _UNIT.match(cell)
        if match:  # "Communication(Not Overlapped)" is a name: only unit suffixes match
            by_name.setdefault(match.group(1), (i, match.group(2)))
        by_name.setdefault(cell, (i, None))
    plan: list[tuple[Column, int | None, int]] = []
    missing: list[str] = []
    for column in fmt.columns:
        found = next((by_name[h] for h in column.headers if h in by_name), None)
        if found is None:
            if column.required:
                missing.append(column.headers[0])
            plan.append((column, None, 1))
            continue
        index, unit = found
        factor = 1
        if column.kind in ("time", "size"):
            unit = unit or column.default_unit
            kind, factor = _FACTORS.get(unit, (None, 0)) if unit is not None else (None, 0)
            if kind != column.kind:
                raise SourceError(f"{path}: column {header[index]!r} (row 0) has no {column.kind} unit rlwh knows")
        plan.append((column, index, factor))
    if missing:
        raise SourceError(f"{path}: missing column(s) {', '.join(missing)} in the header (row 0)")
    return plan


def _cell(text: str, column: Column, factor: int):
    text = text.strip(_SPACE)
    if text == "":
        return None
    if column.kind == "text":
        return text
    if column.kind == "int":
        return int(text)
    return scaled(text, factor)


def read_header(path: Path, fmt: Format) -> tuple[list[str], list]:
    """The header's cells and the column plan; SourceError for an empty file or a missing column."""
    header = [h.strip(_SPACE) for h in header_cells(path)]
    return header, _plan(path, header, fmt)


JOBS = {"memory_usage": "ascend_memory_record_csv", "npu_module_memory": "ascend_npu_module_mem_csv",
        "step_times": "ascend_step_trace_csv", "kernel_details": "ascend_kernel_details_csv"}


def _sql_reads(path: Path, header: list[str], plan: list, fmt: Format) -> bool:
    """True when the job's SQL reads this file as the row-by-row read would: it names
    every field the plan takes (same units), no other spelling of one of them, and the
    file has no blank line (read_csv skips one; the row-by-row read counts it as a row)."""
    declared = set(dict(csv_job.field_types(JOBS[fmt.table])))
    used = {header[index] for _, index, _ in plan if index is not None}
    if not used <= declared or (declared & set(header)) - used:
        return False
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return data.find(b"\n\n") < 0 and data.find(b"\n\r\n") < 0


def _read_rows(path: Path, header: list[str], plan: list, fmt: Format, sink: TableSink) -> tuple[int, list[str]]:
    """Row by row: keeps every row that converts; returns (rows kept, descriptions of bad rows)."""
    schema = fmt.schema
    bad: list[str] = []
    batch: list[dict] = []
    kept = 0
    reader = None
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            next(reader, None)
            for row_number, cells in enumerate(reader, start=1):
                if not any(c.strip(_SPACE) for c in cells):
                    continue  # a blank line is no row
                if len(cells) != len(header):
                    bad.append(f"row {row_number}: {len(cells)} cells, the header has {len(header)}")
                    continue
                record: dict[str, object] = {"source_row": row_number}
                try:
                    for column, index, factor in plan:
                        record[column.name] = None if index is None else _cell(cells[index], column, factor)
                except (InvalidOperation, ValueError) as exc:
                    bad.append(f"row {row_number}: column {header[index]!r}: cannot read {cells[index]!r} ({exc})")
                    continue
                batch.append(record)
                if len(batch) >= BATCH_ROWS:
                    sink.write(fmt.table, pa.RecordBatch.from_pylist(batch, schema))
                    kept, batch = kept + len(batch), []
    except (UnicodeDecodeError, csv.Error) as exc:
        line = reader.line_num + 1 if reader is not None else 1
        what = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else f"malformed CSV ({exc})"
        raise SourceError(f"{path}: {what} at line {line} (1-based, header is line 1)") from exc
    if batch:
        sink.write(fmt.table, pa.RecordBatch.from_pylist(batch, schema))
        kept += len(batch)
    return kept, bad


def read_csv(path: Path, sink: TableSink, fmt: Format, memory_limit: str | None = None) -> ReadOutcome:
    """Every row that converts lands; a bad row is numbered in the message and the file is partial."""
    header, plan = read_header(path, fmt)
    if _sql_reads(path, header, plan, fmt):
        part = sink.parquet_path(fmt.table)
        try:
            csv_job.read_to_parquet(JOBS[fmt.table], fmt.table, path, header, part, memory_limit)
            return ReadOutcome()
        except (duckdb.Error, csv_job.Unreadable):
            part.unlink(missing_ok=True)
    kept, bad = _read_rows(path, header, plan, fmt, sink)
    return rows_outcome(path, kept, bad)


def _read_in_place(con: duckdb.DuckDBPyConnection, paths: list[Path], fmt: Format) -> list[ReadOutcome]:
    """Read a batch in the warehouse's own connection (rlwh.ingest.in_place) by the job's
    SQL; raises for a file the SQL does not read as the row-by-row read would (read_csv
    then takes it alone)."""
    headers = []
    for path in paths:
        header, plan = read_header(path, fmt)
        if not _sql_reads(path, header, plan, fmt):
            raise SourceError(f"{path}: read row by row")
        headers.append(header)
    csv_job.read_batch_into(con, JOBS[fmt.table], fmt.table, paths, headers)
    return [ReadOutcome() for _ in paths]


def read_memory_record_in_place(con: duckdb.DuckDBPyConnection, paths: list[Path], context: dict,
                                scratch: Path) -> list[ReadOutcome]:
    return _read_in_place(con, paths, MEMORY_RECORD)


def read_npu_module_mem_in_place(con: duckdb.DuckDBPyConnection, paths: list[Path], context: dict,
                                 scratch: Path) -> list[ReadOutcome]:
    return _read_in_place(con, paths, NPU_MODULE_MEM)


def read_step_trace_time_in_place(con: duckdb.DuckDBPyConnection, paths: list[Path],
                                  context: dict, scratch: Path) -> list[ReadOutcome]:
    return _read_in_place(con, paths, STEP_TRACE_TIME)


def read_memory_record(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    return read_csv(path, sink, MEMORY_RECORD, context.get("memory_limit"))


def read_npu_module_mem(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    return read_csv(path, sink, NPU_MODULE_MEM, context.get("memory_limit"))


def read_step_trace_time(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    return read_csv(path, sink, STEP_TRACE_TIME, context.get("memory_limit"))
