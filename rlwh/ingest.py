"""`rlwh ingest`: discover a profile dir's files, parse them in parallel, load each
file in its own transaction, publish the warehouse once at the end.

Unchanged files (same fingerprint as at the last ingest) are skipped, and when every
file is unchanged the warehouse is not even opened for writing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import duckdb

from rlwh import derive
from rlwh.config import Config
from rlwh.discover import SourceFile, discover
from rlwh.errors import RlwhError
from rlwh.executor import Task, local_pool
from rlwh.fingerprint import fingerprint
from rlwh.jobs import FACT_TABLES, SHARED_TABLES, jobs
from rlwh.parse import failed_result, parse_source
from rlwh.sqltext import sql_literal
from rlwh.warehouse import connect_read, pause_for_test, write_session

KEY_COLUMNS = ("run", "role", "rank_id", "capture", "source_id", "step")
KEY_TYPES = {"run": "varchar", "role": "varchar", "rank_id": "integer", "capture": "varchar", "source_id": "bigint",
             "step": "integer"}
# Tables whose captures start at their earliest event: (table, time column).
_EVENT_TIMES = (("cpu_ops", "ts_ns"), ("memory_records", "alloc_ns"), ("ranges", "start_ns"),
                ("memory_usage", "ts_ns"), ("npu_module_memory", "ts_ns"))


@dataclass
class FileResult:
    """What happened to one source file."""

    kind: str
    rel_path: str
    status: str  # ok | partial | failed | ignored | skipped | unchanged
    rows: int = 0
    message: str | None = None
    seconds: float = 0.0
    bytes: int = 0


@dataclass
class IngestSummary:
    run: str
    profile_dir: str
    results: list[FileResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Files rlwh does not load (status ignored in sources, with the reason), apart from
    # `results` so counts and exit statuses are about the files that were read.
    ignored: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.results if r.status in ("ok", "partial"))

    @property
    def failed(self) -> int:
        return self.count("failed")


# progress(files_done, files_total, bytes_done, bytes_total, current file or step)
Progress = Callable[[int, int, int, int, str], None]


@dataclass
class _Planned:
    source: SourceFile
    fingerprint: str
    size: int
    mtime: float
    source_id: int | None = None
    loaded_before: bool = False  # the warehouse holds rows of an earlier version of the file


def utc(seconds: float | None = None) -> datetime:
    """A naive UTC datetime: warehouse times are TIMESTAMP in UTC (no pytz needed to read them)."""
    moment = datetime.now(timezone.utc) if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)
    return moment.replace(tzinfo=None)


def _default_run_name(profile_dir: Path) -> str:
    return profile_dir.resolve().name


def _known_sources(con: duckdb.DuckDBPyConnection, run: str) -> dict[str, tuple[int, str, str]]:
    rows = con.execute("select path, source_id, fingerprint, status from sources where run = ?", [run]).fetchall()
    return {path: (source_id, fp, status) for path, source_id, fp, status in rows}


def _plan(files: list[SourceFile]) -> list[_Planned]:
    """Fingerprint every file; one that cannot be read is planned as a failure."""
    planned = []
    for source in files:
        try:
            fp, size, mtime = fingerprint(source.path)
        except OSError as exc:
            # A failed file, not just a warning: `rlwh sources`, the summary and the exit status show it.
            source.problem = f"cannot read {source.path}: {exc.strerror}"
            planned.append(_Planned(source, f"unreadable:{exc.errno}", 0, 0.0))
            continue
        planned.append(_Planned(source, fp, size, mtime))
    return planned


def _nothing_changed(config: Config, run: str, planned: list[_Planned]) -> bool:
    """True when the published warehouse already holds every file as it is now."""
    if not config.db_path.exists():
        return False
    try:
        con = connect_read(config)
    except RlwhError:
        return False
    try:
        known = _known_sources(con, run)
    finally:
        con.close()
    return all(_is_unchanged(known.get(p.source.rel_path), p) for p in planned)


def _is_unchanged(known: tuple | None, p: _Planned) -> bool:
    """Same fingerprint as last time, and not failed then (a failure is always retried)."""
    return known is not None and known[1] == p.fingerprint and known[2] != "failed"


def _context(p: _Planned, config: Config) -> dict:
    s = p.source
    return {
        "rel_path": s.rel_path,
        "role": s.role,
        "rank_id": s.rank_id,
        "capture": s.capture,
        "step": s.step,
        "capture_started_ns": s.capture_started_ns,
        "single_process_rank0": s.single_process_rank0,
        "memory_limit": config.worker_memory_limit,
    }


def _ignored_result(reason: str) -> dict:
    """What an ignored file 'parses' to: no rows, the reason as its message."""
    return {**failed_result(reason), "status": "ignored"}


def _tables_with_step(con) -> frozenset[str]:
    """Base tables that have a step column (a table added by a later migration may not)."""
    rows = con.execute(
        "select table_name from duckdb_columns() where schema_name = 'main' and column_name = 'step'"
    ).fetchall()
    return frozenset(r[0] for r in rows)


def _staged_select(table: str, parts: list[str], columns: list[str], has_step: bool = True) -> str:
    """SELECT over a reader's Parquet parts, adding the key columns it does not carry
    from the one-row _rlwh_keys table (values bound as parameters, never pasted)."""
    paths = "[" + ", ".join(sql_literal(p) for p in parts) + "]"
    if table in SHARED_TABLES:
        return f"select * from read_parquet({paths})"
    wanted = [k for k in KEY_COLUMNS if k != "step" or has_step or k in columns]
    keys = [f"coalesce(f.{k}, k.{k}) as {k}" if k in columns else f"k.{k}" for k in wanted]
    rest = [f'f."{c}"' for c in columns if c not in KEY_COLUMNS]
    return f"select {', '.join(keys + rest)} from read_parquet({paths}) as f cross join _rlwh_keys as k"


def _upsert_source(con, run: str, p: _Planned, status: str, rows: int, message, seconds: float, rank: dict) -> None:
    s = p.source
    if p.loaded_before:
        con.execute("delete from sources where source_id = ?", [p.source_id])
    con.execute(
        """insert into sources
           (source_id, run, role, rank_id, capture, step, kind, path, bytes, mtime, fingerprint,
            status, rows, message, seconds, ingested_at)
           values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            p.source_id, run, rank.get("role", s.role), rank.get("rank_id", s.rank_id), s.capture, s.step,
            s.kind, s.rel_path, p.size, utc(p.mtime), p.fingerprint, status, rows, message, seconds, utc(),
        ],
    )


