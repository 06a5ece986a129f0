"""Warehouses the way an older rlwh left them, for the tests of the migrations that upgrade
them. These names are history: tools/private_schema_rename.py never rewrites this file.
"""

from __future__ import annotations

import duckdb

from rlwh.assets import asset_dir
from rlwh.warehouse.schema import MIGRATION_NAME

# Migration 0010's moves: the name in schema internal -> the name in main before it.
MOVED_BY_0010 = {
    "internal.settings": "_rlwh_settings",
    "internal.memory_record_ops": "_memory_record_ops",
    "internal.memory_timeline_rows": "_memory_timeline",
    "internal.torch_memory_blocks": "_torch_memory_blocks",
    "internal.stack_user_frames": "_stack_user_frames",
}
# The helper views main held before 0010 (0010 drops them; sql/internal/ re-creates them).
OLD_PRIVATE_VIEWS = {
    "_memory_records_matched": "select * from _memory_record_ops",
    "_stack_frames": "select * from _stack_user_frames",
    "_torch_memory_pairs": "select * from torch_memory_events",
}


def migrate_the_old_way(con: duckdb.DuckDBPyConnection, up_to: int) -> None:
    """Apply migrations 1..up_to as rlwh did before 0010: recorded in main._rlwh_migrations."""
    con.execute("create table _rlwh_migrations (version integer primary key, name varchar not null, "
                "applied_at timestamp not null)")
    for path in sorted(asset_dir("migrations").glob("*.sql")):
        version = int(MIGRATION_NAME.match(path.name).group(1))
        if version <= up_to:
            con.execute(path.read_text(encoding="utf-8"))
            con.execute("insert into _rlwh_migrations values (?, ?, now()::timestamp)", [version, path.name])


# Migration 0011's renames of internal.torch_memory_blocks' columns: new name -> old name.
RENAMED_BY_0011 = {
    "alloc_total_allocated_bytes": "allocated_after_alloc_bytes",
    "alloc_total_reserved_bytes": "reserved_after_alloc_bytes",
    "release_total_allocated_bytes": "allocated_after_release_bytes",
    "release_total_reserved_bytes": "reserved_after_release_bytes",
}


def _drop_views(con: duckdb.DuckDBPyConnection) -> None:
    for schema, view in con.execute("select schema_name, view_name from duckdb_views() where not internal "
                                    "and database_name = current_database()").fetchall():
        con.execute(f'drop view "{schema}"."{view}"')


def undo_0015(con: duckdb.DuckDBPyConnection) -> None:
    """Drop collective_transfers, added by migration 0015 (the views that read it go first)."""
    _drop_views(con)
    con.execute("drop table collective_transfers")
    con.execute("delete from internal.migrations where version >= 14")


def undo_0013(con: duckdb.DuckDBPyConnection) -> None:
    """Drop communication_links, added by migration 0013 (the views that read it go first).
    Migrations 0014 and 0015 are undone first."""
    undo_0015(con)
    _drop_views(con)
    con.execute("drop table communication_links")
    con.execute("delete from internal.migrations where version >= 13")


def undo_0012(con: duckdb.DuckDBPyConnection) -> None:
    """Drop device_ops.seq_is_global, added by migration 0012 (the views that read it go first).
    Migration 0013 is undone first."""
    undo_0013(con)
    _drop_views(con)
    con.execute("alter table device_ops drop column seq_is_global")
    con.execute("delete from internal.migrations where version >= 12")


def undo_0011(con: duckdb.DuckDBPyConnection) -> None:
    """Give internal.torch_memory_blocks its column names from before migration 0011 (the
    views that read them go first). Migration 0012 is undone first."""
    undo_0012(con)
    _drop_views(con)
    for new, old in RENAMED_BY_0011.items():
        con.execute(f"alter table internal.torch_memory_blocks rename column {new} to {old}")
    con.execute("delete from internal.migrations where version >= 11")


def undo_0010(con: duckdb.DuckDBPyConnection) -> None:
    """Put a current warehouse's private objects back in main under their old names, rows
    and all, as before migration 0010 (views go; migrate() re-creates the current ones).
    Migration 0011, which renamed columns of one of them, is undone first."""
    undo_0011(con)
    for schema, view in con.execute("select schema_name, view_name from duckdb_views() where not internal "
                                    "and database_name = current_database()").fetchall():
        con.execute(f'drop view "{schema}"."{view}"')
    for new, old in MOVED_BY_0010.items():
        schema, table = new.split(".")
        ddl, comment = con.execute(
            "select sql, comment from duckdb_tables() where schema_name = ? and table_name = ?",
            [schema, table]).fetchone()
        con.execute(ddl.replace(f"CREATE TABLE {new}(", f"CREATE TABLE {old}(", 1))
        con.execute(f"insert into {old} select * from {new}")
        if comment:
            con.execute(f"comment on table {old} is '{comment.replace(chr(39), chr(39) * 2)}'")
    next_id = con.execute("select nextval('internal.source_ids')").fetchone()[0]
    con.execute(f"create sequence _source_ids start {int(next_id)}")
    con.execute("create table _rlwh_migrations (version integer primary key, name varchar not null, "
                "applied_at timestamp not null)")
    con.execute("insert into _rlwh_migrations select * from internal.migrations where version < 10")
    con.execute("drop schema internal cascade")
    for view, select in OLD_PRIVATE_VIEWS.items():
        con.execute(f"create view {view} as {select}")
    # A public view that still reads an old table, as every memory view did.
    con.execute("create view memory_timeline as select * from _memory_timeline")


def downgrade_to_0002(con: duckdb.DuckDBPyConnection) -> None:
    """Undo migrations 0003 and 0004 (and 0010, which moved their tables; views go first,
    migrate() re-creates them)."""
    undo_0010(con)
    for view in con.execute("select view_name from duckdb_views() where not internal").fetchall():
        con.execute(f"drop view if exists {view[0]}")
    for table in ("_memory_record_ops", "_memory_timeline", "_torch_memory_blocks", "_stack_user_frames"):
        con.execute(f"drop table if exists {table}")
    con.execute("alter table cpu_ops drop column seq_no")
    con.execute("alter table cpu_ops drop column fwd_tid")
    con.execute("alter table torch_memory_events drop column op_ts_ns")
    con.execute("delete from _rlwh_migrations where version in (3, 4)")  # later ones touch other tables
