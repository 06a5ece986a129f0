"""Derived tables: what the memory views would otherwise recompute on every query.

The ASOF match of memory rows to cpu_ops and the live-memory timeline cost seconds per
rank on every query; stored once per (run, role, rank_id, capture) they answer at once.
Ingest marks the keys a file's rows belong to (before deleting old rows and after loading
new ones) and refreshes those keys before it publishes, in the same write session, so a
reader never sees base tables and derived tables disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable

import duckdb

from rlwh import stacks
from rlwh.assets import asset_dir
from rlwh.sqltext import one_value, rows_as_lists_sql, sql_literal

# The tables whose rows feed ingest/derived/memory.sql; cpu_ops only beside the others.
SOURCE_TABLES = ("memory_records", "cpu_ops", "torch_memory_events", "snapshot_trace_blocks")
MEMORY_TABLES = ("memory_records", "torch_memory_events", "snapshot_trace_blocks")
KEY = ("run", "role", "rank_id", "capture")
# A WHERE clause for one key bound as 4 parameters (role, rank_id, capture may be NULL).
KEY_MATCH = ("run = ? and role is not distinct from ? and rank_id is not distinct from ? "
             "and capture is not distinct from ?")


# A refresh's group of keys holds at most this many source rows (memory_records, cpu_ops,
# PyTorch and snapshot events), or one key: a group is one statement per derived table and
# one transaction, whose sorts spill beyond the memory limit but whose changed blocks stay
# pinned until it commits (1,000 ranks in one transaction ran out of the loader's 384 MB).
GROUP_ROWS = 4_000_000


@dataclass(frozen=True)
class Statement:
    sql: str

    @property
    def needs(self) -> frozenset[str]:
        """The tables named on its `-- needs:` line: it runs for a group holding rows of one
        of them. Empty for a statement that always runs (a delete of old rows, a drop)."""
        found = re.search(r"^-- needs: (.+)$", self.sql, flags=re.MULTILINE)
        return frozenset(t.strip() for t in found.group(1).split(",")) if found else frozenset()

    def run(self, con: duckdb.DuckDBPyConnection, keys: list[tuple]) -> None:
        """Run over the group of keys in _derive_keys (`keys`, its rows)."""
        lists = {"runs": sorted({k[0] for k in keys}), "captures": sorted({k[3] for k in keys})}
        code = re.sub(r"--.*", "", self.sql)
        con.execute(self.sql, {name: value for name, value in lists.items() if re.search(rf"\${name}\b", code)})


@lru_cache(maxsize=None)
def statements() -> tuple[Statement, ...]:
    """The refresh statements of ingest/derived/memory.sql, in order."""
    text = (asset_dir("ingest") / "derived" / "memory.sql").read_text(encoding="utf-8")
    parts = re.split(r"^;\s*$", text, flags=re.MULTILINE)
    return tuple(Statement(p.strip()) for p in parts if re.search(r"^\s*[a-z]", p, flags=re.MULTILINE))


def _ensure_state(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "create temp table if not exists _rlwh_dirty (run varchar, role varchar, rank_id integer, capture varchar)"
    )


def feeds_derived(tables: Iterable[str]) -> bool:
    """Whether rows of `tables` (what a job fills) are what derived rows are made of: only a
    file of such a kind has keys to mark when it lands (a mark is a scan of every
    SOURCE_TABLES table: 2-3 ms a file or batch that gives none of their rows)."""
    return bool(set(tables) & set(SOURCE_TABLES))


def mark_source(con: duckdb.DuckDBPyConnection, source_id: int) -> None:
    """Remember the keys that rows of `source_id` belong to, so refresh() redoes them."""
    mark_sources(con, [source_id])


def mark_sources(con: duckdb.DuckDBPyConnection, source_ids: list[int]) -> None:
    """mark_source for several sources at once: one scan of each table, not one per source,
    in one statement (each statement costs ~1 ms to plan)."""
    if not source_ids:
        return
    _ensure_state(con)
    scans = " union all ".join(f"select run, role, rank_id, capture from {table} where list_contains($ids, source_id)"
                               for table in SOURCE_TABLES)
    con.execute(f"insert into _rlwh_dirty select distinct * from ({scans})", {"ids": source_ids})


def marked_keys(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    """The keys refresh() would redo now."""
    _ensure_state(con)
    return con.execute("select distinct run, role, rank_id, capture from _rlwh_dirty order by all").fetchall()


def unmark(con: duckdb.DuckDBPyConnection, keys: list[tuple]) -> None:
    """Forget marked keys whose derived rows were computed elsewhere (rlwh.ingest.build)."""
    _ensure_state(con)
    for key in keys:
        con.execute(f"delete from _rlwh_dirty where {KEY_MATCH}", list(key))


def clear_marks(con: duckdb.DuckDBPyConnection) -> None:
    """Forget every marked key."""
    _ensure_state(con)
    con.execute("delete from _rlwh_dirty")


def refresh(con: duckdb.DuckDBPyConnection, on_key: Callable[[int, int], None] | None = None,
            transaction_per_key: bool = False, group_rows: int = GROUP_ROWS) -> int:
    """Recompute the derived rows of every marked key; return how many keys. The keys go
    in groups of at most `group_rows` source rows (or one key), each group one statement
    per derived table (ingest/derived/memory.sql). `on_key(i, n)` is told before a group
    whose first key is the i-th of n (seconds each on a large rank: progress output).

    transaction_per_key: commit after each group, for a connection in autocommit mode:
    one transaction over 1,000 ranks keeps every changed block pinned and runs out of
    memory at the loader's 384 MB; the ingest's database (its scratch, or a new file) is private until it is
    published, so no reader sees the groups done so far.
    """
    keys = marked_keys(con)
    done = 0
    for group in key_groups(con, keys, group_rows):
        if on_key:
            on_key(done + 1, len(keys))
        if transaction_per_key:
            con.execute("begin transaction")
        try:
            _set_group(con, group)
            held = _tables_with_rows(con)
            for statement in statements():
                if not statement.needs or statement.needs & held:
                    statement.run(con, group)
            con.execute("drop table _derive_keys")
            if transaction_per_key:
                con.execute("commit")
        except BaseException:
            if transaction_per_key:
                con.execute("rollback")
            raise
        done += len(group)
    clear_marks(con)
    refresh_user_frames(con)
    return len(keys)


def key_groups(con: duckdb.DuckDBPyConnection, keys: list[tuple], group_rows: int = GROUP_ROWS) -> list[list[tuple]]:
    """`keys` in order, cut into groups of at most `group_rows` source rows (a larger key
    alone): what one refresh statement reads."""
    if len(keys) < 2:  # nothing to cut: no need to count (a scan of every source table)
        return [keys] if keys else []
    counts = " union all ".join(
        f"select run, role, rank_id, capture, count(*) as n from {table} "
        f"semi join _rlwh_dirty using (run, role, rank_id, capture) group by all"
        for table in SOURCE_TABLES
    )
    rows = {tuple(r[:4]): r[4] for r in con.execute(
        f"select run, role, rank_id, capture, sum(n) from ({counts}) group by all").fetchall()}
    groups: list[list[tuple]] = []
    size = 0
    for key in keys:
        n = rows.get(key, 0)
        if not groups or size + n > group_rows:
            groups.append([])
            size = 0
        groups[-1].append(key)
        size += n
    return groups


def _tables_with_rows(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Which MEMORY_TABLES hold rows of a key of the group in _derive_keys: a statement that
    needs none of them is skipped (all 19 statements for a trace without memory events were
    a third of a small ingest; the PyTorch ones cost an Ascend group 0.1-0.2 s on 64 ranks)."""
    found = " union all ".join(
        f"select {sql_literal(t)} where exists "
        f"(select 1 from {t} semi join _derive_keys using (run, role, rank_id, capture))" for t in MEMORY_TABLES)
    return {row[0] for row in con.execute(found).fetchall()}


