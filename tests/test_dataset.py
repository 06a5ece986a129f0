"""rlwh.parquet.dataset: a Parquet dataset of generations, its atomic publication and the thin file.

A normal warehouse of the demo profile (every source kind, 2 roles x 2 ranks and the
critic) is cut into groups, one per (run, role, rank_id, capture) with the call stacks
its rows use (so stacks repeat across groups), plus one per run holding its `runs` row
and the stacks no row uses. Published, the thin DuckDB file over the dataset must
answer every table and view exactly as the warehouse does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from conftest import REPO
from pauses import wait_stopped

from rlwh import report
from rlwh.cli import cli
from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.parquet import dataset
from rlwh.parquet.export import export_parquet, public_tables, public_views
from rlwh.warehouse.session import connect_read, write_session

pytestmark = pytest.mark.slow  # every test reads a dataset cut from the demo warehouse
RUN = "demo"  # conftest.demo_warehouse
SHELL = Path(sys.executable).parent / "duckdb"  # the pinned duckdb-cli of the environment under test


def _config(db: Path, **more) -> Config:
    return Config(db_path=db, workers=1, lock_timeout=5, **more)


@pytest.fixture(scope="module")
def warehouse(demo_warehouse, tmp_path_factory) -> Path:
    """A copy of the session's demo warehouse (conftest), with one stray sources row."""
    tmp = tmp_path_factory.mktemp("dataset")
    config = _config(tmp / "wh" / "warehouse.duckdb")
    config.db_path.parent.mkdir()
    shutil.copyfile(demo_warehouse, config.db_path)
    with write_session(config) as session:  # a sources row with no role and no rank: NULL partitions
        session.con.execute(
            """insert into sources select * replace (nextval('internal.source_ids') as source_id, null as role,
                 null as rank_id, 'stray.pt' as path, 'failed' as status) from sources limit 1""")
        session.changed = True
    return config.db_path


def _where(columns: list[str]) -> str:
    return " and ".join(f"{k} is not distinct from ${k}" for k in ("run", "role", "rank_id", "capture")
                        if k in columns)


def _gid(*key) -> str:
    return "g-" + hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def make_groups(db: Path, dest: Path) -> dict[str, Path]:
    """One group per (run, role, rank_id, capture) with the stacks its rows name; one per run."""
    tables = dataset.dataset_tables()
    keyed = {t: [c for c, _ in cols] for t, cols in tables.items() if "rank_id" in [c for c, _ in cols]}
    con = duckdb.connect(str(db), read_only=True)
    groups: dict[str, Path] = {}
    try:
        keys = set()
        for table in keyed:
            keys |= set(con.execute(f"select distinct run, role, rank_id, capture from {table}").fetchall())
        con.execute("create temp table used (stack_id bigint)")
        for run, role, rank_id, capture in sorted(keys, key=repr):
            folder = dest / _gid(run, role, rank_id, capture)
            folder.mkdir(parents=True)
            params = {"run": run, "role": role, "rank_id": rank_id, "capture": capture}
            con.execute("delete from used")
            for table, columns in keyed.items():
                select = f"select * from {table} where {_where(columns)}"
                if con.execute(f"select count(*) from ({select})", params).fetchone()[0]:
                    con.execute(f"copy ({select}) to '{folder / (table + '.parquet')}' (format parquet)", params)
                for col in (c for c in columns if c.endswith("stack_id")):
                    con.execute(f"insert into used select {col} from ({select}) where {col} is not null", params)
            for table in ("call_stacks", "internal.stack_user_frames"):
                con.execute(f"copy (select * from {table} where stack_id in (select stack_id from used)) "
                            f"to '{folder / (table + '.parquet')}' (format parquet)")
            groups[folder.name] = folder
        for (run,) in con.execute("select run from runs").fetchall():
            folder = dest / _gid(run)
            folder.mkdir(parents=True)
            con.execute(f"copy (select * from runs where run = ?) to '{folder / 'runs.parquet'}' (format parquet)",
                        [run])
            groups[folder.name] = folder
        # Stacks no row names (a trace's unused ones) still belong to the warehouse.
        rest = dest / "g-unreferenced"
        rest.mkdir()
        all_used = " union ".join(f"select {c} from {t}" for t, cols in keyed.items() for c in cols
                                  if c.endswith("stack_id"))
        for table in ("call_stacks", "internal.stack_user_frames"):
            con.execute(f"copy (select * from {table} where stack_id not in ({all_used} where true)) "
                        f"to '{rest / (table + '.parquet')}' (format parquet)")
        groups[rest.name] = rest
    finally:
        con.close()
    return groups


@pytest.fixture(scope="module")
def published(warehouse, tmp_path_factory):
    """The dataset of the demo warehouse, and its thin file."""
    tmp = tmp_path_factory.mktemp("published")
    groups = make_groups(warehouse, tmp / "groups")
    root = tmp / "ds"
    gen = dataset.publish(root, groups)
    thin = tmp / "thin.duckdb"
    dataset.build_thin_db(root, thin)
    return {"root": root, "gen": gen, "thin": thin, "groups": groups}


