"""Landing changed files into one DuckDB connection: the engine both targets of `rlwh ingest`
share (rlwh.ingest.to_warehouse: a new warehouse's file, or the scratch database an ingest
appends from; rlwh.ingest.to_dataset: a dataset's scratch database).

The formats DuckDB reads, and the expert-count dumps, are read in place, batch by batch, by
the connection itself (rlwh.ingest.in_place); the others are parsed in the executors and
landed LAND_FILES files per transaction, each whole with its sources row
(rlwh.ingest.load.load_batch). With Ray or [ingest] derive_in_workers a worker builds each
capture whole, its derived tables included (rlwh.ingest.build), and the loader only appends
it; otherwise the loader derives the keys the files touched at the end (rlwh.warehouse.derive).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.executors.run import fresh_parts_dir, run_tasks, stop_tasks
from rlwh.executors.task import Task
from rlwh.ingest import in_place
from rlwh.ingest.build import BuiltCapture, build_capture, land_capture
from rlwh.ingest.load import TablesWithStep, ignored_result, load_batch, load_file, set_capture_starts
from rlwh.ingest.parse import ParseResult, failed_result, parse_source
from rlwh.ingest.plan import FileResult, IngestSummary, Plan, Planned, Progress, file_context
from rlwh.readers import ascend_trace
from rlwh.safe_files import pause_for_test, remove_folder
from rlwh.sqltext import has_relation, sql_literal
from rlwh.warehouse import derive, template
from rlwh.warehouse.append import SCRATCH
from rlwh.warehouse.schema import tables_with_column
from rlwh.warehouse.session import configure_writer, stage_path, store_settings

# Parsed files landed per transaction: one commit per file was most of a many-rank landing,
# 8 per transaction halved it (DESIGN.md); a failure lands the files one by one.
LAND_FILES = 16


@dataclass
class Counter:
    """Files and bytes done of an ingest's plan, for its progress line."""

    progress: Progress | None
    total_files: int
    total_bytes: int
    files: int = 0
    bytes: int = 0

    def add(self, files: list[Planned], say: bool = True) -> None:
        self.files += len(files)
        self.bytes += sum(p.size for p in files)
        if say and files:
            self.say(files[-1].source.rel_path)

    def say(self, what: str) -> None:
        if self.progress:
            self.progress(self.files, self.total_files, self.bytes, self.total_bytes, what)


def digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def groups(run: str, planned: list[Planned]) -> dict[str, list[Planned]]:
    """The files by group: one per capture, or per file where no capture names it. A
    group's id is filename-safe: a digest of the run and the capture (or path)."""
    found: dict[str, list[Planned]] = {}
    for p in planned:
        key = f"capture\0{p.source.capture}" if p.source.capture is not None else f"file\0{p.source.rel_path}"
        found.setdefault("g-" + digest(f"{run}\0{key}"), []).append(p)
    return found


@dataclass
class Changed:
    """What an ingest lands: the files to read (`files`) and, in a group with a changed
    file, its unchanged files whose rows the warehouse holds (`kept`); each has its source
    id, and `group_of` names each id's group."""

    files: list[Planned]
    kept: list[Planned]
    group_of: dict[int, str]


def changed_groups(plan: Plan, summary: IngestSummary, done: Counter, read_unchanged: bool) -> Changed:
    """The files of every group with a changed file, each given its source id (its old one,
    or the next free). A capture is the unit: its derived tables need all of its rows, and
    a scratch database (scratch()) holds only what is landed now. read_unchanged: an
    unchanged file of such a group is read again (a dataset, which keeps no rows to copy);
    else it is `kept`, its rows copied from the warehouse (keep_rows). Unchanged files go
    to `summary` as they are."""
    next_id = plan.next_source_id
    changed = Changed([], [], {})
    for gid, files in groups(plan.run, plan.files).items():
        if all(plan.is_unchanged(p) for p in files):
            summary.results += [plan.unchanged_result(p) for p in files if not p.source.ignored]
            done.add(files, say=False)
            continue
        for p in files:
            known = plan.known.get(p.source.rel_path)
            if known:
                p.source_id = known[0]
            else:
                p.source_id, next_id = next_id, next_id + 1
            p.loaded_before = False  # not in the scratch database: the target replaces its old rows
            changed.group_of[p.source_id] = gid
            if plan.is_unchanged(p) and not read_unchanged:
                changed.kept.append(p)
                if not p.source.ignored:
                    summary.results.append(plan.unchanged_result(p))
                done.add([p], say=False)
            else:
                changed.files.append(p)
    return changed


