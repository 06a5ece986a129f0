"""The process's own in-memory DuckDB, for SQL that needs no DuckDB of its own: queries of
constants (rlwh.sqltext.constant_rows) and readers' SQL over small inputs
(rlwh.readers.reader_db), each on a cursor of it.

Making a DuckDB costs 14-20 ms (it fills a catalog with every built-in function) and
closing one 3-6 ms; a cursor costs microseconds, and the temp tables, temp macros and
registered Arrow tables it makes are its own, gone when it closes. Its settings (memory
limit, threads, spill folder) are the database's, shared by every cursor, so they are set
once, here, and no cursor changes them.
"""

from __future__ import annotations

import os
import threading

import duckdb

from rlwh.safe_files import process_spill_folder

# What its SQL may hold in memory before it spills: the readers that use it read at most
# 16 MB each (reader_db.SMALL_INPUT_BYTES); the default worker limit is 256 MB too.
MEMORY_LIMIT = "256MB"

_lock = threading.Lock()
_made: dict[int, duckdb.DuckDBPyConnection] = {}  # by pid: a forked child makes its own


def process_db() -> duckdb.DuckDBPyConnection:
    """The DuckDB, made on first use: one thread (a worker per core reads files side by side),
    MEMORY_LIMIT, spilling into the process's folder (DuckDB makes `readers` in it when it
    first spills), "did you mean" names from a missing name's own schema only (its SQL is
    rlwh's own: sqltext.no_suggestions)."""
    pid = os.getpid()
    made = _made.get(pid)  # every small read asks: no lock once it is made
    if made is not None:
        return made
    spill = process_spill_folder() / "readers"
    with _lock:
        if pid not in _made:
            _made[pid] = duckdb.connect(config={"threads": 1, "temp_directory": str(spill),
                                                "memory_limit": MEMORY_LIMIT,
                                                # sqltext.no_suggestions's setting (sqltext imports this module)
                                                "catalog_error_max_schemas": 0})
        return _made[pid]


def discard() -> None:
    """Forget the DuckDB after a fatal error invalidated it: the next use makes a new one
    (a long-lived Ray worker reads thousands of files)."""
    with _lock:
        con = _made.pop(os.getpid(), None)
    if con is not None:
        try:
            con.close()
        except duckdb.Error:
            pass


def memory_limit_problem(raw: str) -> str | None:
    """DuckDB's complaint about a memory limit text, or None: tried on the DuckDB, whose own
    limit is set back at once."""
    cursor = process_db().cursor()
    try:
        cursor.execute("set memory_limit = ?", [raw])
    except duckdb.Error as exc:
        return str(exc)
    finally:
        cursor.execute("set memory_limit = ?", [MEMORY_LIMIT])
        cursor.close()
    return None
