"""Shared fixtures: the real profiler samples in tests/data, fresh warehouses, configs."""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

import duckdb
import path_guard
import progress
import pytest

from rlwh.config import Config
from rlwh.sqltext import sql_literal
from rlwh.warehouse import derive

REPO = Path(__file__).resolve().parent.parent
# The real files live in the repository (tests/data/SOURCES says where each came from);
# the path guard above fails a test that opens files outside it and the temp dirs.
DATA = REPO / "tests" / "data"
FIXTURES = DATA
SAMPLES = FIXTURES / "rl-insight-samples"
CONTRACT_CHECK = DATA / "tools" / "contract_check.py"


@pytest.fixture(scope="session", autouse=True)
def _schema_cache(tmp_path_factory) -> Iterator[Path]:
    """The schema template cache (rlwh.warehouse.template) of this test run, never the
    user's: rlwh commands the tests run, in-process or not, and every xdist worker share it.
    The template is built here, once for the run under run_wide_folder's lock (each worker
    built its own, ~0.5 s, and often two at once)."""
    from rlwh.warehouse import template

    with run_wide_folder(tmp_path_factory, "rlwh_cache") as folder:
        before = os.environ.get("RLWH_CACHE_DIR")
        os.environ["RLWH_CACHE_DIR"] = str(folder)
        template.build_once(template.template_path())
    yield folder
    if before is None:
        os.environ.pop("RLWH_CACHE_DIR", None)
    else:
        os.environ["RLWH_CACHE_DIR"] = before


@functools.cache
def _default_database() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


@pytest.fixture(scope="module", autouse=True)
def _fresh_default_duckdb_connection() -> None:
    """Each test file starts with a new default DuckDB connection (duckdb.sql, duckdb.execute):
    under pytest-xdist a worker runs files in another order than one process does, and a
    result one file left unfinished on the shared default connection failed the next file's
    duckdb.sql ("connection has an unfinished result"). A cursor of one in-memory database
    per process is such a connection (a DuckDB of its own took 15 ms a file); the tests
    create nothing in it, they only query files."""
    duckdb.set_default_connection(_default_database().cursor())


def scratch() -> duckdb.DuckDBPyConnection:
    """A connection of its own (a cursor) to this process's one in-memory DuckDB, for SQL that
    reads no warehouse: its temp objects are its own (make only temp objects; settings such
    as memory_limit or threads are the database's: leave them), and it costs microseconds
    where a new in-memory DuckDB took ~15 ms to make, ~3 ms to close."""
    return _default_database().cursor()


@pytest.fixture
def scratch_con() -> Iterator[duckdb.DuckDBPyConnection]:
    """scratch() for one test, closed after it."""
    with scratch() as con:
        yield con


@pytest.fixture(scope="session")
def _migrated_template(_schema_cache) -> Path:
    """A migrated warehouse file with every view, to copy (ten times faster than migrating):
    the run's schema template (what migrate makes of an empty file, tests/test_schema.py
    holds the two equal). Read it, never write."""
    from rlwh.warehouse import template

    return template.build_once(template.template_path())


@pytest.fixture
def fresh_db(_migrated_template, tmp_path):
    """A new DuckDB warehouse, migrated and with every view installed (a copy of the template)."""
    path = tmp_path / "fresh.duckdb"
    shutil.copyfile(_migrated_template, path)
    con = duckdb.connect(str(path))
    yield con
    con.close()


_ATTACHED = itertools.count()


@pytest.fixture
def attached_db(_migrated_template, tmp_path) -> Iterator[duckdb.DuckDBPyConnection]:
    """fresh_db's warehouse (a copy of the template: a file, writable, migrated, with views),
    attached to the process's in-memory DuckDB (scratch()'s), as a cursor's default database: ~15 ms
    to attach and detach where a DuckDB of its own took ~40 ms to open and close (tests/sql).
    Only for a test that neither closes it nor opens its path (a second DuckDB on the file
    this one holds): those take fresh_db."""
    path = tmp_path / "fresh.duckdb"
    shutil.copyfile(_migrated_template, path)
    name = f"warehouse_{next(_ATTACHED)}"
    host = _default_database()
    with host.cursor() as con:
        con.execute(f"attach {sql_literal(path)} as {name}")
        con.execute(f"use {name}")
        yield con
    host.execute(f"detach {name}")


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
    """Copy tests/data/<relative> into dest (tests never change tests/data)."""
    source = FIXTURES / relative
    if not source.exists():
        raise FileNotFoundError(f"fixture missing: {source} (the sdist leaves the real corpora out:"
                                " run the tests from a git clone)")
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


