"""Crash safety: `kill -9` an `rlwh ingest` at several points, re-run it, and get exactly
the rows of a clean ingest (no duplicates, no missing files, sources telling the truth),
while the published warehouse stays as it was until the one atomic rename.

The ingest runs as a real subprocess (`python -m rlwh.cli ingest`) in its own session,
and the whole process group is killed, parse workers included, as cron or systemd would.
Exact points come from the runner's test hook: with RLWH_TEST_PAUSE_AT=<stage> the
process stops itself (SIGSTOP) at that stage, the test sees it stop and kills it there.
Stages: between_files (after files landed in the ingest's scratch database), publish (the
rows appended to the warehouse, or to its copy where a reader holds it, not yet committed),
published (committed and checkpointed in place, or the copy renamed over the warehouse),
worker_started (each parse worker, once started).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from conftest import copy_fixture
from pauses import wait_stopped

from rlwh import synth
from rlwh.config import Config
from rlwh.ingest.jobs import FACT_TABLES
from rlwh.ingest.runner import ingest
from rlwh.warehouse.catalog import duckdb_shell_path

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent
RUN = "night"
BIG_TRACE_MB = 100
# Columns that differ between two correct ingests of the same files.
VOLATILE = {"sources": {"source_id", "seconds", "ingested_at"}, "runs": {"first_ingested_at", "last_ingested_at"}}


# --------------------------------------------------------------------------- fixtures


def _config(db: Path) -> Config:
    return Config(db_path=db, workers=1, lock_timeout=5)


@pytest.fixture(scope="module")
def area(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("crash")


@pytest.fixture(scope="module")
def small(area) -> Path:
    """14 small real files: 4 MSTX rank dirs, the memory sample, 3 GMM dumps."""
    root = area / "small"
    root.mkdir()
    for name in ("mstx_data", "memory_data", "gmm_data"):
        copy_fixture(f"rl-insight-samples/{name}", root)
    return root


@pytest.fixture(scope="module")
def base_db(area, small) -> Path:
    """The published warehouse before the ingest that gets killed: one other run in it."""
    db = area / "base" / "warehouse.duckdb"
    assert ingest(small, _config(db), run="base").failed == 0
    return db


def _reference(base_db: Path, profile: Path, dest: Path) -> Path:
    """What a clean, uninterrupted ingest of `profile` on top of base_db gives."""
    db = dest / "warehouse.duckdb"
    dest.mkdir()
    shutil.copy(base_db, db)
    summary = ingest(profile, _config(db), run=RUN)
    assert summary.failed == 0 and summary.count("partial") == 0
    return db


@pytest.fixture(scope="module")
def small_ref(area, base_db, small) -> Path:
    return _reference(base_db, small, area / "small_ref")


@pytest.fixture(scope="module")
def big(area) -> Path:
    """A rank dir with a ~100 MB trace_view.json, beside the four small MSTX rank dirs."""
    root = area / "big"
    synth.write_ascend_rank(root / "actor_update", n_ops=synth.ops_for_trace_mb(BIG_TRACE_MB), n_allocs=2000,
                            n_stacks=200)
    copy_fixture("rl-insight-samples/mstx_data", root)
    return root


@pytest.fixture(scope="module")
def big_ref(area, base_db, big) -> Path:
    return _reference(base_db, big, area / "big_ref")


@pytest.fixture
def db(tmp_path, base_db) -> Path:
    """This test's copy of the published warehouse."""
    path = tmp_path / "wh" / "warehouse.duckdb"
    path.parent.mkdir()
    shutil.copy(base_db, path)
    return path


# --------------------------------------------------------------------------- helpers


def _write_toml(folder: Path, workers: int, lock_timeout: float = 600) -> Path:
    path = folder / f"rlwh-{workers}-{lock_timeout}.toml"
    # pool_min_bytes = 0: these small files still go to the worker pool the tests kill.
    path.write_text(f"[ingest]\nworkers = {workers}\npool_min_bytes = 0\nlock_timeout = {lock_timeout}\n")
    return path


