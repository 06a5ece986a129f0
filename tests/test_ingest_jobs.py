"""Ingest jobs that read their file in SQL (ingest/ascend_*_csv.sql): their sections, and
that the SQL read and the Python row-by-row read give rows of one shape."""

from __future__ import annotations

import re

import duckdb
import pytest

from rlwh.ingest.jobs import SHARED_TABLES, jobs
from rlwh.readers import ascend_csv, ascend_usage, csv_job
from rlwh.sqltext import job_sections

# job -> (table, the row-by-row read's schema)
CSV_JOBS = {
    "ascend_memory_csv": ("memory_records", ascend_csv.SCHEMA),
    **{job: (table, fmt.schema) for table, job in ascend_usage.JOBS.items()
       for fmt in (ascend_usage.MEMORY_RECORD, ascend_usage.NPU_MODULE_MEM, ascend_usage.STEP_TRACE_TIME)
       if fmt.table == table},
}


def test_sections_split_at_their_markers():
    text = "-- job: x\n-- note\n\n-- fields:\nselect 1;\n\n-- read t:\nselect 2\n-- land:\ninsert 3;\n"
    assert job_sections(text) == {"land": "-- job: x\n-- note\n\ninsert 3;\n", "fields": "select 1;\n",
                                  "read t": "select 2\n"}
    assert job_sections("-- job: y\ninsert 4;\n") == {"land": "-- job: y\ninsert 4;\n"}


@pytest.mark.parametrize("job", sorted(jobs()))
def test_a_job_writes_only_the_tables_its_fills_line_names(job):
    """Landing marks for the derived tables only the files whose kind fills one of their
    source tables (rlwh.ingest.load), so `fills` must name every table a job writes."""
    code = re.sub(r"--[^\n]*", "", jobs()[job].sql).lower()
    written = set(re.findall(r"\b(?:insert(?: or replace)? into|update|delete from)\s+([a-z_.]+)", code))
    assert written <= set(jobs()[job].fills), written - set(jobs()[job].fills)
    assert written or set(jobs()[job].fills) <= {"ranks", *SHARED_TABLES}  # a ranks row comes from the reader


@pytest.mark.parametrize("job", CSV_JOBS)
def test_a_csv_job_lands_its_staged_rows_and_reads_in_the_worker(job):
    table, _ = CSV_JOBS[job]
    land = jobs()[job].sql
    assert f"insert into {table}" in land and "from _csv" not in land and "read_csv(" not in land
    assert set(csv_job.sections(job)) == {"land", "fields", f"read {table}"}


@pytest.mark.parametrize("job", CSV_JOBS)
def test_the_sql_read_gives_the_columns_and_types_of_the_row_by_row_read(job, tmp_path):
    table, schema = CSV_JOBS[job]
    types = dict(csv_job.field_types(job))
    header = list(types)
    path = tmp_path / "header_only.csv"
    path.write_text(",".join(f'"{h}"' for h in header) + "\n", encoding="utf-8")
    part = tmp_path / "part.parquet"
    csv_job.read_to_parquet(job, table, path, header, part)
    got = duckdb.sql(f"describe select * from '{part}'").fetchall()
    want = {"int64": "BIGINT", "string": "VARCHAR", "int32": "INTEGER"}
    assert [(name, kind) for name, kind, *_ in got] == [(f.name, want[str(f.type)]) for f in schema]