@contextlib.contextmanager
def run_wide_folder(tmp_path_factory, name: str) -> Iterator[Path]:
    """A folder that every pytest-xdist worker of this test run sees alike, held under a
    lock for the block: the first worker makes what it holds, the others wait and find it.
    (Without xdist, the session's own.) Only for what the tests read and never write."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / f"shared-{name}"
    with open(f"{root}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        root.mkdir(exist_ok=True)
        yield root


def _once_for_all_workers(tmp_path_factory, name: str, make: Callable[[Path], Any]) -> Any:
    """make(folder) once for the whole test run, its result (a path, or a tuple of paths)
    shared by every xdist worker (run_wide_folder)."""
    import json

    with run_wide_folder(tmp_path_factory, name) as root:
        done = root / ".made.json"
        if not done.exists():  # new, or left half-made by a worker whose make() raised
            shutil.rmtree(root)
            root.mkdir()
            made = make(root)
            many = isinstance(made, tuple)
            done.write_text(json.dumps({"paths": [str(p) for p in (made if many else (made,))], "many": many}))
        saved = json.loads(done.read_text())
    paths = tuple(Path(p) for p in saved["paths"])
    return paths if saved["many"] else paths[0]


@pytest.fixture(scope="session")
def demo_profile(tmp_path_factory) -> Path:
    """The demo's profile dir (every format rlwh reads), made once; copy it before changing it."""
    from rlwh.demo import write_demo_profile

    return _once_for_all_workers(tmp_path_factory, "demo", lambda folder: write_demo_profile(folder / "demo"))


def _ingested_once(profile: Path, db: Path, run: str, workers: int = 2) -> Path:
    from rlwh.ingest.runner import ingest

    summary = ingest(profile, Config(db_path=db, workers=workers), run=run)
    assert summary.failed == 0, [r.message for r in summary.results if r.status == "failed"]
    return db


@pytest.fixture(scope="session")
def demo_warehouse(demo_profile, tmp_path_factory) -> Path:
    """The demo profile ingested once per test run (run "demo", two parse workers, the loader
    derives): the reference other ingests of the demo are compared with. Read it, never write."""
    return _once_for_all_workers(tmp_path_factory, "demo-wh",
                                 lambda folder: _ingested_once(demo_profile, folder / "warehouse.duckdb", "demo"))


@pytest.fixture(scope="session")
def small_warehouse(tmp_path_factory) -> tuple[Path, Path]:
    """(a copy of rl-insight-samples/memory_data, its warehouse): one real Ascend capture
    ingested once per test run (run "small", in-process, the loader derives), the fast
    loop's reference for the other paths. Read both, never write."""
    def make(folder: Path) -> tuple[Path, Path]:
        profile = copy_fixture("rl-insight-samples/memory_data", folder)
        return profile, _ingested_once(profile, profile.parent / "warehouse.duckdb", "small", workers=1)

    return _once_for_all_workers(tmp_path_factory, "small", make)


@pytest.fixture(scope="session")
def alexnet_warehouse(tmp_path_factory) -> tuple[Path, Path]:
    """(a copy of real/ascend/msinsight-alexnet-level1, its warehouse): two real Ascend ranks,
    a text and a db export each, ingested once per test run (in-process, the run named
    after the folder, as a plain `rlwh ingest` names it). Read both, never write."""
    def make(folder: Path) -> tuple[Path, Path]:
        profile = copy_fixture("real/ascend/msinsight-alexnet-level1", folder)
        return profile, _ingested_once(profile, folder / "warehouse.duckdb", profile.name, workers=1)

    return _once_for_all_workers(tmp_path_factory, "alexnet", make)


@pytest.fixture(scope="session")
def real_corpus(tmp_path_factory) -> tuple[Path, Path]:
    """(a copy of ../shared/fixtures/real, its warehouse): every real file ingested once per
    test run (run "real", two parse workers, the loader derives). Read both, never write."""
    def make(folder: Path) -> tuple[Path, Path]:
        profile = copy_fixture("real", folder)
        return profile, _ingested_once(profile, profile.parent / "warehouse.duckdb", "real")

    return _once_for_all_workers(tmp_path_factory, "real-corpus", make)


# ---------------------------------------------------------------- CPU time per test
# On a shared 2-core machine wall times swing with the load; `--cpu-durations=N` also lists
# the N tests that used the most CPU (this process and its reaped children, setup included),
# which is what decides the `slow` mark (when a test is slow: pyproject.toml's markers).

def pytest_configure(config):
    """The path guard (tests/path_guard.py) and the progress line (tests/progress.py) as
    plugins of their own, so that their hooks stand beside this file's hooks of the same
    names instead of being replaced by them."""
    if not config.pluginmanager.has_plugin("path_guard"):
        config.pluginmanager.register(path_guard, "path_guard")
    if not config.pluginmanager.has_plugin("progress"):
        config.pluginmanager.register(progress, "progress")


# The test files that take longest (test-seconds measured on the 2-core machine, `make test`
# of 2026-12-06 session 19, --durations=0 summed per file), longest first. `make test` hands
# whole files to the workers (--dist loadfile) in the order they are collected
# (--no-loadscope-reorder: by default pytest-xdist orders them by their number of tests,
# which put test_ray, 11 tests and minutes, near the end, where it ran alone); so the long
# files start first and the many short ones fill in at the end. test_wheel (one test, 6 s:
# it builds the wheel) joined in session 26: collected last, it ran alone for the last 5 s.
LONGEST_FIRST = ("test_ray.py", "test_ingest_dataset.py", "test_kineto_typed.py", "test_crash.py",
                 "test_same_rows_as_previous_release.py", "test_real_stack_nesting.py", "test_kineto_nesting.py",
                 "test_readme.py", "test_build.py", "test_report_browser.py", "test_dataset.py",
                 "test_check_agrees_with_ingest.py", "test_nightly.py", "test_repeated_captures.py",
                 "test_ingest_batches.py", "test_bad_inputs.py", "test_cli_summary.py",
                 "test_device_time.py", "test_device_idle.py", "test_wheel.py", "test_cli_query.py")


