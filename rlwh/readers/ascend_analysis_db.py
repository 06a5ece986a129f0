"""analysis.db with no db export loaded beside it -> communication_links, collective_transfers.

The profiler writes analysis.db beside ascend_pytorch_profiler_<rank>.db, and that reader
reads it (rlwh.readers.ascend_db). Where no db export of the capture is loaded (none lies
beside it, or it is not loaded because the text export beside it is) and no
communication_matrix.json is loaded instead, analysis.db's CommAnalyzerMatrix is the only
record of the capture's links: this reader lands it, as the db reader would
(rlwh.readers.ascend_db_matrix), and CommAnalyzerBandwidth (per op and transport) unless
communication.json beside it says the same. The file is opened read-only and immutable.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rlwh.errors import SourceError
from rlwh.readers.ascend_comm_matrix import SCHEMA, TABLE, problems_outcome
from rlwh.readers.ascend_comm_transfers import BANDWIDTH_TABLE, bandwidth_transfers
from rlwh.readers.ascend_comm_transfers import SCHEMA as TRANSFERS_SCHEMA
from rlwh.readers.ascend_comm_transfers import TABLE as TRANSFERS_TABLE
from rlwh.readers.ascend_db import COMMUNICATION_JSON, check_header, connect_read_only
from rlwh.readers.ascend_db_matrix import MATRIX_TABLE, matrix_links
from rlwh.readers.base import ReadOutcome, TableSink


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    problems: list[str] = []
    cut = check_header(path)
    if cut:
        problems.append(cut)
    try:
        con = connect_read_only(path)
    except sqlite3.DatabaseError as exc:
        raise SourceError(f"{path}: SQLite cannot read it ({exc})") from None
    try:
        tables = {name for (name,) in con.execute("select name from sqlite_master where type = 'table'")}
        links = matrix_links(con, path.name, problems) if MATRIX_TABLE in tables else None
        transfers = (bandwidth_transfers(con, path.name, problems)
                     if BANDWIDTH_TABLE in tables and not path.with_name(COMMUNICATION_JSON).is_file() else None)
    except sqlite3.DatabaseError as exc:
        raise SourceError(f"{path}: unreadable ({exc})") from None
    finally:
        con.close()
    for table, schema, rows in ((TABLE, SCHEMA, links), (TRANSFERS_TABLE, TRANSFERS_SCHEMA, transfers)):
        if rows is not None:
            sink.write(table, rows)
        sink.ensure(table, schema)
    kept = sum(t.num_rows for t in (links, transfers) if t is not None)
    if links is None and transfers is None and not problems:
        return ReadOutcome(message=f"{path}: no {MATRIX_TABLE} nor {BANDWIDTH_TABLE} table: nothing to load")
    return problems_outcome(path, kept, problems, what="rows")
