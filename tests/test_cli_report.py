"""`rlwh report` and `rlwh nightly` through CliRunner."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from conftest import copy_fixture

from rlwh.cli import cli


@pytest.mark.slow
def test_report_writes_pages(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    db = str(tmp_path / "w.duckdb")
    assert CliRunner().invoke(cli, ["ingest", str(profile), "--db", db, "-q"]).exit_code == 0
    out = tmp_path / "reports"
    result = CliRunner().invoke(cli, ["report", "--db", db, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"-> {out / 'index.html'}" in result.output
    assert (out / "index.html").exists() and (out / "plotly.min.js").exists()


@pytest.mark.slow
def test_report_unknown_run_is_a_clear_error(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    db = str(tmp_path / "w.duckdb")
    CliRunner().invoke(cli, ["ingest", str(profile), "--db", db, "-q"])
    result = CliRunner().invoke(cli, ["report", "--db", db, "--run", "nope", "--out", str(tmp_path / "r")])
    assert result.exit_code == 1 and "nope" in result.output


@pytest.mark.slow
def test_nightly_exit_codes(tmp_path):
    root = tmp_path / "nightly"
    root.mkdir()
    copy_fixture("rl-insight-samples/memory_data", root)
    db = str(tmp_path / "w.duckdb")
    out = tmp_path / "site"
    clean = CliRunner().invoke(cli, ["nightly", str(root), "--db", db, "--out", str(out)])
    assert clean.exit_code == 0, clean.output
    assert "memory_data: ingested" in clean.output and (out / "index.html").exists()
    trace = next(root.rglob("trace_view.json"))
    trace.write_text("{broken")
    failed = CliRunner().invoke(cli, ["nightly", str(root), "--db", db, "--out", str(out)])
    assert failed.exit_code == 1, failed.output


def test_nightly_over_an_empty_root_says_so_and_exits_6(tmp_path):
    (tmp_path / "root").mkdir()
    result = CliRunner().invoke(cli, ["nightly", str(tmp_path / "root"), "--db", str(tmp_path / "w.duckdb"),
                                      "--out", str(tmp_path / "site")])
    assert result.exit_code == 6, result.output
    assert f"no run dir under {tmp_path / 'root'}" in result.output and "no index written" in result.output
    assert not (tmp_path / "site").exists()
