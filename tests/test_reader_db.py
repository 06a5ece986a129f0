"""Readers of small inputs share one DuckDB per process (a cursor each); large inputs get a
DuckDB of their own with the reader's settings; both give the same rows
(rlwh.readers.reader_db)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow.parquet as pq
import pytest

from rlwh import process_db as process_db_module
from rlwh.readers import ascend_csv, ascend_kernels, ascend_trace, reader_db, torch_trace
from rlwh.readers.base import TableSink
from rlwh.safe_files import SPILL_PREFIX, process_spill_folder
from tests.conftest import FIXTURES

MEMORY = FIXTURES / "rl-insight-samples/memory_data/20260526_085155_ascend_pt/ASCEND_PROFILER_OUTPUT"
KERNELS = FIXTURES / "real/ascend/msinsight-alexnet-level1/text/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
READS = [
    (torch_trace, FIXTURES / "rl-insight-samples/torch_data/torch_profile/actor_update/prof_rank-0_031904.json.gz"),
    (ascend_csv, MEMORY / "operator_memory.csv"),
    (ascend_trace, MEMORY / "trace_view.json"),
    (ascend_kernels, KERNELS / "kernel_details.csv"),
]


def _read_all(root: Path) -> dict[str, dict[str, list[dict]]]:
    """Each reader's tables (rows in file order) for its file of READS."""
    found = {}
    root.mkdir(parents=True, exist_ok=True)  # a sink makes its folder, never the folders above it
    for module, path in READS:
        sink = TableSink(root / module.__name__.rsplit(".", 1)[-1])
        outcome = module.read(path, sink, {})
        assert outcome.status == "ok", outcome.message
        sink.close()
        found[module.__name__] = {t: pq.read_table(parts).to_pylist() for t, parts in sink.tables().items()}
    return found


@pytest.fixture
def connects(monkeypatch, tmp_path) -> Iterator[list[tuple]]:
    """The duckdb.connect calls made from here on, with a process DuckDB not yet made."""
    made: list[tuple] = []
    real = duckdb.connect

    def counted(*args, **kwargs):
        made.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(process_db_module, "_made", {})
    # Its own spill folder: DuckDB removes the folder it made when it is closed.
    monkeypatch.setattr(process_db_module, "process_spill_folder", lambda: tmp_path)
    monkeypatch.setattr(duckdb, "connect", counted)
    yield made
    for con in process_db_module._made.values():
        con.close()


def test_small_inputs_share_one_duckdb_and_leave_nothing_in_it(tmp_path, connects):
    tables = _read_all(tmp_path)
    assert all(tables.values())
    assert len(connects) == 1  # the process's, made by the first read
    shared = process_db_module.process_db().cursor()
    # Every reader's tables, views and macros were its cursor's own (temp): nothing stays.
    assert shared.execute("select count(*) from duckdb_tables()").fetchone() == (0,)
    assert shared.execute("select count(*) from duckdb_views() where not internal").fetchone() == (0,)
    assert shared.execute("select count(*) from duckdb_functions() where not internal").fetchone() == (0,)


def test_large_inputs_get_a_duckdb_each_and_read_the_same_rows(tmp_path, connects, monkeypatch):
    small = _read_all(tmp_path / "small")
    made_small = len(connects)
    monkeypatch.setattr(reader_db, "SMALL_INPUT_BYTES", -1)
    large = _read_all(tmp_path / "large")
    # A DuckDB per read at least: the torch trace's sort and its stacks take one each.
    assert len(connects) - made_small >= len(READS) + 1
    assert large == small


def test_a_duckdb_of_its_own_takes_the_readers_settings(tmp_path):
    with reader_db.reader_db(reader_db.SMALL_INPUT_BYTES + 1, "100MB", spill=tmp_path / "spill",
                             keep_order=False) as con:
        settings = dict(con.execute(
            "select name, value from duckdb_settings() where name in "
            "('threads', 'memory_limit', 'temp_directory', 'preserve_insertion_order', 'enable_progress_bar')"
        ).fetchall())
    assert settings == {"threads": "1", "memory_limit": "95.3 MiB", "temp_directory": str(tmp_path / "spill"),
                        "preserve_insertion_order": "false", "enable_progress_bar": "false"}


def test_a_duckdb_of_its_own_without_a_spill_folder_gets_one_in_the_processes_for_the_block():
    with reader_db.reader_db(reader_db.SMALL_INPUT_BYTES + 1) as con:
        spill = Path(con.execute("select current_setting('temp_directory')").fetchone()[0])
        assert spill.parent == process_spill_folder() and spill.is_dir()
    assert not spill.exists()


def test_a_small_input_runs_under_the_process_duckdbs_settings_which_no_reader_changes(connects):
    with reader_db.reader_db(1, "100MB", keep_order=False) as con:
        settings = dict(con.execute(
            "select name, value from duckdb_settings() where name in "
            "('threads', 'memory_limit', 'temp_directory', 'preserve_insertion_order', 'enable_progress_bar')"
        ).fetchall())
    assert Path(settings.pop("temp_directory")).name == "readers"
    assert settings == {"threads": "1", "memory_limit": "244.1 MiB", "preserve_insertion_order": "true",
                        "enable_progress_bar": "false"}


def test_a_checked_memory_limit_leaves_the_process_duckdbs_own(connects):
    assert process_db_module.memory_limit_problem("1GB") is None
    assert "Memory" in process_db_module.memory_limit_problem("lots")
    limit = process_db_module.process_db().execute("select current_setting('memory_limit')").fetchone()
    assert limit == ("244.1 MiB",)


def test_a_fatal_error_makes_the_next_reader_a_new_process_duckdb(connects):
    first = process_db_module.process_db()
    with pytest.raises(duckdb.FatalException):
        with reader_db.reader_db(1):
            raise duckdb.FatalException("invalidated")
    assert process_db_module.process_db() is not first


_SHOW_SPILL_FOLDER = ("import os; from rlwh.safe_files import process_spill_folder; "
                      "print(os.getpid(), process_spill_folder())")


def test_the_spill_folder_is_the_processes_own_and_goes_when_it_ends(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    shown = subprocess.run([sys.executable, "-c", _SHOW_SPILL_FOLDER], env=env, capture_output=True, text=True,
                           check=True).stdout.split()
    folder = Path(shown[1])
    assert folder.parent == tmp_path and folder.name.startswith(f"{SPILL_PREFIX}{shown[0]}-")
    assert not folder.exists()  # removed at exit
    # A killed process's folder (its atexit never ran) goes when the next process makes its own.
    orphan = tmp_path / f"{SPILL_PREFIX}{shown[0]}-left"
    (orphan / "readers").mkdir(parents=True)
    subprocess.run([sys.executable, "-c", _SHOW_SPILL_FOLDER], env=env, check=True, capture_output=True)
    assert not orphan.exists()
