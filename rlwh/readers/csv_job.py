"""A CSV read by its ingest job's SQL: DuckDB's read_csv with a type for each field.

The job (ingest/<job>.sql) says what the file holds and how it maps to a table, in SQL:
  -- fields:           a SELECT of (field, type): the source fields it uses and the type
                       read_csv reads each as (DECIMAL(20,3) keeps 19-digit µs exact)
  -- read <table>:     a SELECT over `_csv` (the file) giving that table's rows: the
                       renames, units and casts, with source_row numbering the records
This module runs them in the parse worker and writes the rows as the table's Parquet part.
`_csv` has a column per header field in the file's order (typed as `fields` says, text
otherwise) and a NULL column for each field the file lacks. The read is strict: a row it
cannot read raises, and the caller reads the file row by row, naming the bad rows.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import duckdb

from rlwh.assets import asset_dir
from rlwh.sqltext import job_sections, sql_ident, sql_literal

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
    con = duckdb.connect()
    try:
        return tuple(con.execute(sections(job)["fields"]).fetchall())
    finally:
        con.close()


def _csv_view(path: Path, header: list[str], types: dict[str, str]) -> str:
    if len(set(header)) < len(header):
        raise Unreadable("a field is named twice in the header")
    columns = ", ".join(f"{sql_literal(name)}: {sql_literal(types.get(name, 'VARCHAR'))}" for name in header)
    absent = "".join(f", null::{t} as {sql_ident(f)}" for f, t in types.items() if f not in header)
    return (f"create temp view _csv as select *{absent} from read_csv({sql_literal(path)}, header = true, "
            f"auto_detect = false, delim = ',', quote = '\"', escape = '\"', strict_mode = true, "
            f"max_line_size = {MAX_LINE_BYTES}, columns = {{{columns}}})")


def read_to_parquet(job: str, table: str, path: Path, header: list[str], part: Path,
                    memory_limit: str | None = None) -> None:
    """Run the job's `read <table>` over the file into `part`; raises duckdb.Error or
    Unreadable when a row or the header is not as the job expects."""
    sql = sections(job)
    con = duckdb.connect()
    try:
        # One thread: source_row is row_number() in file order, and a worker per core reads files side by side.
        con.execute("set threads = 1")
        con.execute("set enable_progress_bar = false")
        if memory_limit:
            con.execute("set memory_limit = ?", [memory_limit])
        types = dict(field_types(job))
        con.execute(_csv_view(path, header, types))
        rows = sql["read " + table]
        con.execute(f"copy ({rows}\n) to {sql_literal(part)} (format parquet, compression uncompressed)")
    finally:
        con.close()
