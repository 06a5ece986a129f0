"""`rlwh ingest` in dataset mode: the same answers as a normal warehouse, a changed rank
rewrites only its own files, and the thin file is read like any warehouse.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from pauses import wait_stopped

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.ingest.runner import ingest
from rlwh.parquet import dataset
from rlwh.parquet.export import export_parquet
from rlwh.warehouse.session import connect_read
from rlwh.warehouse.upgrade import initialize
from tests.warehouse_compare import every_table_differences

MEMORY_VIEWS = ("memory_peak", "memory_peak_breakdown", "memory_unreleased", "rank_skew", "role_timeline")


@pytest.fixture
def demo(demo_profile) -> Path:
    return demo_profile


@pytest.fixture(scope="module")
def demo_thin(demo_profile, tmp_path_factory):
    """The demo ingested once in dataset mode (two workers, as the shared demo_warehouse):
    (the thin file's config, the summary). Read it, never write."""
    tmp = tmp_path_factory.mktemp("demo-thin")
    thin = Config(db_path=tmp / "wh-thin.duckdb", dataset=tmp / "wh.dataset", workers=2, lock_timeout=5)
    return thin, _ok(ingest(demo_profile, thin, run="demo"))


def _small_profile(demo: Path, dest: Path) -> Path:
    """The demo's Ascend ranks (two roles, two ranks each) and PyTorch files, without its
    144 GMM dumps: the same formats and partitions for a fraction of the ingest time."""
    for part in ("ascend", "torch"):
        shutil.copytree(demo / part, dest / part)
    return dest


def _ascend_profile(demo: Path, dest: Path) -> Path:
    """The demo's Ascend ranks alone (two roles, two ranks each, 20 files): enough captures
    and partitions for the tests of planning and generations, in half the ingest time of
    _small_profile (its PyTorch traces took most of it)."""
    shutil.copytree(demo / "ascend", dest / "ascend")
    return dest


def _modes(config, tmp_path: Path, name: str = "wh"):
    """(normal warehouse config, dataset-mode config) in tmp_path."""
    normal = dataclasses.replace(config, db_path=tmp_path / f"{name}.duckdb")
    thin = dataclasses.replace(config, db_path=tmp_path / f"{name}-thin.duckdb", dataset=tmp_path / f"{name}.dataset")
    return normal, thin


def _ok(summary):
    assert summary.failed == 0, [r.message for r in summary.results if r.status == "failed"]
    return summary


def _files_by_path(root: Path) -> dict[str, int]:
    """Every file the current generation lists: its path under the root -> inode."""
    listed = dataset.manifest_files(dataset.current_generation(root))
    return {e["path"]: (root / e["path"]).stat().st_ino for e in listed}


def _in_table(path: str) -> str:
    """A manifest path without its generation: <table>/run=.../<file>."""
    return path.split("/", 1)[1]


@pytest.mark.slow
def test_demo_dataset_equals_the_warehouse(demo, demo_thin, demo_warehouse):
    thin, summary = demo_thin
    assert summary.rows > 10_000
    assert every_table_differences(thin.db_path, demo_warehouse) == {}
    con = duckdb.connect(str(thin.db_path), read_only=True)
    want = duckdb.connect(str(demo_warehouse), read_only=True)
    for view in MEMORY_VIEWS:
        got_rows = sorted(map(repr, con.execute(f"select * from {view}").fetchall()))
        assert got_rows == sorted(map(repr, want.execute(f"select * from {view}").fetchall())), view
    kinds = dict(con.execute("select table_type, count(*) from information_schema.tables group by 1").fetchall())
    assert kinds.get("VIEW", 0) > 20 and set(kinds) <= {"VIEW", "BASE TABLE"}
    # Every file of the profile dir is in sources, as in a normal warehouse.
    files = {str(p.relative_to(demo)) for p in demo.rglob("*") if p.is_file()}
    assert {r[0] for r in con.execute("select path from sources").fetchall()} == files


@pytest.mark.slow
def test_real_corpus_dataset_equals_the_warehouse(tmp_path, config, real_corpus):
    profile, normal = real_corpus
    _, thin = _modes(dataclasses.replace(config, workers=2), tmp_path)
    _ok(ingest(profile, thin, run="real"))
    assert every_table_differences(thin.db_path, normal) == {}


@pytest.mark.slow
def test_a_changed_rank_rewrites_only_its_files(tmp_path, config, demo):
    profile = _small_profile(demo, tmp_path / "demo")
    normal, thin = _modes(config, tmp_path)
    _ok(ingest(profile, thin, run="demo"))
    before = _files_by_path(thin.dataset)
    unchanged = _ok(ingest(profile, thin, run="demo"))
    assert unchanged.count("unchanged") == len(unchanged.results)
    assert len(dataset._generations(thin.dataset)) == 1  # nothing changed: no new generation

    csv = sorted(profile.rglob("operator_memory.csv"))[0]
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(lines[:-3]))  # three allocations fewer
    again = _ok(ingest(profile, thin, run="demo"))
    assert "ok" in {r.status for r in again.results}
    after = _files_by_path(thin.dataset)
    new = {path for path, inode in after.items() if before.get(path) != inode}
    con = duckdb.connect(str(thin.db_path), read_only=True)
    role, rank = con.execute("select role, rank_id from sources where path = ?",
                             [str(csv.relative_to(profile))]).fetchone()
    # The changed capture's files and the runs row (its last_ingested_at): nothing else.
    for path in new:
        in_rank = f"rank_id={rank}" in path and f"role={role}" in path
        assert in_rank or _in_table(path).startswith(("runs/", "call_stacks/", "internal.stack_user_frames/")), path
    assert any(_in_table(p).startswith("memory_records/") for p in new), "the changed rank's rows were not rewritten"
    kept = [path for path in after if path in before and f"rank_id={rank}" not in path]
    assert kept and all(after[p] == before[p] for p in kept)  # the previous generation's files, where they are
    _ok(ingest(profile, normal, run="demo"))
    assert every_table_differences(thin.db_path, normal.db_path) == {}


