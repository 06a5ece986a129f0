"""The dataset target of `rlwh ingest` ([warehouse] dataset): every file of each changed
capture lands in a scratch DuckDB database through the same engine as a warehouse's
(rlwh.ingest.landing: read in place, parsed in the workers, derived), its rows are
partitioned into the dataset's layout with one COPY per table, and publishing makes them
a new generation of the dataset (rlwh.parquet.dataset) and rewrites the thin DuckDB file
over it. No warehouse is copied: the scratch database holds only what changed.

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
from rlwh.ingest import landing
from rlwh.ingest.plan import IngestSummary, Plan, Planned, Progress, utc
from rlwh.parquet import dataset
from rlwh.sqltext import sql_literal
from rlwh.warehouse.schema import migrate
from rlwh.warehouse.session import store_settings


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


def _scratch(config: Config, folder: Path) -> duckdb.DuckDBPyConnection:
    """An empty warehouse in memory, spilling into `folder` past the ingest's memory limit."""
    con = duckdb.connect(config={"temp_directory": str(folder)})
    con.execute("set enable_progress_bar = false")
    con.execute(f"set threads = {int(config.threads)}")
    con.execute("set memory_limit = ?", [config.ingest_memory_limit])
    migrate(con)
    store_settings(con, config)
    return con


def write(summary: IngestSummary, plan: Plan, config: Config, progress: Progress | None) -> None:
    """Land every changed capture of `plan` in a scratch database, stage and publish them as
    a generation; fills `summary`. The runner holds the writer lock."""
    assert config.dataset is not None  # the runner picks this target in dataset mode only
    run = plan.run
    done = landing.Counter(progress, len(plan.files), plan.total_bytes)
    next_id = plan.next_source_id
    changed: list[Planned] = []
    group_of: dict[int, str] = {}
    for gid, files in _groups(run, plan.files).items():
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
            p.loaded_before = False  # the scratch database is empty; the group replaces its old rows whole
            group_of[p.source_id] = gid
            changed.append(p)
    work = config.db_path.with_name(config.db_path.name + ".stage")
    shutil.rmtree(work, ignore_errors=True)  # a killed ingest's leftovers (the caller holds the writer lock)
    (work / "spill").mkdir(parents=True)
    try:
        con = _scratch(config, work / "spill")
        try:
            landing.land(con, run, changed, config, summary, done)
            done.say("publishing the dataset")
            staged: dict[str, Path] = dataset.stage_rows_of(con, group_of, work / "staged")
        finally:
            con.close()
        staged["run-" + _digest(run)] = _runs_group(work, run, plan.profile_dir, plan.first_ingested_at)
        # Each lands whole or raises. A failed publish leaves the dataset as it was; a thin
        # file that failed after it leaves the old one, whose sources make the next ingest
        # rebuild these captures.
        dataset.publish(config.dataset, staged)
        dataset.build_thin_db(config.dataset, config.db_path, config.view_settings())
    finally:
        shutil.rmtree(work, ignore_errors=True)
