"""A query for one run reads that run's rows only.

A nightly store holds hundreds of runs, and `rlwh summary`, `rlwh compare`, the reports and
a BI tool all ask for one run at a time (`where run = ...`). DuckDB pushes such a filter
down to the table scans through projections, groups, windows partitioned by run and the
left side of a join, but not into the right side of an anti, semi or outer join, nor into a
CTE that is used twice and one of whose uses is unfiltered: a view built that way scans
every run's rows for one run's answer (on a 6.3 GB warehouse of ~300 runs, memory_peak took
18-30 s for one run, rank_skew 13-15 s; now 0.03 s and 0.43 s, BENCHMARKS.md session 17).

The check is the plan, not a timing: every scan of a large per-run table must carry the
filter on run. It fails on the views as they were before session 17 (device_ops aside, below).
"""

from __future__ import annotations

import json
import shutil
from typing import Iterator

import duckdb
import pytest

# The tables that grow with every run a warehouse holds (events, ops, memory rows). Not yet
# device_ops: the collectives chain (internal.collective_arrivals uses its ops three times,
# once on an outer join's right side) still reads every run's, and stragglers and rank_skew
# through it.
LARGE_TABLES = {"cpu_ops", "memory_records", "torch_memory_events", "memory_timeline_rows"}
PER_RUN_VIEWS = ["memory_peak", "memory_peak_breakdown", "role_timeline", "rank_skew"]


def _scans_without_run_filter(con: duckdb.DuckDBPyConnection, query: str) -> list[str]:
    """The large tables `query`'s physical plan scans without a filter on run."""
    plan = [text for kind, text in con.execute("explain (format json) " + query).fetchall() if "physical" in kind]
    found: list[str] = []

    def walk(node: dict) -> None:
        info = node.get("extra_info", {})
        table = str(info.get("Table", "")).split(".")[-1]
        if node.get("name") == "SEQ_SCAN" and table in LARGE_TABLES and "run" not in str(info.get("Filters", "")):
            found.append(table)
        for child in node.get("children", []):
            walk(child)

    for root in json.loads(plan[0]):
        walk(root)
    return found


@pytest.fixture(scope="module")
def two_runs(demo_warehouse, tmp_path_factory) -> Iterator[duckdb.DuckDBPyConnection]:
    """The demo warehouse with every row of run 'demo' copied as run 'demo-again' (new
    source ids). Two runs, so that the optimizer can neither drop a filter on run (always
    true where the column holds one value) nor the plan (always false). Read on one
    read-only connection for the module (an open per case cost ~25 ms)."""
    db = tmp_path_factory.mktemp("two-runs") / "warehouse.duckdb"
    shutil.copy(demo_warehouse, db)
    con = duckdb.connect(str(db))
    try:
        shift = con.execute("select max(source_id) from sources").fetchone()[0]
        tables = con.execute(
            "select t.schema_name || '.' || t.table_name, bool_or(c.column_name = 'source_id') "
            "from duckdb_tables() as t join duckdb_columns() as c using (schema_name, table_name) "
            "where t.schema_name in ('main', 'internal') group by all having bool_or(c.column_name = 'run')").fetchall()
        for table, has_source in tables:
            moved = "'demo-again' as run" + (f", source_id + {shift} as source_id" if has_source else "")
            con.execute(f"insert into {table} select * replace ({moved}) from {table} where run = 'demo'")
    finally:
        con.close()
    with duckdb.connect(str(db), read_only=True) as con:
        yield con


@pytest.mark.parametrize("view", PER_RUN_VIEWS)
def test_a_filter_on_run_reaches_every_large_table(two_runs, view):
    with two_runs.cursor() as con:
        assert _scans_without_run_filter(con, f"select * from {view} where run = 'demo'") == []
        # The check can fail: the same view without the filter scans its tables whole.
        assert _scans_without_run_filter(con, f"select * from {view}")
        # And the filtered rows are the run's own.
        assert con.execute(f"select count(*) from {view} where run = 'demo'").fetchone()[0] \
            == con.execute(f"select count(*) from {view} where run = 'demo-again'").fetchone()[0] > 0
