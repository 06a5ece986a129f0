"""operator_memory.csv -> memory_records.

Fast path: DuckDB reads the CSV with explicit DECIMAL types: times such as
"1779785515596661.420\\t" do not fit a DOUBLE to the ns, and MB totals are rounded
decimals whose byte value must round the same way every time. When the strict read
fails (a malformed row), a row-by-row Python read keeps every good row, numbers each
bad one and marks the file partial.
"""

from __future__ import annotations

import csv
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

import duckdb
import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers.base import ReadOutcome, TableSink, trimmed_sql, us_text_to_ns_sql
from rlwh.sqltext import sql_literal

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
COLUMNS_BY_COL = {col: kind for col, kind in COLUMNS.values()}
REQUIRED = ("Name", "Size(KB)", "Allocation Time(us)")
# Times stay text and become ns by exact string arithmetic (us_text_to_ns_sql). KB and MB
# are read as DOUBLE: with up to ~7 decimals the product with 1024 or 2^20 is never near
# a .5 that a DOUBLE could round the wrong way, and round() is half away from zero like
# the row-by-row fallback's ROUND_HALF_UP.
_SQL_TYPE = {"text": "VARCHAR", "kb": "DOUBLE", "mb": "DOUBLE", "us": "VARCHAR"}
_SCALE = {"kb": 1024, "mb": 1048576, "us": 1000}
BATCH_ROWS = 65536

SCHEMA = pa.schema(
    [("source_row", pa.int64())]
    + [(col, pa.string() if kind == "text" else pa.int64()) for col, kind in COLUMNS.values()]
)


def read_header(path: Path) -> list[str]:
    """The CSV's column names; raises SourceError when a required one is missing."""
    with open(path, "rb") as handle:
        first = handle.readline()  # only the header line: a bad byte further on is a bad row
    try:
        header = next(csv.reader([first.decode("utf-8")]), None)
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: row 0 (header) is not UTF-8 text (byte {exc.start})") from exc
    if not header:
        raise SourceError(f"{path}: empty file, no CSV header")
    header = [h.strip().lstrip("\ufeff") for h in header]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise SourceError(f"{path}: missing column(s) {', '.join(missing)} in the header (row 0)")
    return header


def _sql_expr(header_name: str) -> str:
    column, kind = COLUMNS[header_name]
    quoted = '"' + header_name.replace('"', '""') + '"'
    if kind == "text":
        return f"{quoted} as {column}"
    if kind == "us":
        return f"{us_text_to_ns_sql(column + '_text', strict=True)} as {column}"
    return f"cast(round({quoted} * {_SCALE[kind]}) as bigint) as {column}"


def _read_with_duckdb(path: Path, header: list[str], sink: TableSink, memory_limit: str) -> None:
    types = {h: _SQL_TYPE[COLUMNS[h][1]] if h in COLUMNS else "VARCHAR" for h in header}
    known = [h for h in header if h in COLUMNS]
    missing = [COLUMNS[h][0] for h in COLUMNS if h not in header]
    select = ", ".join(
        ["ordinality as source_row"]
        + [_sql_expr(h) for h in known]
        + [f"null::{'varchar' if COLUMNS_BY_COL[c] == 'text' else 'bigint'} as {c}" for c in missing]
    )
    con = duckdb.connect()
    try:
        # One thread keeps the file's row order, which ordinality (source_row) numbers.
        con.execute("set threads = 1")
        con.execute("set enable_progress_bar = false")
        con.execute("set memory_limit = ?", [memory_limit])
        trimmed = ", ".join(
            f'{trimmed_sql(chr(34) + h + chr(34))} as {COLUMNS[h][0]}_text' for h in known if COLUMNS[h][1] == "us"
        )
        con.execute(
            f"copy (select {select} from (select *, {trimmed} from read_csv(?, header = true, auto_detect = false, "
            "delim = ',', quote = '\"', escape = '\"', columns = ?, null_padding = false, strict_mode = true) "
            "with ordinality)) "
            f"to {sql_literal(sink.parquet_path('memory_records'))} (format parquet)",
            [str(path), types],
        )
    finally:
        con.close()


def _convert(text: str, kind: str):
    text = text.strip()
    if text == "":
        return None
    if kind == "text":
        return text
    value = Decimal(text)
    if not value.is_finite():
        raise InvalidOperation(f"{text!r} is not a finite number")
    result = int((value * _SCALE[kind]).to_integral_value(rounding=ROUND_HALF_UP))
    if not -(2**63) <= result < 2**63:
        raise InvalidOperation(f"{text!r} is out of range")
    return result


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
            record = {"source_row": row_number}
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


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    header = read_header(path)
    try:
        _read_with_duckdb(path, header, sink, context.get("memory_limit", "384MB"))
        return ReadOutcome()
    except duckdb.Error:
        for part in sink.tables().get("memory_records", []):
            part.unlink()
    try:
        kept, bad = _read_row_by_row(path, header, sink)
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not UTF-8 text near byte {exc.start}") from exc
    if not bad:
        return ReadOutcome()
    shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more bad rows" if len(bad) > 5 else "")
    if kept == 0:
        raise SourceError(f"{path}: no readable rows: {shown}")
    return ReadOutcome(status="partial", message=f"{path}: kept {kept} rows, skipped {len(bad)}: {shown}")