PUBLISHED = "published"  # the warehouse, attached read-only to a scratch database


@contextlib.contextmanager
def scratch_folder(config: Config) -> Iterator[Path]:
    """The folder beside the warehouse that a scratch database spills into (its `spill/`)
    and a dataset stages in; removed afterwards (a killed ingest's, by the next one)."""
    work = stage_path(config)
    try:
        (work / "spill").mkdir(parents=True)
    except OSError as exc:
        raise RlwhError(f"cannot create {work} beside the warehouse ({exc.strerror}): pick another --db, "
                        "or fix the folder's permissions") from exc
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def scratch(config: Config, spill: Path, published: Path | None = None) -> duckdb.DuckDBPyConnection:
    """An empty warehouse in memory (the catalog SCRATCH) that changed groups land in,
    spilling into `spill` past the ingest's memory limit. `published`: the warehouse, attached
    read-only as PUBLISHED (readers keep reading it) for keep_rows and for the stack texts it
    knows (rlwh.readers.ascend_trace.KNOWN_STACK_TEXTS); the caller detaches it to write it."""
    con = duckdb.connect(config={"temp_directory": str(spill)})
    configure_writer(con, config)
    template.schema_into_memory(con)
    store_settings(con, config)
    known = [ascend_trace.known_stack_texts_sql()]
    if published is not None:
        try:
            con.execute(f"attach {sql_literal(str(published))} as {PUBLISHED} (read_only)")
        except duckdb.Error as exc:
            con.close()
            first = str(exc).strip().splitlines()[0]
            raise RlwhError(f"cannot open {published} as a warehouse ({first}); move it aside or pick another "
                            "--db") from exc
        if has_relation(con, f"{PUBLISHED}.internal.stack_texts"):
            known.append(ascend_trace.known_stack_texts_sql(PUBLISHED))
    con.execute(f"create temp view {ascend_trace.KNOWN_STACK_TEXTS} as {' union all '.join(known)}")
    return con


def keep_rows(con: duckdb.DuckDBPyConnection, source_ids: list[int]) -> None:
    """Copy the rows of the sources `source_ids` from the attached warehouse (scratch(...,
    published)) into the scratch database, and mark their keys for derive: the unchanged
    files of a changed capture, whose rows its derived tables need."""
    if not source_ids:
        return
    for table in tables_with_column(con, "source_id", SCRATCH, ("main",)):
        con.execute(f"insert into {table} by name select * from {PUBLISHED}.{table} "
                    "where list_contains(?, source_id)", [source_ids])
    derive.mark_sources(con, source_ids)


def land(con: duckdb.DuckDBPyConnection, run: str, files: list[Planned], config: Config,
         summary: IngestSummary, done: Counter) -> None:
    """Land every file of `files` (each with its source_id and loaded_before set) into
    `con`, then derive the keys they touched; their results go to `summary`."""
    todo = []
    for p in files:
        if p.source.ignored or p.source.problem:
            parsed = ignored_result(p.source.reason) if p.source.ignored else failed_result(p.source.problem)
            result = load_file(con, run, p, parsed)
            (summary.ignored if p.source.ignored else summary.results).append(result)
            done.add([p], say=False)
            continue
        todo.append(p)
    done.say("")
    parts = fresh_parts_dir(config)
    try:
        builds = _captures_to_build(con, run, todo, config)
        in_builds = {id(p) for group in builds.values() for p in group}
        read_here = [p for p in todo if id(p) not in in_builds and in_place.reads_in_place(p.source.kind)]
        here = {id(p) for p in read_here}
        to_parse = [p for p in todo if id(p) not in in_builds and id(p) not in here]
        tasks = _tasks(run, to_parse, builds, config)
        finished = run_tasks([t for t, _ in tasks.values()], config, parts)  # the workers start now
        try:
            summary.results += in_place.read_and_land(con, run, read_here, config, parts, done.add)
        except BaseException:
            stop_tasks(finished)
            raise
        summary.results += _land_finished(con, run, tasks, finished, parts, done.add)
    finally:
        remove_folder(parts)
    set_capture_starts(con, run, {p.source.capture for p in todo if p.source.kind.startswith("ascend_")})
    _refresh_derived(con, done)


