"""`rlwh query`, `rlwh runs`, `rlwh sources` through CliRunner."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner
from conftest import copy_fixture

from rlwh.cli import cli


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("q")
    profile = copy_fixture("rl-insight-samples/memory_data", tmp)
    path = tmp / "w.duckdb"
    assert CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(path), "-q"]).exit_code == 0
    return str(path)


def test_query_formats(db):
    sql = "select rank_id, peak_live_bytes from memory_peak"
    table = CliRunner().invoke(cli, ["query", sql, "--db", db])
    assert table.exit_code == 0 and "peak_live_bytes" in table.output and "(1 row)" in table.output
    rows = list(csv.reader(io.StringIO(CliRunner().invoke(cli, ["query", sql, "--db", db, "--format", "csv"]).output)))
    assert rows[0] == ["rank_id", "peak_live_bytes"] and rows[1][0] == "0"
    records = json.loads(CliRunner().invoke(cli, ["query", sql, "--db", db, "--format", "json"]).output)
    assert records[0]["peak_live_bytes"] == int(rows[1][1])


def test_query_is_read_only(db):
    result = CliRunner().invoke(cli, ["query", "delete from memory_records", "--db", db])
    assert result.exit_code == 1 and "read-only" in result.output


def test_query_error_is_clear(db):
    result = CliRunner().invoke(cli, ["query", "select * from no_such_table", "--db", db])
    assert result.exit_code == 1 and "no_such_table" in result.output


def test_runs_and_sources(db):
    runs = CliRunner().invoke(cli, ["runs", "--db", db, "--format", "json"])
    assert json.loads(runs.output)[0] | {"profile_dir": None, "last_ingested_at": None} == {
        "run": "memory_data", "profile_dir": None, "last_ingested_at": None, "ranks": 1, "files": 3,
        "failed": 0, "partial": 0, "rows": 63}
    sources = CliRunner().invoke(cli, ["sources", "--db", db, "--status", "ok", "--format", "csv"])
    assert sources.exit_code == 0 and sources.output.count("\nmemory_data,") == 3
    none = CliRunner().invoke(cli, ["sources", "--db", db, "--status", "failed", "--format", "json"])
    assert json.loads(none.output) == []


def test_missing_warehouse_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(cli, ["runs", "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 1 and "no warehouse at" in result.output
