"""`rlwh ingest` through click's CliRunner: exit codes, summary, quiet mode."""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import copy_fixture

from rlwh.cli import cli


def test_ingest_prints_summary_and_exits_zero(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(db), "--run", "nightly-1"])
    assert result.exit_code == 0, result.output
    assert "run nightly-1: 3 files, 63 rows loaded" in result.output
    assert "0 failed" in result.output
    again = CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(db), "--run", "nightly-1", "-q"])
    assert again.exit_code == 0 and "3 unchanged" in again.output


def test_ingest_exits_nonzero_when_a_file_failed(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    trace = next(profile.rglob("trace_view.json"))
    trace.write_text("{not json")
    result = CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 1
    assert "failed: " in result.output and "trace_view.json" in result.output
    assert "1 failed" in result.output


def test_ingest_missing_dir_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "nope"), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_rlwh_db_env_var_picks_the_warehouse(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    db = tmp_path / "env.duckdb"
    result = CliRunner().invoke(cli, ["ingest", str(profile), "-q"], env={"RLWH_DB": str(db)})
    assert result.exit_code == 0, result.output
    assert db.exists()
    runs = CliRunner().invoke(cli, ["runs", "--format", "json"], env={"RLWH_DB": str(db)})
    assert json.loads(runs.output)[0]["run"] == "memory_data"


def test_empty_dir_warns_and_writes_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "empty"), "--db", str(db)])
    assert result.exit_code == 0
    assert "no profiler files" in result.output and not db.exists()
