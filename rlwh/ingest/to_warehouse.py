"""The DuckDB-file target of `rlwh ingest`: the formats DuckDB reads are read in place,
batch by batch, by the working copy's own connection (rlwh.ingest.in_place); the others
are parsed in the executors and landed LAND_FILES files per transaction, each whole with
its sources row (rlwh.ingest.load.load_batch); derive after the last; publish once.

With Ray or [ingest] derive_in_workers a worker builds each capture whole, its derived
tables included (rlwh.ingest.build), and the loader only appends it; otherwise the loader
loads each parsed file (rlwh.ingest.load) and derives the keys they touched at the end.
The runner holds the writer lock and made the plan; this module only writes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from rlwh.config import Config
from rlwh.executors.run import fresh_parts_dir, run_tasks, stop_tasks
from rlwh.executors.task import Task
from rlwh.ingest import in_place
from rlwh.ingest.build import BuiltCapture, build_capture, land_capture
from rlwh.ingest.load import ignored_result, load_batch, load_file, set_capture_starts, tables_with_step
from rlwh.ingest.parse import ParseResult, failed_result, parse_source
from rlwh.ingest.plan import FileResult, IngestSummary, Plan, Planned, Progress, file_context, utc
from rlwh.safe_files import pause_for_test
from rlwh.sqltext import one_value
from rlwh.warehouse import derive
from rlwh.warehouse.session import working_copy

# Parsed files landed per transaction: one commit per file was most of a many-rank landing,
# 8 per transaction halved it (DESIGN.md); a failure lands the files one by one.
LAND_FILES = 16


def write(summary: IngestSummary, plan: Plan, config: Config, progress: Progress | None) -> None:
    """Land every changed file of `plan` and publish the warehouse; fills `summary`."""
    run = plan.run
    total_bytes = plan.total_bytes
    done_files = done_bytes = 0
    with working_copy(config) as session:
        con = session.con
        if derive.catch_up(con, session.derived_stale):
            session.changed = True
        todo = []
        for p in plan.files:
            known = plan.known.get(p.source.rel_path)
            if plan.is_unchanged(p):
                if not p.source.ignored:
                    summary.results.append(plan.unchanged_result(p))
                done_files, done_bytes = done_files + 1, done_bytes + p.size
                continue
            p.loaded_before = known is not None
            p.source_id = known[0] if known else one_value(con.execute("select nextval('internal.source_ids')"))
            if p.source.ignored or p.source.problem:
                parsed = ignored_result(p.source.reason) if p.source.ignored else failed_result(p.source.problem)
                result = load_file(con, run, p, parsed)
                (summary.ignored if p.source.ignored else summary.results).append(result)
                done_files, done_bytes = done_files + 1, done_bytes + p.size
                continue
            todo.append(p)
        if progress:
            progress(done_files, len(plan.files), done_bytes, total_bytes, "")
        parts = fresh_parts_dir(config)

        def landed(files: list[Planned]) -> None:
            nonlocal done_files, done_bytes
            done_files, done_bytes = done_files + len(files), done_bytes + sum(p.size for p in files)
            if progress:
                progress(done_files, len(plan.files), done_bytes, total_bytes, files[-1].source.rel_path)

        try:
            builds = _captures_to_build(con, run, todo, config)
            in_builds = {id(p) for files in builds.values() for p in files}
            read_here = [p for p in todo if id(p) not in in_builds and in_place.reads_in_place(p.source.kind)]
            here = {id(p) for p in read_here}
            to_parse = [p for p in todo if id(p) not in in_builds and id(p) not in here]
            tasks = _tasks(run, to_parse, builds, config)
            finished = run_tasks([t for t, _ in tasks.values()], config, parts)  # the workers start now
            try:
                summary.results += in_place.read_and_land(con, run, read_here, config, parts, landed)
            except BaseException:
                stop_tasks(finished)
                raise
            summary.results += _land_finished(con, run, tasks, finished, parts, landed)
        finally:
            shutil.rmtree(parts, ignore_errors=True)
        set_capture_starts(con, run, {p.source.capture for p in todo if p.source.kind.startswith("ascend_")})
        _refresh_derived(con, progress, len(plan.files), total_bytes)
        _record_run(con, run, plan.profile_dir)
        session.changed = True


def _refresh_derived(con, progress: Progress | None, files: int, total_bytes: int) -> None:
    """Recompute the derived memory tables of every key the loaded files touched, one
    transaction per key (memory stays flat whatever the number of ranks). This runs after
    the parse workers have exited: the timeline's window sorts every event of a rank and
    takes ~500 MB, more than fits beside them."""

    def on_key(i: int, n: int) -> None:
        if progress:
            progress(files, files, total_bytes, total_bytes, f"deriving memory tables: rank {i} of {n}")

    derive.refresh(con, on_key, transaction_per_key=True)


def _record_run(con, run: str, profile_dir: Path) -> None:
    con.execute(
        """insert into runs values (?, ?, ?, ?)
           on conflict (run) do update set profile_dir = excluded.profile_dir,
             last_ingested_at = excluded.last_ingested_at""",
        [run, str(profile_dir), utc(), utc()],
    )


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
    with_step = tables_with_step(con)
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
        # The first result lands as it arrives: the working copy holds committed rows from
        # the start (what a kill between files exercises), the rest LAND_FILES at a time.
        if len(pending) >= LAND_FILES or not results:
            land_pending()
    land_pending()
    return results
