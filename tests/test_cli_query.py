"""`rlwh query`, `rlwh runs`, `rlwh sources` through CliRunner."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, copy_fixture

from rlwh.cli import cli
from rlwh.report.terminal import format_float


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
        "run": "memory_data", "profile_dir": None, "last_ingested_at": None, "roles": 1, "ranks": 1, "files": 3,
        "failed": 0, "partial": 0, "ignored": 1, "rows": 63}
    sources = CliRunner().invoke(cli, ["sources", "--db", db, "--status", "ok", "--format", "csv"])
    assert sources.exit_code == 0 and sources.output.count("\nmemory_data,") == 3
    none = CliRunner().invoke(cli, ["sources", "--db", db, "--status", "failed", "--format", "json"])
    assert json.loads(none.output) == []


def test_missing_warehouse_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(cli, ["runs", "--db", str(tmp_path / "none.duckdb")])
    assert result.exit_code == 1 and "no warehouse at" in result.output and "RLWH_DB" in result.output


def test_sql_may_start_with_a_comment_and_hold_several_statements(db):
    sql = "-- Which rank peaked?\nselect rank_id from memory_peak;\n-- and again\nselect 2 as two; select 3 as three"
    result = CliRunner().invoke(cli, ["query", sql, "--db", db])
    assert result.exit_code == 0, result.output
    for number, column in ((1, "rank_id"), (2, "two"), (3, "three")):
        assert f"-- statement {number} of 3: " in result.output and column in result.output
    assert result.output.count("(1 row)") == 3


def test_sql_from_a_file_or_stdin(db, tmp_path):
    script = tmp_path / "q.sql"
    script.write_text("-- from a file\nselect 41 + 1 as answer;\n", encoding="utf-8")
    from_file = CliRunner().invoke(cli, ["query", "--file", str(script), "--db", db, "--format", "csv"])
    assert from_file.exit_code == 0 and from_file.output.split() == ["answer", "42"], from_file.output
    from_stdin = CliRunner().invoke(cli, ["query", "-", "--db", db, "--format", "csv"], input="select 7 as seven")
    assert from_stdin.exit_code == 0 and from_stdin.output.split() == ["seven", "7"], from_stdin.output
    missing = CliRunner().invoke(cli, ["query", "--file", str(tmp_path / "none.sql"), "--db", db])
    assert missing.exit_code == 1 and "none.sql" in missing.output and "Traceback" not in missing.output


@pytest.mark.parametrize("args, says", [
    ([""], "no SQL given"),
    (["   "], "no SQL given"),
    (["-- only a comment"], "no SQL statement"),
    (["--formt", "csv", "select 1"], "no such option: --formt"),
    (["select 1", "--file", "x.sql"], "not both"),
    (["select 1; select 2", "--format", "json"], "holds 2 statements"),
    # A JSON object keeps one value per name: the other column vanished without a word.
    (["select 1 as a, 2 as a", "--format", "json"], "'a' is named twice"),
])
def test_bad_input_is_one_clear_line(db, args, says):
    result = CliRunner().invoke(cli, ["query", *args, "--db", db])
    assert result.exit_code in (1, 2) and isinstance(result.exception, SystemExit), result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.output


def test_a_syntax_error_names_the_statement(db):
    result = CliRunner().invoke(cli, ["query", "select 1; selec 2", "--db", db])
    assert result.exit_code == 1 and "selec" in result.output and "Traceback" not in result.output


def test_table_rounds_floats_and_prints_stacks_as_lines(db):
    sql = ("select 0.3551602115841266::double as share, 1536.123456::double as mb, "
           "concat('/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1532 _call_impl', "
           "chr(10), 'train.py:88 step') as call_stack")
    result = CliRunner().invoke(cli, ["query", sql, "--db", db])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "0.3552" in lines[2] and "1536.123" in lines[2] and "0.35516" not in result.output
    assert lines[2].endswith("/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1532 _call_impl")
    assert lines[3].strip() == "train.py:88 step" and "\\n" not in result.output
    windows = CliRunner().invoke(cli, ["query", "select concat('a.py:1 f', chr(13), chr(10), 'b.py:2 g') as s",
                                       "--db", db])
    assert windows.output.splitlines()[2:4] == ["a.py:1 f", "b.py:2 g"], windows.output
    raw = CliRunner().invoke(cli, ["query", sql, "--db", db, "--format", "json"])
    assert json.loads(raw.output)[0]["share"] == 0.3551602115841266  # machine formats stay exact


@pytest.mark.parametrize("value, text", [
    (0.3551602115841266, "0.3552"), (1536.123456, "1536.123"), (2.0, "2"), (-0.000123456, "-0.0001235"),
    (1.5e-07, "1.5e-07"), (0.0, "0"), (float("nan"), "nan"), (12345678901.25, "12345678901.25"),
])
def test_floats_are_rounded_for_people(value, text):
    assert format_float(value) == text


def test_sources_prints_whole_paths(db):
    result = CliRunner().invoke(cli, ["sources", "--db", db])
    paths = [line for line in result.output.splitlines() if "ASCEND_PROFILER_OUTPUT" in line]
    assert len(paths) == 2 and "…" not in result.output
    assert any("20260526_085155_ascend_pt/ASCEND_PROFILER_OUTPUT/operator_memory.csv" in p for p in paths)


def test_json_output_is_valid_json_even_for_nan(db):
    result = CliRunner().invoke(cli, ["query", "select 'nan'::double as x, 'inf'::double as y, 1.5::double as z",
                                      "--db", db, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"x": None, "y": None, "z": 1.5}]
    assert "NaN" not in result.output and "Infinity" not in result.output


def test_a_long_value_is_cut_in_the_table_and_whole_in_csv(db):
    """A 385-character kernel name would make every line of the table 400 wide."""
    sql = "select repeat('k', 385) as kernel, 'short' as other"
    table = CliRunner().invoke(cli, ["query", "--db", str(db), sql])
    assert table.exit_code == 0, table.output
    row = table.output.splitlines()[2]
    assert row.startswith("k" * 99 + "\u2026") and "short" in row and len(row) < 120
    assert "--format csv" in table.output.splitlines()[-1]
    whole = CliRunner().invoke(cli, ["query", "--db", str(db), "--format", "csv", sql])
    assert whole.output.splitlines()[1] == "k" * 385 + ",short"
    short = CliRunner().invoke(cli, ["query", "--db", str(db), "select 'short' as other"])
    assert "cut" not in short.output


def test_ingest_runs_summary_and_forget_count_alike(tmp_path):
    """One definition per count: files are the files read (ignored ones apart), ranks the
    distinct rank ids, rows the rows read from the files; every command says the same."""
    profile = copy_fixture("rl-insight-samples/mstx_data", tmp_path)
    db = str(tmp_path / "w.duckdb")
    ingested = CliRunner().invoke(cli, ["ingest", str(profile), "--db", db])
    assert ingested.exit_code == 0, ingested.output
    files, rows = (int(n.replace(",", "")) for n in
                   re.search(r": (\S+) files, (\S+) rows loaded", ingested.output).groups())
    (run,) = json.loads(CliRunner().invoke(cli, ["runs", "--db", db, "--format", "json"]).output)
    ranks = {r["rank_id"] for r in json.loads(CliRunner().invoke(
        cli, ["query", "--db", db, "--format", "json", "select distinct rank_id from ranks"]).output)}
    assert (run["files"], run["rows"], run["ranks"]) == (files, rows, len(ranks))
    summary = CliRunner().invoke(cli, ["summary", "--db", db]).output
    assert f": {files} files read (" in summary.splitlines()[0]
    forgot = CliRunner().invoke(cli, ["forget", run["run"], "--db", db]).output
    assert f": {rows:,} rows read from its files" in forgot


@pytest.mark.slow  # three rlwh processes: ~1.1 CPU-s
def test_output_cut_short_by_its_reader_ends_quietly(db):
    """`rlwh summary RUN | head -1`: the reader closing the pipe said "Error: a file: Broken
    pipe" and exited 1. Here the pipe is closed before anything is written."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = {}
    for args in (["summary"], ["query", "select * from range(300000)", "--format", "csv"], ["runs"]):
        procs[tuple(args)] = proc = subprocess.Popen([sys.executable, "-m", "rlwh", *args, "--db", db],
                                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        proc.stdout.close()
    for args, proc in procs.items():  # side by side: each is a process start of its own
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 0 and err == "", (args, err)


def test_sources_of_an_unknown_run_is_an_error(db):
    """It printed an empty table and exited 0 (read as "no file failed"); every other
    command says there is no such run."""
    result = CliRunner().invoke(cli, ["sources", "--run", "no-such-run", "--db", db])
    assert result.exit_code == 1 and "no run named 'no-such-run'" in result.output, result.output
    known = CliRunner().invoke(cli, ["sources", "--db", db, "--status", "failed", "--format", "json"])
    assert known.exit_code == 0


def test_runs_counts_the_roles_summary_lists(tmp_path):
    """A run of two roles of two ranks and a training log at its root (a file that names no
    role): `rlwh runs` said 2 roles where summary listed 3 ((none) for the log) and counted
    them from the ranks table, which a log has no row in."""
    import shutil

    from rlwh import synth

    profile = synth.write_ascend_profile(tmp_path / "run", roles=("actor_update", "rollout"), ranks=2, n_ops=40,
                                         n_allocs=10, n_stacks=3)
    shutil.copy(next((FIXTURES / "real" / "verl-logs").rglob("output.log")), profile / "train.log")
    db = str(tmp_path / "w.duckdb")
    assert CliRunner().invoke(cli, ["ingest", str(profile), "--db", db, "-q"]).exit_code == 0
    (run,) = json.loads(CliRunner().invoke(cli, ["runs", "--db", db, "--format", "json"]).output)
    assert (run["roles"], run["ranks"]) == (3, 2)
    summary = CliRunner().invoke(cli, ["summary", "--db", db]).output
    assert "(3 rows)" in summary.split("Roles:")[1].split("\n\n")[0]