def _names(con) -> list[str]:
    """The base tables: main's by name, the private ones as internal.<name>."""
    return [r[0] for r in con.execute(
        """select if(schema_name = 'main', table_name, schema_name || '.' || table_name) from duckdb_tables()
           where database_name = current_database() order by 1""").fetchall()]


def _differences(con, name: str, columns: list[str] | None = None) -> tuple[int, int]:
    """Rows of `name` only in the warehouse (attached as wh), only in the thin file (EXCEPT ALL both ways)."""
    cols = ", ".join(f'"{c}"' for c in columns or [r[0] for r in con.execute(f"describe wh.{name}").fetchall()])
    a, b = f"select {cols} from wh.{name}", f"select {cols} from {name if '.' in name else 'main.' + name}"
    # Each side's rows once, into a temp table (a view over Parquet, rank_skew's most of all,
    # took seconds computed again for each direction).
    con.execute(f"create or replace temp table _wh_rows as {a}")
    con.execute(f"create or replace temp table _thin_rows as {b}")
    try:
        return tuple(con.execute(f"select count(*) from (from {x} except all from {y})").fetchone()[0]
                     for x, y in (("_wh_rows", "_thin_rows"), ("_thin_rows", "_wh_rows")))
    finally:
        con.execute("drop table _wh_rows; drop table _thin_rows")


def test_thin_file_answers_every_table_and_view_like_the_warehouse(warehouse, published):
    con = duckdb.connect(str(warehouse), read_only=True)
    thin = duckdb.connect(str(published["thin"]), read_only=True)
    thin.execute(f"attach '{warehouse}' as wh (read_only)")
    try:
        tables, views = _names(con), public_views(con)
        assert {"internal.memory_timeline_rows", "internal.memory_record_ops", "internal.torch_memory_blocks",
                "internal.stack_user_frames", "call_stacks", "memory_records", "sources"} <= set(tables)
        # The rest are views over Parquet; rlwh still tells its tables from its views.
        assert _names(thin) == ["internal.dataset", "internal.migrations", "internal.settings", "internal.stack_texts"]
        assert public_views(thin) == views and public_tables(thin) == public_tables(con)
        assert thin.execute("select root, generation from internal.dataset").fetchall() == [
            (str(published["root"]), "gen-000001")]
        for name in tables + views:
            # Same column names, order and types (a view has no NOT NULL or key to describe).
            described = [(r[0], r[1]) for r in thin.execute(f"describe {name}").fetchall()]
            assert described == [(r[0], r[1]) for r in con.execute(f"describe {name}").fetchall()], name
            if name == "internal.stack_texts":  # the writer's cache, not data: a thin file's is empty
                continue
            count = con.execute(f"select count(*) from {name}").fetchone()[0]
            assert thin.execute(f"select count(*) from {name}").fetchone()[0] == count, name
            if name == "internal.migrations":  # applied when the thin file was made
                assert _differences(thin, name, ["version", "name"]) == (0, 0)
            else:
                assert _differences(thin, name) == (0, 0), name
        for view in ("memory_peak", "memory_alloc_stack", "memory_timeline", "rank_skew", "gmm_imbalance",
                     "memory_peak_breakdown", "role_timeline"):
            assert con.execute(f"select count(*) from {view}").fetchone()[0] > 0, view
        # NULL partitions read back NULL; rank_id is an INTEGER, run and role strings.
        assert thin.execute("select count(*) from sources where role is null and rank_id is null").fetchone()[0] == 1
        assert thin.execute("select typeof(run), typeof(role), typeof(rank_id) from cpu_ops limit 1").fetchone() \
            == ("VARCHAR", "VARCHAR", "INTEGER")
        # Stacks repeat across groups' files, once in the view.
        files = [str(published["root"] / e["path"]) for e in dataset.manifest(published["gen"])["files"]
                 if e["table"] == "call_stacks"]
        stored = duckdb.sql(f"select count(*), count(distinct stack_id) from read_parquet({files})").fetchall()[0]
        assert stored[0] > stored[1] == con.execute("select count(*) from call_stacks").fetchone()[0]
        # Column docs come along.
        assert thin.execute("select comment from duckdb_views() where view_name = 'runs'").fetchone()[0]
    finally:
        con.close()
        thin.close()


