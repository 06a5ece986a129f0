"""Shared fixtures: the real profiler samples in ../shared, fresh warehouses, configs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pytest

from rlwh.config import Config
from rlwh.warehouse import derive
from rlwh.warehouse.schema import migrate

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("RLWH_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"
SAMPLES = FIXTURES / "rl-insight-samples"


@pytest.fixture
def fresh_db():
    """An in-memory DuckDB, migrated and with every view installed."""
    con = duckdb.connect()
    migrate(con)
    yield con
    con.close()


@pytest.fixture
def config(tmp_path) -> Config:
    """Settings for a warehouse in a temp dir; parsing stays in-process (workers=1)."""
    return Config(
        db_path=tmp_path / "wh" / "warehouse.duckdb",
        workers=1,
        lock_timeout=5,
        reports_dir=tmp_path / "reports",
        nightly_root=tmp_path / "nightly",
        nightly_index=tmp_path / "reports" / "index.html",
    )


def copy_fixture(relative: str, dest: Path) -> Path:
    """Copy ../shared/fixtures/<relative> into dest (tests never touch ../shared)."""
    source = FIXTURES / relative
    if not source.exists():
        raise FileNotFoundError(f"fixture missing: {source} (is ../shared checked out?)")
    target = dest / source.name
    if source.is_dir():
        shutil.copytree(source, target)
        for path in [target, *target.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    else:
        shutil.copy(source, target)
        target.chmod(0o644)
    return target


def read_db(config: Config) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(config.db_path), read_only=True)


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, columns: list[str], rows: list[tuple],
                **constants) -> None:
    """Bulk insert through Arrow (DuckDB's executemany is row-at-a-time and slow)."""
    import pyarrow as pa

    data = pa.Table.from_pylist([{**constants, **dict(zip(columns, row))} for row in rows])
    con.register("_rows", data)
    try:
        con.execute(f"insert into {table} by name select * from _rows")
    finally:
        con.unregister("_rows")
    if table in derive.SOURCE_TABLES:
        derive.refresh_all(con)  # what rlwh ingest does after loading


@pytest.fixture(scope="session")
def demo_profile(tmp_path_factory) -> Path:
    """The demo's profile dir (every format rlwh reads), made once; copy it before changing it."""
    from rlwh.demo import write_demo_profile

    return write_demo_profile(tmp_path_factory.mktemp("demo") / "demo")


def landed_rows(kind: str, sink, table: str, columns: list[str], role: str = "discovered_role",
                rank_id: int | None = None) -> list[dict]:
    """The `table` rows a job lands from a reader's staged parts: the job's SQL maps the
    source's fields to columns, as `rlwh ingest` runs it (rlwh.ingest.load)."""
    import pyarrow.parquet as pq

    from rlwh.ingest.jobs import jobs
    from rlwh.ingest.load import _staged_select

    parts = [str(p) for p in sink.tables().get(table, [])]
    if not parts:
        return []
    con = duckdb.connect()
    try:
        migrate(con)
        con.execute("""create temp table _rlwh_keys as select 'run'::varchar as run, ?::varchar as role,
                       ?::integer as rank_id, 'capture'::varchar as capture, 1::bigint as source_id,
                       null::integer as step""", [role, rank_id])
        staged = _staged_select(table, parts, pq.read_schema(parts[0]).names)
        con.execute(f"create temp view _staged_{table} as {staged}")
        con.execute(jobs()[kind].sql)
        rows = con.execute(f"select {', '.join(columns)} from {table}").fetchall()
        return [dict(zip(columns, row)) for row in rows]
    finally:
        con.close()
