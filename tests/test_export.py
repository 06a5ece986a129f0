"""`export_parquet`: every public table as hive-partitioned Parquet that reads back the same.

The warehouse holds two runs: "night-1" (the MSTX and GMM samples) and a hostile one,
"a/b", whose rank dir says its role is "../../x" (profiler_metadata.json is data, and
data is untrusted). Both must land inside OUT and read back exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from conftest import copy_fixture

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.ingest.runner import ingest
from rlwh.parquet.export import MARKER, export_parquet, public_tables, public_views
from rlwh.warehouse.session import write_session

HOSTILE_RUN = "a/b"
HOSTILE_ROLE = "../../x"
TABLES = ("call_stacks", "cpu_ops", "gmm_expert_load", "memory_records", "ranges", "ranks", "runs", "sources",
          "torch_memory_events")


def _set_metadata_role(profile: Path, role: str) -> None:
    for meta in profile.rglob("profiler_metadata.json"):
        data = json.loads(meta.read_text())
        data["role"] = role
        meta.write_text(json.dumps(data))


def _config(db: Path) -> Config:
    return Config(db_path=db, workers=1, lock_timeout=5)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Config:
    tmp = tmp_path_factory.mktemp("export")
    config = _config(tmp / "wh" / "warehouse.duckdb")
    night = tmp / "night"
    night.mkdir()
    copy_fixture("rl-insight-samples/mstx_data", night)
    copy_fixture("rl-insight-samples/gmm_data", night)
    # A failed file; a sources row with no role exports as role=__HIVE_DEFAULT_PARTITION__.
    broken = night / "gmm_data" / "step_1" / "actor_update" / "rank1" / "dump_tensor_data"
    broken.mkdir(parents=True)
    (broken / "NPU.npu_grouped_matmul.0.forward.kwargs.group_list.pt").write_bytes(b"")
    assert ingest(night, config, run="night-1").failed == 1
    # Discovery tells that file's role from its path now; a sources row whose role nothing
    # names (a file outside any role folder that failed) still happens: make one.
    with write_session(config) as session:
        session.con.execute(
            """insert into sources select * replace (nextval('internal.source_ids') as source_id, null as role,
                 null as rank_id, 'stray.pt' as path) from sources where status = 'failed'""")
        session.changed = True
    hostile = copy_fixture("rl-insight-samples/memory_data", tmp / "hostile")
    _set_metadata_role(hostile, HOSTILE_ROLE)
    assert ingest(hostile, config, run=HOSTILE_RUN).failed == 0
    return config


def _read_back(out: Path, table: str) -> str:
    """SQL reading one exported table: run and role as text (never guessed types), rank_id an integer."""
    glob = str(out / table / "**" / "*.parquet").replace("'", "''")
    hive_types = ", hive_types = {'rank_id': 'INTEGER'}" if list((out / table).glob("**/rank_id=*")) else ""
    return f"read_parquet('{glob}', hive_partitioning = true, hive_types_autocast = false{hive_types})"


def con_count(config: Config, sql: str) -> int:
    con = duckdb.connect(str(config.db_path), read_only=True)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def _columns(con, table: str) -> str:
    names = [r[0] for r in con.execute(f"describe {table}").fetchall()]
    return ", ".join(f'"{n}"' for n in names)


def _assert_same_rows(config: Config, out: Path, run: str | None = None) -> None:
    """Every table reads back with exactly the warehouse's rows (of `run`), as a multiset."""
    con = duckdb.connect(str(config.db_path), read_only=True)
    try:
        for table in public_tables(con):
            cols = _columns(con, table)
            has_run = "run" in cols.replace('"', "").split(", ")
            where = "where run = $run" if run is not None and has_run else ""
            params = {"run": run} if where else {}
            mine = f"select {cols} from {table} {where}"
            theirs = f"select {cols} from {_read_back(out, table)}"
            for a, b in ((mine, theirs), (theirs, mine)):
                extra = con.execute(f"select count(*) from ({a} except all {b})", params).fetchone()[0]
                assert extra == 0, f"{table}: {extra} rows differ between the warehouse and the export"
    finally:
        con.close()


