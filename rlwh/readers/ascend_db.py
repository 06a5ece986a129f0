"""ascend_pytorch_profiler_<rank>.db (torch_npu export_type=db) -> the tables a text export
of the same capture lands: memory_records (OP_MEMORY), memory_usage (MEMORY_RECORD),
npu_module_memory (NPU_MODULE_MEM), step_times (STEP_TIME, with analysis.db's StepTraceTime
beside it for the stage times), cpu_ops and call_stacks (PYTORCH_API, PYTORCH_CALLCHAINS)
and ranges (PYTORCH_API's mstx rows, OVERLAP_ANALYSIS), spelled as the text export spells them.

The file is opened read-only and immutable through sqlite3's URI, so SQLite writes
nothing (no journal, no lock) even on a shared file system. The db stores text as
STRING_IDS ids; GE's rows in OP_MEMORY (the operators of NPU_OP_MEM, with neither
allocationTotalActive nor streamPtr) are written bare where operator_memory.csv writes
`cann::<name>`. Each table is read on its own: a cut file keeps the tables before the
damage and says which failed.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers.ascend_usage import scaled
from rlwh.readers.base import CALL_STACKS_SCHEMA, ReadOutcome, TableSink, call_stack_row, normalize_stack

BATCH_ROWS = 65536
SQLITE_MAGIC = b"SQLite format 3\x00"
# A rank dir holding these is a text export: it is loaded, and the db beside it is not.
TEXT_EXPORT_FILES = ("operator_memory.csv", "trace_view.json", "memory_record.csv", "step_trace_time.csv")
# ENUM_MODULE names the text export spells otherwise (msinsight fixture: ENUM_MODULE id 74
# is AMP, npu_module_mem.csv of the same job writes AML, and ENUM_MODULE has no AML).
TEXT_MODULE_NAMES = {"AMP": "AML"}
OVERLAP_TYPES = {0: "Computing", 1: "Communication", 2: "Communication(Not Overlapped)", 3: "Free"}

_I, _S = pa.int64(), pa.string()
SCHEMAS = {
    "memory_records": pa.schema([
        ("source_row", _I), ("name", _S), ("size_bytes", _I), ("alloc_ns", _I), ("release_ns", _I),
        ("active_release_ns", _I), ("duration_ns", _I), ("active_duration_ns", _I),
        ("alloc_total_allocated_bytes", _I), ("alloc_total_reserved_bytes", _I), ("alloc_total_active_bytes", _I),
        ("release_total_allocated_bytes", _I), ("release_total_reserved_bytes", _I),
        ("release_total_active_bytes", _I), ("stream_ptr", _S), ("device", _S)]),
    "memory_usage": pa.schema([
        ("source_row", _I), ("component", _S), ("ts_ns", _I), ("total_allocated_bytes", _I),
        ("total_reserved_bytes", _I), ("total_active_bytes", _I), ("stream_ptr", _S), ("device", _S)]),
    "npu_module_memory": pa.schema([
        ("source_row", _I), ("module", _S), ("ts_ns", _I), ("total_reserved_bytes", _I), ("device", _S)]),
    "step_times": pa.schema([("source_row", _I), ("step", _I), ("start_ns", _I), ("end_ns", _I)] + [
        (f"{c}_ns", _I) for c in ("computing", "communication_not_overlapped", "overlapped", "communication", "free",
                                  "stage", "bubble", "communication_not_overlapped_exclude_receive", "preparing")]),
    "cpu_ops": pa.schema([("name", _S), ("ts_ns", _I), ("dur_ns", _I), ("pid", _I), ("tid", _I), ("stack_id", _I),
                          ("seq_no", _I), ("fwd_tid", _I)]),
    "ranges": pa.schema([("source", _S), ("domain", _S), ("name", _S), ("start_ns", _I), ("end_ns", _I),
                         ("pid", _I), ("tid", _I), ("thread", _S)]),
}
# analysis.db StepTraceTime column -> step_times column (values in us).
STAGES = {"computing": "computing_ns", "communication_not_overlapped": "communication_not_overlapped_ns",
          "overlapped": "overlapped_ns", "communication": "communication_ns", "free": "free_ns",
          "stage": "stage_ns", "bubble": "bubble_ns",
          "communication_not_overlapped_and_exclude_receive": "communication_not_overlapped_exclude_receive_ns",
          "preparing": "preparing_ns"}


class _Bad(Exception):
    """A value the db holds that rlwh cannot read as what its column means."""


def connect_read_only(path: Path) -> sqlite3.Connection:
    """sqlite3 on `path` with mode=ro&immutable=1: nothing is ever written beside the file."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True)
    con.execute("pragma query_only = 1")
    return con


