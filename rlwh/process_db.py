"""The process's own in-memory DuckDB, for SQL that needs no DuckDB of its own: queries of
constants (rlwh.sqltext.constant_rows) and readers' SQL over small inputs
(rlwh.readers.reader_db), each on a cursor of it.

Making a DuckDB costs 14-20 ms (it fills a catalog with every built-in function) and
closing one 3-6 ms; a cursor costs microseconds, and its temp tables, macros and
registered Arrow tables are its own, gone when it closes. Its settings (memory limit,
threads, spill folder) are the database's, shared by every cursor.
"""

from __future__ import annotations

import os
import threading

import duckdb

from rlwh.safe_files import process_spill_folder

_lock = threading.Lock()
_made: dict[int, duckdb.DuckDBPyConnection] = {}  # by pid: a forked child makes its own


def process_db() -> duckdb.DuckDBPyConnection:
    """The DuckDB, made on first use: one thread (a worker per core reads files side by side),
    spilling into the process's folder (DuckDB makes `readers` in it when it first spills)."""
    spill = process_spill_folder() / "readers"
    with _lock:
        pid = os.getpid()
        if pid not in _made:
            _made[pid] = duckdb.connect(config={"threads": 1, "temp_directory": str(spill)})
        return _made[pid]
