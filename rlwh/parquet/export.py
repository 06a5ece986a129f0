"""`rlwh export parquet OUT`: every public table (and with --views every public view) as
hive-partitioned Parquet. Public means in the schema `main`; rlwh's own helpers live in
`internal` (rlwh.warehouse.schema.PRIVATE_SCHEMA) and are never exported.

Spark, Trino, Polars or another DuckDB read the warehouse without opening the .duckdb
file. The views' rows matter to engines that cannot run DuckDB SQL (the ASOF join of
memory_alloc_stack, the window of memory_timeline): with --views each view is
materialized from the same snapshot as the tables, in the same layout, under its own
name (OUT/memory_peak/run=.../role=.../rank_id=.../data_0.parquet). A table or view is
partitioned by those of run, role and rank_id that it has. Layout:

    OUT/_rlwh_export.json                          what was exported, rows per table
    OUT/<table>/run=<run>/role=<role>/rank_id=<rank>/data_0.parquet
                                                   tables keyed by (run, role, rank_id, ...)
    OUT/runs/run=<run>/data_0.parquet              runs: no role, no rank
    OUT/call_stacks/data_0.parquet                 call_stacks: shared by all runs, one file
                                                   (whole even with --run: a superset of its stacks)
    OUT/<table>/empty.parquet                      a table with no rows: its schema only

A dataset generation (rlwh.parquet.dataset, `gen-N/<table>/...`) has the same folders.

Partition columns live in the folder names only (Spark refuses a column that is in the
files and in the path), so read `run` and `role` as strings and `rank_id` as an integer:
DuckDB `read_parquet('OUT/cpu_ops/**/*.parquet', hive_partitioning = true,
hive_types_autocast = false, hive_types = {'rank_id': 'INTEGER'})` (without
hive_types_autocast = false a run named 0412 reads back as the number 412), Spark
`spark.read.option("basePath", "OUT/cpu_ops").parquet("OUT/cpu_ops")` with
`spark.sql.sources.partitionColumnTypeInference.enabled=false` (then cast rank_id to int).
A NULL role or rank_id (a sources row whose role or rank discovery could not tell) is the
folder `role=__HIVE_DEFAULT_PARTITION__` (`rank_id=__HIVE_DEFAULT_PARTITION__`), which
every engine reads back as NULL.

Safety: the export reads one snapshot through a read-only connection (an ingest running
meanwhile does not change what it sees and is not blocked). It is written into a temp
folder beside OUT and renamed into place, so a half export never appears at OUT; a
previous export at OUT is replaced (moved aside, then deleted: for an instant OUT is
absent, never half-written), but a folder that is not an rlwh export is never touched.
Run and role values come from profiler data: DuckDB percent-encodes them in folder
names ('/' is %2F, '=' is %3D, so '../../x' is the single folder `role=..%2F..%2Fx`),
and every path written is checked to lie inside the export before it is published.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from rlwh import __version__
from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.safe_files import check_contained, remove_orphaned
from rlwh.sqltext import one_value, sql_ident, sql_literal
from rlwh.warehouse.schema import is_thin, view_files
from rlwh.warehouse.session import connect_read

MARKER = "_rlwh_export.json"
PARTITION_KEYS = ("run", "role", "rank_id")  # those a table has, in this order
_TMP_PREFIX = ".rlwh-export-"


def _thin_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    """In a thin file, the views that stand for the warehouse's tables: those sql/ does not define."""
    if not is_thin(con):
        return set()
    return set(_views(con)) - {v.name for v in view_files()}


def public_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The warehouse's public base tables (main's, not views), by name; in a dataset's
    thin file the views that stand for them."""
    rows = con.execute(
        """select table_name from duckdb_tables()
           where database_name = current_database() and schema_name = 'main' and not temporary
           order by table_name"""
    ).fetchall()
    thin = _thin_tables(con)
    return sorted({r[0] for r in rows} | {v for v in _views(con) if v in thin})


def _views(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute(
        """select view_name from duckdb_views()
           where database_name = current_database() and schema_name = 'main'
             and not internal and not temporary
           order by view_name"""
    ).fetchall()
    return [r[0] for r in rows]


def public_views(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The warehouse's public views (main's; the helpers of `internal` are not), by name."""
    thin = _thin_tables(con)
    return [v for v in _views(con) if v not in thin]


