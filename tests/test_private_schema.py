"""The schema main holds the public tables and views only (what a BI tool lists); rlwh's
helpers live in the schema internal (migration 0010), in a fresh warehouse and in one
upgraded from before 0010."""

from __future__ import annotations

import functools
import importlib.util

import duckdb
import pytest
from conftest import REPO, copy_fixture
from old_warehouse import MOVED_BY_0010, migrate_the_old_way, undo_0010

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.ingest.runner import ingest
from rlwh.warehouse.schema import PRIVATE_SCHEMA, migrate, migration_files, view_files
from rlwh.warehouse.session import connect_read
from rlwh.warehouse.upgrade import initialize, migration_status

RENAME = REPO / "tools" / "private_schema_rename.py"


def objects(con, schema: str) -> dict[str, set[str]]:
    """Every object of `schema` in con's database, by kind."""
    where = "database_name = current_database() and schema_name = ?"
    return {
        "tables": {r[0] for r in con.execute(f"select table_name from duckdb_tables() where {where}",
                                             [schema]).fetchall()},
        "views": {r[0] for r in con.execute(f"select view_name from duckdb_views() where {where} and not internal",
                                            [schema]).fetchall()},
        "macros": {r[0] for r in con.execute(f"select function_name from duckdb_functions() where {where} "
                                             "and not internal", [schema]).fetchall()},
        "sequences": {r[0] for r in con.execute(f"select sequence_name from duckdb_sequences() where {where}",
                                                [schema]).fetchall()},
        "types": {r[0] for r in con.execute(f"select type_name from duckdb_types() where {where} and not internal",
                                            [schema]).fetchall()},
    }


def assert_main_is_public(con) -> None:
    main = objects(con, "main")
    public_views = {v.name for v in view_files() if v.is_public}
    assert main["views"] == public_views
    assert not [n for names in main.values() for n in names if n.startswith("_")]
    assert main["macros"] == main["sequences"] == main["types"] == set()


def test_a_fresh_warehouse_keeps_its_helpers_out_of_main(fresh_db):
    assert_main_is_public(fresh_db)
    internal = objects(fresh_db, PRIVATE_SCHEMA)
    assert internal["views"] == {v.name.split(".", 1)[1] for v in view_files() if not v.is_public and v.kind == "view"}
    assert {"migrations", "settings", "memory_record_ops", "memory_timeline_rows", "torch_memory_blocks",
            "stack_user_frames"} <= internal["tables"]
    assert internal["sequences"] == {"source_ids"}
    # No helper reads like a public object: an unqualified name inside an internal view
    # would find the helper first.
    main = objects(fresh_db, "main")
    assert not (internal["tables"] | internal["views"]) & (main["tables"] | main["views"])


def test_private_view_files_live_in_sql_internal():
    private = [v for v in view_files() if not v.is_public]
    assert private and all(v.path.parent.name == PRIVATE_SCHEMA for v in private)
    assert all(v.path.parent.name == "sql" for v in view_files() if v.is_public)


def test_a_file_of_macros_in_sql_internal_creates_them_there(tmp_path):
    from rlwh.warehouse.schema import parse_view_file

    (tmp_path / "internal").mkdir()
    path = tmp_path / "internal" / "rules.sql"
    path.write_text("-- Shared rules.\ncreate or replace macro internal.twice(x) as 2 * x;\n")
    rules = parse_view_file(path)
    assert (rules.name, rules.kind, rules.is_public, rules.comment) == ("internal.rules", "macros", False,
                                                                        "Shared rules.")
    path.write_text("create or replace macro twice(x) as 2 * x;\n")
    with pytest.raises(RlwhError, match="schema internal"):
        parse_view_file(path)


def test_a_private_view_file_in_sql_is_refused(tmp_path):
    from rlwh.warehouse.schema import parse_view_file

    (tmp_path / "sql").mkdir()
    path = tmp_path / "sql" / "_helper.sql"
    path.write_text("create or replace view _helper as select 1 as x\n")
    with pytest.raises(RlwhError, match="sql/internal/"):
        parse_view_file(path)


@functools.lru_cache(maxsize=1)
def _rename_script():
    spec = importlib.util.spec_from_file_location("private_schema_rename", RENAME)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rename_script_finds_nothing_left_to_rename(capsys):
    """Every file names the private objects in schema internal (a merged branch that
    still says `_memory_timeline` fails here: run the script)."""
    code = _rename_script().main(["--check"])
    assert code == 0, capsys.readouterr()


def _old_names() -> dict[str, str]:
    return _rename_script().MAPPING


def _columns(con, schema: str, table: str) -> list[tuple]:
    return con.execute("""select column_name, data_type, is_nullable, comment from duckdb_columns()
                          where schema_name = ? and table_name = ? order by column_index""",
                       [schema, table]).fetchall()


# Columns a later migration renames (0011: one name per allocator total).
RENAMED_AFTER_0010 = {"allocated_after_alloc_bytes": "alloc_total_allocated_bytes",
                      "reserved_after_alloc_bytes": "alloc_total_reserved_bytes",
                      "allocated_after_release_bytes": "release_total_allocated_bytes",
                      "reserved_after_release_bytes": "release_total_reserved_bytes"}


