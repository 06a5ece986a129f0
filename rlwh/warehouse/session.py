"""Opening the warehouse: read-only for queries, a published working copy for writes.

A DuckDB file that another process holds open (a BI tool, a duckdb shell, even
read-only) cannot be opened for writing. So writers never write the published file:
they copy it to a working file beside it, write there, checkpoint, and atomically
rename the working file over the published one. Open readers keep the old file (their
consistent view) until they reconnect; a crash leaves the published file as it was.
A lock file serialises writers.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Iterator

import duckdb

from rlwh.config import Config
from rlwh.errors import RlwhError, WarehouseBusy
from rlwh.safe_files import fsync_path, pause_for_test
from rlwh.sqltext import no_suggestions, rows_as_lists_sql, sql_literal, suggestions_back
from rlwh.warehouse import template
from rlwh.warehouse.schema import (
    SETTINGS_COLUMNS,
    VIEWS_DIGEST,
    adds_derived_tables,
    is_current,
    is_thin,
    migrate,
    thin_generation,
)
from rlwh.warehouse.storage import connect_writable

WRITER_CHECKPOINT = "1GB"


def configure(con: duckdb.DuckDBPyConnection, config: Config, memory_limit: str | None = None) -> None:
    con.execute("set enable_progress_bar = false")  # it would print into our output
    con.execute(f"set threads = {int(config.threads)}")
    con.execute("set memory_limit = ?", [memory_limit or config.memory_limit])


def configure_writer(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    """configure() for a connection that writes (a working copy, the file in place, a
    scratch database): the ingest's memory limit, and "did you mean" names from a missing
    name's own schema only, for its lookups (no_suggestions)."""
    configure(con, config, config.ingest_memory_limit)
    no_suggestions(con)


def missing_warehouse(path: Path) -> RlwhError:
    """The error for a warehouse that is not there: most often the wrong one was picked."""
    return RlwhError(
        f"no warehouse at {path}: pick one with --db PATH or RLWH_DB (after `make demo`: "
        "export RLWH_DB=demo/warehouse.duckdb), or create it with `rlwh ingest PROFILE_DIR`")


def _open_read_only(path: Path, timeout: float) -> duckdb.DuckDBPyConnection:
    """A read-only connection; while an ingest appends to the file in place (seconds:
    rlwh.warehouse.append) DuckDB refuses every other process, so wait for it, up to
    `timeout` ([ingest] lock_timeout), saying so once."""
    started = time.monotonic()
    said = False
    while True:
        try:
            return duckdb.connect(str(path), read_only=True)
        except duckdb.IOException as exc:
            waited = time.monotonic() - started
            if "lock" not in str(exc).lower():
                raise RlwhError(f"cannot open {path}: {exc}") from exc
            if waited >= timeout:
                first = str(exc).strip().splitlines()[0]
                raise RlwhError(f"cannot open {path}: another process holds it open for writing ({first}); waited "
                                f"{waited:.0f} s ([ingest] lock_timeout): close it there, then try again") from exc
            if not said:
                print(f"{path}: waiting for the process that is writing it (an rlwh ingest appending, or a "
                      "program that holds it open for writing)", file=sys.stderr, flush=True)
                said = True
            time.sleep(0.2)
        except duckdb.Error as exc:
            raise RlwhError(f"cannot open {path}: {exc}") from exc