def test_manifest_lists_every_file_and_group(published):
    gen, groups = published["gen"], published["groups"]
    m = dataset.manifest(gen)
    assert m["generation"] == 1 and m["rlwh_version"] and m["created_at"] and set(m["groups"]) == set(groups)
    assert m["format"] == 2  # paths relative to the root
    root = published["root"]
    on_disk = sorted(str(p.relative_to(root)) for p in gen.rglob("*.parquet"))
    assert sorted(e["path"] for e in m["files"]) == on_disk
    for entry in m["files"]:
        rows = duckdb.sql(f"select count(*) from read_parquet('{root / entry['path']}')").fetchall()[0][0]
        assert rows == entry["rows"] > 0 and entry["path"].startswith(f"{gen.name}/{entry['table']}/")
        assert re.fullmatch(re.escape(entry["group"]) + r"\.[0-9a-f]{12}_\d+\.parquet", Path(entry["path"]).name)
    assert m["tables"]["memory_records"]["rows"] == sum(e["rows"] for e in m["files"] if e["table"] == "memory_records")
    assert m["tables"]["npu_module_memory"]["rows"] == 0 and not (gen / "npu_module_memory").exists()
    assert [c for c, _ in m["tables"]["npu_module_memory"]["columns"]] == \
        [c for c, _ in dataset.dataset_tables()["npu_module_memory"]]  # a table with no file: its columns
    assert len(dataset.groups_of(published["root"], RUN)) == len(groups) - 1  # all but the unreferenced stacks
    assert dataset.groups_of(published["root"], "nope") == set()
    assert (published["root"] / "current").resolve() == gen.resolve()


def test_thin_views_carry_the_warehouses_comments(warehouse, published):
    """Each table's view in the thin file has the table's comment and column comments: kept
    from the template where the table has files (only the macro naming them changes), given
    again where its view is replaced by one of no rows."""
    def comments(path):
        con = duckdb.connect(str(path), read_only=True)
        try:
            tables = con.execute(
                """select schema_name, table_name, comment from duckdb_tables() where database_name = current_database()
                   union all select schema_name, view_name, comment from duckdb_views()
                   where database_name = current_database() and not internal""").fetchall()
            columns = con.execute(
                """select schema_name, table_name, column_name, comment from duckdb_columns()
                   where database_name = current_database()""").fetchall()
            return {(s, t): c for s, t, c in tables}, {(s, t, c): text for s, t, c, text in columns}
        finally:
            con.close()

    normal_tables, normal_columns = comments(warehouse)
    thin_tables, thin_columns = comments(published["thin"])
    gen = published["gen"]
    with_files = {e["table"] for e in dataset.manifest_files(gen, dataset.manifest(gen))}
    qualified = {(s, t): t if s == "main" else f"{s}.{t}" for s, t in normal_tables}
    kept = [k for k, name in qualified.items() if name not in dataset.THIN_TABLES]
    assert {qualified[k] for k in kept} & with_files and {qualified[k] for k in kept} - with_files  # both kinds
    for key in kept:
        assert thin_tables[key] == normal_tables[key], key
        assert normal_tables[key], key
    for (s, t, c), text in normal_columns.items():
        if (s, t) in kept:
            assert thin_columns[(s, t, c)] == text, (s, t, c)


