"""operator_memory.csv -> memory_records.

Fast path: pyarrow streams the CSV a block at a time (memory stays bounded), every cell
as text, and pyarrow.compute converts each batch (2-3x faster than DuckDB's read_csv with
SQL string arithmetic). Times such as "1779785515596661.420\\t" need 19 digits, more than
a DOUBLE holds: 3-decimal text becomes ns by dropping the point, and the rare other
spellings follow base.us_text_to_ns_sql in Python. KB and MB are DOUBLE * 1024 (or 2^20)
rounded half away from zero. When anything is off (a malformed row, a number that is not
plain and finite), a row-by-row Python read keeps every good row, numbers each bad one
and marks the file partial.
"""

from __future__ import annotations

import csv
import re
from decimal import InvalidOperation
from functools import reduce
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from rlwh.errors import SourceError
from rlwh.readers.base import ReadOutcome, TableSink, rows_outcome, scaled

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
_SPACE = " \t\r\n"
# DuckDB read_csv's max_line_size: the former fast path sent files with longer lines to the
# row-by-row read; keep that (counted without quotes, so within a few bytes).
_MAX_LINE_BYTES = 2_000_000
# Parsed and converted at a time. Small blocks stay in cache, and pyarrow reads up to 32
# ahead (~70 MB); a line up to _MAX_LINE_BYTES still parses (it may span two blocks, not three).
_BLOCK_BYTES = 2 << 20
BATCH_ROWS = 65536

_TEXT_COLUMNS = [column for column, kind in COLUMNS.values() if kind == "text"]
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


class _Unusual(Exception):
    """A cell or row the fast path leaves to the row-by-row read."""


# Compute arguments as Arrow scalars: a Python number costs ~0.1 ms a call (pyarrow tries
# to import numpy each time).
_NO_TEXT = pa.scalar(None, pa.string())
_EMPTY = pa.scalar("")
_FALSE = pa.scalar(False)
_0, _3, _4 = (pa.scalar(i, pa.int32()) for i in (0, 3, 4))
_ONE_ROW = pa.scalar(1, pa.int64())
_BYTES = {kind: pa.scalar(float(_SCALE[kind])) for kind in ("kb", "mb")}


def _trimmed(cells: pa.Array) -> pa.Array:
    """Cells without the spaces and tabs profilers leave around numbers; empty -> NULL."""
    text = pc.utf8_trim(cells, _SPACE)
    blank = pc.equal(text, _EMPTY)
    return pc.if_else(blank, _NO_TEXT, text) if pc.any(blank).as_py() else text  # if_else copies the text


def _size_to_bytes(cells: pa.Array, kind: str) -> pa.Array:
    """KB or MB text -> bytes, as DuckDB's round(DOUBLE * scale) did."""
    text = _trimmed(cells)
    if text.null_count != cells.null_count:
        raise _Unusual("a blank number")  # DuckDB's DOUBLE refused these: row by row, as before
    scaled = pc.multiply(pc.cast(text, pa.float64()), _BYTES[kind])  # the cast raises on text that is no number
    # Half away from zero on abs(): pyarrow's "half_towards_infinity" rounds
    # -0.49999999999999994 to -1 (DuckDB and Decimal: 0).
    rounded = pc.multiply(pc.round(pc.abs(scaled), round_mode="half_up"), pc.sign(scaled))
    return pc.cast(rounded, pa.int64())  # raises on "inf", "nan" and out of BIGINT range, as the row-by-row read


