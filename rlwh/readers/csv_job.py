"""A CSV read by its ingest job's SQL: DuckDB's read_csv with a type for each field.

The job (ingest/<job>.sql) says what the file holds and how it maps to a table, in SQL:
  -- fields:           a SELECT of (field, type): the source fields it uses and the type
                       read_csv reads each as (DECIMAL(20,3) keeps 19-digit µs exact)
  -- read <table>:     a SELECT over `_csv` (the files) giving that table's rows: the
                       renames, units and casts, with `_file` and source_row kept;
                       `trim_blank(text)` trims what profilers leave around a value
                       (rlwh.readers.base.trimmed_sql)
This module runs them over a batch of files with the same header, in the warehouse's own
connection (read_into, rlwh.ingest.in_place), or over one file into a Parquet part
(read_to_parquet, for the routes that parse in workers). `_csv` has a column per header
field in the file's order (typed as `fields` says, text otherwise), a NULL column for each
field the file lacks, `_file` (which file of the batch) and `_source_row` (the record's
1-based number in its file). The read is strict: a row it cannot read raises, and the
caller reads the file row by row, naming the bad rows.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import duckdb

from rlwh.assets import asset_dir
from rlwh.readers.base import trimmed_sql
from rlwh.readers.reader_db import file_bytes, reader_db
from rlwh.sqltext import constant_rows, has_relation, job_sections, sql_ident, sql_literal

# read_csv's longest line; a longer one goes to the row-by-row read (whose csv module names it).
MAX_LINE_BYTES = 2_000_000


class Unreadable(Exception):
    """The header is one read_csv cannot take as it is (a field named twice)."""


@lru_cache(maxsize=None)
def sections(job: str) -> dict[str, str]:
    """The sections of ingest/<job>.sql, each one statement without its ';'."""
    found = job_sections((asset_dir("ingest") / f"{job}.sql").read_text(encoding="utf-8"))
    return {name: text.strip().rstrip(";") for name, text in found.items()}


@lru_cache(maxsize=None)
def field_types(job: str) -> tuple[tuple[str, str], ...]:
    """The job's `fields`: (source field, the type read_csv reads it as)."""
    return tuple(constant_rows(sections(job)["fields"]))


def _csv_view(files: list[tuple[int, Path]], header: list[str], types: dict[str, str]) -> str:
    """`_csv` over `files` ((index in the batch, path), all with `header`).

    Records are numbered by one row_number() over the scan, which DuckDB computes in the
    scan's order (a streaming window: files in list order, records in file order, on any
    number of threads), then counted from each file's first; a window partitioned by file
    numbers in no defined order."""
    if len(set(header)) < len(header):
        raise Unreadable("a field is named twice in the header")
    columns = ", ".join(f"{sql_literal(name)}: {sql_literal(types.get(name, 'VARCHAR'))}" for name in header)
    absent = "".join(f", null::{t} as {sql_ident(f)}" for f, t in types.items() if f not in header)
    paths = "[" + ", ".join(sql_literal(path) for _, path in files) + "]"
    indexes = "[" + ", ".join(str(i) for i, _ in files) + "]"
    return (f"create or replace temp view _csv as select * exclude (_n, _at){absent}, "
            f"_n - min(_n) over (partition by _file) + 1 as _source_row "
            f"from (select *, row_number() over () as _n, {indexes}[list_position({paths}, _at)] as _file "
            f"from read_csv({paths}, header = true, "
            f"auto_detect = false, delim = ',', quote = '\"', escape = '\"', strict_mode = true, "
            f"max_line_size = {MAX_LINE_BYTES}, filename = '_at', columns = {{{columns}}}))")


def _define_macros(con: duckdb.DuckDBPyConnection) -> None:
    """The functions a job's SQL may call, on this connection only (temp)."""
    con.execute(f"create or replace temp macro trim_blank(s) as {trimmed_sql('s')}")


def read_into(con: duckdb.DuckDBPyConnection, job: str, table: str, files: list[tuple[int, Path]],
              header: list[str]) -> None:
    """Add the job's `read <table>` rows of `files` ((index in the batch, path), all with
    `header`) to the temp table `_rows_<table>`; raises duckdb.Error or Unreadable when a
    row or the header is not as the job expects."""
    _define_macros(con)
    con.execute(_csv_view(files, header, dict(field_types(job))))
    rows = sections(job)["read " + table]
    exists = has_relation(con, f"temp._rows_{table}")
    con.execute(f"insert into _rows_{table} {rows}" if exists else f"create temp table _rows_{table} as {rows}")
    con.execute("drop view _csv")


def read_batch_into(con: duckdb.DuckDBPyConnection, job: str, table: str, paths: list[Path],
                    headers: list[list[str]]) -> None:
    """read_into over a batch: the files that share a header in one statement each."""
    by_header: dict[tuple[str, ...], list[tuple[int, Path]]] = {}
    for i, (path, header) in enumerate(zip(paths, headers)):
        by_header.setdefault(tuple(header), []).append((i, path))
    for fields, files in by_header.items():
        read_into(con, job, table, files, list(fields))


def read_to_parquet(job: str, table: str, path: Path, header: list[str], part: Path,
                    memory_limit: str | None = None) -> None:
    """Run the job's `read <table>` over the file into `part`; raises duckdb.Error or
    Unreadable when a row or the header is not as the job expects."""
    sql = sections(job)
    with reader_db(file_bytes(path), memory_limit) as con:
        _define_macros(con)
        con.execute(_csv_view([(0, path)], header, dict(field_types(job))))
        rows = sql["read " + table]
        con.execute(f"copy (select * exclude (_file) from ({rows}\n)) to {sql_literal(part)} "
                    "(format parquet, compression uncompressed)")
