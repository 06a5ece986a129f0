"""`rlwh ingest` through click's CliRunner: exit codes, summary, quiet mode."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import copy_fixture

from rlwh import exitcodes
from rlwh.cli import cli


@pytest.mark.slow
def test_ingest_prints_summary_and_exits_zero(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    db = tmp_path / "w.duckdb"
    result = CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(db), "--run", "nightly-1"])
    assert result.exit_code == 0, result.output
    assert "run nightly-1: 3 files, 63 rows loaded" in result.output
    assert "0 failed" in result.output
    again = CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(db), "--run", "nightly-1", "-q"])
    assert again.exit_code == 0 and "3 unchanged" in again.output


@pytest.mark.slow
def test_ingest_exits_nonzero_when_a_file_failed(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    trace = next(profile.rglob("trace_view.json"))
    trace.write_text("{not json")
    result = CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 1
    assert "failed: " in result.output and "trace_view.json" in result.output
    assert "1 failed" in result.output


@pytest.mark.parametrize("command", ["ingest", "check"])
def test_a_missing_dir_exits_1_as_the_readme_says(tmp_path, command):
    """README's exit statuses: 1 for a bad path (2 is a wrong option); one line naming it."""
    args = [command, str(tmp_path / "nope")] + (["--db", str(tmp_path / "w.duckdb")] if command == "ingest" else [])
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and result.output.strip() == f"Error: profile dir not found: {tmp_path / 'nope'}"


def test_ingest_of_a_file_says_to_point_at_its_folder(tmp_path):
    file = tmp_path / "trace_view.json"
    file.write_text("[]")
    result = CliRunner().invoke(cli, ["ingest", str(file), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 1 and "is a file: point at the folder" in result.output


@pytest.mark.slow
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
    assert result.exit_code == exitcodes.NOTHING_FOUND == 6
    assert "no profiler files" in result.output and not db.exists()


def _cut_trace(profile):
    """Cut trace_view.json mid-way: the events before the cut are salvaged (partial)."""
    trace = next(profile.rglob("trace_view.json"))
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) // 2])
    return trace


@pytest.mark.slow
def test_a_partial_load_exits_5_and_a_failure_wins(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    _cut_trace(profile)
    db = str(tmp_path / "w.duckdb")
    partial = CliRunner().invoke(cli, ["ingest", str(profile), "--db", db, "-q"])
    assert partial.exit_code == exitcodes.PARTIAL == 5, partial.output
    assert "1 partial, 0 failed" in partial.output
    next(profile.rglob("operator_memory.csv")).write_text("not,a\nmemory,csv\n")
    both = CliRunner().invoke(cli, ["ingest", str(profile), "--db", db, "-q"])
    assert both.exit_code == exitcodes.FAILED == 1, both.output  # failed is more severe than partial


def test_the_most_severe_exit_status_wins():
    assert exitcodes.most_severe([]) == exitcodes.OK
    assert exitcodes.most_severe([exitcodes.REGRESSION, exitcodes.PARTIAL]) == exitcodes.PARTIAL
    assert exitcodes.most_severe([exitcodes.NOTHING_FOUND, exitcodes.REGRESSION]) == exitcodes.NOTHING_FOUND
    assert exitcodes.most_severe([exitcodes.PARTIAL, exitcodes.FAILED, exitcodes.OK]) == exitcodes.FAILED


def test_check_of_an_empty_dir_says_why_it_exits_6_as_ingest_does(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    checked = CliRunner().invoke(cli, ["check", str(empty)])
    ingested = CliRunner().invoke(cli, ["ingest", str(empty), "--db", str(tmp_path / "w.duckdb")])
    assert checked.exit_code == ingested.exit_code == 6
    for output in (checked.output, ingested.output):
        assert f"no profiler files under {empty.resolve()}: expected *_ascend_pt rank dirs" in output


def test_a_file_gone_from_the_runs_folder_is_said_and_its_rows_stay(tmp_path):
    """Re-ingesting the run's own folder after one of its files was deleted: the rows it
    brought stay (nothing is deleted unasked), and the ingest says which file went and how
    to drop them. From another folder (a subset, a copy) nothing is said: paths there tell
    nothing about the run's folder."""
    from rlwh import synth

    profile = synth.write_ascend_profile(tmp_path / "run", roles=("actor_update",), ranks=2, n_ops=60,
                                         n_allocs=20, n_stacks=5)
    db = tmp_path / "w.duckdb"
    assert CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(db), "-q"]).exit_code == 0
    memory_csv = sorted(profile.rglob("operator_memory.csv"))[0]
    rel = memory_csv.relative_to(profile).as_posix()
    memory_csv.unlink()
    again = CliRunner().invoke(cli, ["ingest", str(profile), "--db", str(db), "-q"])
    assert again.exit_code == 0, again.output
    assert f"1 file of run 'run' is no longer under {profile} ({rel})" in again.output
    assert "`rlwh forget run` and ingest again" in again.output
    rows = CliRunner().invoke(cli, ["query", "--db", str(db), "--format", "csv",
                                    "select count(*) from memory_records"])
    assert rows.output.splitlines()[-1] == "40"  # both ranks' 20 rows, as loaded
    subset = CliRunner().invoke(cli, ["ingest", str(memory_csv.parents[2]), "--db", str(db), "--run", "run",
                                      "-q"])
    assert subset.exit_code == 0, subset.output
    assert "no longer under" not in subset.output