def _start(db: Path, profile: Path, tmp_path: Path, workers: int = 1, lock_timeout: float = 600,
           pause_at: str | None = None, stderr_apart: bool = False,
           notice_every_s: float | None = None) -> subprocess.Popen:
    """`rlwh ingest` in its own session (so the kill reaches its workers) and temp dir;
    notice_every_s: how often it says whom it waits for (rlwh.warehouse.session, 5 s)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env.update(PYTHONPATH=str(REPO), TMPDIR=str(tmpdir),
               RLWH_CONFIG=str(_write_toml(tmp_path, workers, lock_timeout)))
    if pause_at:
        env["RLWH_TEST_PAUSE_AT"] = pause_at
    if notice_every_s is not None:
        env["RLWH_TEST_WAIT_NOTICE_S"] = str(notice_every_s)
    return subprocess.Popen(
        [sys.executable, "-m", "rlwh", "ingest", str(profile), "--db", str(db), "--run", RUN, "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE if stderr_apart else subprocess.STDOUT, text=True,
        env=env, cwd=tmp_path,
        start_new_session=True,
    )


def _kill(proc: subprocess.Popen) -> None:
    """kill -9 the ingest, as a user's `kill -9 PID` does, then every process it started that
    is left. Its pool processes end with it, and multiprocessing's resource tracker, once
    they have, removes the pool's named semaphores (/dev/shm/sem.mp-*): killing the whole
    group at once killed the tracker too, and each run of this file left 5 of them behind."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 5
    while _group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _group_members(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (zombies count as gone)."""
    return [pid for pid, fields in _processes() if int(fields[2]) == pgid and fields[0] != "Z"]




def _rerun(db: Path, profile: Path):
    """The re-run after the crash (in-process: the same code as the CLI, without the start-up)."""
    summary = ingest(profile, _config(db), run=RUN)
    assert summary.failed == 0
    return summary


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _public_tables(con, alias: str) -> list[str]:
    return [r[0] for r in con.execute(
        "select table_name from duckdb_tables() where database_name = ? and schema_name = 'main'"
        " order by 1", [alias]).fetchall()]


def _table_sql(con, alias: str, table: str) -> str:
    """The table's rows as a comparable SELECT: volatile columns out, source_id as its file's path."""
    columns = [r[0] for r in con.execute(
        "select column_name from duckdb_columns() where database_name = ? and schema_name = 'main' and table_name = ?"
        " order by column_index", [alias, table]).fetchall()]
    keep = [f't."{c}"' for c in columns if c not in VOLATILE.get(table, set()) and c != "source_id"]
    if "source_id" in columns and table != "sources":
        keep.append(f"(select s.path from {alias}.sources s where s.source_id = t.source_id) as source_path")
    return f"select {', '.join(keep)} from {alias}.{table} t"


def _differences(got: Path, want: Path) -> dict[str, tuple[int, int]]:
    """Per table: (rows only in got, rows only in want), counting duplicates."""
    con = duckdb.connect()
    try:
        con.execute(f"attach '{got}' as got (read_only)")
        con.execute(f"attach '{want}' as want (read_only)")
        tables = _public_tables(con, "want")
        assert _public_tables(con, "got") == tables
        diffs = {}
        for table in tables:
            a, b = _table_sql(con, "got", table), _table_sql(con, "want", table)
            extra = con.execute(f"select count(*) from ({a} except all {b})").fetchone()[0]
            missing = con.execute(f"select count(*) from ({b} except all {a})").fetchone()[0]
            if extra or missing:
                diffs[table] = (extra, missing)
        return diffs
    finally:
        con.close()


def _assert_like_clean_ingest(db: Path, ref: Path) -> None:
    """Same rows as the clean ingest, every file ok, sources.rows = the rows really there."""
    assert _differences(db, ref) == {}
    con = duckdb.connect(str(db), read_only=True)
    try:
        statuses = con.execute("select status, count(*) from sources where run = ? and status <> 'ignored' group by 1",
                               [RUN]).fetchall()
        assert [s for s, _ in statuses] == ["ok"], statuses
        counted = " + ".join(f"(select count(*) from {t} where source_id = s.source_id)" for t in FACT_TABLES)
        lying = con.execute(f"select path, rows, {counted} from sources s where rows <> {counted}").fetchall()
        assert lying == [], f"sources.rows disagrees with the rows loaded: {lying[:5]}"
        dupes = con.execute("select run, path, count(*) from sources group by all having count(*) > 1").fetchall()
        assert dupes == []
    finally:
        con.close()
    leftovers = sorted(p.name for p in db.parent.iterdir() if p.name not in (db.name, db.name + ".lock"))
    assert leftovers == [], f"files left beside the warehouse: {leftovers}"


# --------------------------------------------------------------------------- tests


def _bytes_read(pid: int) -> int:
    """What process `pid` has read so far (rchar: every read, page cache or disk)."""
    with open(f"/proc/{pid}/io", encoding="ascii") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("rchar:"))


def _has_open(pid: int, path: Path) -> bool:
    with contextlib.suppress(FileNotFoundError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    return True
    return False


def test_kill_during_a_large_trace_parse(db, tmp_path, big, big_ref):
    """kill -9 while the writer reads the 100 MB trace in place (the file is open and a
    quarter of it read since): the published warehouse is untouched, a re-run exact."""
    before = _sha(db)
    trace = max(big.rglob("trace_view.json"), key=lambda p: p.stat().st_size)
    proc = _start(db, big, tmp_path, workers=2)
    deadline = time.monotonic() + 120
    opened_at = None
    while opened_at is None or _bytes_read(proc.pid) < opened_at + trace.stat().st_size // 4:
        assert proc.poll() is None, f"the ingest ended before the trace was read: {proc.stdout.read()[-2000:]}"
        assert time.monotonic() < deadline, "the large trace was never read"
        if opened_at is None and _has_open(proc.pid, trace):
            opened_at = _bytes_read(proc.pid)
        time.sleep(0.002)
    _kill(proc)
    assert _sha(db) == before  # the published warehouse is exactly as it was
    _rerun(db, big)
    _assert_like_clean_ingest(db, big_ref)
    con = duckdb.connect(str(db), read_only=True)
    big_ops = con.execute("select count(*) from cpu_ops where run = ? and role = 'actor_update'", [RUN]).fetchone()[0]
    con.close()
    assert big_ops > 100_000


@pytest.mark.parametrize("stage", ["between_files", "publish"])
def test_kill_before_the_commit_leaves_the_warehouse_as_it_was(db, tmp_path, small, small_ref, base_db, stage):
    """between_files: the files land in the ingest's scratch database, and the warehouse is
    not touched, byte for byte. publish: the rows are appended to the warehouse, in place,
    in a transaction not yet committed: DuckDB rolls it back when the file is next opened."""
    before = _sha(db)
    proc = _start(db, small, tmp_path, pause_at=stage)
    wait_stopped(proc, stage)
    assert not (db.parent / (db.name + ".ingest")).exists()  # no copy of the warehouse: it is written in place
    _kill(proc)
    if stage == "between_files":
        assert _sha(db) == before
    assert _differences(db, base_db) == {}
    con = duckdb.connect(str(db), read_only=True)  # it opens, without the run
    assert con.execute("select count(*) from sources where run = ?", [RUN]).fetchone()[0] == 0
    con.close()
    _rerun(db, small)
    _assert_like_clean_ingest(db, small_ref)


def test_kill_right_after_the_commit_keeps_the_whole_ingest(db, tmp_path, small, small_ref):
    proc = _start(db, small, tmp_path, pause_at="published")
    wait_stopped(proc, "published")
    _kill(proc)
    assert _differences(db, small_ref) == {}  # already the new warehouse, whole
    assert _rerun(db, small).count("unchanged") == 14
    _assert_like_clean_ingest(db, small_ref)


@pytest.mark.parametrize("stage", ["publish", "published"])
def test_a_warehouse_a_reader_holds_is_copied_and_renamed(db, tmp_path, small, small_ref, base_db, stage):
    """A reader holds the published file open (DuckDB then lets no process write it): the
    ingest writes a copy and renames it over. Killed before the rename, the warehouse is as
    it was, byte for byte; after it, whole. The reader is never blocked and keeps its view."""
    before = _sha(db)
    reader = duckdb.connect(str(db), read_only=True)
    try:
        count = reader.execute("select count(*) from sources").fetchone()
        proc = _start(db, small, tmp_path, pause_at=stage)
        wait_stopped(proc, stage)
        assert (db.parent / (db.name + ".ingest")).exists() == (stage == "publish")
        assert reader.execute("select count(*) from sources").fetchone() == count
        _kill(proc)
    finally:
        reader.close()
    if stage == "publish":
        assert _sha(db) == before
        assert _differences(db, base_db) == {}
    else:
        assert _differences(db, small_ref) == {}
    _rerun(db, small)
    _assert_like_clean_ingest(db, small_ref)


def test_a_reader_that_opens_during_the_append_waits_for_it(db, tmp_path, small, small_ref):
    """The seconds an ingest appends in place, DuckDB refuses other processes the file: an
    rlwh command waits for the append (saying so), then sees the whole run."""
    proc = _start(db, small, tmp_path, pause_at="publish")
    wait_stopped(proc, "publish")
    try:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}, "PYTHONPATH": str(REPO)}
        reader = subprocess.Popen(
            [sys.executable, "-m", "rlwh", "query", "--db", str(db), "--format", "csv",
             f"select count(*) as n from sources where run = '{RUN}'"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        time.sleep(1.5)
        assert reader.poll() is None  # waiting for the file
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=120) == 0
        out, err = reader.communicate(timeout=60)
        assert reader.returncode == 0, err
        assert "waiting for the process that is writing it (an rlwh ingest appending" in err
        assert int(out.splitlines()[-1]) > 0  # the run, whole
    finally:
        _kill(proc)
    _assert_like_clean_ingest(db, small_ref)


def test_kills_at_arbitrary_moments_then_a_rerun(db, tmp_path, small, small_ref, base_db):
    """Whatever moment the kill lands on, the warehouse is the old one or the new one, whole."""
    for delay in (0.5, 1.5):
        proc = _start(db, small, tmp_path)
        time.sleep(delay)
        _kill(proc)
        old = _differences(db, base_db) == {}
        assert old or _differences(db, small_ref) == {}, f"half an ingest visible after a kill at {delay} s"
    _rerun(db, small)
    _assert_like_clean_ingest(db, small_ref)


def test_a_second_writer_waits_or_exits_with_a_clear_message(db, tmp_path, small, small_ref):
    first = _start(db, small, tmp_path, pause_at="between_files")
    wait_stopped(first, "between_files")  # holds the writer lock, mid-ingest
    try:
        (tmp_path / "b").mkdir()
        impatient = _start(db, small, tmp_path / "b", lock_timeout=1)
        output = impatient.communicate(timeout=60)[0]
        assert impatient.returncode == 1, output
        assert f"is being written by pid {first.pid}" in output and "Try again" in output
        (tmp_path / "c").mkdir()
        patient = _start(db, small, tmp_path / "c", lock_timeout=600)
        time.sleep(1.0)
        assert patient.poll() is None  # waiting for the lock
        os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=120) == 0, first.stdout.read()
        output = patient.communicate(timeout=120)[0]
        assert patient.returncode == 0, output
        assert "14 unchanged" in output  # it saw the first writer's work, whole
    finally:
        _kill(first)
    _assert_like_clean_ingest(db, small_ref)


def _read_lines_until(stream, count: int, needle: str, timeout: float = 60) -> list[str]:
    """Lines read from `stream` until `count` of them contain `needle` (or the timeout)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while sum(needle in line for line in lines) < count and time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = stream.readline()
        if not line:
            break
        lines.append(line)
    return lines


def test_a_waiting_writer_says_whom_it_waits_for_and_keeps_saying_so(db, tmp_path, small, small_ref):
    first = _start(db, small, tmp_path, pause_at="between_files")
    wait_stopped(first, "between_files")
    try:
        (tmp_path / "b").mkdir()
        # Notices 1.5 s apart, not 5: the second still says "still waiting" (after 1 s or more).
        waiting = _start(db, small, tmp_path / "b", lock_timeout=600, stderr_apart=True, notice_every_s=1.5)
        lines = _read_lines_until(waiting.stderr, 2, f"waiting for pid {first.pid}")
        notices = [line for line in lines if f"waiting for pid {first.pid}" in line]
        assert len(notices) == 2, lines
        assert str(db) in notices[0] and "still waiting" in notices[1]
        assert waiting.poll() is None
        os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=120) == 0
        out, err = waiting.communicate(timeout=120)
        assert waiting.returncode == 0, out + err
        assert "14 unchanged" in out and "Traceback" not in err
    finally:
        _kill(first)
    _assert_like_clean_ingest(db, small_ref)