@pytest.mark.slow
def test_every_table_reads_back_with_the_same_rows(warehouse, tmp_path):
    out = tmp_path / "out"
    counts = export_parquet(warehouse, out)
    con = duckdb.connect(str(warehouse.db_path), read_only=True)
    assert set(counts) == set(public_tables(con)) and set(TABLES) <= set(counts)  # later migrations add tables
    for table in counts:
        assert counts[table] == con.execute(f"select count(*) from {table}").fetchone()[0], table
        back = duckdb.sql(f"select count(*) from {_read_back(out, table)}").fetchall()[0][0]
        assert back == counts[table], table
    # Per run, role and rank, too: the partitions carry the keys, rank_id as an integer.
    for table in ("cpu_ops", "memory_records", "ranges", "ranks", "sources", "gmm_expert_load"):
        want = con.execute(f"select run, role, rank_id, count(*) from {table} group by all order by all").fetchall()
        got = duckdb.sql(f"select run, role, rank_id, count(*) from {_read_back(out, table)} group by all order by all")
        assert got.fetchall() == want, table
        assert duckdb.sql(f"select typeof(rank_id) from {_read_back(out, table)} limit 1").fetchall()[0] == ("INTEGER",)
    con.close()
    assert counts["memory_records"] == 49 and counts["gmm_expert_load"] > 0 and counts["ranges"] > 0
    _assert_same_rows(warehouse, out)
    assert (out / "sources" / "run=night-1" / "role=__HIVE_DEFAULT_PARTITION__"
            / "rank_id=__HIVE_DEFAULT_PARTITION__").is_dir()
    nulls = duckdb.sql(f"select count(*) from {_read_back(out, 'sources')} where role is null").fetchall()[0][0]
    assert nulls == 1
    no_rank = duckdb.sql(f"select count(*) from {_read_back(out, 'sources')} where rank_id is null").fetchall()[0][0]
    assert no_rank == con_count(warehouse, "select count(*) from sources where rank_id is null") >= 1
    marker = json.loads((out / MARKER).read_text())
    assert marker["rows"] == counts and marker["partition_by"]["runs"] == ["run"]
    assert marker["partition_by"]["call_stacks"] == []
    assert marker["partition_by"]["cpu_ops"] == marker["partition_by"]["sources"] == ["run", "role", "rank_id"]


@pytest.mark.slow
def test_layout_is_hive_partitioned_by_run_role_and_rank(warehouse, tmp_path):
    out = tmp_path / "out"
    export_parquet(warehouse, out)
    for table in ("cpu_ops", "memory_records", "ranges", "ranks", "sources", "gmm_expert_load"):
        files = list((out / table).rglob("*.parquet"))
        assert files and all(len(f.relative_to(out / table).parts) == 4 for f in files), table
        assert all(f.parent.name.startswith("rank_id=") for f in files), table
    # One folder per (run, role, rank) that has rows, no more.
    folders = sorted(str(p.relative_to(out / "ranges")) for p in (out / "ranges").glob("run=night-1/role=*/rank_id=*"))
    con = duckdb.connect(str(warehouse.db_path), read_only=True)
    want = con.execute("""select distinct format('run=night-1/role={}/rank_id={}', role, rank_id) from ranges
                          where run = 'night-1' order by 1""").fetchall()
    con.close()
    assert folders == [w[0] for w in want] and len(folders) > 1
    assert list((out / "memory_records" / "run=a%2Fb" / "role=..%2F..%2Fx").glob("rank_id=*/*.parquet"))
    assert list((out / "runs").glob("run=*/*.parquet"))  # runs: no role
    assert [p.name for p in (out / "call_stacks").iterdir()] == ["data_0.parquet"]  # shared: one file
    # A table with no rows is still there, with its schema.
    assert [p.name for p in (out / "torch_memory_events").iterdir()] == ["empty.parquet"]
    columns = [r[0] for r in duckdb.sql(f"describe select * from {_read_back(out, 'torch_memory_events')}").fetchall()]
    assert {"run", "role", "rank_id", "ts_ns", "bytes"} <= set(columns)


@pytest.mark.slow
def test_hostile_run_and_role_stay_inside_out(warehouse, tmp_path):
    area = tmp_path / "area"
    area.mkdir()
    out = area / "deep" / "out"
    export_parquet(warehouse, out)
    # Nothing appeared beside or above OUT: "../../x" and "a/b" became single, escaped folders.
    assert [p.name for p in area.iterdir()] == ["deep"]
    assert [p.name for p in (area / "deep").iterdir()] == ["out"]
    assert not (tmp_path / "x").exists() and not (area / "x").exists()
    for path in out.rglob("*"):
        assert path.resolve().is_relative_to(out.resolve()) and not path.is_symlink()
    got = duckdb.sql(f"select distinct run, role from {_read_back(out, 'memory_records')}").fetchall()
    assert got == [(HOSTILE_RUN, HOSTILE_ROLE)]


