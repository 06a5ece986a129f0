"""Are two warehouses the same data? Every public table, rows compared as multisets.

Two correct ingests of the same files differ only in ids and clocks: source ids (each
row's file is compared by its path instead), timings and timestamps.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

IGNORED = {"sources": {"source_id", "seconds", "ingested_at"}, "runs": {"first_ingested_at", "last_ingested_at"}}


def _tables(con, db: str) -> list[str]:
    rows = con.execute("select table_name from duckdb_tables() where database_name = ? and schema_name = 'main' "
                       "order by table_name", [db]).fetchall()
    return [name for (name,) in rows]


def _rows(con, db: str, table: str) -> str:
    """SELECT of the table's comparable columns; a fact row's source_id becomes its file's path."""
    names = [c for (c,) in con.execute("select column_name from duckdb_columns() where database_name = ? and "
                                       "schema_name = 'main' and table_name = ? order by column_index",
                                       [db, table]).fetchall()]
    picked = [f'r."{c}"' for c in names if c != "source_id" and c not in IGNORED.get(table, ())]
    joined = ""
    if "source_id" in names and table != "sources":
        picked.append("f.path as file_path")
        joined = f" left join {db}.sources f using (source_id)"
    return f"select {', '.join(picked)} from {db}.{table} r{joined}"


def _multiset_difference(con, got_sql: str, want_sql: str) -> tuple[int, int]:
    """(rows only in got, rows only in want), duplicates counted."""
    extra = con.execute(f"select count(*) from ({got_sql} except all {want_sql})").fetchone()[0]
    lacking = con.execute(f"select count(*) from ({want_sql} except all {got_sql})").fetchone()[0]
    return extra, lacking


def differences(got: Path, want: Path) -> dict[str, tuple[int, int]]:
    """{table: (rows only in got, rows only in want)}, duplicates counted; {} when equal.
    A table present on one side only is reported as (-1, -1)."""
    con = duckdb.connect()
    try:
        con.execute(f"attach '{got}' as got (read_only)")
        con.execute(f"attach '{want}' as want (read_only)")
        found = {}
        for table in sorted(set(_tables(con, "got")) | set(_tables(con, "want"))):
            if table not in _tables(con, "got") or table not in _tables(con, "want"):
                found[table] = (-1, -1)
                continue
            extra, lacking = _multiset_difference(con, _rows(con, "got", table), _rows(con, "want", table))
            if extra or lacking:
                found[table] = (extra, lacking)
        return found
    finally:
        con.close()


def row_count(db: Path) -> int:
    """Rows in all public tables: a comparison of two empty warehouses proves nothing."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return sum(con.execute(f'select count(*) from "{t}"').fetchone()[0] for t in _tables(con, con.execute(
            "select current_database()").fetchone()[0]))
    finally:
        con.close()


# Columns that say when or how long, not what: they differ between any two ingests.
VOLATILE = {"ingested_at", "seconds", "applied_at", "first_ingested_at", "last_ingested_at"}


def every_table_differences(got: Path, want: Path) -> dict[str, tuple[int, int]]:
    """Like differences(), over every table of `want`, the private (derived) ones of the
    schema internal included, ids compared as they are; `got` may hold views of those
    names (a dataset's thin file)."""
    con = duckdb.connect()
    try:
        con.execute(f"attach '{got}' as got (read_only)")
        con.execute(f"attach '{want}' as want (read_only)")
        tables = [r[0] for r in con.execute(
            "select schema_name || '.' || table_name from duckdb_tables() where database_name = 'want' "
            "and schema_name in ('main', 'internal') "
            "and schema_name || '.' || table_name not in ('internal.migrations', 'internal.settings')").fetchall()]
        found = {}
        for table in tables:
            schema, name = table.split(".")
            columns = [r[0] for r in con.execute(
                """select column_name from duckdb_columns() where database_name = 'want' and schema_name = ?
                   and table_name = ? order by column_index""", [schema, name]).fetchall() if r[0] not in VOLATILE]
            select = ", ".join(f'"{c}"' for c in columns)
            extra, lacking = _multiset_difference(con, f"select {select} from got.{table}",
                                                  f"select {select} from want.{table}")
            if extra or lacking:
                found[table] = (extra, lacking)
        return found
    finally:
        con.close()