def check_header(path: Path) -> str | None:
    """SourceError for a file that is no SQLite db; a note when the file is shorter than its header says."""
    with open(path, "rb") as handle:
        head = handle.read(100)
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        raise SourceError(f"{path}: not an SQLite database (no 'SQLite format 3' header in its first 100 bytes)")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    size = path.stat().st_size
    if pages and page_size * pages > size:
        return (f"cut short: the header says {pages} pages of {page_size} bytes ({pages * page_size} bytes), "
                f"the file has {size}")
    return None


def _int(value, what: str) -> int | None:
    """An integer cell (INTEGER, or the TEXT/NUMERIC some tables use) as int."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise _Bad(f"{what}: {value!r} is not an integer")


def _us(value, what: str) -> int | None:
    """Microseconds (REAL or text) -> ns, from the value's shortest decimal text."""
    if value is None or value == "":
        return None
    try:
        return scaled(repr(value) if isinstance(value, float) else str(value), 1000)
    except ArithmeticError as exc:
        raise _Bad(f"{what}: {value!r} is not a number of microseconds") from exc


def _tables(con: sqlite3.Connection) -> set[str]:
    return {name for (name,) in con.execute("select name from sqlite_master where type = 'table'")}


class _Reader:
    """Reads one table at a time into the sink; damage in one table is noted, not fatal."""

    def __init__(self, path: Path, con: sqlite3.Connection, sink: TableSink):
        self.path, self.con, self.sink = path, con, sink
        self.tables = _tables(con)
        self.problems: list[str] = []
        self.rows = 0

    def strings(self) -> dict[int, str]:
        if "STRING_IDS" not in self.tables:
            return {}
        return dict(self.con.execute("select id, value from STRING_IDS"))

    def run(self, label: str, table: str, sql: str, convert, params=()) -> None:
        """Rows of `sql` through `convert` (row, 1-based position) -> dict, written to `table`."""
        schema = SCHEMAS[table]
        batch: list[dict] = []
        position = 0
        try:
            cursor = self.con.execute(sql, params)
            while True:
                fetched = cursor.fetchmany(BATCH_ROWS)
                if not fetched:
                    break
                for row in fetched:
                    position += 1
                    try:
                        batch.append(convert(row, position))
                    except _Bad as exc:
                        self.problems.append(f"{label} row {position}: {exc}")
                self.sink.write(table, pa.RecordBatch.from_pylist(batch, schema))
                self.rows, batch = self.rows + len(batch), []
        except sqlite3.DatabaseError as exc:
            self.problems.append(f"{label}: unreadable after row {position} ({exc})")


def _memory_records(r: _Reader, strings: dict[int, str]) -> None:
    ge_names = None
    if "NPU_OP_MEM" in r.tables:
        ge_names = {n for (n,) in r.con.execute("select distinct operatorName from NPU_OP_MEM")}

    def name(row) -> str | None:
        text = strings.get(row[0])
        is_ge = row[9] is None and row[13] is None and (ge_names is None or row[0] in ge_names)
        return f"cann::{text}" if text is not None and is_ge else text

    columns = [c for c in SCHEMAS["memory_records"].names if c not in ("source_row", "name", "stream_ptr", "device")]

    def convert(row, position):
        record = {"source_row": position, "name": name(row)}
        record.update({c: _int(v, c) for c, v in zip(columns, row[1:13])})
        record["stream_ptr"] = None if row[13] is None else str(_int(row[13], "streamPtr"))
        record["device"] = None if row[14] is None else f"NPU:{_int(row[14], 'deviceId')}"
        return record

    r.run("OP_MEMORY", "memory_records",
          "select name, size, allocationTime, releaseTime, activeReleaseTime, duration, activeDuration,"
          " allocationTotalAllocated, allocationTotalReserved, allocationTotalActive, releaseTotalAllocated,"
          " releaseTotalReserved, releaseTotalActive, streamPtr, deviceId from OP_MEMORY order by rowid", convert)


def _memory_usage(r: _Reader, strings: dict[int, str]) -> None:
    def convert(row, position):
        return {"source_row": position, "component": strings.get(row[0]), "ts_ns": _int(row[1], "timestamp"),
                "total_allocated_bytes": _int(row[2], "totalAllocated"),
                "total_reserved_bytes": _int(row[3], "totalReserved"),
                "total_active_bytes": _int(row[4], "totalActive"),
                "stream_ptr": None if row[5] is None else str(_int(row[5], "streamPtr")),
                "device": None if row[6] is None else f"NPU:{_int(row[6], 'deviceId')}"}

    r.run("MEMORY_RECORD", "memory_usage",
          "select component, timestamp, totalAllocated, totalReserved, totalActive, streamPtr, deviceId"
          " from MEMORY_RECORD order by rowid", convert)


