"""The dataset target of `rlwh ingest` ([warehouse] dataset): every file of each changed
capture lands in a scratch DuckDB database through the same engine as a warehouse's
(rlwh.ingest.landing: read in place, parsed in the workers, derived), its rows are
partitioned into the dataset's layout with one COPY per table, and publishing makes them
a new generation of the dataset (rlwh.parquet.dataset) and rewrites the thin DuckDB file
over it. No warehouse is copied: the scratch database holds only what changed.

A capture is the unit: a changed file rebuilds its whole capture (its derived tables
need all of its rows, and the dataset holds no warehouse to derive against); unchanged
captures are carried over by their manifest entries (no file is touched).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from rlwh.config import Config
from rlwh.ingest import landing
from rlwh.ingest.plan import IngestSummary, Plan, Progress, utc
from rlwh.parquet import dataset
from rlwh.sqltext import sql_literal


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
    """Land every changed capture of `plan` in a scratch database, stage and publish them as
    a generation; fills `summary`. The runner holds the writer lock."""
    assert config.dataset is not None  # the runner picks this target in dataset mode only
    run = plan.run
    done = landing.Counter(progress, len(plan.files), plan.total_bytes)
    changed = landing.changed_groups(plan, summary, done, read_unchanged=True)
    with landing.scratch_folder(config) as work:
        con = landing.scratch(config, work / "spill")
        try:
            landing.land(con, run, changed.files, config, summary, done)
            done.say("publishing the dataset")
            staged: dict[str, Path] = dataset.stage_rows_of(con, changed.group_of, work / "staged")
        finally:
            con.close()
        staged["run-" + landing.digest(run)] = _runs_group(work, run, plan.profile_dir, plan.first_ingested_at)
        # Each lands whole or raises. A failed publish leaves the dataset as it was; a thin
        # file that failed after it leaves the old one, whose sources make the next ingest
        # rebuild these captures.
        next_free = max([plan.next_source_id, *(i + 1 for i in changed.group_of)])
        dataset.publish(config.dataset, staged, next_source_id=next_free)
        # The runner found db_path a thin file or absent, under the writer lock it holds.
        dataset.build_thin_db(config.dataset, config.db_path, config.view_settings(), checked=True)
