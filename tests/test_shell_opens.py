"""The warehouse file that rlwh (DuckDB 2 in Python) writes opens in the `duckdb` shell
that `make install` puts beside it (duckdb-cli 1.5.6, older than the engine): tables,
views and comments, and that shell can append to it (rlwh.warehouse.storage)."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import REPO, copy_fixture

from rlwh.ingest.runner import ingest

SHELL = Path(sys.executable).with_name("duckdb")
RANK = "real/ascend/msinsight-alexnet-level1/text/rank0_ascend_pt"


def _pinned_shell_version() -> str:
    return re.search(r'"duckdb-cli==([0-9.]+)"', (REPO / "pyproject.toml").read_text(encoding="utf-8")).group(1)


def _shell(db: Path, sql: str, readonly: bool = True) -> list[str]:
    argv = [str(SHELL)] + (["-readonly"] if readonly else []) + ["-csv", "-noheader", str(db), "-c", sql]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> tuple[Path, Path]:
    """A warehouse with one real Ascend rank, written by rlwh; and that rank's folder."""
    from rlwh.config import Config

    tmp = tmp_path_factory.mktemp("shell")
    rank = copy_fixture(RANK, tmp / "run")
    config = Config(db_path=tmp / "wh" / "warehouse.duckdb", workers=1, lock_timeout=5)
    summary = ingest(tmp / "run", config, run="alexnet")
    assert summary.failed == 0
    return config.db_path, rank


def test_the_shell_is_older_than_the_engine():
    """What this file guards: the shell is the pinned 1.5 CLI, the engine is newer."""
    version = subprocess.run([str(SHELL), "-version"], capture_output=True, text=True, check=True).stdout
    assert version.split()[0].lstrip("v") == _pinned_shell_version()
    assert tuple(map(int, duckdb.__version__.split(".")[:2])) > tuple(map(int, _pinned_shell_version().split(".")[:2]))


def test_the_shell_opens_the_warehouse_with_its_views_and_comments(warehouse):
    db, rank = warehouse
    with open(rank / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv", newline="", encoding="utf-8") as handle:
        want_rows = sum(1 for _ in csv.reader(handle)) - 1  # the header
    assert want_rows > 0
    assert _shell(db, "select count(*) from memory_records") == [str(want_rows)]
    # A view over the tables answers, and the comments travel with the file.
    assert int(_shell(db, "select count(*) from memory_alloc_stack")[0]) == want_rows
    comment = _shell(db, "select comment is not null and comment <> '' from duckdb_views() "
                         "where view_name = 'memory_peak'")
    assert comment == ["true"]
    column_comment = _shell(db, "select comment is not null from duckdb_columns() "
                                "where table_name = 'memory_records' and column_name = 'alloc_ns'")
    assert column_comment == ["true"]


def test_the_shell_answers_every_table_and_view(warehouse):
    """DuckDB 2 stores a view as its own SQL text: the shell must still bind it (it does
    not know `"if"(...)`, which DuckDB 2 writes for if(); the views say CASE)."""
    db, _ = warehouse
    con = duckdb.connect(str(db), read_only=True)
    try:
        names = [f"{s}.{n}" for s, n in con.execute(
            "select schema_name, table_name from duckdb_tables() union all "
            "select schema_name, view_name from duckdb_views() where not internal").fetchall()]
    finally:
        con.close()
    assert {"main.memory_blocks", "main.memory_records", "internal.memory_timeline_rows"} <= set(names)
    answered = _shell(db, "".join(f"select '{n}', count(*) from {n};\n" for n in names))
    assert {line.split(",")[0] for line in answered} == set(names)


def test_the_shell_can_append_and_rlwh_reads_it_back(warehouse, tmp_path):
    db, _ = warehouse
    copy = tmp_path / "copy.duckdb"
    shutil.copyfile(db, copy)
    _shell(copy, "create table shell_note as select 42 as answer", readonly=False)
    con = duckdb.connect(str(copy), read_only=True)
    try:
        assert con.execute("select answer from shell_note").fetchall() == [(42,)]
    finally:
        con.close()