def _npu_module_memory(r: _Reader) -> None:
    modules = dict(r.con.execute("select id, name from ENUM_MODULE")) if "ENUM_MODULE" in r.tables else {}
    names = set(modules.values())
    modules = {i: TEXT_MODULE_NAMES.get(n, n) if TEXT_MODULE_NAMES.get(n) not in names else n
               for i, n in modules.items()}

    def convert(row, position):
        return {"source_row": position, "module": modules.get(row[0], None if row[0] is None else str(row[0])),
                "ts_ns": _int(row[1], "timestampNs"), "total_reserved_bytes": _int(row[2], "totalReserved"),
                "device": None if row[3] is None else f"NPU:{_int(row[3], 'deviceId')}"}

    r.run("NPU_MODULE_MEM", "npu_module_memory",
          "select moduleId, timestampNs, totalReserved, deviceId from NPU_MODULE_MEM order by rowid", convert)


def _stage_times(path: Path, problems: list[str]) -> dict[str, dict]:
    """analysis.db's StepTraceTime beside the db: step text -> stage ns columns."""
    analysis = path.with_name("analysis.db")
    if not analysis.is_file():
        return {}
    try:
        note = check_header(analysis)
        con = connect_read_only(analysis)
    except (SourceError, sqlite3.Error) as exc:
        problems.append(f"{analysis.name}: {exc}")
        return {}
    try:
        if note:
            problems.append(f"{analysis.name}: {note}")
        if "StepTraceTime" not in _tables(con):
            return {}
        cursor = con.execute("select * from StepTraceTime")
        names = [d[0] for d in cursor.description]
        found = {}
        for position, row in enumerate(cursor, start=1):
            cells = dict(zip(names, row))
            try:
                found[str(cells.get("step") or "")] = {
                    column: _us(cells.get(source), f"StepTraceTime.{source}") for source, column in STAGES.items()}
            except _Bad as exc:
                problems.append(f"{analysis.name} StepTraceTime row {position}: {exc}")
        return found
    except sqlite3.DatabaseError as exc:
        problems.append(f"{analysis.name}: StepTraceTime unreadable ({exc})")
        return {}
    finally:
        con.close()


def _step(text: str) -> int | None:
    text = text.strip()
    if text.lower().startswith("step"):
        text = text[4:]
    return int(text) if text.isdigit() else None


def _step_times(r: _Reader) -> None:
    stages = _stage_times(r.path, r.problems)
    steps = []
    if "STEP_TIME" in r.tables:
        try:
            steps = r.con.execute("select id, startNs, endNs from STEP_TIME order by id").fetchall()
        except sqlite3.DatabaseError as exc:
            r.problems.append(f"STEP_TIME: unreadable ({exc})")
    empty = dict.fromkeys(STAGES.values())
    rows = []
    for step_id, start, end in steps:
        key = next((k for k in stages if _step(k) == step_id), None)
        rows.append({"step": _int(step_id, "STEP_TIME.id"), "start_ns": _int(start, "startNs"),
                     "end_ns": _int(end, "endNs"), **(stages.pop(key) if key is not None else empty)})
    for key, values in stages.items():  # steps analysis.db knows that STEP_TIME does not
        rows.append({"step": _step(key), "start_ns": None, "end_ns": None, **values})
    for position, row in enumerate(rows, start=1):
        row["source_row"] = position
    if rows:
        r.sink.write("step_times", pa.RecordBatch.from_pylist(rows, SCHEMAS["step_times"]))
        r.rows += len(rows)


def _api_type(r: _Reader, name: str, default: int) -> int:
    """PYTORCH_API.type id of `name` (op, mstx, ...) by ENUM_API_TYPE; the documented id without it."""
    if "ENUM_API_TYPE" not in r.tables:
        return default
    return {n: i for i, n in r.con.execute("select id, name from ENUM_API_TYPE")}.get(name, default)


