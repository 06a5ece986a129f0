"""`rlwh init` and `rlwh migrate`."""

from __future__ import annotations

import duckdb
from click.testing import CliRunner

from rlwh.cli import cli
from rlwh.warehouse.schema import migration_files


def test_init_creates_then_reports_current(tmp_path):
    db = tmp_path / "new" / "w.duckdb"
    first = CliRunner().invoke(cli, ["init", "--db", str(db)])
    assert first.exit_code == 0 and "applied 0001_create_base_tables.sql, 0002_create_settings.sql" in first.output
    assert "0003_create_derived_memory.sql" in first.output
    second = CliRunner().invoke(cli, ["init", "--db", str(db)])
    assert second.exit_code == 0 and "schema is current" in second.output
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("select count(*) from internal.migrations").fetchone()[0] == len(migration_files())
    assert con.execute("select count(*) from duckdb_views() where view_name = 'memory_alloc_stack'").fetchone()[0] == 1


def test_migrate_list_is_read_only(tmp_path):
    db = tmp_path / "w.duckdb"
    listed = CliRunner().invoke(cli, ["migrate", "--list", "--db", str(db)])
    assert listed.exit_code == 0 and "pending" in listed.output and not db.exists()
    CliRunner().invoke(cli, ["init", "--db", str(db)])
    listed = CliRunner().invoke(cli, ["migrate", "--list", "--db", str(db)])
    assert "applied" in listed.output and "0001_create_base_tables.sql" in listed.output
