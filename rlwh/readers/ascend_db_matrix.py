"""analysis.db's CommAnalyzerMatrix (beside a db export) -> communication_links.

The db export's analysis.db holds the communication matrix a text export writes as
communication_matrix.json, one row per link: hccl_op_name (allreduce-top1, ...-total),
group_name, src_rank, dst_rank (text), transport_type, transit_size (MB), transit_time
(ms), bandwidth (GB/s), step ('step50'), type (collective / p2p), op_name ('' for a total).
Rows become what the text reader makes of the JSON (rlwh.readers.ascend_comm_matrix), so
both exports of a capture land the same links. Where communication_matrix.json lies beside
the db, that file is loaded instead.
"""

from __future__ import annotations

import sqlite3

import pyarrow as pa

from rlwh.readers.ascend_comm_matrix import BANDWIDTH, SCHEMA, SIZE, TIME, BadLink, link_row, step_of

MATRIX_TABLE = "CommAnalyzerMatrix"
MATRIX_JSON = "communication_matrix.json"
_COLUMNS = ("hccl_op_name", "group_name", "src_rank", "dst_rank", "transport_type", "transit_size", "transit_time",
            "bandwidth", "step", "type", "op_name")


def matrix_links(con: sqlite3.Connection, label: str, problems: list[str]) -> pa.Table | None:
    """CommAnalyzerMatrix's links (the caller saw the table) as communication_links rows; None
    when its key columns are missing. A row that cannot be read is named in `problems` (with
    `label`, the file) and dropped."""
    have = {row[1] for row in con.execute(f'pragma table_info("{MATRIX_TABLE}")')}
    missing = [c for c in ("hccl_op_name", "src_rank", "dst_rank") if c not in have]
    if missing:
        problems.append(f"{label} {MATRIX_TABLE}: no column(s) {', '.join(missing)}, so not read")
        return None
    picked = ", ".join(c if c in have else "null" for c in _COLUMNS)
    rows = []
    position = 0
    try:
        for cells in con.execute(f"select {picked} from {MATRIX_TABLE} order by rowid"):
            position += 1
            op, group, src, dst, transport, size, time, bandwidth, step, kind, op_name = cells
            figures = {"Transport Type": transport, SIZE: size, TIME: time, BANDWIDTH: bandwidth, "Op Name": op_name}
            name = str(op) if op is not None else ""
            try:
                row = link_row(None if step is None else step_of(str(step)), None if kind is None else str(kind),
                               f"{name}@{group}" if group not in (None, "") else name, src, dst, figures)
            except BadLink as exc:
                problems.append(f"{label} {MATRIX_TABLE} row {position}: {exc}")
                continue
            rows.append({"source_row": position, **row})
    except sqlite3.DatabaseError as exc:
        problems.append(f"{label} {MATRIX_TABLE}: unreadable after row {position - 1} ({exc})")
    return pa.Table.from_pylist(rows, SCHEMA)