def connect_read(config: Config, require_current: bool = True) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the published warehouse; it never blocks a writer.

    require_current=False: also a warehouse that still needs migrating (the ingest plan
    reads only `sources` and `runs`, which every version has)."""
    path = config.db_path
    if not path.exists():
        raise missing_warehouse(path)
    con = _open_read_only(path, config.lock_timeout)
    configure(con, config)
    no_suggestions(con)  # for the lookups below; a user's query on it gets every schema's names back
    if require_current and not is_current(con):
        con.close()
        raise RlwhError(f"{path} was written by an older rlwh: run `rlwh init` to upgrade it")
    if require_current and (gone := _generation_gone(con)):
        con.close()
        raise RlwhError(f"{path} is the thin file of the dataset {gone[0]}, and its generation {gone[1]} is gone "
                        "(the dataset was deleted or moved, or another thin file's ingests pruned it): "
                        f"run `rlwh ingest <profile-dir> --dataset {gone[0]} --db {path}` to build it again")
    suggestions_back(con)
    return con


def _generation_gone(con: duckdb.DuckDBPyConnection) -> tuple[str, str] | None:
    """A thin file's (dataset root, generation) where that generation's folder is gone."""
    built = thin_generation(con)
    return built if built is not None and not (Path(built[0]) / built[1]).is_dir() else None


# Tests shorten it (RLWH_TEST_WAIT_NOTICE_S) so as not to wait out two notices.
WAIT_NOTICE_EVERY_S = float(os.environ.get("RLWH_TEST_WAIT_NOTICE_S") or 5.0)


def _say_waiting(db_path: Path, holder: str, waited: float, timeout: float) -> None:
    """Tell the user (stderr: stdout may be a pipe into a script) who holds the lock."""
    still = "still " if waited >= 1 else ""
    print(f"{db_path}: {still}waiting for {holder}, which is writing it "
          f"({waited:.0f} of at most {timeout:.0f} s, [ingest] lock_timeout)", file=sys.stderr, flush=True)


def _open_lock_file(lock_path: Path):
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        return open(lock_path, "a+")
    except OSError as exc:
        raise RlwhError(
            f"cannot create the writer lock {lock_path}: {exc.strerror}; writers need a folder they can write "
            "beside the warehouse: pick another --db (or RLWH_DB), or fix the folder's permissions"
        ) from exc


@contextlib.contextmanager
def writer_lock(config: Config) -> Iterator[None]:
    """Hold the warehouse's writer lock; wait up to lock_timeout for another writer,
    saying at once and every few seconds which pid it waits for."""
    with hold_lock(config.db_path.with_name(config.db_path.name + ".lock"), config.db_path, config.lock_timeout):
        yield


@contextlib.contextmanager
def hold_lock(lock_path: Path, target: Path, timeout: float) -> Iterator[None]:
    """Hold the lock file `lock_path` of `target` (what the holder writes); wait up to
    `timeout` seconds for its holder, saying at once and every few seconds which pid."""
    with _open_lock_file(lock_path) as handle:
        started = time.monotonic()
        next_notice = started
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                handle.seek(0)
                holder = handle.read().strip() or "another process"
                waited = time.monotonic() - started
                if waited >= timeout:
                    raise WarehouseBusy(
                        f"{target} is being written by {holder}; waited {timeout:.0f} s. "
                        "Try again when it finishes (or raise [ingest] lock_timeout)."
                    ) from None
                if time.monotonic() >= next_notice:
                    _say_waiting(target, holder, waited, timeout)
                    next_notice = time.monotonic() + WAIT_NOTICE_EVERY_S
                time.sleep(0.2)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


def working_path(config: Config) -> Path:
    return config.db_path.with_name(config.db_path.name + ".ingest")


def remove_working_files(work: Path) -> None:
    for path in (work, work.with_name(work.name + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def stage_path(config: Config) -> Path:
    """The folder beside the warehouse where an ingest's scratch database spills and a
    dataset's groups are staged (rlwh.ingest.to_warehouse, rlwh.ingest.to_dataset)."""
    return config.db_path.with_name(config.db_path.name + ".stage")


def remove_leftovers(config: Config) -> None:
    """Remove what a killed writer left beside the warehouse (the caller holds the writer lock)."""
    shutil.rmtree(stage_path(config), ignore_errors=True)
    remove_working_files(working_path(config))