def _processes() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of /proc/<pid>/stat after its command: state, ppid, pgrp, ...) of
    every process."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            yield int(stat.parent.name), stat.read_text().rsplit(")", 1)[1].split()


def _child_pids(parent: int) -> list[int]:
    """Processes whose parent is `parent`."""
    return [pid for pid, fields in _processes() if int(fields[1]) == parent]


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (R, S, T, Z, ...); None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    return _state(pid) not in (None, "Z", "X")


def _wait_until_gone(workers: list[int]) -> list[int]:
    """The workers still running after up to 30 s (the resource tracker ends once its pipe closes)."""
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in workers if _running(pid)]


def _kill_all(workers: list[int], proc) -> None:
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _kill(proc)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_parse_workers_die_with_a_killed_ingest(db, tmp_path, small):
    """kill -9 of the ingest alone (not its process group, as a user's `kill -9 PID` does):
    its parse workers, idle on their task queue, end too instead of living on."""
    proc = _start(db, small, tmp_path, workers=2, pause_at="between_files")
    wait_stopped(proc, "between_files")  # the pool is up, its workers idle or parsing
    workers = _child_pids(proc.pid)
    try:
        assert len(workers) >= 2, workers
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert _wait_until_gone(workers) == []
    finally:
        _kill_all(workers, proc)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