@pytest.mark.slow
def test_the_thin_file_reads_like_a_warehouse(demo, demo_thin):
    """rlwh query and the pinned duckdb shell read it; writers other than ingest refuse it."""
    thin, _ = demo_thin
    query = subprocess.run(
        [sys.executable, "-m", "rlwh.cli", "query", "select count(*) as n from memory_peak", "--format", "json",
         "--db", str(thin.db_path)], capture_output=True, text=True, check=False)
    assert query.returncode == 0, query.stderr
    assert json.loads(query.stdout)[0]["n"] > 0
    shell = Path(sys.executable).with_name("duckdb")
    out = subprocess.run([str(shell), "-readonly", str(thin.db_path), "-csv", "-c",
                          "select count(*) from memory_timeline"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.splitlines()[-1]) > 0
    with pytest.raises(RlwhError, match="thin file of a Parquet dataset"):
        initialize(dataclasses.replace(thin, dataset=None))
    with pytest.raises(RlwhError, match="thin file of a Parquet dataset"):
        ingest(demo, dataclasses.replace(thin, dataset=None), run="other")


@pytest.mark.slow
def test_cli_ingest_with_dataset_flag(tmp_path, demo):
    db = tmp_path / "thin.duckdb"
    profile = demo / "ascend" / "actor_update"  # two ranks are enough to see the flag work
    out = subprocess.run([sys.executable, "-m", "rlwh.cli", "ingest", str(profile), "--run", "demo", "-q",
                          "--dataset", str(tmp_path / "ds"), "--db", str(db)], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ds" / "current" / "_manifest.json").is_file()
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("select count(*) from cpu_ops").fetchone()[0] > 0


@pytest.mark.parametrize("role", ["NULL", "__HIVE_DEFAULT_PARTITION__"])
def test_a_role_a_hive_path_reads_as_null_is_refused_and_nothing_is_published(tmp_path, config, demo, role):
    """Staging checks every row's run and role inside its COPY (both COPY sides: the rows of
    several tables carry the role); the message names the table and the value, and the
    dataset gets no generation."""
    _, thin = _modes(config, tmp_path)
    with pytest.raises(RlwhError, match=f"has role '{role}', which a hive path reads back as NULL"):
        ingest(demo / "ascend" / "actor_update", thin, run="demo", role=role)
    assert not (thin.dataset / "current").exists()
    published = list(thin.dataset.rglob("*.parquet")) if thin.dataset.exists() else []
    assert published == []


def test_ctrl_c_while_staging_stops_both_copies_and_leaves_nothing(tmp_path, demo):
    """Ctrl-C while the staging COPYs run on two connections (rlwh.parquet.dataset.
    _run_two_at_a_time, stopped by the test hook right after the second starts): one line,
    exit 130, no generation, no scratch folder left. (The small profile's COPYs end in
    milliseconds, so this holds the outcome, not that the second COPY was interrupted.)"""
    profile = _ascend_profile(demo, tmp_path / "small")
    root, db = tmp_path / "wh.dataset", tmp_path / "thin.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLWH_")}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[1]), RLWH_TEST_PAUSE_AT="dataset-stage")
    proc = subprocess.Popen([sys.executable, "-m", "rlwh", "ingest", str(profile), "--run", "r", "--dataset",
                             str(root), "--db", str(db), "-q"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_stopped(proc, "dataset-stage")
        os.killpg(proc.pid, signal.SIGINT)
        os.killpg(proc.pid, signal.SIGCONT)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output[-3000:]
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Aborted!") and "Traceback" not in output, output[-3000:]
    assert not (root / "current").exists() and not list(root.rglob("*.parquet"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small", "thin.duckdb.lock", "wh.dataset"]


def test_a_small_profile_in_dataset_mode_equals_the_warehouse(tmp_path, config, small_warehouse):
    """The fast loop's check of dataset mode and of export: one real Ascend capture, against
    the session's normal warehouse of it."""
    profile, normal = small_warehouse
    _, thin = _modes(config, tmp_path)
    _ok(ingest(profile, thin, run="small"))
    assert (thin.dataset / "current" / "_manifest.json").is_file()
    assert every_table_differences(thin.db_path, normal) == {}
    export_parquet(dataclasses.replace(config, db_path=normal), tmp_path / "export")
    assert list((tmp_path / "export" / "memory_records").rglob("*.parquet"))


def _ids_by_run(root: Path) -> dict[str, list[int]]:
    """Every source id of the current generation's sources files, by run (read from the
    Parquet files the manifest lists)."""
    paths = [str(root / e["path"]) for e in dataset.manifest_files(dataset.current_generation(root))
             if e["table"] == "sources"]
    rows = duckdb.sql(f"select run, list(source_id order by source_id) from read_parquet({paths!r}, "
                      "hive_partitioning = true) group by run").fetchall()
    return dict(rows)


def _set_next_source_id(thin, value) -> None:
    """Rewrite the current manifest's next_source_id and drop the thin file, which is built
    again from it; None: as rlwh wrote both before it recorded one (the manifest without the
    field, the thin file's marker without the column)."""
    path = dataset.current_generation(thin.dataset) / "_manifest.json"
    listed = json.loads(path.read_text())
    listed.pop("next_source_id")
    if value is not None:
        listed["next_source_id"] = value
    path.write_text(json.dumps(listed))
    if value is not None:
        thin.db_path.unlink()
        return
    con = duckdb.connect(str(thin.db_path))
    try:
        con.execute("alter table internal.dataset drop column next_source_id")
    finally:
        con.close()


def test_source_ids_planned_from_the_manifest_and_counted_where_it_does_not_say(tmp_path, config, small_warehouse):
    """The manifest records the first free source id (counting the sources of thousands of
    Parquet files took 0.3 s of every plan); a manifest written before it was recorded is
    counted, and the next publish records it."""
    profile, _ = small_warehouse
    _, thin = _modes(config, tmp_path)
    _ok(ingest(profile, thin, run="r1"))
    ids = _ids_by_run(thin.dataset)
    assert dataset.manifest(dataset.current_generation(thin.dataset))["next_source_id"] == max(ids["r1"]) + 1

    _set_next_source_id(thin, None)  # an older dataset and thin file: counted
    _ok(ingest(profile, thin, run="r2"))
    ids = _ids_by_run(thin.dataset)
    assert min(ids["r2"]) == max(ids["r1"]) + 1
    assert dataset.manifest(dataset.current_generation(thin.dataset))["next_source_id"] == max(ids["r2"]) + 1

    _set_next_source_id(thin, 1000)  # what the manifest says is what the plan takes
    _ok(ingest(profile, thin, run="r3"))
    ids = _ids_by_run(thin.dataset)
    assert min(ids["r3"]) == 1000
    assert dataset.manifest(dataset.current_generation(thin.dataset))["next_source_id"] == max(ids["r3"]) + 1


def _sources(thin) -> list[tuple[str, str]]:
    con = duckdb.connect(str(thin.db_path), read_only=True)
    try:
        return con.execute("select run, path from sources order by all").fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_a_thin_file_over_a_deleted_dataset_is_built_again(tmp_path, config, demo):
    """The dataset deleted and the thin file kept: a reader is told so, and the next ingest
    reads every file afresh into a new dataset that the thin file then stands over (both
    raised an IOException naming a Parquet file of the deleted generation)."""
    profile = _ascend_profile(demo, tmp_path / "small")
    _, thin = _modes(config, tmp_path)
    first = _ok(ingest(profile, thin, run="r"))
    shutil.rmtree(thin.dataset)
    with pytest.raises(RlwhError, match=r"thin file of the dataset .*, and its generation gen-000001 is gone"):
        connect_read(thin)  # what every reading command says, not an IOException on a query
    again = _ok(ingest(profile, thin, run="r"))
    assert again.count("unchanged") == 0 and again.rows == first.rows > 0
    assert [path for _, path in _sources(thin)] == sorted(r.rel_path for r in first.results + first.ignored)


@pytest.mark.slow
def test_a_thin_file_behind_the_dataset_is_built_again(tmp_path, config, demo):
    """Two thin files over one dataset: the other's publishes prune the generation this
    one stands over. Its next ingest plans from the current generation: the run it holds
    is unchanged, and it sees the other's runs too."""
    profile = _ascend_profile(demo, tmp_path / "small")
    _, mine = _modes(config, tmp_path)
    other = dataclasses.replace(mine, db_path=tmp_path / "other-thin.duckdb")
    _ok(ingest(profile, mine, run="mine"))
    for i in range(3):  # publish keeps 3 generations: the first one goes
        _ok(ingest(profile, other, run=f"other-{i}"))
    again = _ok(ingest(profile, mine, run="mine"))
    assert again.count("unchanged") == len(again.results) > 0
    assert {run for run, _ in _sources(mine)} == {"mine", "other-0", "other-1", "other-2"}


@pytest.mark.slow
def test_thin_files_over_one_dataset_plan_from_it(tmp_path, config, demo):
    """Three runs, each through a thin file of its own over one dataset (the last one new):
    every table and memory view as a normal warehouse of the three runs has them. Each new
    thin file planned source ids from 1, so runs shared ids and the memory views, which
    join on them, doubled their rows."""
    profile = _small_profile(demo, tmp_path / "small")
    normal, thin = _modes(config, tmp_path)
    for i, run in enumerate(("r1", "r2", "r3")):
        _ok(ingest(profile, normal, run=run))
        _ok(ingest(profile, dataclasses.replace(thin, db_path=tmp_path / f"thin-{i}.duckdb"), run=run))
    last = tmp_path / "thin-2.duckdb"
    assert every_table_differences(last, normal.db_path) == {}
    got, want = (duckdb.connect(str(p), read_only=True) for p in (last, normal.db_path))
    try:
        for view in MEMORY_VIEWS + ("memory_alloc_stack", "memory_timeline"):
            query = f"select * from {view}"
            assert sorted(map(repr, got.execute(query).fetchall())) == sorted(
                map(repr, want.execute(query).fetchall())), view
    finally:
        got.close()
        want.close()


@pytest.mark.slow
def test_two_ingests_into_one_dataset_through_two_thin_files_take_turns(tmp_path, config, demo):
    """The second waits for the first (the dataset's ingest lock, saying for whom), then
    plans from the generation the first published: no source id is used twice."""
    profile = _ascend_profile(demo, tmp_path / "small")
    dataset_root = tmp_path / "wh.dataset"

    def start(db: str, run: str, pause: str | None = None) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        if pause:
            env["RLWH_TEST_PAUSE_AT"] = pause
        return subprocess.Popen([sys.executable, "-m", "rlwh", "ingest", str(profile), "--run", run, "--dataset",
                                 str(dataset_root), "--db", str(tmp_path / db), "-q"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    first = start("a.duckdb", "r1", pause="between_files")
    wait_stopped(first, "between_files")  # its plan is made, its lock held
    second = start("b.duckdb", "r2")
    waited = second.stderr.readline()
    assert "waiting for pid" in waited and str(dataset_root) in waited, waited
    os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=120) == 0, first.stderr.read()
    assert second.wait(timeout=120) == 0, second.stderr.read()
    con = duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True)
    try:
        ids = con.execute("select run, count(*), count(distinct source_id) from sources group by run").fetchall()
        overlap = con.execute("select count(*) from sources a join sources b using (source_id) "
                              "where a.run < b.run").fetchone()[0]
    finally:
        con.close()
    assert {run for run, _, _ in ids} == {"r1", "r2"} and all(n == d for _, n, d in ids) and overlap == 0


def test_a_normal_warehouse_as_the_thin_file_is_refused_before_anything_is_written(tmp_path, config, demo):
    """It published a generation, then refused to replace the warehouse with its thin file."""
    profile = _ascend_profile(demo, tmp_path / "small")
    normal, thin = _modes(config, tmp_path)
    initialize(normal)
    with pytest.raises(RlwhError, match="is a warehouse with its own tables"):
        ingest(profile, dataclasses.replace(thin, db_path=normal.db_path))
    assert not thin.dataset.exists()
