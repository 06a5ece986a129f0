"""`rlwh init` and `rlwh init --status`: create or upgrade the warehouse, and say which
migrations it has.

An upgrade may add derived tables; they are filled here (rlwh.warehouse.derive), after
the storage layer has migrated the working copy, so storage never runs analysis SQL.
"""

from __future__ import annotations

import duckdb

from rlwh.config import Config
from rlwh.warehouse import derive
from rlwh.warehouse.schema import migration_files, migrations_table
from rlwh.warehouse.session import write_session


def initialize(config: Config) -> list[str]:
    """Create or upgrade the warehouse; returns the migrations applied."""
    with write_session(config) as session:
        derive.catch_up(session.con, session.derived_stale)
        session.changed = True
    return session.applied


def migration_status(config: Config) -> list[tuple[str, object]]:
    """(migration file, applied_at or None) for every migration, read-only."""
    applied: dict[int, object] = {}
    if config.db_path.exists():
        con = duckdb.connect(str(config.db_path), read_only=True)
        try:
            table = migrations_table(con)  # main's legacy one in a warehouse from before 0010
            if table:
                applied = dict(con.execute(f"select version, applied_at from {table}").fetchall())
        finally:
            con.close()
    return [(path.name, applied.get(version)) for version, path in migration_files()]