class WriteSession:
    """A write connection on the working copy; `publish()` makes it the warehouse."""

    def __init__(self, config: Config, con: duckdb.DuckDBPyConnection, work: Path):
        self.config = config
        self.con = con
        self.work = work
        self.changed = False
        self.applied: list[str] = []
        self.derived_stale = False  # a migration added derived tables: the caller fills them

    def publish(self) -> None:
        """Checkpoint the working copy and rename it over the published file."""
        self.con.execute("checkpoint")
        self.con.close()
        with open(self.work, "rb+") as handle:
            os.fsync(handle.fileno())
        pause_for_test("publish")
        os.replace(self.work, self.config.db_path)
        pause_for_test("published")
        # The replaced file's log, its commits now in the copy: left beside the new file,
        # DuckDB would refuse to open it (the log's checkpoint iteration is another file's).
        with contextlib.suppress(FileNotFoundError):
            self.config.db_path.with_name(self.config.db_path.name + ".wal").unlink()
        fsync_path(self.config.db_path.parent)


def store_settings(con: duckdb.DuckDBPyConnection, config: Config) -> bool:
    """Copy the settings views read into internal.settings; True when one changed. The
    installed views' digest (schema.VIEWS_DIGEST) shares the table and stays."""
    wanted = config.view_settings()
    current = dict(con.execute("select name, value from internal.settings where name <> ?", [VIEWS_DIGEST]).fetchall())
    if current == wanted:
        return False
    con.execute("delete from internal.settings where name <> ?", [VIEWS_DIGEST])
    con.execute(f"insert into internal.settings select {rows_as_lists_sql(SETTINGS_COLUMNS)}",
                [list(wanted), list(wanted.values())])  # executemany: ~6 ms a row
    return True


