"""Derived tables: what the memory views would otherwise recompute on every query.

The ASOF match of memory rows to cpu_ops and the live-memory timeline cost seconds per
rank on every query; stored once per (run, role, rank_id, capture) they answer at once.
Ingest marks the keys a file's rows belong to (before deleting old rows and after loading
new ones) and refreshes those keys before it publishes, in the same write session, so a
reader never sees base tables and derived tables disagree. Statements that need only a
CSV's rows run as soon as it lands, while the trace of the same rank is still parsing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import duckdb

from rlwh.assets import asset_dir

# The tables whose rows feed ingest/derived/memory.sql.
SOURCE_TABLES = ("memory_records", "cpu_ops", "torch_memory_events")
KEY = ("run", "role", "rank_id", "capture")


@dataclass(frozen=True)
class Statement:
    sql: str
    needs: tuple[str, ...]

    def run(self, con: duckdb.DuckDBPyConnection, key: tuple) -> None:
        params = {name: value for name, value in zip(KEY, key) if f"${name}" in self.sql}
        con.execute(self.sql, params)


@lru_cache(maxsize=None)
def statements() -> tuple[Statement, ...]:
    """The refresh statements of ingest/derived/memory.sql, in order, with what they read."""
    text = (asset_dir("ingest") / "derived" / "memory.sql").read_text(encoding="utf-8")
    found = []
    for part in re.split(r"^;\s*$", text, flags=re.MULTILINE):
        if not re.search(r"^\s*[a-z]", part, flags=re.MULTILINE):
            continue
        needs = re.search(r"^-- needs:(.*)$", part, flags=re.MULTILINE)
        if not needs:
            raise ValueError(f"ingest/derived/memory.sql: a statement lacks its '-- needs:' line:\n{part.strip()[:200]}")
        tables = tuple(t.strip() for t in needs.group(1).split(",") if t.strip())
        found.append(Statement(part.strip(), tables))
    return tuple(found)


def _ensure_state(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "create temp table if not exists _rlwh_dirty (run varchar, role varchar, rank_id integer, capture varchar)"
    )
    con.execute(
        "create temp table if not exists _rlwh_derived_early"
        " (run varchar, role varchar, rank_id integer, capture varchar, source_table varchar)"
    )


def _keys_of_source(con: duckdb.DuckDBPyConnection, table: str, source_id: int) -> list[tuple]:
    return con.execute(
        f"select distinct run, role, rank_id, capture from {table} where source_id = ?", [source_id]
    ).fetchall()


def mark_source(con: duckdb.DuckDBPyConnection, source_id: int) -> None:
    """Remember the keys that rows of `source_id` belong to, so refresh() redoes them."""
    _ensure_state(con)
    for table in SOURCE_TABLES:
        con.execute(
            f"insert into _rlwh_dirty select distinct run, role, rank_id, capture from {table} where source_id = ?",
            [source_id],
        )


def refresh_source(con: duckdb.DuckDBPyConnection, source_id: int, table: str) -> None:
    """Run now the statements that need nothing but `table`, for the keys of `source_id`'s
    rows there; refresh() then skips them for those keys."""
    _ensure_state(con)
    early = [s for s in statements() if s.needs == (table,)]
    for key in _keys_of_source(con, table, source_id):
        for statement in early:
            statement.run(con, key)
        con.execute("insert into _rlwh_derived_early values (?, ?, ?, ?, ?)", [*key, table])


def refresh(con: duckdb.DuckDBPyConnection) -> int:
    """Recompute the derived rows of every marked key; return how many keys."""
    _ensure_state(con)
    keys = con.execute("select distinct run, role, rank_id, capture from _rlwh_dirty order by all").fetchall()
    early = {}
    for *key, table in con.execute("select * from _rlwh_derived_early").fetchall():
        early.setdefault(tuple(key), set()).add(table)
    for key in keys:
        done = early.get(key, set())
        for statement in statements():
            if not (len(statement.needs) == 1 and statement.needs[0] in done):
                statement.run(con, key)
    con.execute("delete from _rlwh_dirty")
    con.execute("delete from _rlwh_derived_early")
    return len(keys)


def mark_all(con: duckdb.DuckDBPyConnection) -> None:
    """Mark every key in the warehouse (after a migration that adds derived tables)."""
    _ensure_state(con)
    for table in SOURCE_TABLES:
        con.execute(f"insert into _rlwh_dirty select distinct run, role, rank_id, capture from {table}")


def refresh_all(con: duckdb.DuckDBPyConnection) -> int:
    """Recompute every key's derived rows, in one transaction."""
    con.execute("begin transaction")
    try:
        mark_all(con)
        count = refresh(con)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    return count