def _refresh_derived(con, done: Counter) -> None:
    """Recompute the derived memory tables of every key the loaded files touched, one
    transaction per key (memory stays flat whatever the number of ranks). This runs after
    the parse workers have exited: the timeline's window sorts every event of a rank and
    takes ~500 MB, more than fits beside them."""

    def on_key(i: int, n: int) -> None:
        done.say(f"deriving memory tables: rank {i} of {n}")

    derive.refresh(con, on_key, transaction_per_key=True)


def _captures_to_build(con, run: str, todo: list[Planned], config: Config) -> dict[str, list[Planned]]:
    """The captures a worker builds whole (rlwh.ingest.build), by capture: with Ray, or with
    [ingest] derive_in_workers, every capture whose files are all (re)loaded now. A capture
    that keeps rows of a file not reloaded now is derived in the loader, which sees them all.

    Locally the loader's path is the default: building costs ~1.5x the CPU (a scratch load
    and a Parquet round trip per capture), which 2 busy cores pay in wall time; it pays
    where the serial loader, not the cores, bounds the ingest (many cores, Ray)."""
    if config.executor != "ray" and not config.derive_in_workers:
        return {}
    by_capture: dict[str, list[Planned]] = {}
    for p in todo:
        if p.source.capture is not None:
            by_capture.setdefault(p.source.capture, []).append(p)
    kept = con.execute(
        "select distinct capture from sources where run = ? and rows > 0 and not list_contains(?, path)",
        [run, [p.source.rel_path for p in todo]],
    ).fetchall()
    for (capture,) in kept:
        by_capture.pop(capture, None)
    return by_capture


def _tasks(run: str, parsed: list[Planned], builds: dict[str, list[Planned]],
           config: Config) -> dict[str, tuple[Task, list[Planned]]]:
    """One task per capture to build and per file to parse: name -> (task, files)."""
    tasks = {}
    for i, files in enumerate(builds.values()):
        task = Task(f"capture-{i}", build_capture, (run, files, config), sum(p.size for p in files),
                    tuple(str(p.source.path) for p in files))
        tasks[task.name] = (task, files)
    for i, p in enumerate(parsed):
        task = Task(f"file-{i}", parse_source, (p.source.kind, str(p.source.path), file_context(p, config)), p.size,
                    (str(p.source.path),))
        tasks[task.name] = (task, [p])
    return tasks


def _land_built(con, run: str, files: list[Planned], built: BuiltCapture) -> list[FileResult]:
    """Append a capture a worker built; if the warehouse refuses it, every file of it fails."""
    try:
        land_capture(con, files, built)
        return built.results
    except duckdb.Error as exc:
        if isinstance(exc, (duckdb.IOException, duckdb.FatalException)):
            raise  # the warehouse could not be written (a full disk): no file is to blame
        message = f"loading failed: {exc}"
        return [load_file(con, run, p, failed_result(f"{p.source.rel_path}: {message}")) for p in files]


def _land_finished(con, run: str, tasks: dict[str, tuple[Task, list[Planned]]], finished, parts: Path,
                   landed) -> list[FileResult]:
    """Land the parse and build tasks' results as they arrive (`finished`: run_tasks), LAND_FILES
    parsed files per transaction (rlwh.ingest.load.load_batch); `landed(files)` after each landing."""
    with_step = TablesWithStep(con)
    results: list[FileResult] = []
    pending: list[tuple[Planned, ParseResult]] = []
    pending_tasks: list[str] = []

    def land_pending() -> None:
        if not pending:
            return
        results.extend(load_batch(con, run, pending, with_step))
        pause_for_test("between_files")
        for name in pending_tasks:
            shutil.rmtree(parts / name, ignore_errors=True)
        for p, _ in pending:  # progress names each file, as when files landed one by one
            landed([p])
        pending.clear()
        pending_tasks.clear()

    for task, result in finished:
        files = tasks[task.name][1]
        if task.function is build_capture:
            results.extend(_land_built(con, run, files, result))
            pause_for_test("between_files")
            shutil.rmtree(parts / task.name, ignore_errors=True)
            landed(files)
            continue
        pending.append((files[0], result))
        pending_tasks.append(task.name)
        # The first result lands as it arrives: the database holds committed rows from
        # the start (what a kill between files exercises), the rest LAND_FILES at a time.
        if len(pending) >= LAND_FILES or not results:
            land_pending()
    land_pending()
    return results