def _refuse_thin_file(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    """A dataset's thin file (rlwh.parquet.dataset) holds views, not tables: only a dataset-mode
    ingest rewrites it."""
    if is_thin(con):
        raise RlwhError(f"{config.db_path} is the thin file of a Parquet dataset: it changes only through "
                        "`rlwh ingest` with [warehouse] dataset (or --dataset) naming that dataset")


def _open_working_copy(work: Path, from_template: bool) -> duckdb.DuckDBPyConnection:
    """A write connection to `work`; a template copy that will not open (a damaged cache
    file) is replaced by an empty file, which migrate() then makes whole."""
    try:
        return connect_writable(work)
    except duckdb.Error:
        if not from_template:
            raise
    remove_working_files(work)
    return connect_writable(work)


@contextlib.contextmanager
def working_copy(config: Config) -> Iterator[WriteSession]:
    """Copy the published file and migrate the copy; publish it if `changed` is set. The
    caller holds the writer lock (write_session, or the ingest runner for its whole plan).

    Nothing is published when the block raises or changes nothing, so a failure or a
    kill at any point leaves the published warehouse exactly as it was. Derived tables
    are the caller's business: `derived_stale` says a migration added some.
    """
    try:
        config.db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RlwhError(f"cannot create the warehouse folder {config.db_path.parent}: {exc.strerror}") from exc
    work = working_path(config)
    remove_working_files(work)  # left by a writer that was killed
    from_template = False
    # A read-only connection on the published file from the copy to the rename: it waits
    # out a process holding the file open for writing (its commits would be lost under
    # the rename), and no such process can open it until the copy is published.
    guard = _open_read_only(config.db_path, config.lock_timeout) if config.db_path.exists() else None
    if guard is not None:
        try:
            shutil.copyfile(config.db_path, work)
            _copy_wal(config.db_path, work)
        except OSError as exc:
            remove_working_files(work)
            guard.close()
            raise RlwhError(f"cannot copy {config.db_path} to {work}: {exc}") from exc
        except BaseException:  # Ctrl-C during the copy: no half copy left beside the warehouse
            remove_working_files(work)
            guard.close()
            raise
    else:  # a new warehouse: the schema's template, else migrate() makes it below
        try:
            from_template = template.copy_schema(work)
        except BaseException:  # Ctrl-C during the copy, as above
            remove_working_files(work)
            raise
    try:
        con = _open_working_copy(work, from_template)
    except BaseException as exc:
        remove_working_files(work)
        if guard is not None:
            guard.close()
        if not isinstance(exc, duckdb.Error):
            raise
        first = str(exc).strip().splitlines()[0]
        if config.db_path.exists():  # the copy is the published file's: that file is the problem
            raise RlwhError(
                f"cannot open {config.db_path} as a warehouse ({first.replace(str(work), str(config.db_path))}); "
                "move it aside or pick another --db"
            ) from exc
        raise RlwhError(f"cannot open {work} for writing: {first}") from exc
    session = WriteSession(config, con, work)
    try:
        configure_writer(con, config)
        _refuse_thin_file(con, config)
        # The working copy is private until published, and publishing checkpoints it:
        # a checkpoint at every commit (DuckDB's 16 MB WAL default) cost each landed
        # capture ~0.7 s of its ~1.2 s, growing with the file.
        con.execute(f"set checkpoint_threshold = {sql_literal(WRITER_CHECKPOINT)}")
        session.applied = migrate(con)
        if from_template:
            session.applied = template.stamp_copy(con)
        session.derived_stale = adds_derived_tables(session.applied)
        if store_settings(con, config) or session.applied or not config.db_path.exists():
            session.changed = True
        yield session
        if session.changed:
            session.publish()
    except duckdb.Error as exc:  # the disk filled up, the file system failed: say so, keep the warehouse
        first = str(exc).strip().splitlines()[0]
        raise RlwhError(f"cannot write the working copy {work} ({first}); {config.db_path} is unchanged") from exc
    finally:
        with contextlib.suppress(duckdb.Error):
            con.close()
        remove_working_files(work)
        if guard is not None:
            guard.close()


def _copy_wal(published: Path, work: Path) -> None:
    """The published file's write-ahead log beside its copy: commits a writer that died
    left there, which the copy would otherwise lose (publishing removes the old log)."""
    wal = published.with_name(published.name + ".wal")
    if wal.exists():
        shutil.copyfile(wal, work.with_name(work.name + ".wal"))


class InPlaceSession(WriteSession):
    """A write connection on the published file itself (in_place)."""

    def publish(self) -> None:
        """Checkpoint: the change is already in the published file, committed."""
        self.con.execute("checkpoint")


def _open_in_place(config: Config) -> duckdb.DuckDBPyConnection | None:
    """The published warehouse opened for writing, or None where that cannot be done in
    place: no file yet, or another process holds it (a reader: DuckDB's lock)."""
    if not config.db_path.is_file():
        return None
    try:
        return connect_writable(config.db_path)
    except duckdb.Error:  # held by a reader, or no warehouse: the working copy says which
        return None


@contextlib.contextmanager
def in_place(config: Config, con: duckdb.DuckDBPyConnection) -> Iterator[WriteSession]:
    """The published file, written in place through `con`: for a change DuckDB commits in
    one transaction (a forget), so that a kill leaves it as before or done (its
    write-ahead log) and the change costs what it changes, not a copy of the warehouse.
    Pending migrations are applied first, each in its own transaction, as on a copy."""
    session = InPlaceSession(config, con, config.db_path)
    try:
        configure_writer(con, config)
        _refuse_thin_file(con, config)
        session.applied = migrate(con)
        session.derived_stale = adds_derived_tables(session.applied)
        if store_settings(con, config) or session.applied:
            session.changed = True
        yield session
        if session.changed:
            session.publish()
    except duckdb.Error as exc:  # the disk filled up: the uncommitted change is rolled back
        first = str(exc).strip().splitlines()[0]
        raise RlwhError(f"cannot write {config.db_path} ({first}); what was not committed is rolled back") from exc
    finally:
        with contextlib.suppress(duckdb.Error):
            con.close()


@contextlib.contextmanager
def write_session(config: Config, in_place_when_free: bool = False) -> Iterator[WriteSession]:
    """Lock, then a working copy (working_copy) that is published if `changed` is set; or,
    with in_place_when_free and no other process holding the file, the file itself (in_place)."""
    with writer_lock(config):
        con = _open_in_place(config) if in_place_when_free else None
        with (in_place(config, con) if con is not None else working_copy(config)) as session:
            yield session