def test_ctrl_c_stops_at_once_and_leaves_nothing(db, tmp_path, small):
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it, while the parse
    workers are busy (here: stopped at start by the test hook, so they never finish on
    their own): one short message, no worker traceback, no process left, the warehouse
    as it was. Waiting for the workers' files instead would hang here."""
    before = _sha(db)
    proc = _start(db, small, tmp_path, workers=2, pause_at="worker_started")
    deadline = time.monotonic() + 60
    while len([pid for pid in _child_pids(proc.pid) if _state(pid) == "T"]) < 2:
        assert proc.poll() is None, f"the ingest ended before its workers started: {proc.stdout.read()[-2000:]}"
        assert time.monotonic() < deadline, "the parse workers never reached the worker_started hook"
        time.sleep(0.01)
    workers = _child_pids(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGINT)
        output = proc.communicate(timeout=60)[0]
        assert proc.returncode == 130 and "Aborted!" in output, output
        assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
        assert _wait_until_gone(workers) == []
    finally:
        _kill_all(workers, proc)
    assert _sha(db) == before


def _leftovers(db: Path, tmp_path: Path) -> list[str]:
    """What an ingest left beside the warehouse and in its TMPDIR (nothing, when it ended)."""
    beside = [p.name for p in db.parent.iterdir() if p.name not in (db.name, db.name + ".lock")]
    temp = [p.name for p in (tmp_path / "tmp").iterdir()] if (tmp_path / "tmp").exists() else []
    return sorted(beside + temp)


