"""Meta-tests of the schema: migrations, view files, column docs, layering, contract."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import CONTRACT_CHECK, copy_fixture, migrated_file, migrated_memory

from rlwh.assets import asset_dir
from rlwh.errors import RlwhError
from rlwh.ingest.runner import ingest
from rlwh.warehouse import schema as wh_schema
from rlwh.warehouse.schema import MIGRATION_NAME, migrate, migration_files, view_files


def test_migrations_are_numbered_without_gaps():
    names = sorted(p.name for p in asset_dir("migrations").glob("*.sql"))
    numbers = [int(MIGRATION_NAME.match(n).group(1)) for n in names]
    assert numbers == list(range(1, len(names) + 1))


def test_migrations_hold_no_views():
    for path in asset_dir("migrations").glob("*.sql"):
        assert not re.search(r"create\s+(or\s+replace\s+)?view", path.read_text(), re.I), path.name


def test_migrate_twice_is_a_no_op():
    """A migrated warehouse (the template: test_a_new_warehouse_from_the_template_equals_
    the_migrations_applied_one_by_one holds it equal to one) has nothing left to apply."""
    assert migrate(migrated_memory()) == []


def test_view_files_only_declare():
    for view in view_files():
        body = "\n".join(ln for ln in view.sql.splitlines() if not ln.strip().startswith("--")).lower()
        assert not re.search(r"\b(insert|delete|drop|update|copy|attach)\b", body), view.path.name
        assert body.count("create or replace view") == (0 if view.kind == "macros" else 1), view.path.name


def test_every_public_object_and_column_has_a_comment(fresh_db):
    undocumented = fresh_db.execute(
        """select table_name, column_name from duckdb_columns()
           where schema_name = 'main' and database_name = current_database()
             and (comment is null or comment = '')"""
    ).fetchall()
    assert undocumented == []
    objects = fresh_db.execute(
        """select schema_name, table_name from duckdb_tables() where comment is null
           union all select schema_name, view_name from duckdb_views()
           where not internal and schema_name in ('main', 'internal') and comment is null"""
    ).fetchall()
    assert objects == []


# Private derived tables (migrations/0003) count as tables the views may read.
# Every table a migration creates (views may read those, and other views, nothing else).
BASE_TABLES = {m.group(1) for path in (Path(__file__).resolve().parent.parent / "migrations").glob("*.sql")
               for m in re.finditer(r"create table (?:if not exists )?((?:[a-z_][a-z0-9_]*\.)?[a-z_][a-z0-9_]*)",
                                     path.read_text(), re.I)}


def test_views_read_only_base_tables_and_views():
    names = {v.name for v in view_files()}
    for view in view_files():
        code = "\n".join(ln.split("--")[0] for ln in view.sql.lower().splitlines())
        # "is [not] distinct from x" compares values; it names no table.
        code = re.sub(r"\bdistinct\s+from\b", "distinct_from", code)
        referenced = set(re.findall(r"\b(?:from|join)\s+((?:[a-z_][a-z0-9_]*\.)?[a-z_][a-z0-9_]*)", code))
        ctes = set(re.findall(r"\b([a-z_][a-z0-9_]*)\s+as\s+(?:(?:not\s+)?materialized\s+)?\(", code))
        unknown = referenced - ctes - names - BASE_TABLES
        assert not unknown, f"{view.path.name} reads {unknown}"
        for dep in referenced & names:
            assert dep in view.depends, f"{view.path.name} uses {dep} without `-- depends: {dep}`"


def test_contract_check_passes_on_a_migrated_warehouse(tmp_path):
    db = tmp_path / "w.duckdb"
    migrated_file(db).close()
    checker = CONTRACT_CHECK
    result = subprocess.run([sys.executable, str(checker), str(db), "--groups", "memory,timelines,gmm"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_public_column_is_hugeint(fresh_db):
    """sum() gives HUGEINT, which BI tools and pandas read badly: views cast to BIGINT."""
    wide = fresh_db.execute(
        "select table_name, column_name from duckdb_columns() where data_type = 'HUGEINT'"
        " and schema_name = 'main'").fetchall()
    assert wide == []


@pytest.mark.slow
def test_upgrading_an_older_warehouse_fills_the_derived_tables(tmp_path):
    """A warehouse loaded before migration 0003 answers the memory views right after it."""
    from conftest import copy_fixture
    from old_warehouse import downgrade_to_0002

    from rlwh.config import Config
    from rlwh.ingest.runner import ingest
    from rlwh.warehouse.upgrade import initialize

    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path / "profile")
    db = tmp_path / "w.duckdb"
    ingest(profile, Config(db_path=db))
    con = duckdb.connect(str(db))
    want = con.execute("select * from memory_peak order by all").fetchall()
    stacks = con.execute("select count(call_stack) from memory_alloc_stack").fetchone()[0]
    assert want and stacks > 0
    # Back to the state before 0003: no derived tables, none of 0004's columns, no record
    # of either migration (nor of 0010, which moved the derived tables out of main).
    downgrade_to_0002(con)
    con.close()
    # What `rlwh init` does: the storage layer migrates, the writer fills the derived tables.
    applied = initialize(Config(db_path=db))
    assert applied == ["0003_create_derived_memory.sql", "0004_stacks_innermost_first_and_autograd_links.sql",
                       "0010_private_objects_in_their_own_schema.sql", "0011_one_name_per_allocator_total.sql",
                       "0012_collective_seq_shared_across_ranks.sql", "0013_create_communication_links.sql",
                       "0014_reload_ascend_device_sources.sql", "0015_create_collective_transfers.sql",
                       "0016_create_stack_texts.sql", "0017_nvtx_ranges_are_phases.sql"]
    con = duckdb.connect(str(db))
    assert con.execute("select * from memory_peak order by all").fetchall() == want
    assert con.execute("select count(call_stack) from memory_alloc_stack").fetchone()[0] == stacks


@pytest.mark.slow
def test_migration_0004_turns_pytorch_stacks_innermost_first(tmp_path):
    """A warehouse that stored PyTorch stacks outermost first reads like a fresh ingest after 0004."""
    from conftest import copy_fixture
    from old_warehouse import downgrade_to_0002

    from rlwh.config import Config
    from rlwh.ingest.runner import ingest
    from rlwh.warehouse.upgrade import initialize

    profile = copy_fixture("torch_profile", tmp_path / "profile")
    db = tmp_path / "w.duckdb"
    ingest(profile, Config(db_path=db))
    con = duckdb.connect(str(db))
    own_stacks = ("select b.capture, b.origin_row, s.stack from internal.torch_memory_blocks b"
                  " join call_stacks s on b.op_stack_id = s.stack_id order by all")
    fresh = con.execute(own_stacks).fetchall()
    stacks = con.execute("select o.name, o.ts_ns, s.stack from cpu_ops o join call_stacks s using (stack_id)"
                         " order by all").fetchall()
    assert fresh and stacks
    # What rlwh wrote before 0004: the same frames, outermost first, under their own ids.
    con.execute("""create temp table old as select stack_id as new_id,
        array_to_string(list_reverse(string_split(stack, chr(10))), chr(10)) as stack from call_stacks""")
    con.execute("""create temp table old_ids as select new_id, stack, (md5_number_lower(stack) >> 1)::bigint as old_id,
        split_part(stack, chr(10), 1) as top, len(string_split(stack, chr(10)))::integer as depth from old""")
    con.execute("insert or ignore into call_stacks select old_id, stack, top, depth from old_ids")
    con.execute("update cpu_ops set stack_id = o.old_id from old_ids o where cpu_ops.stack_id = o.new_id")
    con.execute("update torch_memory_events set stack_id = o.old_id from old_ids o"
                " where torch_memory_events.stack_id = o.new_id")
    con.execute("delete from call_stacks where stack_id in (select new_id from old_ids)")
    downgrade_to_0002(con)
    con.close()
    initialize(Config(db_path=db))  # migrates, then fills the derived tables
    con = duckdb.connect(str(db))
    assert con.execute("select o.name, o.ts_ns, s.stack from cpu_ops o join call_stacks s using (stack_id)"
                       " order by all").fetchall() == stacks
    assert con.execute(own_stacks).fetchall() == fresh  # each block's op stack, innermost first again


# The parts of DESIGN.md's contract that ../shared/tools/contract_check.py does not list yet.
KEY = ["run", "role", "rank_id", "capture"]
CONTRACT_BEYOND_THE_CHECKER = {
    "memory_usage": KEY + ["component", "ts_ns", "total_allocated_bytes", "total_reserved_bytes",
                           "total_active_bytes", "device"],
    "npu_module_memory": KEY + ["module", "ts_ns", "total_reserved_bytes", "device"],
    "step_times": KEY + ["step", "computing_ns", "communication_not_overlapped_ns", "overlapped_ns", "free_ns",
                         "stage_ns", "bubble_ns", "preparing_ns"],
    "snapshot_segments": KEY + ["device", "address", "total_size_bytes", "allocated_bytes", "active_bytes",
                                "segment_type", "stream"],
    "snapshot_blocks": KEY + ["device", "address", "size_bytes", "requested_bytes", "state", "stack_id"],
    "cpu_ops": ["seq_no", "fwd_tid"],
    "memory_alloc_stack": ["user_frame", "stack_source", "op_stack_id", "stack_id"],
    "memory_blocks": ["capture", "user_frame", "stack_source", "allocator", "release_inferred", "clock"],
    "memory_timeline": ["allocator", "allocator_live_bytes", "user_frame", "stack_source", "clock"],
    "memory_peak": ["clock"],
    "memory_peak_breakdown": ["user_frame"],
    "memory_unreleased": ["user_frame"],
}


def test_the_rest_of_the_contract_exists_with_comments(fresh_db):
    comments = {(t, c): comment for t, c, comment in fresh_db.execute(
        "select table_name, column_name, comment from duckdb_columns()").fetchall()}
    missing = [f"{table}.{column}" for table, columns in CONTRACT_BEYOND_THE_CHECKER.items() for column in columns
               if not comments.get((table, column))]
    assert missing == []


@pytest.mark.slow
def test_rows_from_before_0005_are_reloaded_by_the_next_ingest(tmp_path):
    """Captures were file names before 0005, so two steps' traces of one rank merged; after
    the upgrade the next ingest reads every file again and names captures by their path."""
    from conftest import copy_fixture

    from rlwh.config import Config
    from rlwh.ingest.runner import ingest

    root = tmp_path / "run"
    for step in ("1", "2"):  # VeRL's <save_path>/<step>/<role>/prof_rank-<k>.json.gz
        copy_fixture("torch_profile/actor_update", root / step)
    db = tmp_path / "w.duckdb"
    config = Config(db_path=db, workers=1)
    ingest(root, config)
    con = duckdb.connect(str(db))
    # What the old release left: captures named by the file alone, no step columns, 0005 pending.
    for schema, view in con.execute("select schema_name, view_name from duckdb_views() where not internal").fetchall():
        con.execute(f"drop view {schema}.{view}")
    for table in ("cpu_ops", "memory_records", "ranges", "torch_memory_events", "ranks",
                  "internal.memory_timeline_rows", "internal.torch_memory_blocks", "internal.memory_record_ops"):
        con.execute(f"update {table} set capture = regexp_extract(capture, '[^/]+$')")
    for table in ("sources", "ranks", "memory_records", "cpu_ops", "ranges", "torch_memory_events"):
        con.execute(f"alter table {table} drop column step")
    con.execute("alter table ranges drop column clock")
    con.execute("delete from internal.migrations where version = 5")
    assert "0005_add_step_and_clock.sql" in migrate(con)
    con.close()
    summary = ingest(root, config)
    assert sum(r.status == "unchanged" for r in summary.results) == 0  # every file read again
    con = duckdb.connect(str(db), read_only=True)
    captures = {c for (c,) in con.execute("select distinct capture from memory_peak").fetchall()}
    assert captures == {f"{step}/actor_update/prof_rank-{k}.pt.trace.json.gz" for step in "12" for k in "01"}
    assert con.execute("select count(*) from cpu_ops where capture not like '%/%'").fetchone()[0] == 0


def test_key_columns_mean_one_thing_everywhere(fresh_db):
    """run, role, rank_id, capture, step and source_id carry one comment in every public
    table and view, so no BI user reads two meanings of a key."""
    rows = fresh_db.execute(
        """select column_name, comment, list(table_name order by table_name) from duckdb_columns()
           where schema_name = 'main'
             and column_name in ('run', 'role', 'rank_id', 'capture', 'step', 'source_id')
           group by all order by all""").fetchall()
    by_key: dict[str, list] = {}
    for column, comment, objects in rows:
        by_key.setdefault(column, []).append((comment, objects))
    assert sorted(by_key) == ["capture", "rank_id", "role", "run", "source_id", "step"]
    split = {key: texts for key, texts in by_key.items() if len(texts) != 1 or not texts[0][0]}
    assert split == {}


def test_migrate_makes_the_schema_in_one_transaction(monkeypatch):
    """A view that fails to install takes every migration of the new file with it: nothing
    half-made is left (one transaction), and the error names the view file."""
    con = duckdb.connect()
    real = wh_schema.view_files

    def broken():
        views = real()
        bad = views[-1]
        oops = wh_schema.ViewFile(bad.name, bad.path, "create or replace view oops as select * from nowhere", [], "")
        return views[:-1] + [oops]

    monkeypatch.setattr(wh_schema, "view_files", broken)
    with pytest.raises(RlwhError, match=r"sql/.*\.sql failed"):
        migrate(con)
    assert con.execute("select count(*) from duckdb_tables()").fetchone()[0] == 0
    assert con.execute("select count(*) from duckdb_views() where not internal").fetchone()[0] == 0
    monkeypatch.undo()
    assert migrate(con) == [path.name for _, path in migration_files()]


def test_views_are_installed_only_when_their_files_change(monkeypatch):
    con = migrated_memory()
    digest = con.execute("select value from internal.settings where name = 'installed_views'").fetchall()
    assert digest == [(wh_schema.views_digest(),)]
    calls = []
    real = wh_schema.install_views
    monkeypatch.setattr(wh_schema, "install_views", lambda c: (calls.append(1), real(c)))
    assert migrate(con) == [] and calls == []  # unchanged: no view re-created
    # A view file that differs from the one installed (a newer rlwh): installed again.
    con.execute("update internal.settings set value = 'another rlwh' where name = 'installed_views'")
    con.execute("create or replace view memory_peak as select 1 as stale")
    assert migrate(con) == [] and calls == [1]
    assert "stale" not in [r[0] for r in con.execute("describe memory_peak").fetchall()]
    assert con.execute("select value from internal.settings where name = 'installed_views'").fetchall() == digest


def test_a_reingest_of_a_changed_file_installs_no_views(config, tmp_path, monkeypatch):
    profile = copy_fixture("real/kineto/hta/amd_trace", tmp_path / "p")
    assert ingest(profile, config).failed == 0
    calls = []
    real = wh_schema.install_views
    monkeypatch.setattr(wh_schema, "install_views", lambda c: (calls.append(1), real(c)))
    trace = next(profile.rglob("*.json.gz"))
    os.utime(trace, (trace.stat().st_atime, trace.stat().st_mtime + 10))
    summary = ingest(profile, config)
    assert summary.failed == 0 and sum(r.rows for r in summary.results) > 0  # the file was loaded again
    assert calls == []


def _catalog(con) -> dict[str, list]:
    """Every object of the file as DuckDB describes it: tables, columns, views, constraints,
    indexes, sequences, macros (their SQL and comments), and rlwh's own bookkeeping rows."""
    here = "database_name = current_database() and not internal"
    return {
        "tables": con.execute(f"select schema_name, table_name, comment, sql from duckdb_tables() where {here} "
                              "order by all").fetchall(),
        "columns": con.execute(
            "select schema_name, table_name, column_index, column_name, data_type, column_default, is_nullable, "
            f"comment from duckdb_columns() where {here} order by all").fetchall(),
        "views": con.execute(f"select schema_name, view_name, comment, sql from duckdb_views() where {here} "
                             "order by all").fetchall(),
        "constraints": con.execute("select schema_name, table_name, constraint_type, constraint_text "
                                   "from duckdb_constraints() where database_name = current_database() "
                                   "order by all").fetchall(),
        "indexes": con.execute("select schema_name, table_name, index_name, sql from duckdb_indexes() "
                               "where database_name = current_database() order by all").fetchall(),
        "sequences": con.execute("select schema_name, sequence_name, start_value, increment_by from "
                                 "duckdb_sequences() where database_name = current_database() order by all").fetchall(),
        "macros": con.execute("select schema_name, function_name, function_type, macro_definition, comment "
                              "from duckdb_functions() where database_name = current_database() and not internal "
                              "order by all").fetchall(),
        "migrations": con.execute("select version, name from internal.migrations order by all").fetchall(),
        "settings": con.execute("select * from internal.settings order by all").fetchall(),
    }