def _set_group(con: duckdb.DuckDBPyConnection, group: list[tuple]) -> None:
    """The group's keys as the temp table the refresh statements join, each with a key_id."""
    con.execute("create or replace temp table _derive_keys "
                "(key_id integer, run varchar, role varchar, rank_id integer, capture varchar)")
    columns = {"key_id": "integer", "run": "varchar", "role": "varchar", "rank_id": "integer", "capture": "varchar"}
    rows = [(i, *key) for i, key in enumerate(group)]
    con.execute(f"insert into _derive_keys select {rows_as_lists_sql(columns)}",
                [[row[j] for row in rows] for j in range(len(columns))])


def _user_frame_rule(con: duckdb.DuckDBPyConnection) -> tuple[str, str]:
    """The library regex in force, and the rule text a stack_user_frames row records."""
    row = con.execute("select max(value) from internal.settings where name = 'library_frames'").fetchone()
    rule = row[0] if row and row[0] else stacks.library_pattern()
    return rule, f"{rule}\n-- native frames: {stacks.LINE_FRAME} unless {stacks.PYTHON_LINE_FRAME}"


def user_frames_stale(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether a stored user frame was computed under another rule (a new rlwh's frame rules)."""
    _, recorded = _user_frame_rule(con)
    return bool(one_value(con.execute(
        "select exists (select 1 from internal.stack_user_frames where rule <> ?)", [recorded])))


def refresh_user_frames(con: duckdb.DuckDBPyConnection) -> int:
    """Compute user_frame for stacks that have none under the current rules (rlwh.stacks).

    The library regex is bound as a parameter, so DuckDB compiles it once; a regex read from
    a column is compiled per row (185 s instead of 0.2 s for 4,000 stacks of 28 frames).
    Each row records the rules it was computed under (the library regex, then the native
    frame rule), so a changed rule recomputes every stack, and call_stacks.top_frame is
    brought to the same rule (stacks stored before native frames were told apart).
    Returns how many stacks were (re)computed.
    """
    rule, recorded = _user_frame_rule(con)
    stale = one_value(con.execute("delete from internal.stack_user_frames where rule <> ?", [recorded]))
    before = one_value(con.execute("select count(*) from internal.stack_user_frames"))
    con.execute(
        f"""insert into internal.stack_user_frames
        select s.stack_id, {stacks.user_frame_sql('s.stack', '$rule')}, $recorded
        from call_stacks as s
        anti join internal.stack_user_frames as u on s.stack_id = u.stack_id""",
        {"rule": rule, "recorded": recorded},
    )
    if stale and _is_table(con, "call_stacks"):  # readers write new stacks under the current rule
        con.execute(f"""update call_stacks set top_frame = {stacks.top_frame_sql('stack')}
            where top_frame is distinct from {stacks.top_frame_sql('stack')}""")
    return one_value(con.execute("select count(*) from internal.stack_user_frames")) - before


def catch_up(con: duckdb.DuckDBPyConnection, migrations_added_derived: bool) -> bool:
    """What a writer does after opening a warehouse: fill the derived tables a migration
    just added, and recompute user frames under a new [stacks] rule. True when anything
    changed (the warehouse must then be published)."""
    if migrations_added_derived:
        refresh_all(con)  # its refresh recomputes the user frames too
        return True
    return bool(refresh_user_frames(con))


def _is_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """True when `name` is a base table here (a dataset's thin file has views over Parquet)."""
    return one_value(con.execute("select count(*) from duckdb_tables() where table_name = ?", [name])) > 0


def mark_all(con: duckdb.DuckDBPyConnection) -> None:
    """Mark every key in the warehouse (after a migration that adds derived tables)."""
    _ensure_state(con)
    for table in SOURCE_TABLES:
        con.execute(f"insert into _rlwh_dirty select distinct run, role, rank_id, capture from {table}")


def refresh_all(con: duckdb.DuckDBPyConnection, group_rows: int = GROUP_ROWS) -> int:
    """Recompute every key's derived rows, in one transaction."""
    con.execute("begin transaction")
    try:
        mark_all(con)
        count = refresh(con, group_rows=group_rows)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    return count
