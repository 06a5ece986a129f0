"""`rlwh forget RUN`: remove a run and every row it brought, in every table.

Where no other process holds the warehouse, the rows are deleted in place, in one
transaction (a kill leaves the run whole or gone); where a reader holds it, through a
working copy renamed over it, so that reader keeps its snapshot. Either way readers see
the run until the forget is done and never half of it, and a nightly forget of an old
run costs its rows, not a copy of the warehouse (rlwh.warehouse.session.write_session).
Every base table with a `run` column is cleared of the run, the private derived tables
of the schema internal included (`internal.memory_record_ops`,
`internal.memory_timeline_rows`): the list is read from the warehouse, so a table added
by a later migration is covered without a change here. `call_stacks` is shared by all
runs and keyed by the stack's text, so its rows stay.
"""

from __future__ import annotations

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.safe_files import pause_for_test
from rlwh.sqltext import one_value, sql_table
from rlwh.warehouse import derive
from rlwh.warehouse.schema import PRIVATE_SCHEMA
from rlwh.warehouse.session import write_session


def tables_with_runs(con) -> list[str]:
    """Base tables that carry a `run` column: main's by name, the private ones as
    internal.<name>."""
    rows = con.execute(
        """select distinct if(c.schema_name = 'main', c.table_name, c.schema_name || '.' || c.table_name)
           from duckdb_columns() c
           join duckdb_tables() t on t.database_name = c.database_name and t.schema_name = c.schema_name
             and t.table_name = c.table_name
           where c.database_name = current_database() and c.schema_name in ('main', $private)
             and not t.temporary and c.column_name = 'run'
           order by 1""",
        {"private": PRIVATE_SCHEMA},
    ).fetchall()
    return [r[0] for r in rows]


def forget_run(config: Config, run: str) -> dict[str, int]:
    """Delete run `run` from the warehouse; returns the rows removed per table (non-zero only)."""
    if not config.db_path.exists():
        raise RlwhError(f"no warehouse at {config.db_path}: nothing to forget")
    removed: dict[str, int] = {}
    with write_session(config, in_place_when_free=True) as session:
        con = session.con
        derive.catch_up(con, session.derived_stale)
        known = one_value(con.execute(
            "select (select count(*) from runs where run = ?) + (select count(*) from sources where run = ?)",
            [run, run],
        ))
        if not known:
            raise RlwhError(f"no run {run!r} in {config.db_path}: see `rlwh runs`")
        con.execute("begin transaction")
        for table in tables_with_runs(con):
            count = one_value(con.execute(f"delete from {sql_table(table)} where run = ?", [run]))
            if count:
                removed[table] = int(count)
        pause_for_test("forget")
        con.execute("commit")
        pause_for_test("forgotten")
        session.changed = True
    return removed