def test_a_new_warehouse_from_the_template_equals_the_migrations_applied_one_by_one(tmp_path, monkeypatch):
    """A new warehouse starts as a copy of the schema template (rlwh.warehouse.template): it
    must hold exactly what the migrations give when each is applied and committed on its own
    and the views are installed after them, as rlwh did before the template."""
    from rlwh.config import Config
    from rlwh.warehouse.session import working_copy
    from rlwh.warehouse.storage import connect_writable

    monkeypatch.setenv("RLWH_CACHE_DIR", str(tmp_path / "cache"))
    config = Config(db_path=tmp_path / "new.duckdb", workers=1)
    with working_copy(config) as session:  # a new file: copied from the template, built now
        assert session.applied == [path.name for _, path in migration_files()]
        assert session.changed
    assert list((tmp_path / "cache").glob("schema-*.duckdb"))
    one_by_one = connect_writable(tmp_path / "one_by_one.duckdb")
    one_by_one.execute("create schema internal")
    one_by_one.execute("create table internal.migrations (version integer primary key, name varchar not null, "
                       "applied_at timestamp not null)")
    one_by_one.execute("comment on table internal.migrations is "
                       "'The migrations (migrations/*.sql) this warehouse has, and when each was applied.'")
    for version, path in migration_files():
        one_by_one.execute("begin transaction")
        one_by_one.execute(path.read_text(encoding="utf-8"))
        one_by_one.execute("insert into internal.migrations values (?, ?, now())", [version, path.name])
        one_by_one.execute("commit")
    wh_schema.install_views(one_by_one)
    one_by_one.executemany("insert into internal.settings values (?, ?)", list(config.view_settings().items()))
    # Both read back from disk: DuckDB prints a view it has just bound with other parentheses.
    one_by_one.execute("checkpoint")
    one_by_one.close()
    one_by_one = duckdb.connect(str(tmp_path / "one_by_one.duckdb"), read_only=True)
    made = duckdb.connect(str(config.db_path), read_only=True)
    got, want = _catalog(made), _catalog(one_by_one)
    assert want["tables"] and want["views"] and want["columns"] and want["macros"]
    for kind in want:
        assert got[kind] == want[kind], kind
    # Dated when this warehouse was made, not when the template was.
    stamped = made.execute("select min(applied_at) from internal.migrations").fetchone()[0]
    built = min(p.stat().st_mtime for p in (tmp_path / "cache").glob("schema-*.duckdb"))
    assert stamped.timestamp() >= built - 1


