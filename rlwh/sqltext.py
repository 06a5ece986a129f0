"""Quoting for the few places where DuckDB takes no parameter (COPY ... TO, COMMENT ON,
table functions over our own temp files): every value from data goes as a parameter."""

from __future__ import annotations

import os


def sql_literal(value: str | os.PathLike) -> str:
    """A SQL string literal: the text in single quotes, quotes doubled."""
    return "'" + str(value).replace("'", "''") + "'"


def sql_ident(name: str) -> str:
    """A quoted SQL identifier (a table or column name read from the catalog)."""
    return '"' + name.replace('"', '""') + '"'


def sql_table(name: str) -> str:
    """A quoted table or view name, schema-qualified when it is (internal.stack_frames:
    "internal"."stack_frames"); rlwh's own names never hold a dot otherwise."""
    return ".".join(sql_ident(part) for part in name.split("."))
