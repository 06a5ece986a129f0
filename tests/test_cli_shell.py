"""The real duckdb shell (duckdb-cli, installed by make install) opens the warehouse."""

from __future__ import annotations

import subprocess

import duckdb
import pytest
from click.testing import CliRunner
from conftest import copy_fixture

from rlwh.cli import cli
from rlwh.config import Config
from rlwh.warehouse.catalog import duckdb_shell_path, shell_command


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shell")
    profile = copy_fixture("rl-insight-samples", tmp)
    db = tmp / "w.duckdb"
    CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(db), "-q"])
    assert db.exists()
    return db


@pytest.mark.slow
def test_shell_queries_every_table_and_view(warehouse):
    con = duckdb.connect(str(warehouse), read_only=True)
    # Every table and view, the private ones of the schema internal too (qualified).
    names = [n for (n,) in con.execute(
        "select if(schema_name = 'main', table_name, schema_name || '.' || table_name) from duckdb_tables()"
        " union all select if(schema_name = 'main', view_name, schema_name || '.' || view_name)"
        " from duckdb_views() where not internal").fetchall()]
    con.close()
    assert "memory_alloc_stack" in names and "call_stacks" in names
    script = "".join(f"select '{n}', count(*) from {n};\n" for n in names)
    shell = subprocess.run([str(duckdb_shell_path()), "-readonly", "-csv", "-noheader", str(warehouse)],
                           input=script, capture_output=True, text=True, timeout=120)
    assert shell.returncode == 0, shell.stderr
    seen = {line.split(",")[0] for line in shell.stdout.splitlines()}
    assert seen == set(names)
    # The shell of `make install` (duckdb-cli), older than the engine: it opens what the engine wrote.
    assert subprocess.run([str(duckdb_shell_path()), "--version"], capture_output=True, text=True).stdout.startswith(
        "v1.")


@pytest.mark.slow
def test_shell_command_is_read_only_unless_asked(warehouse):
    config = Config(db_path=warehouse)
    assert "-readonly" in shell_command(config)
    assert "-readonly" not in shell_command(config, write=True)
