"""Building one capture where its files are parsed, so the loader's serial work stays
an append however many rows a run has.

A capture's derived memory tables are a pure function of that capture's rows. A parse
worker (local or on a Ray node) parses every file of the capture, lands them in a scratch
DuckDB of its own with the loader's code (rlwh.ingest.load), computes the derived tables there
with the same ingest/derived SQL, and writes every table's rows as one Parquet file each.
The loader then appends those files (land_capture) instead of loading and deriving.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb

from rlwh.config import Config
from rlwh.ingest.jobs import FACT_TABLES
from rlwh.ingest.load import TablesWithStep, delete_rows_of, ignored_result, load_file, set_capture_starts
from rlwh.ingest.parse import failed_result, parse_source
from rlwh.ingest.plan import FileResult, Planned, file_context
from rlwh.safe_files import process_spill_folder
from rlwh.sqltext import no_suggestions, one_value, sql_literal
from rlwh.warehouse import derive, template
from rlwh.warehouse.session import store_settings

DERIVED_TABLES = ("internal.memory_record_ops", "internal.memory_timeline_rows", "internal.torch_memory_blocks")
# Keyed by stack_id and shared by every capture: appended only where the warehouse lacks them.
SHARED_BY_STACK = ("call_stacks", "internal.stack_user_frames")
BUILT_TABLES = ("sources", *FACT_TABLES, *DERIVED_TABLES, *SHARED_BY_STACK)


@dataclass
class BuiltCapture:
    """One capture built in a worker: what the loader appends."""

    results: list[FileResult]
    keys: list[tuple]  # the derived keys (run, role, rank_id, capture) its rows touched
    tables: dict[str, str] = field(default_factory=dict)  # table -> Parquet file of its rows

_scratch: duckdb.DuckDBPyConnection | None = None


def _scratch_db(config: Config) -> duckdb.DuckDBPyConnection:
    """This process's scratch warehouse, emptied: made once per process (a copy of the schema
    template, 0.05 s; migrated where there is none, 0.5 s) and reused for each capture. It
    spills into the process's spill folder (safe_files.process_spill_folder)."""
    global _scratch
    if _scratch is None:
        _scratch = duckdb.connect(config={"temp_directory": str(process_spill_folder() / "build")})
        no_suggestions(_scratch)  # its lookups' misses (sqltext.has_relation)
        template.schema_into_memory(_scratch)
    con = _scratch
    # One thread: captures are built in parallel, one per worker.
    con.execute(f"set threads = 1; set memory_limit = {sql_literal(config.worker_memory_limit)}")
    for table in BUILT_TABLES:
        con.execute(f"delete from {table}")
    derive.clear_marks(con)  # left by a capture whose build raised
    store_settings(con, config)
    return con


def build_capture(run: str, files: list[Planned], config: Config, out_dir: str) -> BuiltCapture:
    """Parse, load and derive one capture's files; return their FileResults, the derived
    keys and one Parquet file per non-empty table under out_dir."""
    out = Path(out_dir)
    con = _scratch_db(config)
    with_step = TablesWithStep(con)
    results: list[FileResult] = []
    for i, p in enumerate(files):
        parts = out / f"file-{i}"
        if p.source.ignored or p.source.problem:
            parsed = ignored_result(p.source.reason) if p.source.ignored else failed_result(p.source.problem)
        else:
            parsed = parse_source(p.source.kind, str(p.source.path), file_context(p, config), str(parts))
        # Loaded here for the first time: the loader removes an earlier version's rows.
        results.append(load_file(con, run, _first_time(p), parsed, with_step))
        shutil.rmtree(parts, ignore_errors=True)
    set_capture_starts(con, run, {p.source.capture for p in files if p.source.kind.startswith("ascend_")})
    keys = derive.marked_keys(con)
    derive.refresh(con)
    tables = {}
    for table in BUILT_TABLES:
        if one_value(con.execute(f"select count(*) from {table}")):
            path = out / f"{table}.parquet"
            con.execute(f"copy {table} to {sql_literal(str(path))} (format parquet)")
            tables[table] = str(path)
    return BuiltCapture(results, keys, tables)


def _first_time(p: Planned) -> Planned:
    return replace(p, loaded_before=False)


def land_capture(con: duckdb.DuckDBPyConnection, files: list[Planned], built: BuiltCapture) -> None:
    """Append a built capture to the warehouse in one transaction, replacing the rows an
    earlier version of its files loaded. Raises on a DuckDB error (rolled back)."""
    con.execute("begin transaction")
    try:
        for p in files:
            delete_rows_of(con, p)  # marks the old rows' keys, which may differ from the new ones
            if p.loaded_before:
                con.execute("delete from sources where source_id = ?", [p.source_id])
        # A capture seen for the first time has no derived rows yet (each delete is a scan).
        for key in built.keys if any(p.loaded_before for p in files) else []:
            for table in DERIVED_TABLES:
                con.execute(f"delete from {table} where {derive.KEY_MATCH}", list(key))
        for table, path in built.tables.items():
            rows = f"read_parquet({sql_literal(path)})"
            if table in SHARED_BY_STACK:
                con.execute(f"insert into {table} by name select * from {rows} as b "
                            f"anti join {table} as t on b.stack_id = t.stack_id")
            else:
                con.execute(f"insert into {table} by name select * from {rows}")
        derive.unmark(con, built.keys)
        con.execute("commit")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("rollback")
        raise