def pytest_collection_modifyitems(session, config, items):
    """LONGEST_FIRST's files first, in its order; the others after them, as collected (a
    stable sort: every file's tests keep their order)."""
    first = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))


def pytest_collection_finish(session):
    """What is made before the first test (modules, collected items, fixtures' code) lives
    the whole run: frozen, Python's garbage collector no longer walks it on each pass, and
    with a higher first threshold it passes less often (make check: 3% less time, two runs
    side by side with and without, 2026-12-06 session 22)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)


def pytest_unconfigure(config):
    """Thawed for the interpreter's exit, which collects them (nanobind, under DuckDB's
    Python types, reports objects still frozen then as leaked)."""
    gc.unfreeze()


def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="list the N tests that used the most CPU seconds (0: all)")
    progress.addoption(parser)


_CPU: dict[str, float] = {}
_CPU_START = pytest.StashKey[float]()


def _cpu_seconds() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.config.getoption("--cpu-durations") is not None:
        item.stash[_CPU_START] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The test's CPU seconds ride on its teardown report, so that under pytest-xdist the
    controlling process, which prints the list, hears of the workers' tests too."""
    outcome = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        outcome.get_result().user_properties.append(("cpu_s", _cpu_seconds() - item.stash[_CPU_START]))


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        for key, value in report.user_properties:
            if key == "cpu_s":
                _CPU[report.nodeid] = value


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    count = config.getoption("--cpu-durations")
    if count is None or not _CPU:
        return
    ranked = sorted(_CPU.items(), key=lambda item: -item[1])
    terminalreporter.write_sep("=", f"CPU seconds per test (total {sum(_CPU.values()):.1f})")
    for nodeid, seconds in ranked[:count] if count else ranked:
        terminalreporter.write_line(f"{seconds:8.2f}s cpu  {nodeid}")


def migrated_memory() -> duckdb.DuckDBPyConnection:
    """A new in-memory warehouse with the schema, copied from the session's schema template
    (rlwh.warehouse.template.copy_into_memory, as an ingest makes its scratch database):
    0.05 s where migrate() takes 0.5 s."""
    from rlwh.warehouse import template

    con = duckdb.connect()
    assert template.copy_into_memory(con), f"no schema template in {template.cache_dir()}"
    return con


@functools.cache
def _empty_warehouse() -> duckdb.DuckDBPyConnection:
    return migrated_memory()


def empty_warehouse() -> duckdb.DuckDBPyConnection:
    """A connection of its own (a cursor) to this process's one empty in-memory warehouse, for
    code that only reads the warehouse and makes temp objects (those stay the cursor's own):
    microseconds, where a migrated_memory() of its own took ~40 ms to make and ~8 ms to close.
    Code that writes to the warehouse takes rolled_back()."""
    return _empty_warehouse().cursor()


@contextlib.contextmanager
def rolled_back() -> Iterator[duckdb.DuckDBPyConnection]:
    """empty_warehouse() inside a transaction rolled back after the block, so that what the
    block writes is seen by it alone and gone after it; for code that neither commits nor
    begins a transaction of its own (a commit makes the rollback fail, so it is caught)."""
    with empty_warehouse() as con:
        con.execute("begin transaction")
        try:
            yield con
        finally:
            con.execute("rollback")


@pytest.fixture
def empty_db() -> Iterator[duckdb.DuckDBPyConnection]:
    """rolled_back() for one test: an empty warehouse, every migration and view, that is the
    test's alone, for a test that writes rows and reads views and never needs a file."""
    with rolled_back() as con:
        yield con


def migrated_file(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to a new warehouse file at `path` with the schema: a copy of the session's
    schema template (rlwh.warehouse.template.copy_schema, as a new warehouse starts), 0.05 s
    where migrate() on the empty file takes 0.5 s."""
    from rlwh.warehouse import template

    assert template.copy_schema(path), f"no schema template in {template.cache_dir()}"
    return duckdb.connect(str(path))


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
    with rolled_back() as con:
        con.execute("""create temp table _rlwh_keys as select 'run'::varchar as run, ?::varchar as role,
                       ?::integer as rank_id, 'capture'::varchar as capture, 1::bigint as source_id,
                       null::integer as step""", [role, rank_id])
        staged = _staged_select(table, parts, pq.read_schema(parts[0]).names)
        con.execute(f"create temp view _staged_{table} as {staged}")
        con.execute(jobs()[kind].sql)
        rows = con.execute(f"select {', '.join(columns)} from {table}").fetchall()
        return [dict(zip(columns, row)) for row in rows]
