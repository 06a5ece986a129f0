"""Quoting for the few places where DuckDB takes no parameter (COPY ... TO, COMMENT ON,
table functions over our own temp files): every value from data goes as a parameter.
Also the one value of a query that always yields one row, whether a table or view is there,
the rows of a query over no table, and the sections of an ingest job's SQL."""

from __future__ import annotations

import os
import re
from typing import Any

import duckdb

from rlwh.process_db import process_db


def sql_literal(value: str | os.PathLike) -> str:
    """A SQL string literal: the text in single quotes, quotes doubled."""
    return "'" + str(value).replace("'", "''") + "'"


def rows_as_lists_sql(types: dict[str, str]) -> str:
    """A SELECT list that turns one list parameter per column (`types`: name -> type, in
    order) into rows: many rows in one statement, where a statement per row cost 2-4 ms."""
    return ", ".join(f"unnest(?::{t}[]) as {sql_ident(c)}" for c, t in types.items())


def sql_ident(name: str) -> str:
    """A quoted SQL identifier (a table or column name read from the catalog)."""
    return '"' + name.replace('"', '""') + '"'


def one_value(result: duckdb.DuckDBPyConnection) -> Any:
    """The first value of an executed query that always yields one row (count(*), an aggregate,
    COPY ... TO, DELETE, nextval), so callers need not handle a missing row. The result is
    read to its end: DuckDB refuses other work on a connection whose result is unfinished
    (a connection handed to a user after such a check failed their first query)."""
    rows = result.fetchall()
    assert rows, "a one-row query returned no row"
    return rows[0][0]


def has_relation(con: duckdb.DuckDBPyConnection, qualified: str) -> bool:
    """Whether the connection's database holds the table or view `qualified` (schema.table,
    temp.name, or catalog.schema.table for an attached database; main.table when no schema
    is named, where DuckDB finds a temp one of that name too). Looked up, not listed: the
    first duckdb_tables() or duckdb_views() of a DuckDB builds every system view (7-11 ms,
    paid by each connection). A missing name's error lists "did you mean" names, whose first
    look through every schema of a database costs as much (~6 ms, then 0.2 ms): a connection
    whose lookups may miss looks in the name's own schema only (no_suggestions). con.table()
    raises without aborting an open transaction (migrate asks inside one)."""
    try:
        con.table(qualified if "." in qualified else f"main.{qualified}")
        return True
    except duckdb.CatalogException:
        return False


def no_suggestions(con: duckdb.DuckDBPyConnection) -> None:
    """Look for "did you mean" names of a missing name's error in its own schema only, in
    `con`'s database (a setting of the database, not the cursor): the first look through every
    schema builds the system views (~6 ms). For connections that run rlwh's own SQL, whose
    lookups (has_relation) may miss; one that then runs a user's query (rlwh query) gets
    the other schemas' names back (suggestions_back)."""
    con.execute("set catalog_error_max_schemas = 0")


def suggestions_back(con: duckdb.DuckDBPyConnection) -> None:
    """Undo no_suggestions: "did you mean" names from every schema again."""
    con.execute("reset catalog_error_max_schemas")


def constant_rows(sql: str, params: list | None = None) -> list[tuple]:
    """The rows of a query that reads no table (a job's VALUES list of fields, a setting to
    validate), on a cursor of the process's DuckDB (rlwh.process_db): a DuckDB made
    for each costs 14-20 ms, and a CSV ingest asked for three."""
    cursor = process_db().cursor()
    try:
        return cursor.execute(sql, params or []).fetchall()
    finally:
        cursor.close()


def sql_table(name: str) -> str:
    """A quoted table or view name, schema-qualified when it is (internal.stack_frames:
    "internal"."stack_frames"); rlwh's own names never hold a dot otherwise."""
    return ".".join(sql_ident(part) for part in name.split("."))


_SECTION = re.compile(r"^-- (fields|read [a-z_]+|land):\s*$")


def job_sections(text: str) -> dict[str, str]:
    """An ingest job's SQL by section. A line `-- fields:`, `-- read <table>:` or `-- land:`
    starts a section; the text before the first one (the job's header) belongs to 'land',
    so a job without sections is all landing SQL."""
    sections: dict[str, list[str]] = {"land": []}
    current = "land"
    for line in text.splitlines():
        match = _SECTION.match(line)
        if match:
            current = match.group(1)
            sections.setdefault(current, [])
        else:
            sections[current].append(line)
    return {name: "\n".join(lines).strip() + "\n" for name, lines in sections.items()}
