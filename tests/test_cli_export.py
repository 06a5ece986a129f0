"""`rlwh export parquet` through CliRunner."""

from __future__ import annotations

import duckdb
import pytest
from click.testing import CliRunner
from conftest import copy_fixture

from rlwh.cli import cli


@pytest.mark.slow
def test_export_parquet_writes_and_reports_every_table(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    db = str(tmp_path / "w.duckdb")
    assert CliRunner().invoke(cli, ["ingest", str(profile), "--db", db, "-q"]).exit_code == 0
    out = tmp_path / "export"
    result = CliRunner().invoke(cli, ["export", "parquet", str(out), "--db", db])
    assert result.exit_code == 0, result.output
    assert "memory_records" in result.output and f"-> {out}" in result.output
    rows = duckdb.sql(
        f"select count(*) from read_parquet('{out}/memory_records/**/*.parquet', hive_partitioning = true)"
        " where run = 'memory_data' and role = 'memory_data'").fetchall()[0][0]
    assert rows == 49


@pytest.mark.slow
def test_export_refuses_a_foreign_folder(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    db = str(tmp_path / "w.duckdb")
    CliRunner().invoke(cli, ["ingest", str(profile), "--db", db, "-q"])
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("do not delete")
    result = CliRunner().invoke(cli, ["export", "parquet", str(out), "--db", db])
    assert result.exit_code == 1 and (out / "thesis.tex").exists()


@pytest.mark.slow
def test_export_views_flag(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    db = str(tmp_path / "w.duckdb")
    assert CliRunner().invoke(cli, ["ingest", str(profile), "--db", db, "-q"]).exit_code == 0
    out = tmp_path / "export"
    result = CliRunner().invoke(cli, ["export", "parquet", str(out), "--views", "--db", db])
    assert result.exit_code == 0, result.output
    assert "tables and views" in result.output
    peak = duckdb.sql(f"select rank_id, peak_live_bytes from read_parquet('{out}/memory_peak/**/*.parquet')").fetchall()
    con = duckdb.connect(db, read_only=True)
    assert peak == con.execute("select rank_id, peak_live_bytes from memory_peak").fetchall() and peak
    con.close()
