"""Publishing an ingest by appending its rows, not by copying the warehouse.

An ingest lands its changed captures in a scratch database of its own (rlwh.ingest.landing:
in memory, spilling to disk), where parsing, landing and deriving take as long as they
take without touching the published file. Publishing then appends the scratch's rows to
the warehouse in one DuckDB transaction, replacing the rows the reloaded files had: its
cost is the new data's, whatever the warehouse already holds (issue 39; docs/growth.md
has the figures of the designs tried).

Where: DuckDB lets one process open a file for writing only when no other process has it
open, even read-only. So:
- nobody holds the published file: it is attached and written in place. A crash at any
  moment leaves it as before or finished (DuckDB's write-ahead log: an append that did
  not commit is rolled back when the file is next opened). For the seconds the append
  and its checkpoint take, a reader that tries to open the file is refused with DuckDB's
  lock error (rlwh's own commands wait for it, rlwh.warehouse.session.connect_read);
- a reader holds it (a BI tool, a duckdb shell, a notebook): it is copied, the copy
  written, and renamed over it as before this module existed, so the reader is never
  blocked and keeps its snapshot; that ingest pays the copy (none where the file system
  clones: clone_or_copy).
A new warehouse is not appended to: rlwh.ingest.to_warehouse writes it straight.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from pathlib import Path

import duckdb

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.safe_files import fsync_path, pause_for_test
from rlwh.sqltext import sql_literal
from rlwh.warehouse import derive
from rlwh.warehouse.schema import adds_derived_tables, is_thin, migrate, tables_with_column
from rlwh.warehouse.session import WRITER_CHECKPOINT, remove_working_files, store_settings, working_path
from rlwh.warehouse.storage import STORAGE_VERSION

SCRATCH = "memory"  # a scratch database's own catalog (an in-memory connection's)
TARGET = "wh"  # the warehouse, as the scratch connection attaches it
# Rows shared by every run, kept once: appended only where the warehouse lacks their key.
SHARED_KEYS = {"call_stacks": "stack_id", "internal.stack_user_frames": "stack_id",
               "internal.stack_texts": "text_md5"}
# The warehouse's own bookkeeping, and the runs row (written by the caller's `finish`).
NOT_APPENDED = ("internal.migrations", "internal.settings", "runs")


def publish(con: duckdb.DuckDBPyConnection, config: Config, reloaded: list[int], finish) -> str:
    """Append every row of the scratch connection `con` to the warehouse (which exists: a
    new one is written straight, rlwh.ingest.to_warehouse), first removing the rows of the
    sources `reloaded` (ids of files loaded again), then run `finish(con)` in the same
    transaction (the runs row). Returns how: 'in place' or 'copied'."""
    path = config.db_path
    try:
        _attach(con, path)
    except duckdb.IOException as exc:
        if "lock" not in str(exc).lower():
            raise RlwhError(f"cannot open {path} as a warehouse ({_first_line(exc)}); "
                            "move it aside or pick another --db") from exc
        return _append_to_copy(con, config, reloaded, finish)
    _append_attached(con, config, reloaded, finish, path)
    pause_for_test("published")
    return "in place"


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0]


def _attach(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    con.execute(f"attach {sql_literal(str(path))} as {TARGET} (storage_version {sql_literal(STORAGE_VERSION)})")


def _append_attached(con, config: Config, reloaded: list[int], finish, shown: Path) -> None:
    """Append into the attached warehouse and checkpoint it; detach it whatever happens.

    A failure up to and in the commit (a full disk) leaves nothing: the transaction is rolled
    back, its write-ahead log (if any: _append's commit checkpoints) removed, and a checkpoint
    that failed leaves the file's header naming the blocks it named before. A failed
    checkpoint after a commit that wrote the log leaves the log, which DuckDB applies when the
    file is next opened."""
    committed = False
    wal = Path(f"{shown}.wal")
    ours = not wal.exists()  # a log left before (an earlier commit not yet applied) is never removed
    try:
        _append(con, config, reloaded, finish)
        committed = True
        con.execute(f"checkpoint {TARGET}")
    except duckdb.Error as exc:  # the disk filled up, the file system failed: say so, keep the warehouse
        if committed:
            raise RlwhError(f"cannot checkpoint {shown} ({_first_line(exc)}); the ingest is in its write-ahead "
                            f"log {shown}.wal, applied when the file is next opened (free some disk first)") from exc
        raise RlwhError(f"cannot write {shown} ({_first_line(exc)}); it is as it was before this ingest") from exc
    finally:
        with contextlib.suppress(duckdb.Error):
            con.execute(f"use {SCRATCH}")
        with contextlib.suppress(duckdb.Error):
            con.execute(f"detach {TARGET}")
        if not committed and ours:
            with contextlib.suppress(FileNotFoundError):
                wal.unlink()


def _append_to_copy(con, config: Config, reloaded: list[int], finish) -> str:
    """The published file is held by a reader: write a copy of it and rename it over."""
    path = config.db_path
    work = working_path(config)
    remove_working_files(work)  # left by a writer that was killed
    try:
        clone_or_copy(path, work)
        _attach(con, work)
        _append_attached(con, config, reloaded, finish, work)
        with open(work, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(work, path)
        pause_for_test("published")
        fsync_path(path.parent)
    except OSError as exc:
        raise RlwhError(f"cannot write {work} beside {path} ({exc.strerror}); {path} is unchanged") from exc
    finally:
        remove_working_files(work)
    return "copied"


FICLONE = 0x40049409  # Linux's ioctl: the destination shares the source's blocks until written


def clone_or_copy(src: Path, dest: Path) -> None:
    """Copy `src` to `dest`: a copy-on-write clone where the file system makes one (btrfs,
    XFS, ZFS, bcachefs: instant, no extra disk until written), else a plain copy."""
    with open(src, "rb") as source, open(dest, "wb") as target:
        try:
            fcntl.ioctl(target.fileno(), FICLONE, source.fileno())
            return
        except OSError:
            pass  # ext4, tmpfs, another file system: copy
    shutil.copyfile(src, dest)


def _append(con, config: Config, reloaded: list[int], finish) -> None:
    """The warehouse's migrations and settings brought up to date, then one transaction:
    the reloaded sources' rows removed, the scratch's rows appended, `finish(con)`."""
    con.execute(f"use {TARGET}")
    if is_thin(con):
        raise RlwhError(f"{config.db_path} is the thin file of a Parquet dataset: it changes only through "
                        "`rlwh ingest` with [warehouse] dataset (or --dataset) naming that dataset")
    # The migrations' commits checkpoint nothing (a migration that rewrites a large table
    # would rewrite it once per commit): the append's commit below checkpoints them all.
    con.execute(f"set checkpoint_threshold = {sql_literal(WRITER_CHECKPOINT)}")
    applied = migrate(con)
    # Caught up only when something asks for it: its user-frame pass reads every stack the
    # warehouse holds, which the new stacks (their frames made in the scratch) do not need.
    if store_settings(con, config) or applied or derive.user_frames_stale(con):
        derive.catch_up(con, adds_derived_tables(applied))
    tables = [f"{schema}.{table}" for schema, table in con.execute(
        "select schema_name, table_name from duckdb_tables() where database_name = ? and not temporary "
        "and schema_name in ('main', 'internal')", [SCRATCH]).fetchall()]
    # The append's commit checkpoints the warehouse itself, and past DuckDB's
    # auto_checkpoint_skip_wal_threshold writes no write-ahead log first: otherwise the new
    # rows went to the log at the commit and into the file again at the checkpoint after it
    # (0.18-0.43 s, into an empty and a 6.3 GB warehouse; _append_attached's checkpoint now
    # finds nothing left). A checkpoint is atomic, as the log is: a kill before it completes
    # leaves the file as it was.
    con.execute("set checkpoint_threshold = '0b'")
    con.execute("begin transaction")
    try:
        if reloaded:
            for table in tables_with_column(con, "source_id", TARGET):
                con.execute(f"delete from {table} where list_contains(?, source_id)", [reloaded])
        for table in tables:
            name = table.removeprefix("main.")
            rows = f"{SCRATCH}.{table}"
            if name in NOT_APPENDED:
                continue
            if name in SHARED_KEYS:
                key = SHARED_KEYS[name]
                con.execute(f"insert into {name} by name select * from {rows} as s anti join {name} as t "
                            f"on s.{key} = t.{key}")
            else:
                con.execute(f"insert into {name} by name select * from {rows}")
        finish(con)
        pause_for_test("publish")
        con.execute("commit")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("rollback")
        raise