def partition_keys(columns: list[str]) -> list[str]:
    """The hive partition columns of a table with these columns: those of PARTITION_KEYS it has."""
    return [k for k in PARTITION_KEYS if k in columns]


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            """select column_name from duckdb_columns()
               where database_name = current_database() and schema_name = 'main' and table_name = ?
               order by column_index""",
            [table],
        ).fetchall()
    ]


def _copy_table(con: duckdb.DuckDBPyConnection, table: str, target: Path, run: str | None) -> int:
    """COPY one table (or one run of it) into target/; return the rows written."""
    columns = _columns(con, table)
    keys = partition_keys(columns)
    where, params = "", []
    if run is not None and "run" in columns:
        where, params = "where run = ?", [run]
    select = f"select * from {sql_ident(table)} {where}"
    count = one_value(con.execute(f"select count(*) from ({select})", params))
    if count == 0:
        # No rows, so no partitions: one empty file keeps the table and its schema readable.
        target.mkdir()
        con.execute(f"copy ({select} limit 0) to {sql_literal(target / 'empty.parquet')} (format parquet)", params)
        return 0
    if keys:
        options = f"format parquet, partition_by ({', '.join(keys)})"
        written = one_value(con.execute(f"copy ({select}) to {sql_literal(target)} ({options})", params))
    else:
        target.mkdir()
        written = one_value(con.execute(
            f"copy ({select}) to {sql_literal(target / 'data_0.parquet')} (format parquet)", params
        ))
    return int(written)


def _is_replaceable(out: Path) -> bool:
    """OUT may be replaced when it is absent, an empty folder or an earlier rlwh export."""
    if not out.exists() and not out.is_symlink():
        return True
    if out.is_symlink() or not out.is_dir():
        return False
    return (out / MARKER).is_file() or not any(out.iterdir())


def export_parquet(config: Config, out: Path, run: str | None = None, views: bool = False) -> dict[str, int]:
    """Write every public table, and every public view when `views`, (only run `run`'s
    rows, when given) as Parquet under `out`.

    Returns rows written per table or view. `out` ends up holding exactly this export: an earlier
    export there is replaced whole; any other existing, non-empty folder is refused.
    """
    out = Path(out).absolute()
    if not _is_replaceable(out):
        raise RlwhError(
            f"{out} exists and is not an rlwh export (no {MARKER}): give a new or empty folder"
        )
    con = connect_read(config)
    counts: dict[str, int] = {}
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_orphaned(out.parent, _TMP_PREFIX)  # exports killed midway
        tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-", dir=out.parent))
        con.execute("begin transaction")  # one snapshot for every table
        if run is not None and not one_value(con.execute("select count(*) from runs where run = ?", [run])):
            raise RlwhError(f"no run {run!r} in {config.db_path}")
        kinds = {t: "table" for t in public_tables(con)} | {v: "view" for v in (public_views(con) if views else [])}
        for table, kind in kinds.items():
            try:
                counts[table] = _copy_table(con, table, tmp / table, run)
            except duckdb.Error as exc:
                first = str(exc).strip().splitlines()[0]
                if "too long" in first.lower():
                    first += " (a run or role value too long for a folder name)"
                raise RlwhError(f"export of {kind} {table} failed: {first}") from exc
        con.execute("commit")
        check_contained(tmp)
        marker = {
            "rlwh_version": __version__,
            "warehouse": str(config.db_path),
            "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "run": run,
            "views": public_views(con) if views else [],
            "partition_by": {t: partition_keys(_columns(con, t)) for t in counts},
            "rows": counts,
        }
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        _publish(tmp, out)
    except OSError as exc:
        raise RlwhError(f"cannot write the export beside {out}: {exc}") from exc
    finally:
        con.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return counts


def _publish(tmp: Path, out: Path) -> None:
    """Move the finished export to `out`, replacing an earlier one."""
    os.chmod(tmp, 0o755)  # mkdtemp made it 0700
    if out.exists():
        # Rename the old export aside first: os.replace cannot replace a non-empty folder.
        old = tmp.with_name(tmp.name + "-old")
        os.rename(out, old)
        try:
            os.rename(tmp, out)
        except OSError:
            with contextlib.suppress(OSError):
                os.rename(old, out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out)