def test_a_new_warehouse_is_made_in_place_when_no_template_can_be_written(tmp_path, monkeypatch):
    from rlwh.config import Config
    from rlwh.warehouse.session import working_copy

    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("RLWH_CACHE_DIR", str(blocked / "cache"))
    config = Config(db_path=tmp_path / "w.duckdb", workers=1)
    with working_copy(config) as session:
        assert session.applied == [path.name for _, path in migration_files()]
    con = duckdb.connect(str(config.db_path), read_only=True)
    assert con.execute("select count(*) from duckdb_views() where view_name = 'memory_peak'").fetchone()[0] == 1
    assert con.execute("select value from internal.settings where name = 'installed_views'").fetchone()[0] == \
        wh_schema.views_digest()


def test_a_table_is_looked_up_in_the_current_database_without_harm_to_its_transaction():
    """is_thin, the migrations' checks and the readers' temp tables look a table or view up by
    name (rlwh.sqltext.has_relation): a name that is not there answers False without aborting
    the transaction migrate asks in, leaves DuckDB's "did you mean" setting as it was, a name
    without its schema means main's, and a table of another attached database is not this one's
    (unless its catalog is named, as landing asks the warehouse it attached)."""
    from rlwh.sqltext import has_relation

    con = duckdb.connect()
    try:
        con.execute("create schema internal; create table internal.t (a int); create table main.m (a int)")
        con.execute("create temp table tt (a int); create temp view tv as select 1")
        con.execute("attach ':memory:' as other; create schema other.internal; create table other.internal.o (a int)")
        con.execute("set catalog_error_max_schemas = 7")
        con.execute("begin transaction")
        assert has_relation(con, "internal.t")
        assert not has_relation(con, "internal.missing")
        assert not has_relation(con, "nowhere.missing")
        assert has_relation(con, "m") and has_relation(con, "main.m")
        assert not has_relation(con, "t")  # internal's, not main's
        assert not has_relation(con, "internal.o")  # the other database's
        assert has_relation(con, "other.internal.o") and not has_relation(con, "other.internal.t")  # named
        assert has_relation(con, "temp.tt") and has_relation(con, "temp.tv")
        assert not has_relation(con, "temp.m")  # main's table is no temp one
        con.execute("insert into internal.t values (1)")  # the transaction still takes writes
        con.execute("commit")
        assert con.execute("select count(*) from internal.t").fetchone() == (1,)
        assert con.execute("select current_setting('catalog_error_max_schemas')").fetchone() == (7,)
    finally:
        con.close()