def _cpu_ops(r: _Reader, strings: dict[int, str]) -> None:
    """PYTORCH_API rows of type 'op' (the text export's cpu_op events) and their call chains."""
    op_type = _api_type(r, "op", 50001)
    stack_ids: dict[int, int] = {}
    stacks: dict[int, dict] = {}
    if "PYTORCH_CALLCHAINS" in r.tables:
        frames: dict[int, list[str]] = {}
        try:
            for chain, stack, _depth in r.con.execute(
                    "select id, stack, stackDepth from PYTORCH_CALLCHAINS order by id, stackDepth"):
                frames.setdefault(chain, []).append(strings.get(stack, ""))
        except sqlite3.DatabaseError as exc:
            r.problems.append(f"PYTORCH_CALLCHAINS: unreadable ({exc}); ops keep no stack")
        for chain, chain_frames in frames.items():
            text = normalize_stack("\n".join(chain_frames))  # stackDepth 0 is the innermost frame
            if text:
                row = call_stack_row(text)
                stacks.setdefault(row["stack_id"], row)
                stack_ids[chain] = row["stack_id"]
    if stacks:
        r.sink.write("call_stacks", pa.RecordBatch.from_pylist(list(stacks.values()), CALL_STACKS_SCHEMA))

    def convert(row, _position):
        start, end, global_tid = _int(row[0], "startNs"), _int(row[1], "endNs"), _int(row[2], "globalTid")
        return {"name": strings.get(row[3]), "ts_ns": start,
                "dur_ns": None if start is None or end is None else end - start,
                "pid": None if global_tid is None else global_tid >> 32,
                "tid": None if global_tid is None else global_tid & 0xFFFFFFFF,
                "stack_id": stack_ids.get(row[4]), "seq_no": _int(row[5], "sequenceNumber"),
                "fwd_tid": _int(row[6], "fwdThreadId")}

    r.run("PYTORCH_API", "cpu_ops",
          "select startNs, endNs, globalTid, name, callchainId, sequenceNumber, fwdThreadId"
          " from PYTORCH_API where type = ? order by rowid",
          convert, (op_type,))


def _mstx_ranges(r: _Reader, strings: dict[int, str]) -> None:
    """PYTORCH_API rows of type 'mstx' (torch_npu's mstx.mark / range_start..range_end): a
    mark has endNs = startNs. The table names no domain, so every range is 'default'."""

    def convert(row, _position):
        global_tid = _int(row[2], "globalTid")
        return {"source": "mstx", "domain": "default", "name": strings.get(row[3]),
                "start_ns": _int(row[0], "startNs"), "end_ns": _int(row[1], "endNs"),
                "pid": None if global_tid is None else global_tid >> 32,
                "tid": None if global_tid is None else global_tid & 0xFFFFFFFF, "thread": None}

    r.run("PYTORCH_API mstx", "ranges",
          "select startNs, endNs, globalTid, name from PYTORCH_API where type = ? order by rowid",
          convert, (_api_type(r, "mstx", 50004),))


def _overlap_ranges(r: _Reader) -> None:
    def convert(row, _position):
        kind = _int(row[2], "type")
        name = OVERLAP_TYPES.get(kind, str(kind))
        return {"source": "overlap", "domain": "default", "name": name, "start_ns": _int(row[0], "startNs"),
                "end_ns": _int(row[1], "endNs"), "pid": None, "tid": kind, "thread": name}

    r.run("OVERLAP_ANALYSIS", "ranges", "select startNs, endNs, type from OVERLAP_ANALYSIS order by rowid", convert)


def text_export_beside(path: Path) -> list[str]:
    return [name for name in TEXT_EXPORT_FILES if (path.parent / name).is_file()]


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    text = text_export_beside(path)
    if text:
        return ReadOutcome(status="ignored", message=(
            f"{path}: not loaded: the text export of this capture beside it ({', '.join(text)}) is loaded "
            "instead, so no row lands twice"))
    cut = check_header(path)
    try:
        con = connect_read_only(path)
        reader = _Reader(path, con, sink)
    except sqlite3.DatabaseError as exc:
        raise SourceError(f"{path}: {cut + '; ' if cut else ''}SQLite cannot read it ({exc})") from None
    try:
        if cut:
            reader.problems.append(cut)
        strings = reader.strings()
        steps = [("OP_MEMORY", lambda: _memory_records(reader, strings)),
                 ("MEMORY_RECORD", lambda: _memory_usage(reader, strings)),
                 ("NPU_MODULE_MEM", lambda: _npu_module_memory(reader)),
                 ("STEP_TIME", lambda: _step_times(reader)),
                 ("PYTORCH_API", lambda: _cpu_ops(reader, strings)),
                 ("PYTORCH_API", lambda: _mstx_ranges(reader, strings)),
                 ("OVERLAP_ANALYSIS", lambda: _overlap_ranges(reader))]
        for table, step in steps:
            if table in reader.tables or table == "STEP_TIME":
                step()
    except sqlite3.DatabaseError as exc:
        reader.problems.append(f"unreadable ({exc})")
    finally:
        con.close()
    if not reader.problems:
        return ReadOutcome()
    shown = "; ".join(reader.problems[:5]) + (f"; and {len(reader.problems) - 5} more" if len(reader.problems) > 5 else "")
    if reader.rows == 0:
        raise SourceError(f"{path}: no readable rows: {shown}")
    return ReadOutcome(status="partial", message=f"{path}: kept {reader.rows} rows: {shown}")