def test_the_duckdb_shell_opens_the_thin_file(warehouse, published):
    sql = "select role, rank_id, peak_live_bytes from memory_peak order by all"
    version = subprocess.run([str(SHELL), "-version"], capture_output=True, text=True, check=True).stdout
    assert version.split()[0].lstrip("v") != duckdb.__version__  # the pinned shell, older than the engine
    got = subprocess.run([str(SHELL), "-readonly", "-csv", str(published["thin"]), "-c", sql],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    con = duckdb.connect(str(warehouse), read_only=True)
    want = con.execute(sql).fetchall()
    con.close()
    assert got.stdout.splitlines()[1:] == [f"{r},{k},{b}" for r, k, b in want] and want


def _objects(con, schema: str) -> list[str]:
    """Every table, view, macro and sequence of `schema`, by name."""
    return sorted(r[0] for r in con.execute(
        """select table_name from duckdb_tables() where schema_name = $s and database_name = current_database()
           union all select view_name from duckdb_views()
           where schema_name = $s and database_name = current_database() and not internal
           union all select function_name from duckdb_functions()
           where schema_name = $s and database_name = current_database() and not internal
           union all select sequence_name from duckdb_sequences()
           where schema_name = $s and database_name = current_database()""", {"s": schema}).fetchall())


def test_thin_file_main_holds_only_public_objects(warehouse, published):
    """A BI tool lists the same objects of main in the thin file as in the warehouse: the
    public tables (here views) and views, no helper; rlwh's own are in internal."""
    con = duckdb.connect(str(warehouse), read_only=True)
    thin = duckdb.connect(str(published["thin"]), read_only=True)
    try:
        main = _objects(thin, "main")
        assert main == _objects(con, "main") and not [n for n in main if n.startswith("_")]
        assert thin.execute("select count(*) from duckdb_tables() where schema_name = 'main'").fetchone()[0] == 0
        # The warehouse's sequence has no use in a thin file; its marker table is its own, and
        # so are the macros naming the files of each table that has some.
        internal = set(_objects(thin, "internal"))
        macros = {n for n in internal if n.startswith("files_of_")}
        assert internal - macros == set(_objects(con, "internal")) - {"source_ids"} | {"dataset"}
        gen = published["gen"]
        with_files = {e["table"] for e in dataset.manifest_files(gen, dataset.manifest(gen))}
        assert macros == {"files_of_" + t.replace(".", "_") for t in with_files} and "files_of_cpu_ops" in macros
    finally:
        con.close()
        thin.close()


def test_rlwh_query_and_connect_read_work_on_the_thin_file(warehouse, published):
    con = connect_read(_config(published["thin"]))
    assert con.execute("select count(*) from memory_alloc_stack").fetchone()[0] > 0
    con.close()
    sql = "select role, rank_id, user_frame, live_bytes from memory_peak_breakdown order by all"
    runner = CliRunner()
    thin = runner.invoke(cli, ["query", sql, "--db", str(published["thin"]), "--format", "csv"])
    normal = runner.invoke(cli, ["query", sql, "--db", str(warehouse), "--format", "csv"])
    assert thin.exit_code == 0 and thin.output == normal.output and len(normal.output.splitlines()) > 2


def test_export_of_the_thin_file_is_the_export_of_the_warehouse(warehouse, published, tmp_path):
    normal = export_parquet(_config(warehouse), tmp_path / "normal", views=True)
    thin = export_parquet(_config(published["thin"]), tmp_path / "thin", views=True)
    assert thin == normal and normal["memory_records"] > 0 and normal["memory_peak"] > 0
    for table in ("memory_records", "call_stacks", "memory_peak", "sources"):
        read = "read_parquet('{}/**/*.parquet', hive_partitioning = true, hive_types_autocast = false)"
        a, b = read.format(tmp_path / "normal" / table), read.format(tmp_path / "thin" / table)
        for x, y in ((a, b), (b, a)):
            extra = duckdb.sql(f"select count(*) from (select * from {x} except all select * from {y})").fetchall()[0]
            assert extra == (0,), table


@pytest.mark.parametrize("paths", [
    ["/d/gen-000001/cpu_ops/run=a/role=b/g.0.parquet", "/d/it's/x.parquet", "/d/é|,[]/y.parquet"],
    ["/d/run=a\nb/x.parquet", "/d/y.parquet"],  # a newline in a folder name: the list literal
    ["/d/only.parquet"],
    [],
])
def test_a_views_path_list_is_the_paths(paths):
    expression = dataset._path_list_sql(paths)
    assert duckdb.sql(f"select {expression}").fetchall() == [(paths,)]


def test_build_thin_db_replaces_a_thin_file_never_a_warehouse(warehouse, published, tmp_path):
    copy = tmp_path / "warehouse.duckdb"
    shutil.copy(warehouse, copy)
    with pytest.raises(RlwhError, match="not a thin file"):
        dataset.build_thin_db(published["root"], copy)
    assert copy.read_bytes() == warehouse.read_bytes()
    thin = tmp_path / "thin.duckdb"
    thin.write_bytes(b"not duckdb")
    with pytest.raises(RlwhError, match="cannot be opened"):
        dataset.build_thin_db(published["root"], thin)
    thin.unlink()
    dataset.build_thin_db(published["root"], thin, settings={"gmm_ops_per_layer": "7", "library_frames": "x"})
    reader = duckdb.connect(str(thin), read_only=True)  # keeps its snapshot across the rebuild
    dataset.build_thin_db(published["root"], thin)
    assert reader.execute("select value from internal.settings where name = 'gmm_ops_per_layer'").fetchone() == ("7",)
    reader.close()
    con = duckdb.connect(str(thin), read_only=True)
    assert con.execute("select value from internal.settings where name = 'gmm_ops_per_layer'").fetchone() != ("7",)
    con.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thin.duckdb", "warehouse.duckdb"]  # no temp left


def _report(db: Path, out: Path) -> dict[str, str]:
    report.build_report(_config(db, reports_dir=out), out=out)
    stamp = re.compile(r"at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
    return {str(p.relative_to(out)): stamp.sub("at T UTC", p.read_text(encoding="utf-8")) for p in out.rglob("*.html")}


@pytest.fixture(scope="module")
def reports(warehouse, published, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reports")
    return _report(warehouse, tmp / "normal"), _report(published["thin"], tmp / "thin")


def test_a_report_renders_from_the_thin_file(reports):
    normal, thin = reports
    assert set(thin) == set(normal) and any("memory_timeline/" in p for p in normal)
    for page in normal:
        if "memory_timeline/" not in page:  # see the next test for those
            assert thin[page] == normal[page], page


def test_memory_pages_draw_memory_usage_from_the_thin_file(reports):
    normal, thin = reports
    pages = [p for p in normal if "memory_timeline/" in p and "from memory_usage" in normal[p]]
    assert pages and all("from memory_usage" in thin[p] for p in pages)


# --- replacing, dropping, pruning, flipping ---------------------------------------------------


def _group_of(groups: dict[str, Path], role: str, rank_id: int) -> str:
    for gid, folder in groups.items():
        if (folder / "ranks.parquet").exists():
            row = duckdb.sql(f"select role, rank_id from '{folder / 'ranks.parquet'}'").fetchall()[0]
            if row == (role, rank_id) and (folder / "cpu_ops.parquet").exists():
                return gid
    raise AssertionError(f"no group for {role} rank {rank_id}")


def _halve_cpu_ops(folder: Path, dest: Path) -> Path:
    """The group again with only the first half of its cpu_ops (a changed re-ingest)."""
    shutil.copytree(folder, dest)
    src = folder / "cpu_ops.parquet"
    duckdb.sql(f"""copy (select * from '{src}' where ts_ns < (select median(ts_ns) from '{src}'))
                   to '{dest / 'cpu_ops.parquet'}' (format parquet)""")
    return dest


def _inodes(gen: Path) -> dict[str, tuple[str, int]]:
    return {e["path"]: (e["group"], (gen.parent / e["path"]).stat().st_ino) for e in dataset.manifest(gen)["files"]}


def _files_on_disk(root: Path) -> set[str]:
    """Every file under the root's generations but their manifests, relative to the root."""
    return {str(p.relative_to(root)) for p in root.glob("gen-*/**/*") if p.is_file() and p.name != dataset.MANIFEST}


def test_replacing_one_group_rewrites_only_its_files(warehouse, published, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(published["root"], root, symlinks=True)
    groups = published["groups"]
    changed = _group_of(groups, "actor_update", 1)
    gone = _group_of(groups, "rollout", 0)
    first = dataset.current_generation(root)
    before = _inodes(first)
    gen = dataset.publish(root, {changed: _halve_cpu_ops(groups[changed], tmp_path / "new")}, drop={gone})
    assert gen.name == "gen-000002" and dataset.current_generation(root) == gen
    after = _inodes(gen)
    assert set(dataset.manifest(gen)["groups"]) == set(groups) - {gone}
    assert {g for g, _ in after.values()} == {g for g, _ in before.values()} - {gone}
    for path, (group, inode) in after.items():
        if group == changed:
            assert path not in before and path.startswith(gen.name + "/")  # written afresh, under a new token
        else:
            assert before[path] == (group, inode), path  # listed where it was: the same file
    assert {(root / p).stat().st_nlink for p in _files_on_disk(root)} == {1}  # nothing linked or copied
    assert changed in dataset.groups_of(root, RUN) and gone not in dataset.groups_of(root, RUN)
    thin = tmp_path / "thin.duckdb"
    dataset.build_thin_db(root, thin)
    con = duckdb.connect(str(thin), read_only=True)
    con.execute(f"attach '{warehouse}' as wh (read_only)")
    try:
        # Exactly: rollout rank 0's capture gone from every table, half of actor_update rank 1's cpu_ops.
        (gone_capture,) = duckdb.sql(f"select capture from '{groups[gone] / 'ranks.parquet'}'").fetchall()[0]
        (changed_capture,) = duckdb.sql(f"select capture from '{groups[changed] / 'ranks.parquet'}'").fetchall()[0]
        for table in ("memory_records", "ranks", "internal.memory_timeline_rows", "ranges", "sources"):
            want = con.execute(f"select count(*) from wh.{table} where capture is distinct from ?",
                               [gone_capture]).fetchone()[0]
            assert con.execute(f"select count(*) from {table}").fetchone()[0] == want, table
        kept = f"select * from wh.cpu_ops where capture is distinct from '{gone_capture}' and not (capture = " \
               f"'{changed_capture}' and ts_ns >= (select median(ts_ns) from wh.cpu_ops where capture = " \
               f"'{changed_capture}'))"
        for a, b in ((kept, "select * from cpu_ops"), ("select * from cpu_ops", kept)):
            assert con.execute(f"select count(*) from ({a} except all {b})").fetchone()[0] == 0
        assert con.execute("select count(*) from memory_peak where role = 'rollout' and rank_id = 0").fetchone()[0] == 0
        for view in ("memory_peak", "memory_peak_breakdown"):  # the other ranks answer as before
            same = f"select * from {{}}.{view} where not (role = 'rollout' and rank_id = 0)"
            for a, b in ((same.format("wh"), same.format("main")), (same.format("main"), same.format("wh"))):
                assert con.execute(f"select count(*) from ({a} except all {b})").fetchone()[0] == 0, view
    finally:
        con.close()
    # Older generations go beyond keep, current never does; a retired folder stays only while
    # it holds files a kept manifest lists, and only those.
    for _ in range(3):
        last = dataset.publish(root, {}, keep=2)
    complete = sorted(p.parent.name for p in root.glob(f"gen-*/{dataset.MANIFEST}"))
    assert complete == ["gen-000004", "gen-000005"]
    assert sorted(p.name for p in root.glob("gen-*")) == ["gen-000001", "gen-000002", "gen-000004", "gen-000005"]
    assert dataset.current_generation(root) == last and _inodes(last) == after  # the same files all along
    assert _files_on_disk(root) == set(after)
    dataset.publish(root, {}, keep=1)
    assert sorted(p.name for p in root.glob("gen-*")) == ["gen-000001", "gen-000002", "gen-000006"]
    assert _files_on_disk(root) == set(after)
    dataset.publish(root, {}, drop=set(groups) - {gone}, keep=1)  # every group gone: so are the files
    assert sorted(p.name for p in root.glob("gen-*")) == ["gen-000007"] and _files_on_disk(root) == set()


def test_the_manifest_knows_the_next_source_id_only_where_it_is_told(published, tmp_path):
    """Groups given without next_source_id hold ids publish cannot see: unknown (readers
    count); told, the larger of it and the previous one's; a publish that only drops keeps it."""
    root = tmp_path / "ds"
    shutil.copytree(published["root"], root, symlinks=True)
    groups = published["groups"]
    one, two, three = (_group_of(groups, "actor_update", 1), _group_of(groups, "rollout", 0),
                       _group_of(groups, "actor_update", 0))

    def next_id() -> int | None:
        return dataset.manifest(dataset.current_generation(root))["next_source_id"]

    assert next_id() is None  # the fixture's groups came without one
    dataset.publish(root, {one: _halve_cpu_ops(groups[one], tmp_path / "a")}, next_source_id=50)
    assert next_id() == 50
    dataset.publish(root, {three: _halve_cpu_ops(groups[three], tmp_path / "b")}, next_source_id=7)
    assert next_id() == 50
    dataset.publish(root, {}, drop={two})
    assert next_id() == 50
    dataset.publish(root, {one: _halve_cpu_ops(groups[one], tmp_path / "c")})
    assert next_id() is None


def test_a_dataset_of_format_1_is_carried_on_and_its_links_retired(published, tmp_path):
    """A generation written before format 2 lists paths inside itself and holds a file of
    every table (an empty one for a table with no rows): the next publish lists its files
    where they are, and retiring it deletes exactly the files no kept manifest lists."""
    root = tmp_path / "ds"
    shutil.copytree(published["root"], root, symlinks=True)
    before = _cpu_ops_rows(root)
    old = root / "gen-000001"
    m = json.loads((old / dataset.MANIFEST).read_text())
    m["format"] = 1
    m["files"] = [{**e, "path": e["path"].removeprefix("gen-000001/")} for e in m["files"]]
    (old / dataset.MANIFEST).write_text(json.dumps(m))
    (old / "npu_module_memory").mkdir()
    duckdb.sql(f"copy (select 1 as x where false) to '{old / 'npu_module_memory' / 'empty.parquet'}' (format parquet)")
    groups = published["groups"]
    changed = _group_of(groups, "actor_update", 1)
    gen = dataset.publish(root, {changed: _halve_cpu_ops(groups[changed], tmp_path / "new")}, keep=1)
    listed = {e["path"] for e in dataset.manifest(gen)["files"]}
    assert all(p.startswith(("gen-000001/", "gen-000002/")) for p in listed)
    assert _files_on_disk(root) == listed and not (old / dataset.MANIFEST).exists()
    assert 0 < _cpu_ops_rows(root) < before
    thin = tmp_path / "thin.duckdb"
    dataset.build_thin_db(root, thin)
    con = duckdb.connect(str(thin), read_only=True)
    try:
        assert con.execute("select count(*) from cpu_ops").fetchone()[0] == _cpu_ops_rows(root)
    finally:
        con.close()


def _cpu_ops_rows(root: Path) -> int:
    """What a direct reader sees by the README's recipe: the current manifest's files, read once."""
    listed = json.loads((root / "current" / dataset.MANIFEST).read_text())["files"]
    files = [str(root / e["path"]) for e in listed if e["table"] == "cpu_ops"]
    return duckdb.sql(f"select coalesce(sum(num_rows), 0) from parquet_file_metadata({files})").fetchall()[0][0]


def test_a_reader_during_publishes_sees_one_whole_generation(published, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(published["root"], root, symlinks=True)
    groups = published["groups"]
    a, b = _group_of(groups, "actor_update", 0), _group_of(groups, "rollout", 1)
    halves = {g: _halve_cpu_ops(groups[g], tmp_path / f"half-{g}") for g in (a, b)}
    full = _cpu_ops_rows(root)
    dataset.publish(root, halves)
    half = _cpu_ops_rows(root)
    mixed = {full - (full - half) // 2, half + (full - half) // 2}  # one group new, the other old
    assert half < full and not mixed & {full, half}
    seen: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            try:
                seen.append(_cpu_ops_rows(root))
            except duckdb.IOException as exc:  # a generation pruned under a slow reader: loud, never mixed
                errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(8):
            dataset.publish(root, {g: groups[g] for g in (a, b)} if i % 2 == 0 else halves, keep=3)
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    assert len(seen) > 20 and set(seen) == {full, half}, sorted(set(seen))
    assert len(errors) <= len(seen) // 10


# --- crashes -----------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["dataset-manifest", "dataset-swap"])
def test_a_publish_killed_before_the_swap_is_invisible_and_cleaned(published, tmp_path, stage):
    root = tmp_path / "ds"
    shutil.copytree(published["root"], root, symlinks=True)
    groups = published["groups"]
    gid = _group_of(groups, "actor_update", 0)
    before = _cpu_ops_rows(root)
    thin = tmp_path / "thin.duckdb"
    dataset.build_thin_db(root, thin)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env.update(PYTHONPATH=str(REPO), RLWH_TEST_PAUSE_AT=stage)
    code = ("import sys; from pathlib import Path; from rlwh.parquet.dataset import publish; "
            "publish(Path(sys.argv[1]), {sys.argv[2]: Path(sys.argv[3])})")
    half = _halve_cpu_ops(groups[gid], tmp_path / "half")
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), gid, str(half)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_stopped(proc, stage)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    half_gen = root / "gen-000002"
    assert half_gen.is_dir() and list(half_gen.rglob("*.parquet"))  # it had written files
    assert (half_gen / dataset.MANIFEST).exists() == (stage == "dataset-swap")
    assert dataset.current_generation(root).name == "gen-000001" and _cpu_ops_rows(root) == before
    con = duckdb.connect(str(thin), read_only=True)
    assert con.execute("select count(*) from cpu_ops").fetchone()[0] == before
    con.close()
    gen = dataset.publish(root, {gid: half})
    assert gen.name == "gen-000003" and not half_gen.exists()
    assert sorted(p.name for p in root.iterdir()) == sorted([dataset.MARKER, dataset.LOCK, "current", "gen-000001",
                                                            "gen-000003"])
    assert _cpu_ops_rows(root) < before


def test_a_publish_killed_while_it_retires_a_generation_is_finished_by_the_next(published, tmp_path):
    """Killed after deleting a retired generation's dead files, before its manifest: the new
    generation is published whole, and the next publish retires the old one again (nothing
    left to delete but its manifest)."""
    root = tmp_path / "ds"
    shutil.copytree(published["root"], root, symlinks=True)
    groups = published["groups"]
    gid = _group_of(groups, "actor_update", 0)
    half = _halve_cpu_ops(groups[gid], tmp_path / "half")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env.update(PYTHONPATH=str(REPO), RLWH_TEST_PAUSE_AT="dataset-prune")
    code = ("import sys; from pathlib import Path; from rlwh.parquet.dataset import publish; "
            "publish(Path(sys.argv[1]), {sys.argv[2]: Path(sys.argv[3])}, keep=1)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(root), gid, str(half)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_stopped(proc, "dataset-prune")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    gen = dataset.current_generation(root)
    assert gen.name == "gen-000002" and (root / "gen-000001" / dataset.MANIFEST).exists()
    listed = {e["path"] for e in dataset.manifest(gen)["files"]}
    assert listed <= _files_on_disk(root)  # the published generation is whole
    dataset.publish(root, {}, keep=1)
    assert _files_on_disk(root) == listed and not (root / "gen-000001" / dataset.MANIFEST).exists()


# --- safety ------------------------------------------------------------------------------


def test_hostile_run_and_role_stay_inside_the_root(published, tmp_path):
    groups = published["groups"]
    src = groups[_group_of(groups, "actor_update", 0)]
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    run, role = "../../escape", "../x/../../y"
    for path in src.iterdir():
        cols = [c for c, _ in dataset.dataset_tables()[path.stem]]
        replace = ", ".join(f"${k} as {k}" for k in ("run", "role") if k in cols)
        select = f"select * replace ({replace}) from '{path}'" if replace else f"select * from '{path}'"
        duckdb.execute(f"copy ({select}) to '{hostile / path.name}' (format parquet)",
                       {k: v for k, v in (("run", run), ("role", role)) if k in cols})
    area = tmp_path / "area"
    area.mkdir()
    root = area / "deep" / "ds"
    gen = dataset.publish(root, {"g-hostile": hostile})
    assert [p.name for p in area.iterdir()] == ["deep"] and [p.name for p in (area / "deep").iterdir()] == ["ds"]
    assert not (tmp_path / "escape").exists() and not (area / "escape").exists() and not (area / "y").exists()
    for path in root.rglob("*"):
        assert path.resolve().is_relative_to(root.resolve())
        assert not path.is_symlink() or path == root / "current"
    thin = tmp_path / "thin.duckdb"
    dataset.build_thin_db(root, thin)
    con = duckdb.connect(str(thin), read_only=True)
    assert con.execute("select distinct run, role from memory_records").fetchall() == [(run, role)]
    con.close()
    assert dataset.groups_of(root, run) == {"g-hostile"} and gen.parent == root


def test_what_publish_refuses_leaves_everything_as_it_was(published, tmp_path):
    groups = published["groups"]
    gid = _group_of(groups, "actor_update", 0)
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    with pytest.raises(RlwhError, match="not an rlwh dataset"):
        dataset.publish(home, {gid: groups[gid]})
    assert [p.name for p in home.iterdir()] == ["thesis.tex"]
    with pytest.raises(RlwhError, match="not an rlwh dataset"):
        dataset.build_thin_db(home, tmp_path / "thin.duckdb")
    root = tmp_path / "ds"
    shutil.copytree(published["root"], root, symlinks=True)
    state = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    bad_folder = tmp_path / "bad"
    bad_folder.mkdir()
    (bad_folder / "memroy_records.parquet").write_bytes(b"")
    wrong_columns = tmp_path / "wrong"
    wrong_columns.mkdir()
    duckdb.sql(f"copy (select 1 as run) to '{wrong_columns / 'ranks.parquet'}' (format parquet)")
    null_role = tmp_path / "nullrole"
    null_role.mkdir()
    duckdb.sql(f"copy (select * replace ('NULL' as role) from '{groups[gid] / 'ranks.parquet'}') "
               f"to '{null_role / 'ranks.parquet'}' (format parquet)")
    two_runs = tmp_path / "tworuns"
    two_runs.mkdir()
    src = groups[gid] / "ranks.parquet"
    duckdb.sql(f"copy (select * from '{src}' union all select * replace ('other' as run) from '{src}') "
               f"to '{two_runs / 'ranks.parquet'}' (format parquet)")
    for groups_arg, drop, match in (
        ({"../x": groups[gid]}, set(), "group id"),
        ({}, {"_hidden"}, "group id"),
        ({gid: groups[gid]}, {gid}, "both given and dropped"),
        ({"g-bad": bad_folder}, set(), "not <table>.parquet"),
        ({"g-wrong": wrong_columns}, set(), "has columns"),
        ({"g-null": null_role}, set(), "reads back as NULL"),
        ({"g-two": two_runs}, set(), "one run"),
    ):
        with pytest.raises(RlwhError, match=match):
            dataset.publish(root, groups_arg, drop=drop)
        assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == state, match
    with pytest.raises(RlwhError, match="key=value"):
        dataset.publish(tmp_path / "a=b" / "ds", {gid: groups[gid]})


def test_a_generation_has_the_layout_of_an_export(warehouse, published, tmp_path):
    out = tmp_path / "export"
    export_parquet(_config(warehouse), out)
    gen = published["gen"]

    def folders(top: Path) -> set[str]:
        return {str(p.relative_to(top)) for p in top.rglob("*") if p.is_dir()}

    exported = json.loads((out / "_rlwh_export.json").read_text())
    m = dataset.manifest(gen)
    for table in exported["rows"]:
        if m["tables"][table]["rows"] == 0:  # the export writes an empty file, a generation lists none
            assert not (gen / table).exists() and (out / table / "empty.parquet").exists(), table
            continue
        assert folders(out / table) == folders(gen / table), table
        assert exported["partition_by"][table] == m["tables"][table]["partition_by"], table
        depth = {len(p.relative_to(out / table).parts) for p in (out / table).rglob("*.parquet")}
        assert depth == {len(p.relative_to(gen / table).parts) for p in (gen / table).rglob("*.parquet")}, table
    assert f"run={RUN}/role=__HIVE_DEFAULT_PARTITION__/rank_id=__HIVE_DEFAULT_PARTITION__" in folders(out / "sources")


def test_a_generation_with_tables_of_an_older_rlwh_is_refused(tmp_path):
    """A dataset written by an older rlwh names a private table as before 0010 (`_memory_timeline`):
    the thin file would answer without its rows, so it is not written."""
    root = tmp_path / "ds"
    gen = root / "gen-000001"
    gen.mkdir(parents=True)
    (root / dataset.MARKER).write_text(json.dumps({"format": dataset.FORMAT}))
    old_name = "_memory_timeline"  # its name before 0010
    (gen / dataset.MANIFEST).write_text(json.dumps({"files": [
        {"path": f"{old_name}/run=r/x.parquet", "table": old_name, "group": "g-1", "rows": 1}], "groups": {}}))
    os.symlink(gen.name, root / dataset.CURRENT)
    with pytest.raises(RlwhError, match="older rlwh"):
        dataset.build_thin_db(root, tmp_path / "thin.duckdb")
    assert not (tmp_path / "thin.duckdb").exists()


def _catalog(db: Path) -> list[tuple]:
    """Every object of the file with its definition and comments, and the settings' names."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        views = con.execute("select schema_name, view_name, comment from duckdb_views() where not internal "
                            "order by all").fetchall()
        columns = con.execute("select schema_name, table_name, column_name, data_type, comment "
                              "from duckdb_columns() where not internal order by all").fetchall()
        settings = con.execute("select name from internal.settings order by all").fetchall()
        peak = con.execute("select count(*), sum(peak_live_bytes) from memory_peak").fetchall()
    finally:
        con.close()
    return [views, columns, settings, peak]


def test_a_thin_file_from_the_cached_template_equals_one_made_in_place(published, tmp_path, monkeypatch):
    """The thin file starts as a copy of a cached template; where the cache folder cannot be
    written it is made in place, with the same objects, comments and answers."""
    copied = tmp_path / "copied.duckdb"
    dataset.build_thin_db(published["root"], copied)
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("RLWH_CACHE_DIR", str(blocked / "cache"))
    in_place = tmp_path / "in_place.duckdb"
    dataset.build_thin_db(published["root"], in_place)
    assert not (blocked / "cache").exists()
    assert _catalog(copied) == _catalog(in_place)
    assert len(_catalog(copied)[0]) > 20 and _catalog(copied)[3][0][0] > 0
