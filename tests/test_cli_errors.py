"""Errors a user can cause are one line naming the thing and what to do, never a traceback.

Permission cases run `rlwh` as a real process that has dropped the capabilities that let
root ignore file modes (tests often run as root in containers), so the folder's mode is
what decides, as for any user.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from conftest import copy_fixture

from rlwh.cli import cli

REPO = Path(__file__).resolve().parent.parent


def _as_a_plain_user():
    """preexec_fn: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH when running as root."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _rlwh(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")} | {"PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "rlwh.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, preexec_fn=_as_a_plain_user, timeout=120)


def test_db_in_a_folder_that_cannot_be_written_is_one_line(tmp_path):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        for args in (["init"], ["ingest", str(profile)]):
            done = _rlwh(*args, "--db", str(locked / "w.duckdb"), cwd=tmp_path)
            assert done.returncode == 1, done.stdout + done.stderr
            assert "Traceback" not in done.stderr
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and str(locked / "w.duckdb.lock") in lines[0], done.stderr
            assert "Permission denied" in lines[0] and "--db" in lines[0]
    finally:
        locked.chmod(0o755)


def test_db_below_a_file_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("x")
    result = CliRunner().invoke(cli, ["init", "--db", str(tmp_path / "afile" / "w.duckdb")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert len(result.output.strip().splitlines()) == 1 and "afile" in result.output


def test_an_unreadable_sql_file_is_one_line(tmp_path):
    CliRunner().invoke(cli, ["init", "--db", str(tmp_path / "w.duckdb")])
    script = tmp_path / "q.sql"
    script.write_bytes(b"select '\xff'")
    result = CliRunner().invoke(cli, ["query", "--file", str(script), "--db", str(tmp_path / "w.duckdb")])
    assert result.exit_code == 1 and "q.sql is not UTF-8 text (byte 8)" in result.output


def test_a_file_that_is_not_a_warehouse_is_named(tmp_path):
    bogus = tmp_path / "notes.duckdb"
    bogus.write_text("not a database")
    for args in (["init"], ["query", "select 1"], ["runs"]):
        result = CliRunner().invoke(cli, [*args, "--db", str(bogus)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and f"cannot open {bogus}" in lines[0] and ".ingest" not in lines[0], result.output
    assert bogus.read_text() == "not a database"  # and it is left alone


def test_a_db_that_is_no_duckdb_file_is_one_line(tmp_path):
    """ingest attached it read-only for the plan's stack texts and raised a traceback."""
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    empty = tmp_path / "empty.duckdb"
    empty.write_bytes(b"")
    done = _rlwh("ingest", str(profile), "--db", str(empty), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot open {empty} as a warehouse" in lines[0], lines
    assert empty.read_bytes() == b""


def test_a_memory_limit_duckdb_cannot_read_is_one_line_naming_the_setting(tmp_path):
    """It failed once a connection applied it, with a parser traceback (and after writing)."""
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    for section, key in (("warehouse", "memory_limit"), ("ingest", "memory_limit"), ("ingest", "worker_memory_limit")):
        config = tmp_path / "warehouse.toml"
        config.write_text(f'[{section}]\n{key} = "lots"\n', encoding="utf-8")
        done = _rlwh("ingest", str(profile), "--db", str(tmp_path / "w.duckdb"), cwd=tmp_path)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"[{section}] {key} = 'lots' is not a valid memory size" in lines[0], lines
        assert not (tmp_path / "w.duckdb").exists()