def test_0010_moves_every_private_table_of_a_warehouse_made_the_old_way():
    """Migrations 0001-0009 as an older rlwh applied them, then today's migrate(): every
    private object leaves main with its columns, types, nullability and comments."""
    con = duckdb.connect()
    migrate_the_old_way(con, up_to=9)
    before = objects(con, "main")
    private_before = {n for kind in before.values() for n in kind if n.startswith("_")}
    names = _old_names()
    old_tables = {t: (_columns(con, "main", t), con.execute(
        "select comment from duckdb_tables() where schema_name = 'main' and table_name = ?", [t]).fetchone()[0])
        for t in before["tables"] if t.startswith("_")}
    assert set(old_tables) == {"_rlwh_migrations", *MOVED_BY_0010.values()}
    assert migrate(con) == [p.name for v, p in migration_files() if v >= 10]
    assert_main_is_public(con)
    for old, (columns, comment) in old_tables.items():
        schema, table = names[old].split(".")
        renamed = [(RENAMED_AFTER_0010.get(c[0], c[0]), *c[1:]) for c in columns]
        assert _columns(con, schema, table) == renamed, old
        moved_comment = con.execute("select comment from duckdb_tables() where schema_name = ? and table_name = ?",
                                    [schema, table]).fetchone()[0]
        if comment is not None:  # the old text, naming the objects by their new names
            for old_name, new_name in names.items():
                comment = comment.replace(old_name, new_name)
            assert moved_comment == comment, old
    assert private_before - set(names) == set()  # every private object of 0001-0009 has a new name


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """A warehouse of a PyTorch profile and an Ascend one, as today's rlwh writes it."""
    tmp = tmp_path_factory.mktemp("private")
    config = Config(db_path=tmp / "w.duckdb", workers=1)
    for fixture, run in (("torch_profile", "torch"), ("rl-insight-samples/memory_data", "ascend")):
        assert ingest(copy_fixture(fixture, tmp / run), config, run=run).failed == 0
    return config


@pytest.mark.slow
def test_upgrading_a_warehouse_from_before_0010_keeps_its_rows(loaded, tmp_path):
    db = tmp_path / "old.duckdb"
    db.write_bytes(loaded.db_path.read_bytes())
    config = Config(db_path=db, workers=1)
    con = duckdb.connect(str(db))
    views = ("memory_peak", "memory_blocks", "memory_timeline", "memory_alloc_stack")
    want = {v: con.execute(f"select * from {v} order by all").fetchall() for v in views}
    assert all(want.values())
    rows = {new: con.execute(f"select * from {new} order by all").fetchall() for new in MOVED_BY_0010}
    last_id = con.execute("select max(source_id) from sources").fetchone()[0]
    undo_0010(con)
    con.execute("update _rlwh_settings set value = 'kept' where name = 'gmm_ops_per_layer'")
    assert "internal" not in {r[0] for r in con.execute("select schema_name from duckdb_schemas()").fetchall()}
    con.close()
    # Read-only, an old warehouse says what it has and asks for an upgrade.
    status = dict(migration_status(config))
    assert status["0006_create_usage_and_snapshot_tables.sql"] is not None
    assert status["0010_private_objects_in_their_own_schema.sql"] is None
    with pytest.raises(RlwhError, match="rlwh init"):
        connect_read(config)
    con = duckdb.connect(str(db))
    assert migrate(con) == ["0010_private_objects_in_their_own_schema.sql", "0011_one_name_per_allocator_total.sql",
                            "0012_collective_seq_shared_across_ranks.sql", "0013_create_communication_links.sql",
                            "0014_reload_ascend_device_sources.sql", "0015_create_collective_transfers.sql",
                            "0016_create_stack_texts.sql", "0017_nvtx_ranges_are_phases.sql"]
    assert_main_is_public(con)
    assert con.execute("select value from internal.settings where name = 'gmm_ops_per_layer'").fetchone() == ("kept",)
    for new, old_rows in rows.items():
        if new != "internal.settings":
            assert con.execute(f"select * from {new} order by all").fetchall() == old_rows, new
    for view in views:
        assert con.execute(f"select * from {view} order by all").fetchall() == want[view], view
    assert con.execute("select nextval('internal.source_ids')").fetchone()[0] > last_id
    con.close()
    # What `rlwh init` does afterwards: nothing left to apply, the warehouse reads as before.
    assert initialize(config) == []
    con = connect_read(config)
    assert con.execute("select * from memory_peak order by all").fetchall() == want["memory_peak"]
    con.close()


@pytest.mark.slow
def test_an_ingest_after_the_upgrade_gives_new_ids(loaded, tmp_path):
    """internal.source_ids carries on after the ids _source_ids gave: a new file never
    takes an old file's id."""
    db = tmp_path / "old.duckdb"
    db.write_bytes(loaded.db_path.read_bytes())
    con = duckdb.connect(str(db))
    undo_0010(con)
    old = dict(con.execute("select path, source_id from sources").fetchall())
    con.close()
    more = copy_fixture("gmm_dump", tmp_path / "more")
    summary = ingest(more, Config(db_path=db, workers=1), run="more")
    assert summary.failed == 0
    con = duckdb.connect(str(db), read_only=True)
    new = con.execute("select source_id from sources where run = 'more'").fetchall()
    assert new and min(r[0] for r in new) > max(old.values())
    assert dict(con.execute("select path, source_id from sources where run <> 'more'").fetchall()) == old
    assert_main_is_public(con)
