"""communication.json (text export) and analysis.db's CommAnalyzerBandwidth (db export) ->
collective_transfers: how fast each HCCL op moved its bytes over each transport.

The profiler sums, per op and transport (HCCS, PCIE, SIO, RDMA between nodes; SDMA and
LOCAL), the bytes its transfer tasks moved (Transit Size, MB) and the time those tasks ran
(Transit Time, ms): their quotient is the link's bandwidth while it transferred, which the
op's whole duration (waiting for the other ranks included) hides. communication.json keys
them {"step<n>": {"collective" | "p2p": {"<op>@<group>": {"Communication Bandwidth Info":
{"<transport>": {figures}}}}}} ("Total Op Info" is a sum, no op); CommAnalyzerBandwidth has
a row per (op, transport, packet size) with the op's figures repeated.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa

from rlwh.readers.ascend_comm_matrix import BadLink, load_matrix, problems_outcome, step_of, transit_figures
from rlwh.readers.base import ReadOutcome, TableSink

TABLE = "collective_transfers"
SCHEMA = pa.schema([
    ("source_row", pa.int64()), ("step", pa.int64()), ("op_kind", pa.string()), ("name", pa.string()),
    ("group", pa.string()), ("transport_type", pa.string()), ("size_bytes", pa.int64()),
    ("duration_ns", pa.int64()), ("bandwidth_gbps", pa.float64()),
])
BANDWIDTH_INFO = "Communication Bandwidth Info"
TOTAL = "Total Op Info"
BANDWIDTH_TABLE = "CommAnalyzerBandwidth"


def _row(step, op_kind, label: str, transport, figures: dict) -> dict:
    before, at, after = label.rpartition("@")
    name, group = (before, after) if at else (label, None)
    return {"step": step, "op_kind": op_kind, "name": name, "group": group,
            "transport_type": None if transport in (None, "") else str(transport), **transit_figures(figures)}


def transfer_rows(data) -> tuple[list[dict], list[str]]:
    """Every (op, transport) of communication.json, in the file's order, numbered 1..; and the
    entries that could not be read, each named by its place."""
    rows: list[dict] = []
    problems: list[str] = []
    position = 0
    for step_key, sections in (data.items() if isinstance(data, dict) else ()):
        for section, ops in (sections.items() if isinstance(sections, dict) else ()):
            for label, info in (ops.items() if isinstance(ops, dict) else ()):
                bandwidth = info.get(BANDWIDTH_INFO) if isinstance(info, dict) else None
                if label == TOTAL or not isinstance(bandwidth, dict):
                    continue
                for transport, figures in bandwidth.items():
                    position += 1
                    try:
                        if not isinstance(figures, dict):
                            raise BadLink(f"expected an object of figures, found {type(figures).__name__}")
                        rows.append({"source_row": position, **_row(step_of(str(step_key)), str(section),
                                                                     str(label), transport, figures)})
                    except BadLink as exc:
                        problems.append(f"{step_key} / {section} / {label} / {transport}: {exc}")
    return rows, problems


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    rows, problems = transfer_rows(load_matrix(path))
    sink.write(TABLE, pa.Table.from_pylist(rows, SCHEMA))
    sink.ensure(TABLE, SCHEMA)
    return problems_outcome(path, len(rows), problems, what="transfers")


def bandwidth_transfers(con: sqlite3.Connection, label: str, problems: list[str]) -> pa.Table | None:
    """CommAnalyzerBandwidth's (op, transport) rows once each (the caller saw the table); None
    when its key columns are missing. A row that cannot be read is named in `problems`."""
    have = {row[1] for row in con.execute(f'pragma table_info("{BANDWIDTH_TABLE}")')}
    if not {"hccl_op_name", "transport_type"} <= have:
        problems.append(f"{label} {BANDWIDTH_TABLE}: no hccl_op_name or transport_type column, so not read")
        return None
    picked = ", ".join(c if c in have else "null" for c in
                       ("hccl_op_name", "group_name", "transport_type", "transit_size", "transit_time", "bandwidth",
                        "step", "type"))
    rows, seen = [], set()
    position = 0
    for op, group, transport, size, time, bandwidth, step, kind in con.execute(
            f"select {picked} from {BANDWIDTH_TABLE} order by rowid"):
        position += 1
        if (op, group, transport, step, kind) in seen:
            continue  # the op's figures again, for another packet size
        seen.add((op, group, transport, step, kind))
        label = f"{op}@{group}" if group not in (None, "") else str(op)
        figures = {"Transit Size(MB)": size, "Transit Time(ms)": time, "Bandwidth(GB/s)": bandwidth}
        try:
            rows.append({"source_row": position, **_row(None if step is None else step_of(str(step)),
                                                         None if kind is None else str(kind), label, transport,
                                                         figures)})
        except BadLink as exc:
            problems.append(f"{label} {BANDWIDTH_TABLE} row {position}: {exc}")
    return pa.Table.from_pylist(rows, SCHEMA)
