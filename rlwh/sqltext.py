"""Quoting for the few places where DuckDB takes no parameter (COPY ... TO, COMMENT ON,
table functions over our own temp files): every value from data goes as a parameter.
Also the one value of a query that always yields one row."""

from __future__ import annotations

import os
from typing import Any

import duckdb


def sql_literal(value: str | os.PathLike) -> str:
    """A SQL string literal: the text in single quotes, quotes doubled."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_ident(name: str) -> str:
    """A quoted SQL identifier (a table or column name read from the catalog)."""
    return '"' + name.replace('"', '""') + '"'


def one_value(result: duckdb.DuckDBPyConnection) -> Any:
    """The first value of an executed query that always yields one row (count(*), an aggregate,
    COPY ... TO, DELETE, nextval), so callers need not handle a missing row."""
    row = result.fetchone()
    assert row is not None, "a one-row query returned no row"
    return row[0]


def sql_table(name: str) -> str:
    """A quoted table or view name, schema-qualified when it is (internal.stack_frames:
    "internal"."stack_frames"); rlwh's own names never hold a dot otherwise."""
    return ".".join(sql_ident(part) for part in name.split("."))
