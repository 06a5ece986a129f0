"""`rlwh ingest`: discover a profile dir's files, parse them in parallel, load each
file in its own transaction, publish the warehouse once at the end.

Where parsing runs is the executor's business (rlwh.executors.run: this machine's pool, or a
Ray cluster). With Ray or [ingest] derive_in_workers a worker builds each capture whole,
its derived tables included (rlwh.ingest.build), and the loader only appends it; otherwise the
loader loads each parsed file and derives after the last. In dataset mode
(rlwh.ingest.to_dataset) nothing is loaded into DuckDB: built captures are published as
Parquet.

Unchanged files (same fingerprint as at the last ingest) are skipped, and when every
file is unchanged the warehouse is not even opened for writing.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.executors.run import fresh_parts_dir, run_tasks
from rlwh.executors.task import Task
from rlwh.ingest.build import build_capture, land_capture
from rlwh.ingest.discover import SourceFile, discover
from rlwh.ingest.fingerprint import fingerprint
from rlwh.ingest.load import (
    FileResult,
    Planned,
    file_context,
    ignored_result,
    is_unchanged,
    known_sources,
    load_file,
    set_capture_starts,
    tables_with_step,
    utc,
)
from rlwh.ingest.parse import failed_result, parse_source
from rlwh.safe_files import pause_for_test
from rlwh.warehouse.session import connect_read, derive, write_session


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


def _default_run_name(profile_dir: Path) -> str:
    return profile_dir.resolve().name


def _plan(files: list[SourceFile]) -> list[Planned]:
    """Fingerprint every file; one that cannot be read is planned as a failure."""
    planned = []
    for source in files:
        try:
            fp, size, mtime = fingerprint(source.path)
        except OSError as exc:
            # A failed file, not just a warning: `rlwh sources`, the summary and the exit status show it.
            source.problem = f"cannot read {source.path}: {exc.strerror}"
            planned.append(Planned(source, f"unreadable:{exc.errno}", 0, 0.0))
            continue
        planned.append(Planned(source, fp, size, mtime))
    return planned


def _nothing_changed(config: Config, run: str, planned: list[Planned]) -> bool:
    """True when the published warehouse already holds every file as it is now."""
    if not config.db_path.exists():
        return False
    try:
        con = connect_read(config)
    except RlwhError:
        return False
    try:
        known = known_sources(con, run)
    finally:
        con.close()
    return all(is_unchanged(known.get(p.source.rel_path), p) for p in planned)


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


def _tasks(run: str, todo: list[Planned], builds: dict[str, list[Planned]], config: Config) -> dict[str, tuple]:
    """One task per capture to build and per other file: name -> (task, files)."""
    tasks = {}
    for i, files in enumerate(builds.values()):
        task = Task(f"capture-{i}", build_capture, (run, files, config), sum(p.size for p in files),
                    tuple(str(p.source.path) for p in files))
        tasks[task.name] = (task, files)
    in_builds = {id(p) for files in builds.values() for p in files}
    for i, p in enumerate(p for p in todo if id(p) not in in_builds):
        task = Task(f"file-{i}", parse_source, (p.source.kind, str(p.source.path), file_context(p, config)), p.size,
                    (str(p.source.path),))
        tasks[task.name] = (task, [p])
    return tasks


def _land_built(con, run: str, files: list[Planned], built: dict) -> list[FileResult]:
    """Append a capture a worker built; if the warehouse refuses it, every file of it fails."""
    try:
        land_capture(con, files, built)
        return built["results"]
    except duckdb.Error as exc:
        if isinstance(exc, (duckdb.IOException, duckdb.FatalException)):
            raise  # the warehouse could not be written (a full disk): no file is to blame
        message = f"loading failed: {exc}"
        return [load_file(con, run, p, failed_result(f"{p.source.rel_path}: {message}")) for p in files]


def _parse_and_land(con, run: str, todo: list[Planned], config: Config, parts: Path, landed) -> list[FileResult]:
    """Run every parse task and land each result as it arrives; `landed(files)` after each."""
    with_step = tables_with_step(con)
    tasks = _tasks(run, todo, _captures_to_build(con, run, todo, config), config)
    results = []
    for task, result in run_tasks([t for t, _ in tasks.values()], config, parts):
        files = tasks[task.name][1]
        if task.function is build_capture:
            results += _land_built(con, run, files, result)
        else:
            results.append(load_file(con, run, files[0], result, with_step))
        pause_for_test("between_files")
        shutil.rmtree(parts / task.name, ignore_errors=True)
        landed(files)
    return results


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
    if config.dataset is not None:
        from rlwh.ingest.to_dataset import ingest_dataset

        ingest_dataset(summary, planned, root, config, progress)
        summary.results.sort(key=lambda r: r.rel_path)
        summary.seconds = time.perf_counter() - started
        return summary
    total_bytes = sum(p.size for p in planned)
    done_files = done_bytes = 0
    with write_session(config) as session:
        con = session.con
        known = known_sources(con, run)
        todo = []
        for p in planned:
            source_id = known[p.source.rel_path][0] if p.source.rel_path in known else None
            if is_unchanged(known.get(p.source.rel_path), p):
                if not p.source.ignored:
                    summary.results.append(FileResult(p.source.kind, p.source.rel_path, "unchanged", bytes=p.size))
                done_files, done_bytes = done_files + 1, done_bytes + p.size
                continue
            p.loaded_before = source_id is not None
            p.source_id = source_id or con.execute("select nextval('_source_ids')").fetchone()[0]
            if p.source.ignored:
                summary.ignored.append(load_file(con, run, p, ignored_result(p.source.reason)))
                done_files, done_bytes = done_files + 1, done_bytes + p.size
                continue
            if p.source.problem:
                summary.results.append(load_file(con, run, p, failed_result(p.source.problem)))
                done_files, done_bytes = done_files + 1, done_bytes + p.size
                continue
            todo.append(p)
        if progress:
            progress(done_files, len(planned), done_bytes, total_bytes, "")
        tmp = fresh_parts_dir(config)

        def landed(files: list[Planned]) -> None:
            nonlocal done_files, done_bytes
            done_files, done_bytes = done_files + len(files), done_bytes + sum(p.size for p in files)
            if progress:
                progress(done_files, len(planned), done_bytes, total_bytes, files[-1].source.rel_path)

        try:
            summary.results += _parse_and_land(con, run, todo, config, tmp, landed)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        set_capture_starts(con, run, {p.source.capture for p in todo if p.source.kind.startswith("ascend_")})
        _refresh_derived(con, progress, len(planned), total_bytes)
        _record_run(con, run, root)
        session.changed = True
    summary.results.sort(key=lambda r: r.rel_path)
    summary.seconds = time.perf_counter() - started
    return summary