def _one_line_130(proc: subprocess.Popen, output: str | None = None) -> str:
    output = proc.communicate(timeout=60)[0] if output is None else output
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output and "interrupted" in output, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Aborted!"), output[-3000:]
    return output


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("stage", ["start_up", "between_files", "publish"])
def test_ctrl_c_at_a_stage_prints_one_line_and_leaves_nothing(db, tmp_path, small, stage, workers):
    """Ctrl-C while the command starts (before click and duckdb are imported), while the
    ingest is between two files' loads, or just before the working copy replaces the
    warehouse (the process stopped there by the test hook, then continued with SIGINT
    pending): one line, exit 130, the warehouse as it was, nothing beside it."""
    before = _sha(db)
    proc = _start(db, small, tmp_path, workers=workers, pause_at=stage)
    wait_stopped(proc, stage)
    workers_now = _child_pids(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGINT)
        os.killpg(proc.pid, signal.SIGCONT)
        _one_line_130(proc)
        assert _wait_until_gone(workers_now) == []
    finally:
        _kill_all(workers_now, proc)
    assert _sha(db) == before
    assert _leftovers(db, tmp_path) == []


@pytest.fixture(scope="module")
def large_csvs(area) -> Path:
    """Two ranks' ~30 MB operator_memory.csv (one batch on the ingest's second lane, a second
    or more), beside the four small MSTX rank dirs (their traces land on the first)."""
    root = area / "large_csvs"
    synth.write_ascend_profile(root / "critic", roles=("critic",), ranks=2, n_allocs=150_000)
    copy_fixture("rl-insight-samples/mstx_data", root)
    return root


def test_ctrl_c_while_the_second_lane_reads_stops_it_and_exits_130(db, tmp_path, large_csvs):
    """Ctrl-C while the ingest waits for its second lane's CSV batch (stopped by the hook
    where it starts waiting, continued, then SIGINT): the lane's statement is stopped before
    the command exits. In CPython 3.11 a Ctrl-C in Thread.join(timeout) marks a running
    thread as ended, and the ingest then exited under the lane's statement: DuckDB aborted it
    (exit -6) or its cursor was closed under it (-11), after printing "Aborted!"."""
    before = _sha(db)
    proc = _start(db, large_csvs, tmp_path, workers=1, pause_at="waiting_for_the_second_lane")
    wait_stopped(proc, "waiting_for_the_second_lane")
    try:
        os.killpg(proc.pid, signal.SIGCONT)
        time.sleep(0.3)  # into the wait, the lane still in its batch
        os.killpg(proc.pid, signal.SIGINT)
        _one_line_130(proc)
    finally:
        _kill_all(_child_pids(proc.pid), proc)
    assert _sha(db) == before
    assert _leftovers(db, tmp_path) == []


