"""The DuckDB a reader runs its SQL on.

A reader of a small input gets a cursor of the process's DuckDB (rlwh.process_db): making a
DuckDB of its own cost more than a small file's rows take to read (14-20 ms to make, 3-6 ms
to close). An input large enough to need the memory limit gets a DuckDB of its own, as every
reader did before: the memory limit, the threads and the spill folder belong to a database,
not to a cursor, so readers side by side on one would share one budget, and a spill folder
cannot change once DuckDB has used it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

import duckdb

from rlwh.process_db import process_db

# Inputs up to this size share the process's DuckDB: what a reader sorts of one stays well
# inside the default limits (128-384 MB), and a tighter limit spills into the process's folder.
SMALL_INPUT_BYTES = 16 << 20


def shares_process_db(input_bytes: int) -> bool:
    """Whether a reader of `input_bytes` runs on a cursor of the process's DuckDB."""
    return input_bytes <= SMALL_INPUT_BYTES


@contextlib.contextmanager
def reader_db(input_bytes: int, memory_limit: str | None = None, spill: Path | None = None,
              keep_order: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for a reader's SQL over `input_bytes` of input: a cursor of the process's
    DuckDB for a small input, else a DuckDB of its own (one thread, `memory_limit`, spilling
    into `spill` when given, insertion order kept only when `keep_order`: keeping it costs a
    large sort memory). Closed when the block ends."""
    if shares_process_db(input_bytes):
        con = process_db().cursor()
    else:
        settings: dict = {"threads": 1, "preserve_insertion_order": keep_order}
        if spill is not None:
            settings["temp_directory"] = str(spill)
        con = duckdb.connect(config=settings)
    try:
        con.execute("set enable_progress_bar = false")  # it would print to our caller's stdout
        if memory_limit:
            con.execute("set memory_limit = ?", [memory_limit])
        yield con
    finally:
        con.close()


def file_bytes(*paths: str | os.PathLike) -> int:
    """The size of the files together (a missing one counts 0: its reader says why)."""
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            total += os.path.getsize(path)
    return total
