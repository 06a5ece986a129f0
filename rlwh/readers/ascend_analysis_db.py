"""analysis.db with no db export loaded beside it -> communication_links.

The profiler writes analysis.db beside ascend_pytorch_profiler_<rank>.db, and that reader
reads it (rlwh.readers.ascend_db). Where no db export of the capture is loaded (none lies
beside it, or it is not loaded because the text export beside it is) and no
communication_matrix.json is loaded instead, analysis.db's CommAnalyzerMatrix is the only
record of the capture's links: this reader lands it, as the db reader would
(rlwh.readers.ascend_db_matrix). The file is opened read-only and immutable.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rlwh.errors import SourceError
from rlwh.readers.ascend_comm_matrix import SCHEMA, TABLE, problems_outcome
from rlwh.readers.ascend_db import check_header, connect_read_only
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
        if MATRIX_TABLE not in tables:
            sink.ensure(TABLE, SCHEMA)
            return ReadOutcome(message=f"{path}: no {MATRIX_TABLE} table: no links to load")
        links = matrix_links(con, path.name, problems)
    except sqlite3.DatabaseError as exc:
        raise SourceError(f"{path}: {MATRIX_TABLE} unreadable ({exc})") from None
    finally:
        con.close()
    if links is None:
        raise SourceError(f"{path}: {'; '.join(problems)}")
    sink.write(TABLE, links)
    sink.ensure(TABLE, SCHEMA)
    return problems_outcome(path, links.num_rows, problems)