def test_a_read_connection_suggests_names_again_and_a_writer_does_not(config, demo_warehouse):
    """connect_read looks for DuckDB's "did you mean" names in a missing name's own schema for
    its own lookups only: a user's query on it (rlwh query) gets other schemas' names too; a
    writer's connection, whose SQL is rlwh's own, keeps to the own schema
    (sqltext.no_suggestions: the first look through every schema costs ~6 ms)."""
    from rlwh.warehouse.session import connect_read, working_copy

    config.db_path.parent.mkdir(parents=True)
    shutil.copy(demo_warehouse, config.db_path)
    con = connect_read(config)
    try:  # a name of another schema is suggested only while the lists are on
        with pytest.raises(duckdb.CatalogException, match='Did you mean "internal.memory_timeline_rows"'):
            con.execute("select * from memory_timeline_rows")
    finally:
        con.close()
    with working_copy(config) as session:
        assert session.con.execute("select current_setting('catalog_error_max_schemas')").fetchone() == (0,)


def test_view_files_are_read_again_when_one_changes(tmp_path, monkeypatch):
    """view_files() parses the files once per process while they stay as they are (every
    migrate asks); a file changed since is read again."""
    folder = tmp_path / "sql"
    shutil.copytree(asset_dir("sql"), folder)
    monkeypatch.setattr(wh_schema, "asset_dir", lambda name: folder if name == "sql" else asset_dir(name))
    before = {v.name: v.sql for v in view_files()}
    assert before == {v.name: v.sql for v in view_files()}
    changed = folder / "memory_peak.sql"
    changed.write_text(changed.read_text(encoding="utf-8").replace("select", "select /* changed */", 1),
                       encoding="utf-8")
    after = {v.name: v.sql for v in view_files()}
    assert "/* changed */" in after["memory_peak"] and "/* changed */" not in before["memory_peak"]
    assert {k: v for k, v in after.items() if k != "memory_peak"} == {
        k: v for k, v in before.items() if k != "memory_peak"}
