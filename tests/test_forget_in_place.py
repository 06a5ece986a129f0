"""`rlwh forget` deletes in place where no other process holds the warehouse (no copy of
it, issue 39), through a copy where a reader holds it (that reader keeps its snapshot), and
a kill -9 at the commit leaves the run whole or gone. The forget runs as a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from pauses import wait_stopped

from rlwh import synth
from rlwh.config import Config
from rlwh.ingest.runner import ingest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """A warehouse holding runs a and b of the same small profile."""
    root = tmp_path_factory.mktemp("forget")
    profile = synth.write_ascend_profile(root / "profile", roles=("actor_update",), ranks=2, n_ops=300,
                                         n_allocs=200)
    db = root / "two_runs.duckdb"
    for run in ("a", "b"):
        ingest(profile, Config(db_path=db, workers=1), run=run)
    return db


@pytest.fixture
def db(two_runs, tmp_path) -> Path:
    copy = tmp_path / "w.duckdb"
    copy.write_bytes(two_runs.read_bytes())
    return copy


def _counts(db: Path) -> dict[str, dict[str, int]]:
    """Rows per run in every base table with a run column (read here, not with rlwh's list)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [f"{s}.{t}" for s, t in con.execute(
            "select distinct c.schema_name, c.table_name from duckdb_columns() c join duckdb_tables() t "
            "using (database_name, schema_name, table_name) where c.column_name = 'run'").fetchall()]
        return {t: dict(con.execute(f"select run, count(*) from {t} group by run").fetchall()) for t in tables}
    finally:
        con.close()


@pytest.fixture(scope="module")
def before(two_runs) -> dict[str, dict[str, int]]:
    """_counts of two_runs, counted once: each test's db is a copy of it byte for byte (an open
    of the file per test cost ~25 ms)."""
    return _counts(two_runs)


def _forget(db: Path, run: str, pause_at: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if pause_at:
        env["RLWH_TEST_PAUSE_AT"] = pause_at
    return subprocess.Popen([sys.executable, "-m", "rlwh", "forget", run, "--db", str(db)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _without(counts: dict, run: str) -> dict:
    return {t: {r: n for r, n in by_run.items() if r != run} for t, by_run in counts.items()}


def test_forget_deletes_in_place_when_nobody_holds_the_file(db, before):
    assert all(by_run.get("a") for t, by_run in before.items() if t in ("main.cpu_ops", "main.memory_records"))
    inode = db.stat().st_ino
    proc = _forget(db, "a")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert db.stat().st_ino == inode  # written where it is, not copied and renamed
    assert _counts(db) == _without(before, "a")
    assert sorted(p.name for p in db.parent.iterdir()) == ["w.duckdb", "w.duckdb.lock"]  # no copy, no log


def test_forget_while_a_reader_holds_the_file_copies_and_the_reader_keeps_its_view(db, before):
    inode = db.stat().st_ino
    reader = duckdb.connect(str(db), read_only=True)
    try:
        held = reader.execute("select count(*) from cpu_ops where run = 'a'").fetchone()
        proc = _forget(db, "a")
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        assert reader.execute("select count(*) from cpu_ops where run = 'a'").fetchone() == held
    finally:
        reader.close()
    assert db.stat().st_ino != inode
    assert _counts(db) == _without(before, "a")




@pytest.mark.parametrize("stage, gone", [("forget", False), ("forgotten", True)])
def test_a_forget_killed_at_its_commit_leaves_the_run_whole_or_gone(db, before, stage, gone):
    proc = _forget(db, "a", pause_at=stage)
    wait_stopped(proc, stage, timeout=120)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert _counts(db) == (_without(before, "a") if gone else before)


# A notebook that opened the warehouse read-write, committed a table of its own and holds the
# file until the test writes a line to it (release()); then it closes (checkpoints) or dies
# with its commit in the log. Released on a signal, not after a sleep: no wait is longer
# than the test needs, however busy the machine.
_HOLDER = """
import duckdb, os, sys
con = duckdb.connect(sys.argv[1])
con.execute("create table my_notes as select 42 as x")
print("committed", flush=True)
sys.stdin.readline()
if sys.argv[2] == "die":
    os._exit(0)  # no checkpoint: the commit stays in w.duckdb.wal, as after a kill -9
con.close()
"""


def _hold(db: Path, end: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(db), end],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "committed"
    return holder


def _release(holder: subprocess.Popen) -> None:
    holder.stdin.write("go\n")
    holder.stdin.close()
    holder.wait(timeout=30)


def _forget_waiting(db: Path, run: str, timeout_s: float) -> subprocess.Popen:
    """A forget that waits up to `timeout_s` for the file, saying so every 0.2 s."""
    config = db.parent / "warehouse.toml"
    config.write_text(f"[ingest]\nlock_timeout = {timeout_s}\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "RLWH_CONFIG": str(config), "RLWH_TEST_WAIT_NOTICE_S": "0.2"}
    return subprocess.Popen([sys.executable, "-m", "rlwh", "forget", run, "--db", str(db)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("end", ["close", "die"])
def test_forget_waits_for_a_process_that_holds_the_file_for_writing(db, before, end):
    """Its commits survive: the forget waits until it is gone, and takes the commits it left
    in the write-ahead log (a copy renamed over the file lost them, and the log left beside
    the new file kept DuckDB from opening it)."""
    holder = _hold(db, end)
    proc = _forget_waiting(db, "a", 60)
    said = []
    for line in proc.stdout:  # released once the forget says it waits for the holder
        said.append(line)
        if "waiting for the process that is writing it" in line:
            break
    _release(holder)
    out, _ = proc.communicate(timeout=120)
    out = "".join(said) + out
    assert proc.returncode == 0, out
    assert "waiting for the process that is writing it" in out
    assert _counts(db) == _without(before, "a")
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("select x from my_notes").fetchall() == [(42,)]
    finally:
        con.close()


def test_forget_gives_up_on_a_writer_that_stays_and_changes_nothing(db, before):
    holder = _hold(db, "close")
    try:
        proc = _forget_waiting(db, "a", 0.3)
        out, _ = proc.communicate(timeout=60)
    finally:
        _release(holder)
    assert proc.returncode == 1
    said = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(said) == 1 and "another process holds it open for writing" in said[0], out
    assert "lock_timeout" in said[0] and "Traceback" not in out
    assert _counts(db) == before
