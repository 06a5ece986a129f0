"""The DuckDB a reader runs its SQL on.

A reader of a small input gets a cursor of the process's DuckDB (rlwh.process_db): making a
DuckDB of its own cost more than a small file's rows take to read (14-20 ms to make, 3-6 ms
to close). It runs under that DuckDB's settings (one thread, process_db.MEMORY_LIMIT, the
process's spill folder), which no reader changes: they are the database's, not the cursor's.
An input large enough to need the reader's own memory limit gets a DuckDB of its own, as
every reader did before, with the reader's settings.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import duckdb

from rlwh.process_db import discard, process_db
from rlwh.safe_files import process_spill_folder

# Inputs up to this size share the process's DuckDB: what a reader sorts of one stays well
# inside its memory limit, and spills into the process's folder if not.
SMALL_INPUT_BYTES = 16 << 20


def shares_process_db(input_bytes: int) -> bool:
    """Whether a reader of `input_bytes` runs on a cursor of the process's DuckDB."""
    return input_bytes <= SMALL_INPUT_BYTES


@contextlib.contextmanager
def reader_db(input_bytes: int, memory_limit: str | None = None, spill: Path | None = None,
              keep_order: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection for a reader's SQL over `input_bytes` of input, closed when the block
    ends: a cursor of the process's DuckDB for a small input; else a DuckDB of its own with
    one thread, `memory_limit`, spilling into `spill` (a folder of its own in the process's
    spill folder when None) and insertion order kept only when `keep_order` (keeping it
    costs a large sort memory)."""
    if shares_process_db(input_bytes):
        with _shared_cursor() as con:
            yield con
        return
    own_spill = spill or Path(tempfile.mkdtemp(dir=process_spill_folder()))
    settings: dict = {"threads": 1, "preserve_insertion_order": keep_order, "temp_directory": str(own_spill)}
    if memory_limit:
        settings["memory_limit"] = memory_limit
    con = duckdb.connect(config=settings)
    try:
        con.execute("set enable_progress_bar = false")  # it would print to our caller's stdout
        yield con
    finally:
        con.close()
        if spill is None:
            shutil.rmtree(own_spill, ignore_errors=True)


@contextlib.contextmanager
def _shared_cursor() -> Iterator[duckdb.DuckDBPyConnection]:
    con = process_db().cursor()  # a cursor starts with the progress bar off (a test holds it)
    try:
        yield con
    except duckdb.FatalException:
        discard()  # it invalidated the DuckDB: the next reader gets a new one
        raise
    finally:
        con.close()


def file_bytes(*paths: str | os.PathLike) -> int:
    """The size of the files together (a missing one counts 0: its reader says why)."""
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            total += os.path.getsize(path)
    return total