@pytest.mark.slow
def test_one_run(warehouse, tmp_path):
    out = tmp_path / "out"
    counts = export_parquet(warehouse, out, run="night-1")
    assert counts["memory_records"] == 0 and counts["runs"] == 1 and counts["ranges"] > 0
    runs = duckdb.sql(f"select distinct run from {_read_back(out, 'sources')}").fetchall()
    assert runs == [("night-1",)]
    _assert_same_rows(warehouse, out, run="night-1")
    with pytest.raises(RlwhError, match="no run 'nope'"):
        export_parquet(warehouse, tmp_path / "none", run="nope")
    assert not (tmp_path / "none").exists()


@pytest.mark.slow
def test_an_earlier_export_is_replaced_whole(warehouse, tmp_path):
    out = tmp_path / "out"
    export_parquet(warehouse, out)
    (out / "cpu_ops" / "run=stale").mkdir()
    export_parquet(warehouse, out, run=HOSTILE_RUN)
    assert not (out / "cpu_ops" / "run=stale").exists()
    assert duckdb.sql(f"select distinct run from {_read_back(out, 'ranks')}").fetchall() == [(HOSTILE_RUN,)]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp or old folder left


@pytest.mark.slow
def test_a_folder_that_is_not_an_export_is_never_touched(warehouse, tmp_path):
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(RlwhError, match="not an rlwh export"):
        export_parquet(warehouse, out)
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    empty = tmp_path / "empty"
    empty.mkdir()
    export_parquet(warehouse, empty)  # an empty folder is fine
    assert (empty / MARKER).is_file()


@pytest.mark.slow
def test_a_failed_export_leaves_the_previous_one(warehouse, tmp_path, monkeypatch):
    out = tmp_path / "out"
    export_parquet(warehouse, out)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    import rlwh.parquet.export as export_module

    real = export_module._copy_table
    seen = []

    def dying(con, table, target, run):
        seen.append(table)
        if len(seen) == 4:
            raise duckdb.IOException("No space left on device")
        return real(con, table, target, run)

    monkeypatch.setattr(export_module, "_copy_table", dying)
    with pytest.raises(RlwhError, match=r"export of table \w+ failed: .*No space left"):
        export_parquet(warehouse, out)
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_role_too_long_for_a_folder_name_is_a_clear_error(tmp_path):
    config = _config(tmp_path / "wh" / "warehouse.duckdb")
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path / "p")
    _set_metadata_role(profile, "r" * 300)
    assert ingest(profile, config).failed == 0
    with pytest.raises(RlwhError, match="export of table .*too long"):
        export_parquet(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rlwh-export")]


@pytest.mark.slow
def test_export_runs_while_a_writer_holds_the_warehouse(warehouse, tmp_path):
    with write_session(warehouse) as session:
        session.con.execute("delete from memory_records")  # not published: the export never sees it
        counts = export_parquet(warehouse, tmp_path / "out")
    assert counts["memory_records"] == 49


@pytest.mark.slow
def test_stale_temp_of_a_killed_export_is_cleaned(warehouse, tmp_path):
    stale = tmp_path / ".rlwh-export-999999999-abc"  # no such pid
    stale.mkdir()
    (stale / "junk.parquet").write_bytes(b"x")
    export_parquet(warehouse, tmp_path / "out")
    assert not stale.exists()


def test_no_warehouse_is_a_clear_error(tmp_path):
    with pytest.raises(RlwhError, match="no warehouse"):
        export_parquet(_config(tmp_path / "none.duckdb"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_views_are_written_with_their_rows_when_asked(warehouse, tmp_path):
    out = tmp_path / "out"
    counts = export_parquet(warehouse, out, views=True)
    con = duckdb.connect(str(warehouse.db_path), read_only=True)
    try:
        views = public_views(con)
        assert {"memory_peak", "memory_alloc_stack", "rank_skew", "role_timeline", "gmm_imbalance"} <= set(views)
        assert not any(v.startswith("_") for v in views)  # private helpers stay private
        assert set(counts) == set(public_tables(con)) | set(views)
        for view in views:
            assert counts[view] == con.execute(f"select count(*) from {view}").fetchone()[0], view
            cols = _columns(con, view)
            theirs = f"select {cols} from {_read_back(out, view)}"
            for a, b in ((f"select {cols} from {view}", theirs), (theirs, f"select {cols} from {view}")):
                assert con.execute(f"select count(*) from ({a} except all {b})").fetchone()[0] == 0, view
        assert counts["memory_peak"] > 0 and counts["gmm_imbalance"] > 0
    finally:
        con.close()
    assert list((out / "memory_peak").glob("run=*/role=*/rank_id=*/*.parquet"))
    assert json.loads((out / MARKER).read_text())["views"] == views
    tables_only = export_parquet(warehouse, tmp_path / "plain")
    assert "memory_peak" not in tables_only and not (tmp_path / "plain" / "memory_peak").exists()