@pytest.fixture(scope="module")
def big_ingest_s(area, base_db, big) -> float:
    """Seconds an uninterrupted in-process ingest of `big` takes on this machine now, so the
    interruptions below land at fractions of it however fast the parse has become."""
    folder = area / "timed"
    (folder / "wh").mkdir(parents=True)
    db = folder / "wh" / "warehouse.duckdb"
    shutil.copy(base_db, db)
    started = time.perf_counter()
    proc = _start(db, big, folder, workers=1)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output
    return time.perf_counter() - started


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.15, 0.25, 0.35, 0.45, 0.55])  # margin for a load that changes
def test_ctrl_c_in_the_middle_of_a_large_parse_or_query(db, base_db, tmp_path, big, big_ingest_s, fraction):
    """Ctrl-C at a time, not a hook: in-process parsing (workers=1) of a 100 MB trace, so it
    lands in Python, in DuckDB's JSON scan or in a load query (at a fraction of what the whole
    ingest takes). Whatever it interrupts, the user sees one line and exit 130, and the
    warehouse is as it was."""
    before = _sha(db)
    wait = max(0.5, fraction * big_ingest_s)  # past the interpreter's start (its imports)
    for _ in range(3):  # a load that dropped since big_ingest_s was measured can finish it first
        proc = _start(db, big, tmp_path, workers=1)
        time.sleep(wait)
        try:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                output = proc.communicate(timeout=60)[0]
                published = _sha(db) != before
                if not (published and proc.returncode == -signal.SIGINT and "Aborted!" not in output):
                    _one_line_130(proc, output)
                    break
                # Published, then killed by SIGINT without a word: the ingest had finished
                # when SIGINT came (in the interpreter's exit), as below. A status -2 with no
                # "Aborted!" was seen once on a loaded machine. An interrupt of the ingest
                # itself never changes the warehouse, so this hides no failure.
        finally:
            _kill_all([], proc)
        proc.communicate(timeout=60)
        shutil.copy(base_db, db)  # it finished: start over from the same warehouse
        wait /= 2
    else:
        pytest.fail(f"the ingest always finished before its interrupt (last at {wait * 2:.2f} s)")
    assert _sha(db) == before
    assert _leftovers(db, tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self/fd").exists(),
                    reason="tells that the shell holds the file from /proc/<pid>/fd, which only Linux has")
def test_a_duckdb_shell_holding_the_warehouse_is_never_blocked(db, tmp_path, small, small_ref):
    """The duckdb shell (`duckdb -readonly`) holds the warehouse open: the ingest neither
    waits nor fails; it writes a copy and renames it over (a new inode), and the shell
    keeps running on the file it opened. Without a holder, the append is in place."""
    shell = subprocess.Popen([str(duckdb_shell_path()), "-readonly", str(db)], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 20
        while not _holds(shell.pid, db) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _holds(shell.pid, db), "the shell did not open the warehouse"
        inode = db.stat().st_ino
        started = time.monotonic()
        summary = ingest(small, _config(db), run=RUN)
        assert summary.failed == 0 and time.monotonic() - started < 60
        assert any("was open in another process" in w for w in summary.warnings)  # the user is told why
        assert db.stat().st_ino != inode  # a copy, renamed over the file the shell holds
        assert shell.poll() is None and _holds(shell.pid, db)
    finally:
        assert shell.stdin is not None
        shell.stdin.close()
        shell.wait(timeout=30)
    _assert_like_clean_ingest(db, small_ref)
    inode = db.stat().st_ino
    assert ingest(small, _config(db), run="another").failed == 0
    assert db.stat().st_ino == inode  # nobody holds it now: appended in place


def _holds(pid: int, path: Path) -> bool:
    """Whether process `pid` or one it started (the shell's Python launcher runs the binary)
    has `path` open: what it opened, even if renamed over since."""
    want = str(path.resolve())
    for proc in [pid, *_child_pids(pid)]:
        try:
            fds = list(Path(f"/proc/{proc}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(fd).removesuffix(" (deleted)") == want:
                    return True
    return False
