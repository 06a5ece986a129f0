"""BI access: SQLAlchemy through duckdb-engine (what Superset and others use) on the
published warehouse, read-only, while `rlwh ingest` runs in another process.

Needs `duckdb-engine` and `sqlalchemy<2.0.45` (the test extras): SQLAlchemy 2.0.45 made
column reflection query pg_catalog.pg_collation, which DuckDB 1.5.6 lacks
(Mause/duckdb_engine#1379, duckdb/duckdb#22069); with DuckDB 2.0.0, SQLAlchemy 2.0.58's
reflection casts to REGCLASS, which DuckDB lacks too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import copy_fixture
from sqlalchemy.pool import NullPool

from rlwh import synth
from rlwh.ingest.runner import ingest

# One statement, so one snapshot: every count a reader can see at one moment.
COUNTS = sa.text(
    """select (select count(*) from runs), (select count(*) from sources),
              (select coalesce(sum(rows), 0) from sources), (select count(*) from ranks),
              (select count(*) from memory_records), (select count(*) from cpu_ops),
              (select count(*) from call_stacks), (select count(*) from ranges)"""
)


def documented_objects() -> set[str]:
    """The tables and views docs/SCHEMA.md documents."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "SCHEMA.md").read_text(encoding="utf-8")
    return set(re.findall(r"^### (\S+)$", text, flags=re.MULTILINE))


def _engine(db: Path, **kw) -> sa.Engine:
    return sa.create_engine(f"duckdb:///{db}", connect_args={"read_only": True}, **kw)


def _counts(engine: sa.Engine) -> tuple:
    with engine.connect() as con:
        return tuple(con.execute(COUNTS).one())


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    return env


@pytest.fixture
def published(tmp_path, config) -> Path:
    """A published warehouse holding one run."""
    base = copy_fixture("rl-insight-samples/memory_data", tmp_path / "base")
    assert ingest(base, config, run="base").failed == 0
    return config.db_path


def _start_holder(db: Path) -> subprocess.Popen:
    """Another process holding one SQLAlchemy connection open, like a BI server's pool."""
    code = textwrap.dedent(f"""
        import sys, sqlalchemy as sa
        engine = sa.create_engine("duckdb:///{db}", connect_args={{"read_only": True}})
        con = engine.connect()
        q = sa.text({COUNTS.text!r})
        print(tuple(con.execute(q).one()), flush=True)
        sys.stdin.readline()
        print(tuple(con.execute(q).one()), flush=True)
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())


@pytest.mark.slow
def test_sqlalchemy_readers_during_ingest_see_before_or_after_never_between(published, tmp_path):
    db = published
    # Big enough that the ingest takes a few seconds on 2 cores.
    profile = synth.write_ascend_profile(tmp_path / "second", roles=("actor_update", "rollout"), ranks=2,
                                         n_ops=4000, n_allocs=4000)
    engine = _engine(db, poolclass=NullPool)  # a fresh connection per query, like a dashboard refresh
    before = _counts(engine)
    holder = _start_holder(db)
    try:
        assert holder.stdout.readline().strip() == str(before)
        writer = subprocess.Popen(
            [sys.executable, "-m", "rlwh.cli", "ingest", str(profile), "--db", str(db), "--run", "second", "-q"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=_env())
        seen: list[tuple] = []
        deadline = time.monotonic() + 120
        while writer.poll() is None and time.monotonic() < deadline:
            seen.append(_counts(engine))  # any error here fails the test: readers never break
            time.sleep(0.02)
        output = writer.communicate(timeout=60)[0]
        assert writer.returncode == 0, output
        after = _counts(engine)
        # The open session keeps its consistent (old) view until it reconnects.
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == str(before), holder.stderr.read()
    finally:
        holder.kill()
        holder.wait()
    assert after != before and after[0] == before[0] + 1
    assert len(seen) >= 5, f"the reader ran only {len(seen)} times during the ingest"
    between = [c for c in seen if c not in (before, after)]
    assert not between, f"a reader saw a half ingest: {between[:3]} (before {before}, after {after})"
    assert seen[0] == before
    print(f"{len(seen)} reads during the ingest: {seen.count(before)} before, {seen.count(after)} after")


def test_sqlalchemy_reflects_tables_views_and_column_docs(published):
    db = published
    engine = _engine(db)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "doesn't yet support reflection on indices"
        with engine.connect() as con:
            inspector = sa.inspect(con)
            tables = set(inspector.get_table_names())
            assert {"runs", "sources", "memory_records", "cpu_ops", "call_stacks"} <= tables
            assert {"memory_peak", "memory_timeline", "memory_alloc_stack"} <= set(inspector.get_view_names())
            # A BI tool lists a schema's tables and views: main's are the public ones only.
            main = set(inspector.get_table_names(schema="main")) | set(inspector.get_view_names(schema="main"))
            assert main == documented_objects() and not [n for n in main if n.startswith("_")]
            assert "stack_frames" in inspector.get_view_names(schema="internal")
            columns = {c["name"]: c for c in inspector.get_columns("memory_peak")}
            assert columns["peak_live_bytes"]["comment"]  # BI tools show the SQL comments
            assert inspector.get_table_comment("memory_records")["text"]
            peak = sa.Table("memory_peak", sa.MetaData(), autoload_with=con)
            rows = con.execute(sa.select(peak.c.run, peak.c.peak_live_bytes)).fetchall()
            assert rows and rows[0][0] == "base"
    engine.dispose()


def test_sqlalchemy_read_only_connection_cannot_write(published):
    db = published
    before = db.read_bytes()
    engine = _engine(db)
    with engine.connect() as con:
        with pytest.raises(sa.exc.DBAPIError, match="read-only|Cannot execute"):
            con.execute(sa.text("delete from memory_records"))
    engine.dispose()
    assert db.read_bytes() == before