def _us_to_ns(cells: pa.Array) -> pa.Array:
    """Microseconds text -> exact ns: "digits.ddd" drops its point, other text goes through _us_text_to_ns."""
    text = _trimmed(cells)
    digits = pc.replace_substring(text, ".", "", max_replacements=1)
    unsigned = pc.utf8_ltrim(digits, "-")
    point_at_3 = pc.equal(pc.find_substring(text, "."), pc.subtract(pc.binary_length(text), _4))
    digit_before = pc.greater(pc.binary_length(unsigned), _3)  # ".123" is not plain
    only_digits = pc.ascii_is_decimal(unsigned)  # not "0x..." or "+...", which the int64 cast reads its own way
    fast = pc.fill_null(pc.and_(pc.and_(point_at_3, digit_before), only_digits), _FALSE)
    rare = pc.and_not(pc.is_valid(text), fast)
    if not pc.any(rare).as_py():
        return pc.cast(digits, pa.int64())  # raises on "--1234" and on overflow, as the SQL did
    ns = pc.cast(pc.if_else(fast, digits, _NO_TEXT), pa.int64())
    values = pa.array([_us_text_to_ns(t) for t in pc.filter(text, rare).to_pylist()], pa.int64())
    return pc.replace_with_mask(ns, rare, values)


_PLAIN_DECIMAL = re.compile(r"[-+]?([0-9]+)(?:\.([0-9]*))?")


def _us_text_to_ns(text: str) -> int:
    """base.us_text_to_ns_sql(strict=True) for one trimmed text: 3 decimals kept, a 4th rounds half up.

    Text the SQL refuses raises _Unusual, and so the file goes row by row.
    """
    match = _PLAIN_DECIMAL.fullmatch(text)
    if match is None:
        raise _Unusual(text)
    whole, decimals = match.group(1), match.group(2) or ""
    ns = int(whole) * 1000 + int(decimals[:3].ljust(3, "0")) + (decimals[3:4] >= "5")
    ns = -ns if text.startswith("-") else ns
    if not -(2**63) <= ns < 2**63:
        raise _Unusual(text)
    return ns


def _read_fast(path: Path, header: list[str], part: Path) -> None:
    """The whole file into one Parquet part; raises _Unusual or pyarrow.ArrowException when it cannot."""
    if len(set(header)) < len(header):
        raise _Unusual("repeated column names")  # DuckDB refused them; the row-by-row read takes the last
    names = [f"c{i}" for i in range(len(header))]  # positional: a header name may be empty
    where = dict(zip(header, names))
    reader = pacsv.open_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, use_threads=False, block_size=_BLOCK_BYTES),
        # newlines_in_values: a quoted name holding a newline stays one row (costs nothing single-threaded).
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()), null_values=[""], strings_can_be_null=True
        ),
    )
    rows = 0
    # Uncompressed like TableSink's parts; dictionaries only for text (hashing every int64 costs ~1 s).
    writer = pq.ParquetWriter(part, SCHEMA, compression="none", use_dictionary=_TEXT_COLUMNS)
    with reader, writer:
        for batch in reader:
            n = batch.num_rows
            line_bytes = reduce(pc.add, [pc.fill_null(pc.binary_length(c), _0) for c in batch.columns])
            if (pc.max(line_bytes).as_py() or 0) + len(names) - 1 > _MAX_LINE_BYTES:
                raise _Unusual("line too long")
            columns = [pc.cumulative_sum(pa.repeat(_ONE_ROW, n), start=pa.scalar(rows, pa.int64()))]  # source_row
            for name, (_, kind) in COLUMNS.items():
                cells = batch.column(where[name]) if name in where else None
                if cells is None:
                    columns.append(pa.nulls(n, pa.string() if kind == "text" else pa.int64()))
                elif kind == "text":
                    columns.append(_trimmed(cells))  # real files end Name and Device Type cells in a TAB
                elif kind == "us":
                    columns.append(_us_to_ns(cells))
                else:
                    columns.append(_size_to_bytes(cells, kind))
            writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=SCHEMA))
            rows += n


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


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    header = read_header(path)
    part = sink.parquet_path("memory_records")
    try:
        _read_fast(path, header, part)
        return ReadOutcome()
    except (pa.ArrowException, _Unusual):
        part.unlink(missing_ok=True)
    try:
        kept, bad = _read_row_by_row(path, header, sink)
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not UTF-8 text near byte {exc.start}") from exc
    return rows_outcome(path, kept, bad)
