"""The DuckDB-file target of `rlwh ingest`: every file of each changed capture lands in a
scratch database (rlwh.ingest.landing), and its rows are then appended to the warehouse in
one transaction (rlwh.warehouse.append), so an ingest costs what it adds, not what the
warehouse holds. A new warehouse is written straight (the scratch would be all of it).
The runner holds the writer lock and made the plan; this module only writes.
"""

from __future__ import annotations

from pathlib import Path

from rlwh.config import Config
from rlwh.ingest import landing
from rlwh.ingest.plan import REPEATED_CAPTURES, IngestSummary, Plan, Progress, repeated_captures, utc
from rlwh.warehouse import append
from rlwh.warehouse.session import working_copy


def write(summary: IngestSummary, plan: Plan, config: Config, progress: Progress | None) -> None:
    """Land every changed capture of `plan` and append it to the warehouse; fills `summary`."""
    done = landing.Counter(progress, len(plan.files), plan.total_bytes)
    # A warehouse that needs migrating has older tables: its rows are not copied, but read again.
    changed = landing.changed_groups(plan, summary, done, read_unchanged=plan.schema_behind)
    if not config.db_path.exists():
        _create(summary, plan, config, changed.files, done)
        return
    reloaded = [p.source_id for p in changed.files + changed.kept
                if p.source_id is not None and p.source.rel_path in plan.known]
    with landing.scratch_folder(config) as work:
        con = landing.scratch(config, work / "spill", config.db_path)
        try:
            landing.keep_rows(con, [p.source_id for p in changed.kept if p.source_id is not None])
            landing.land(con, plan.run, changed.files, config, summary, done)
            done.say("publishing the warehouse")
            con.execute(f"detach {landing.PUBLISHED}")
            how = append.publish(con, config, reloaded, lambda wh: _finish(wh, summary, plan))
            if how == "copied":
                summary.warnings.append(
                    f"{config.db_path} was open in another process (a reader), so this ingest wrote a copy of it "
                    "and renamed it over; with no reader holding it, an ingest appends in place")
        finally:
            con.close()


def _create(summary: IngestSummary, plan: Plan, config: Config, files: list, done: landing.Counter) -> None:
    """A new warehouse: the files land straight in its file (the schema's template, copied),
    which is renamed into place when whole; a scratch database and an append would only
    write every row twice (64 ranks: 1.13x the time)."""
    with working_copy(config) as session:
        landing.land(session.con, plan.run, files, config, summary, done)
        done.say("publishing the warehouse")
        _finish(session.con, summary, plan)
        session.changed = True


def _finish(con, summary: IngestSummary, plan: Plan) -> None:
    """In the publishing transaction: the runs row, and the run's repeated captures as the
    warehouse will hold them (asked here, the runner opens no connection after; 25-30 ms)."""
    _record_run(con, plan.run, plan.profile_dir)
    summary.repeated = repeated_captures(con.execute(REPEATED_CAPTURES, [plan.run]).fetchall())


def _record_run(con, run: str, profile_dir: Path) -> None:
    con.execute(
        """insert into runs values (?, ?, ?, ?)
           on conflict (run) do update set profile_dir = excluded.profile_dir,
             last_ingested_at = excluded.last_ingested_at""",
        [run, str(profile_dir), utc(), utc()],
    )
