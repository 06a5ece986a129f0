"""The dataset target of `rlwh ingest` ([warehouse] dataset): the workers build every capture
whole (rlwh.ingest.build), the loader publishes their Parquet as one new generation of the
dataset (rlwh.parquet.dataset) and rewrites the thin DuckDB file over it. Nothing is loaded into
a DuckDB file, so the serial part is the publish, whatever the number of rows.

A capture is the unit: a changed file rebuilds its whole capture (its derived tables
need all of its rows, and the dataset holds no warehouse to derive against); unchanged
captures are carried over by hard link.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import duckdb

from rlwh.config import Config
from rlwh.executors.run import fresh_parts_dir, run_tasks
from rlwh.executors.task import Task
from rlwh.ingest.build import BuiltCapture, build_capture
from rlwh.ingest.plan import IngestSummary, Plan, Planned, Progress, utc
from rlwh.parquet import dataset
from rlwh.sqltext import sql_literal


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _groups(run: str, planned: list[Planned]) -> dict[str, list[Planned]]:
    """The files by group: one per capture, or per file where no capture names it. A
    group's id is filename-safe: a digest of the run and the capture (or path)."""
    groups: dict[str, list[Planned]] = {}
    for p in planned:
        key = f"capture\0{p.source.capture}" if p.source.capture is not None else f"file\0{p.source.rel_path}"
        groups.setdefault("g-" + _digest(f"{run}\0{key}"), []).append(p)
    return groups


def build_and_stage(run: str, files: list[Planned], config: Config, gid: str, out_dir: str) -> BuiltCapture:
    """The task of one group: build the capture (rlwh.ingest.build) and partition it into the
    dataset's layout right there, so publishing is renames."""
    built = build_capture(run, files, config, out_dir)
    built.staged = str(dataset.stage_group(gid, Path(out_dir), Path(out_dir) / "staged"))
    for path in built.tables.values():
        Path(path).unlink()  # staged now: half the disk
    built.tables = {}
    return built


def _runs_group(parts: Path, run: str, profile_dir: Path, first_ingested) -> Path:
    """The run's `runs` row, as a group of its own."""
    folder = parts / "runs"
    folder.mkdir()
    now = utc()
    con = duckdb.connect()
    try:
        con.execute(
            "copy (select ?::varchar as run, ?::varchar as profile_dir, ?::timestamp as first_ingested_at, "
            f"?::timestamp as last_ingested_at) to {sql_literal(str(folder / 'runs.parquet'))} (format parquet)",
            [run, str(profile_dir), first_ingested or now, now],
        )
    finally:
        con.close()
    return folder


def write(summary: IngestSummary, plan: Plan, config: Config, progress: Progress | None) -> None:
    """Build every changed capture of `plan` in the workers and publish a generation;
    fills `summary`. The runner holds the writer lock."""
    assert config.dataset is not None  # the runner picks this target in dataset mode only
    run = plan.run
    total_bytes = plan.total_bytes
    next_id = plan.next_source_id
    tasks: dict[str, tuple[Task, list[Planned]]] = {}
    done_files = done_bytes = 0
    for gid, files in _groups(run, plan.files).items():
        if all(plan.is_unchanged(p) for p in files):
            summary.results += [plan.unchanged_result(p) for p in files if not p.source.ignored]
            done_files, done_bytes = done_files + len(files), done_bytes + sum(p.size for p in files)
            continue
        for p in files:
            known = plan.known.get(p.source.rel_path)
            if known:
                p.source_id = known[0]
            else:
                p.source_id, next_id = next_id, next_id + 1
        tasks[gid] = (Task(gid, build_and_stage, (run, files, config, gid), sum(p.size for p in files),
                           tuple(str(p.source.path) for p in files)), files)
    if progress:
        progress(done_files, len(plan.files), done_bytes, total_bytes, "")
    parts = fresh_parts_dir(config)
    try:
        built_groups = {}
        for task, built in run_tasks([t for t, _ in tasks.values()], config, parts):
            files = tasks[task.name][1]
            built_groups[task.name] = Path(built.staged)
            for result in built.results:
                (summary.ignored if result.status == "ignored" else summary.results).append(result)
            done_files, done_bytes = done_files + len(files), done_bytes + sum(p.size for p in files)
            if progress:
                progress(done_files, len(plan.files), done_bytes, total_bytes, files[-1].source.rel_path)
        if progress:
            progress(done_files, len(plan.files), done_bytes, total_bytes, "publishing the dataset")
        built_groups["run-" + _digest(run)] = _runs_group(parts, run, plan.profile_dir, plan.first_ingested_at)
        # Each lands whole or raises. A failed publish leaves the dataset as it was; a thin
        # file that failed after it leaves the old one, whose sources make the next ingest
        # rebuild these captures.
        dataset.publish(config.dataset, built_groups)
        dataset.build_thin_db(config.dataset, config.db_path, config.view_settings())
    finally:
        shutil.rmtree(parts, ignore_errors=True)
