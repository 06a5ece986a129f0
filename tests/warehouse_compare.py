"""Are two warehouses the same data? Every public table, rows compared as multisets.

Two correct ingests of the same files differ only in ids and clocks: source ids (each
row's file is compared by its path instead), timings and timestamps.
"""

from __future__ import annotations

import tempfile
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
            "and schema_name || '.' || table_name not in ('internal.migrations', 'internal.settings', "
            "'internal.stack_texts')").fetchall()]  # bookkeeping, and the writer's cache (empty in a thin file)
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


def every_public_difference(got: Path, want: Path, apart: dict[str, str] | None = None) -> dict[str, tuple[int, int]]:
    """{table or view of main: (rows only in got, rows only in want)}, duplicates counted;
    {} when equal. Views are answered by each warehouse's own connection (a view's SQL
    names its tables without a catalog) and compared as Parquet; a fact row's source_id
    becomes its file's path and volatile columns are left out. A name on one side only
    is (-1, -1). `apart`: name -> a condition on its rows; the rows it holds for are
    compared on neither side (what a release changed on purpose, and nothing beside)."""
    with tempfile.TemporaryDirectory(prefix="rlwh-compare-") as out:
        names = {tag: _dump_public(db, Path(out), tag) for tag, db in (("got", got), ("want", want))}
        con = duckdb.connect()
        try:
            found = {n: (-1, -1) for n in set(names["got"]) ^ set(names["want"])}
            for name in sorted(set(names["got"]) & set(names["want"])):
                files = [f"read_parquet('{Path(out) / f'{tag}-{i}.parquet'}')" for tag, i in
                         (("got", names["got"][name]), ("want", names["want"][name]))]
                # Columns of one side only (a column this release added) are not compared.
                kept = [c for c in _columns(con, files[0]) if c in set(_columns(con, files[1]))]
                picked = ", ".join(f'"{c}"' for c in kept)
                where = f" where not coalesce({apart[name]}, false)" if apart and name in apart else ""
                extra, lacking = _multiset_difference(con, f"select {picked} from {files[0]}{where}",
                                                      f"select {picked} from {files[1]}{where}")
                if extra or lacking:
                    found[name] = (extra, lacking)
            return found
        finally:
            con.close()


def _columns(con, parquet_sql: str) -> list[str]:
    return [r[0] for r in con.execute(f"describe select * from {parquet_sql}").fetchall()]


def _dump_public(db: Path, out: Path, tag: str) -> dict[str, int]:
    """Every public table and view of `db` as Parquet under `out`: name -> its file's index."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = [r[0] for r in con.execute(
            "select table_name from duckdb_tables() where schema_name = 'main' union all "
            "select view_name from duckdb_views() where schema_name = 'main' and not internal").fetchall()]
        found: dict[str, int] = {}
        for i, name in enumerate(sorted(names)):
            columns = [c for (c,) in con.execute("select column_name from duckdb_columns() where schema_name = 'main' "
                                                 "and table_name = ? order by column_index", [name]).fetchall()]
            picked = [f'r."{c}"' for c in columns if c != "source_id" and c not in VOLATILE | IGNORED.get(name, set())]
            joined = ""
            if "source_id" in columns and name != "sources":
                picked.append("f.path as source_path")
                joined = " left join sources f using (source_id)"
            con.execute(f'copy (select {", ".join(picked)} from "{name}" r{joined}) '
                        f"to '{out / f'{tag}-{i}.parquet'}' (format parquet)")
            found[name] = i
        return found
    finally:
        con.close()