def _with_notes(message: str | None, *notes: str | None) -> str | None:
    """The reader's message, then the guesses discovery or the reader made, in one text."""
    parts = [m for m in (message, *notes) if m]
    return "; ".join(parts) if parts else None


def _set_keys(con, run: str, p: _Planned, rank: dict) -> None:
    s = p.source
    values = {
        "run": run,
        "role": rank.get("role", s.role),
        "rank_id": rank.get("rank_id", s.rank_id),
        "capture": s.capture,
        "source_id": p.source_id,
        "step": s.step,
    }
    columns = ", ".join(f"?::{KEY_TYPES[k]} as {k}" for k in values)
    con.execute(f"create or replace temp table _rlwh_keys as select {columns}", list(values.values()))


def _insert_rank(con, run: str, p: _Planned, rank: dict) -> None:
    s = p.source
    con.execute(
        """insert into ranks (run, role, rank_id, capture, step, source_id, capture_started_ns, device,
             world_size, versions, profiler_config, parallel_groups, metadata)
           values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            run, rank.get("role", s.role), rank["rank_id"], s.capture, s.step, p.source_id,
            rank.get("capture_started_ns", s.capture_started_ns), rank.get("device"), rank.get("world_size"),
            *(json.dumps(rank.get(k)) if rank.get(k) is not None else None
              for k in ("versions", "profiler_config", "parallel_groups", "metadata")),
        ],
    )


def _delete_rows_of(con, p: _Planned) -> None:
    """Remove the rows an earlier version of the file loaded (a scan of every fact table,
    so skipped for files seen for the first time)."""
    if p.loaded_before:
        derive.mark_source(con, p.source_id)
        for table in FACT_TABLES:
            con.execute(f"delete from {table} where source_id = ?", [p.source_id])


def _load(con, run: str, p: _Planned, parsed: dict, with_step: frozenset[str] | None = None) -> FileResult:
    """Land one parsed file in one transaction; on any error nothing of it lands.

    with_step: the tables that have a step column (_tables_with_step, once per ingest:
    it costs ~4 ms, which thousands of GMM dumps would pay each)."""
    s = p.source
    rank = dict(parsed.get("rank") or {})
    rank = {k: v for k, v in rank.items() if v is not None}
    reader_note = rank.pop("note", None)
    status, message = parsed["status"], parsed["message"]
    if status in ("ok", "partial"):
        message = _with_notes(message, s.note, reader_note)
    rows = sum(n for t, n in parsed["rows"].items() if t in FACT_TABLES)
    role, rank_id = rank.get("role", s.role), rank.get("rank_id", s.rank_id)
    con.execute("begin transaction")
    try:
        _delete_rows_of(con, p)
        if status in ("failed", "ignored"):
            rows = 0
        else:
            job = jobs()[s.kind]
            with_step = _tables_with_step(con) if with_step is None else with_step
            staged = {t: _staged_select(t, parts, parsed["columns"][t], t in with_step)
                      for t, parts in parsed["tables"].items()}
            if rank_id is None and any(
                "rank_id" not in parsed["columns"][t] for t in parsed["tables"] if t not in SHARED_TABLES
            ):
                raise RlwhError(f"{s.rel_path}: the rank is unknown (neither the file nor its path names it)")
            _set_keys(con, run, p, rank)
            for table in job.fills:
                staged.setdefault(table, f"select * from {table} limit 0")
            for table, sql in staged.items():
                con.execute(f"create or replace temp view _staged_{table} as {sql}")
            if job.has_statements:
                con.execute(job.sql)
                derive.mark_source(con, p.source_id)
            # Readers may name only the role and rank a file belongs to; a ranks row
            # needs facts about the rank beyond that.
            if set(rank) - {"role", "rank_id"} and role is not None and rank_id is not None:
                _insert_rank(con, run, p, {**rank, "role": role, "rank_id": rank_id})
                rows += 1
            facts = [t for t in job.fills if t in FACT_TABLES and t != "ranks"]
            if facts and not any(parsed["rows"].get(t) for t in facts) and parsed["message"] is None:
                loaded = "only its ranks row was loaded" if rows else "nothing was loaded from it"
                message = _with_notes(f"{s.rel_path}: holds none of the rows a {s.kind} file gives "
                                      f"({', '.join(facts)}); {loaded}", message)
        _upsert_source(con, run, p, status, rows, message, parsed["seconds"], rank)
        con.execute("commit")
    except (duckdb.Error, RlwhError) as exc:
        with contextlib.suppress(duckdb.Error):
            con.execute("rollback")  # a commit that failed has rolled back already
        if isinstance(exc, (duckdb.IOException, duckdb.FatalException)):
            raise  # the warehouse could not be written (a full disk): no file is to blame
        status, rows = "failed", 0
        message = str(exc) if isinstance(exc, RlwhError) else f"{s.rel_path}: loading failed: {exc}"
        con.execute("begin transaction")
        _delete_rows_of(con, p)
        _upsert_source(con, run, p, status, 0, message, parsed["seconds"], {})
        con.execute("commit")
    return FileResult(s.kind, s.rel_path, status, rows, message, parsed["seconds"], p.size)


def _refresh_derived(con, progress: Progress | None, files: int, total_bytes: int) -> None:
    """Recompute the derived memory tables of every key the loaded files touched, one
    transaction per key (memory stays flat whatever the number of ranks). This runs after
    the parse workers have exited: the timeline's window sorts every event of a rank and
    takes ~500 MB, more than fits beside them."""

    def on_key(i: int, n: int) -> None:
        if progress:
            progress(files, files, total_bytes, total_bytes, f"deriving memory tables: rank {i} of {n}")

    derive.refresh(con, on_key, transaction_per_key=True)


def _set_capture_starts(con, run: str, captures: set) -> None:
    """An Ascend capture starts at its earliest recorded event (on the epoch clock).

    Its files load in separate transactions and any order, so this runs once all of them
    have: the ranks row from profiler_info holds the profiler's own start until then.
    """
    captures = sorted(c for c in captures if c)
    if not captures:
        return
    tables = con.execute("select table_name from duckdb_tables() where schema_name = 'main'").fetchall()
    present = {r[0] for r in tables}
    epoch_only = {"ranges": "and clock = 'epoch' "}
    firsts = " union all ".join(
        f"select capture, min({column}) as first_ns from {table} where run = $run and capture in "
        f"(select unnest($captures)) {epoch_only.get(table, '')}group by capture"
        for table, column in _EVENT_TIMES if table in present
    )
    con.execute("begin transaction")
    try:
        con.execute(
            f"""update ranks set capture_started_ns = e.first_ns
                from (select capture, min(first_ns) as first_ns from ({firsts}) group by capture) as e
                where ranks.run = $run and ranks.capture = e.capture and e.first_ns is not null""",
            {"run": run, "captures": captures},
        )
        con.execute("commit")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("rollback")
        raise


def _record_run(con, run: str, profile_dir: Path) -> None:
    con.execute(
        """insert into runs values (?, ?, ?, ?)
           on conflict (run) do update set profile_dir = excluded.profile_dir,
             last_ingested_at = excluded.last_ingested_at""",
        [run, str(profile_dir), utc(), utc()],
    )


def _parse_task(i: int, p: _Planned, config: Config) -> Task:
    return Task(f"file-{i}", parse_source, (p.source.kind, str(p.source.path), _context(p, config)), p.size,
                (str(p.source.path),))


def run_tasks(tasks: list[Task], config: Config, parts: Path):
    """Yield (task, result) as tasks finish, on the executor the config names."""
    if config.executor == "ray":
        from rlwh.ray_executor import ray_pool  # imports ray only when asked for

        return ray_pool(tasks, parts, config)
    return local_pool(tasks, parts, config.workers)


def _parse_all(todo: list[_Planned], config: Config, tmp: Path):
    """Yield (planned, parsed) as files finish parsing, largest files started first."""
    tasks = [_parse_task(i, p, config) for i, p in enumerate(todo)]
    planned = {t.name: p for t, p in zip(tasks, todo)}
    for task, parsed in run_tasks(tasks, config, tmp):
        yield planned[task.name], parsed


def ingest(
    profile_dir: str | os.PathLike,
    config: Config,
    run: str | None = None,
    progress: Progress | None = None,
) -> IngestSummary:
    """Load every source file of `profile_dir` into the warehouse as run `run`."""
    started = time.perf_counter()
    root = Path(profile_dir)
    if not root.is_dir():
        raise RlwhError(f"profile dir not found: {root}")
    root = root.resolve()
    run = run if run is not None else _default_run_name(root)
    if not run.strip():
        raise RlwhError("--run must not be empty")
    found = discover(root)
    summary = IngestSummary(run, str(root), warnings=list(found.warnings))
    planned = _plan(found.files)
    if not any(not p.source.ignored for p in planned):
        summary.warnings.append(
            f"no profiler files under {root}: expected *_ascend_pt rank dirs, PyTorch traces, "
            "NVTX .jsonl exports or group_list.pt dumps; nothing was written"
        )
        summary.seconds = time.perf_counter() - started
        return summary
    if _nothing_changed(config, run, planned):
        summary.results = [FileResult(p.source.kind, p.source.rel_path, "unchanged", bytes=p.size)
                           for p in planned if not p.source.ignored]
        summary.seconds = time.perf_counter() - started
        return summary
    total_bytes = sum(p.size for p in planned)
    done_files = done_bytes = 0
    with write_session(config) as session:
        con = session.con
        known = _known_sources(con, run)
        todo = []
        for p in planned:
            source_id = known[p.source.rel_path][0] if p.source.rel_path in known else None
            if _is_unchanged(known.get(p.source.rel_path), p):
                if not p.source.ignored:
                    summary.results.append(FileResult(p.source.kind, p.source.rel_path, "unchanged", bytes=p.size))
                done_files, done_bytes = done_files + 1, done_bytes + p.size
                continue
            p.loaded_before = source_id is not None
            p.source_id = source_id or con.execute("select nextval('_source_ids')").fetchone()[0]
            if p.source.ignored:
                summary.ignored.append(_load(con, run, p, _ignored_result(p.source.reason)))
                done_files, done_bytes = done_files + 1, done_bytes + p.size
                continue
            if p.source.problem:
                summary.results.append(_load(con, run, p, failed_result(p.source.problem)))
                done_files, done_bytes = done_files + 1, done_bytes + p.size
                continue
            todo.append(p)
        if progress:
            progress(done_files, len(planned), done_bytes, total_bytes, "")
        # Parsed parts live beside the warehouse (same disk, usually roomier than /tmp);
        # a killed ingest's leftovers are removed here, under the writer lock.
        with_step = _tables_with_step(con)
        tmp = config.db_path.with_name(config.db_path.name + ".parts")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            for p, parsed in _parse_all(todo, config, tmp):
                summary.results.append(_load(con, run, p, parsed, with_step))
                pause_for_test("between_files")
                for parts in parsed["tables"].values():
                    for part in parts:
                        Path(part).unlink(missing_ok=True)
                done_files, done_bytes = done_files + 1, done_bytes + p.size
                if progress:
                    progress(done_files, len(planned), done_bytes, total_bytes, p.source.rel_path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _set_capture_starts(con, run, {p.source.capture for p in todo if p.source.kind.startswith("ascend_")})
        _refresh_derived(con, progress, len(planned), total_bytes)
        _record_run(con, run, root)
        session.changed = True
    summary.results.sort(key=lambda r: r.rel_path)
    summary.seconds = time.perf_counter() - started
    return summary
