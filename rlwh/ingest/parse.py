"""Parsing one source file, the part of ingest that may run in another process.

`parse_source` is a pure function of the file: it runs the job's reader into a
TableSink and returns a small picklable summary (never the rows), so it can run in a
process pool here or be shipped to a distributed engine unchanged.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import TypedDict

import pyarrow as pa
import pyarrow.parquet as pq

from rlwh import interrupts
from rlwh.errors import SourceError
from rlwh.ingest.jobs import jobs
from rlwh.ingest.plan import FileContext
from rlwh.readers.base import ReadOutcome, TableSink


class ParseResult(TypedDict):
    """What parsing one file hands the loader (picklable, small: the rows stay in Parquet parts)."""

    status: str  # ok | partial | failed | ignored
    message: str | None
    rank: dict  # facts about the rank the file names (role, rank_id, device, versions, ...)
    tables: dict[str, list[str]]  # table -> Parquet part files
    rows: dict[str, int]  # table -> rows in its parts
    columns: dict[str, list[str]]  # table -> column names of its parts
    seconds: float


def failed_result(message: str | None) -> ParseResult:
    """What parse_source returns for a file it could not read."""
    return {"status": "failed", "message": message, "rank": {}, "tables": {}, "rows": {}, "columns": {},
            "seconds": 0.0}


def parse_source(kind: str, path: str, context: FileContext, out_dir: str) -> ParseResult:
    """Read `path` with the job for `kind`; return status, message, rank facts and parts."""
    started = time.perf_counter()
    sink = TableSink(Path(out_dir))
    result = failed_result(None)
    try:
        outcome = jobs()[kind].read_function()(Path(path), sink, context)
        sink.close()
        result = _parsed(outcome, sink)
    except SourceError as exc:
        sink.close()
        result["message"] = str(exc)
    except MemoryError:
        sink.close()
        result["message"] = f"{path}: ran out of memory while reading"
    except Exception as exc:  # a reader bug must fail this file, not the run
        sink.close()
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result["message"] = (
            f"{path}: unexpected {type(exc).__name__}: {exc} (in {Path(where.filename).name}:{where.lineno})"
        )
    interrupts.reraise_if_seen()  # Ctrl-C inside a reader is no fact about the file
    result["seconds"] = time.perf_counter() - started
    _release_memory()
    return result


def _parsed(outcome: ReadOutcome, sink: TableSink) -> ParseResult:
    """A reader's outcome and the parts in its sink, as the loader takes them."""
    result = failed_result(None)
    result["status"], result["message"], result["rank"] = outcome.status, outcome.message, outcome.rank
    for table, parts in sink.tables().items():
        result["tables"][table] = [str(p) for p in parts]
        result["rows"][table] = sum(pq.ParquetFile(p).metadata.num_rows for p in parts)
        result["columns"][table] = pq.read_schema(parts[0]).names
    return result


def _release_memory() -> None:
    # A pool process lives on between files: hand Arrow's freed buffers back to the OS
    # so an idle worker does not hold its last file's memory (~150 MB after a big CSV).
    pa.default_memory_pool().release_unused()
