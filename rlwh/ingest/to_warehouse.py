"""The DuckDB-file target of `rlwh ingest`: the changed files land in the warehouse's
working copy (rlwh.ingest.landing), which is published once at the end
(rlwh.warehouse.session). The runner holds the writer lock and made the plan; this module
only writes.
"""

from __future__ import annotations

from pathlib import Path

from rlwh.config import Config
from rlwh.ingest import landing
from rlwh.ingest.plan import IngestSummary, Plan, Progress, utc
from rlwh.sqltext import one_value
from rlwh.warehouse import derive
from rlwh.warehouse.session import working_copy


def write(summary: IngestSummary, plan: Plan, config: Config, progress: Progress | None) -> None:
    """Land every changed file of `plan` and publish the warehouse; fills `summary`."""
    done = landing.Counter(progress, len(plan.files), plan.total_bytes)
    with working_copy(config) as session:
        con = session.con
        if derive.catch_up(con, session.derived_stale):
            session.changed = True
        changed = []
        for p in plan.files:
            if plan.is_unchanged(p):
                if not p.source.ignored:
                    summary.results.append(plan.unchanged_result(p))
                done.add([p], say=False)
                continue
            known = plan.known.get(p.source.rel_path)
            p.loaded_before = known is not None
            p.source_id = known[0] if known else one_value(con.execute("select nextval('internal.source_ids')"))
            changed.append(p)
        landing.land(con, plan.run, changed, config, summary, done)
        _record_run(con, plan.run, plan.profile_dir)
        session.changed = True


def _record_run(con, run: str, profile_dir: Path) -> None:
    con.execute(
        """insert into runs values (?, ?, ?, ?)
           on conflict (run) do update set profile_dir = excluded.profile_dir,
             last_ingested_at = excluded.last_ingested_at""",
        [run, str(profile_dir), utc(), utc()],
    )
