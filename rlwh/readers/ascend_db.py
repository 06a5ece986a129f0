"""ascend_pytorch_profiler_<rank>.db (torch_npu export_type=db) -> the tables a text export
of the same capture lands: memory_records (OP_MEMORY), memory_usage (MEMORY_RECORD),
npu_module_memory (NPU_MODULE_MEM), step_times (STEP_TIME, with analysis.db's StepTraceTime
beside it for the stage times), cpu_ops and call_stacks (PYTORCH_API, PYTORCH_CALLCHAINS),
ranges (PYTORCH_API's mstx rows, OVERLAP_ANALYSIS) and communication_links (analysis.db's
CommAnalyzerMatrix), spelled as the text export spells them.

The file is opened read-only and immutable through sqlite3's URI, so SQLite writes
nothing (no journal, no lock) even on a shared file system. The db stores text as
STRING_IDS ids; GE's rows in OP_MEMORY (the operators of NPU_OP_MEM, with neither
allocationTotalActive nor streamPtr) are written bare where operator_memory.csv writes
`cann::<name>`. Each table is read on its own: damage in one (a cell of the wrong type, an
unreadable page) keeps the others and says which; a file cut short, whose schema SQLite
cannot read, fails with the sizes its header and the file give.
"""

from __future__ import annotations

import re
import sqlite3
import urllib.parse
from pathlib import Path

import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers.ascend_comm_transfers import BANDWIDTH_TABLE, bandwidth_transfers
from rlwh.readers.ascend_comm_transfers import TABLE as TRANSFERS_TABLE
from rlwh.readers.ascend_db_device import SCHEMA as DEVICE_SCHEMA
from rlwh.readers.ascend_db_device import device_rows
from rlwh.readers.ascend_db_matrix import MATRIX_JSON, MATRIX_TABLE, matrix_links
from rlwh.readers.base import CALL_STACKS_SCHEMA, ReadOutcome, TableSink, call_stack_row, normalize_stack, scaled

BATCH_ROWS = 65536
SQLITE_MAGIC = b"SQLite format 3\x00"
# A rank dir holding these is a text export: it is loaded, and the db beside it is not.
COMMUNICATION_JSON = "communication.json"
TEXT_EXPORT_FILES = ("operator_memory.csv", "trace_view.json", "memory_record.csv", "step_trace_time.csv",
                     "kernel_details.csv")
# ENUM_MODULE names the text export spells otherwise (msinsight fixture: ENUM_MODULE id 74
# is AMP, npu_module_mem.csv of the same job writes AML, and ENUM_MODULE has no AML).
TEXT_MODULE_NAMES = {"AMP": "AML"}
_INTEGER_TEXT = re.compile(r"-?[0-9]+")
_STEP_TEXT = re.compile(r"(?:step)?([0-9]+)", re.IGNORECASE)
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
    if value is None or (isinstance(value, int) and -(2**63) <= value < 2**63):
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()) and -(2**63) <= int(value) < 2**63:
        return int(value)
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
        self.analysis: sqlite3.Connection | None = None  # analysis.db beside the db (_open_analysis)

    def columns(self, table: str, required: tuple[str, ...], alias: str = ""):
        """A function naming `table`'s column in SQL (NULL for one this export lacks), or None
        (and a note) when a column the rows cannot do without is missing."""
        have = {row[1] for row in self.con.execute(f'pragma table_info("{table}")')}
        missing = [c for c in required if c not in have]
        if missing:
            self.problems.append(f"{table}: no column(s) {', '.join(missing)}, so not read")
            return None
        prefix = f"{alias}." if alias else ""
        return lambda column: f"{prefix}{column}" if column in have else "null"

    def strings(self) -> dict[int, str]:
        if "STRING_IDS" not in self.tables:
            return {}
        return dict(self.con.execute("select id, value from STRING_IDS"))

    def run(self, label: str, table: str, sql: str, sources: tuple[str, ...], params=(), post=None) -> None:
        """`sql` selects `table`'s columns (all but source_row) in schema order; `sources` names
        the db column each comes from, for messages; `post` maps a column's values (ids to
        names) before typing. A batch whose cells all have their column's type goes to Arrow
        column by column; one that does not is checked row by row and its bad rows named."""
        schema = SCHEMAS[table]
        fields = [f for f in schema if f.name != "source_row"]
        index = {f.name: i for i, f in enumerate(fields)}
        position = 0
        try:
            cursor = self.con.execute(sql, params)
            while True:
                fetched = cursor.fetchmany(BATCH_ROWS)
                if not fetched:
                    break
                columns = [list(c) for c in zip(*fetched)]
                for name, function in (post or {}).items():
                    columns[index[name]] = [function(v) for v in columns[index[name]]]
                first = position + 1
                try:
                    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, fields)]
                    kept = list(range(first, first + len(fetched)))
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
                    arrays, kept = self._checked(label, fields, sources, columns, first)
                position += len(fetched)
                if "source_row" in schema.names:
                    arrays.insert(0, pa.array(kept, pa.int64()))
                self.sink.write(table, pa.RecordBatch.from_arrays(arrays, schema=schema))
                self.rows += len(kept)
        except sqlite3.DatabaseError as exc:
            self.problems.append(f"{label}: unreadable after row {position} ({exc})")

    def _checked(self, label, fields, sources, columns, first) -> tuple[list[pa.Array], list[int]]:
        """Row by row: integers as _int reads them, text as text; a bad row is noted and dropped."""
        good: list[list] = []
        kept: list[int] = []
        for offset, row in enumerate(zip(*columns)):
            try:
                good.append([_int(v, source) if f.type == _I else (None if v is None else str(v))
                             for v, f, source in zip(row, fields, sources)])
                kept.append(first + offset)
            except _Bad as exc:
                self.problems.append(f"{label} row {first + offset}: {exc}")
        by_column = list(zip(*good)) if good else [() for _ in fields]
        return [pa.array(list(c), type=f.type) for c, f in zip(by_column, fields)], kept


def _integer_sql(column: str) -> str:
    """SQL: a TEXT cell of plain digits as INTEGER (PYTORCH_API keeps times as TEXT); any
    other value as it is, so the row check names it."""
    return (f"(case when typeof({column}) = 'text' and {column} glob '[0-9]*' and {column} not glob '*[^0-9]*'"
            f" then cast({column} as integer) else {column} end)")


def _device_sql(column: str) -> str:
    return f"(case when {column} is null then null else 'NPU:' || {column} end)"


def _memory_records(r: _Reader) -> None:
    c = r.columns("OP_MEMORY", ("name", "size", "allocationTime"), "o")
    if c is None:
        return
    ge = ("o.name in (select operatorName from NPU_OP_MEM)" if "NPU_OP_MEM" in r.tables else "1")
    name = (f"case when s.value is not null and {c('allocationTotalActive')} is null and {c('streamPtr')} is null"
            f" and {ge} then 'cann::' || s.value else s.value end")
    columns = ("size", "allocationTime", "releaseTime", "activeReleaseTime", "duration", "activeDuration",
               "allocationTotalAllocated", "allocationTotalReserved", "allocationTotalActive",
               "releaseTotalAllocated", "releaseTotalReserved", "releaseTotalActive")
    r.run("OP_MEMORY", "memory_records",
          f"select {name}, {', '.join(c(x) for x in columns)}, cast({c('streamPtr')} as text),"
          f" {_device_sql(c('deviceId'))} from OP_MEMORY o left join STRING_IDS s on s.id = o.name order by o.rowid",
          ("name", *columns, "streamPtr", "deviceId"))


def _memory_usage(r: _Reader, strings: dict[int, str]) -> None:
    c = r.columns("MEMORY_RECORD", ("component", "timestamp"))
    if c is None:
        return
    r.run("MEMORY_RECORD", "memory_usage",
          f"select component, timestamp, {c('totalAllocated')}, {c('totalReserved')}, {c('totalActive')},"
          f" cast({c('streamPtr')} as text), {_device_sql(c('deviceId'))} from MEMORY_RECORD order by rowid",
          ("component", "timestamp", "totalAllocated", "totalReserved", "totalActive", "streamPtr", "deviceId"),
          post={"component": strings.get})


def _npu_module_memory(r: _Reader) -> None:
    modules = dict(r.con.execute("select id, name from ENUM_MODULE")) if "ENUM_MODULE" in r.tables else {}
    names = set(modules.values())
    modules = {i: TEXT_MODULE_NAMES.get(n, n) if TEXT_MODULE_NAMES.get(n) not in names else n
               for i, n in modules.items()}
    c = r.columns("NPU_MODULE_MEM", ("moduleId", "timestampNs", "totalReserved"))
    if c is None:
        return
    r.run("NPU_MODULE_MEM", "npu_module_memory",
          f"select moduleId, timestampNs, totalReserved, {_device_sql(c('deviceId'))} from NPU_MODULE_MEM"
          " order by rowid",
          ("moduleId", "timestampNs", "totalReserved", "deviceId"),
          post={"module": lambda m: modules.get(m, None if m is None else str(m))})


def _open_analysis(path: Path, problems: list[str]) -> sqlite3.Connection | None:
    """analysis.db beside the db, opened once for the tables read from it (StepTraceTime,
    CommAnalyzerMatrix); None, with what is wrong in `problems`, when it cannot be read."""
    analysis = path.with_name("analysis.db")
    if not analysis.is_file():
        return None
    try:
        note = check_header(analysis)
        con = connect_read_only(analysis)
    except (SourceError, sqlite3.Error) as exc:
        problems.append(f"{analysis.name}: {exc}")
        return None
    if note:
        problems.append(f"{analysis.name}: {note}")
    return con


def _stage_times(r: _Reader) -> dict[str, dict]:
    """analysis.db's StepTraceTime: step text -> stage ns columns."""
    if r.analysis is None:
        return {}
    try:
        if "StepTraceTime" not in _tables(r.analysis):
            return {}
        cursor = r.analysis.execute("select * from StepTraceTime")
        names = [d[0] for d in cursor.description]
        found = {}
        for position, row in enumerate(cursor, start=1):
            cells = dict(zip(names, row))
            try:
                found[str(cells.get("step") or "")] = {
                    column: _us(cells.get(source), f"StepTraceTime.{source}") for source, column in STAGES.items()}
            except _Bad as exc:
                r.problems.append(f"analysis.db StepTraceTime row {position}: {exc}")
        return found
    except sqlite3.DatabaseError as exc:
        r.problems.append(f"analysis.db: StepTraceTime unreadable ({exc})")
        return {}


def _step(text: str) -> int | None:
    """StepTraceTime's step text ("50", "step50") as a number; None when it names none."""
    match = _STEP_TEXT.fullmatch(text.strip())
    return int(match.group(1)) if match else None


def _step_times(r: _Reader) -> None:
    stages = _stage_times(r)
    steps = []
    if "STEP_TIME" in r.tables:
        try:
            steps = r.con.execute("select id, startNs, endNs from STEP_TIME order by id").fetchall()
        except sqlite3.DatabaseError as exc:
            r.problems.append(f"STEP_TIME: unreadable ({exc})")
    empty = dict.fromkeys(STAGES.values())
    rows = []
    for position, (step_id, start, end) in enumerate(steps, start=1):
        try:
            step, start, end = _int(step_id, "id"), _int(start, "startNs"), _int(end, "endNs")
        except _Bad as exc:
            r.problems.append(f"STEP_TIME row {position}: {exc}")
            continue
        key = next((k for k in stages if _step(k) == step), None)
        rows.append({"step": step, "start_ns": start, "end_ns": end,
                     **(stages.pop(key) if key is not None else empty)})
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
    c = r.columns("PYTORCH_API", ("startNs", "endNs", "globalTid", "name", "type"), "p")
    if c is None:
        return
    start, end = _integer_sql("startNs"), _integer_sql("endNs")
    r.run("PYTORCH_API", "cpu_ops",
          f"select s.value, {start}, {end} - {start}, globalTid >> 32, globalTid & 4294967295, {c('callchainId')},"
          f" {c('sequenceNumber')}, {c('fwdThreadId')} from PYTORCH_API p left join STRING_IDS s on s.id = p.name"
          " where type = ? order by p.rowid",
          ("name", "startNs", "endNs - startNs", "globalTid", "globalTid", "callchainId", "sequenceNumber",
           "fwdThreadId"), (op_type,), post={"stack_id": stack_ids.get})


def _mstx_ranges(r: _Reader) -> None:
    """PYTORCH_API rows of type 'mstx' (torch_npu's mstx.mark / range_start..range_end): a
    mark has endNs = startNs. The table names no domain, so every range is 'default'."""
    if r.columns("PYTORCH_API", ("startNs", "endNs", "globalTid", "name", "type")) is None:
        return
    r.run("PYTORCH_API mstx", "ranges",
          f"select 'mstx', 'default', s.value, {_integer_sql('startNs')}, {_integer_sql('endNs')}, globalTid >> 32,"
          " globalTid & 4294967295, null from PYTORCH_API p left join STRING_IDS s on s.id = p.name"
          " where type = ? order by p.rowid",
          ("", "", "name", "startNs", "endNs", "globalTid", "globalTid", ""), (_api_type(r, "mstx", 50004),))


def _overlap_ranges(r: _Reader) -> None:
    names = " ".join(f"when {k} then '{v}'" for k, v in OVERLAP_TYPES.items())
    name = f"(case type {names} else cast(type as text) end)"
    if r.columns("OVERLAP_ANALYSIS", ("startNs", "endNs", "type")) is None:
        return
    r.run("OVERLAP_ANALYSIS", "ranges",
          f"select 'overlap', 'default', {name}, startNs, endNs, null, type, {name}"
          " from OVERLAP_ANALYSIS order by rowid",
          ("", "", "type", "startNs", "endNs", "", "type", "type"))


def _device_ops(r: _Reader) -> None:
    """TASK, COMPUTE_TASK_INFO, COMMUNICATION_OP: rlwh.readers.ascend_db_device."""
    for batch in device_rows(r.con, r.tables, r.problems):
        r.sink.write("device_ops", batch)
        r.rows += batch.num_rows
    r.sink.ensure("device_ops", DEVICE_SCHEMA)  # a db with no device rows


def _communication_links(r: _Reader) -> None:
    """analysis.db's CommAnalyzerMatrix (rlwh.readers.ascend_db_matrix), unless
    communication_matrix.json beside the db is loaded instead."""
    if r.analysis is None or r.path.with_name(MATRIX_JSON).is_file():
        return
    try:
        links = matrix_links(r.analysis, "analysis.db", r.problems) if MATRIX_TABLE in _tables(r.analysis) else None
    except sqlite3.DatabaseError as exc:
        r.problems.append(f"analysis.db: CommAnalyzerMatrix unreadable ({exc})")
        links = None
    if links is not None:
        r.sink.write("communication_links", links)
        r.rows += links.num_rows


def _collective_transfers(r: _Reader) -> None:
    """analysis.db's CommAnalyzerBandwidth (rlwh.readers.ascend_comm_transfers), unless
    communication.json beside the db is loaded instead."""
    if r.analysis is None or r.path.with_name(COMMUNICATION_JSON).is_file():
        return
    try:
        transfers = (bandwidth_transfers(r.analysis, "analysis.db", r.problems)
                     if BANDWIDTH_TABLE in _tables(r.analysis) else None)
    except sqlite3.DatabaseError as exc:
        r.problems.append(f"analysis.db: {BANDWIDTH_TABLE} unreadable ({exc})")
        transfers = None
    if transfers is not None:
        r.sink.write(TRANSFERS_TABLE, transfers)
        r.rows += transfers.num_rows


def not_loaded_beside(path: Path) -> str | None:
    """Why the db is not loaded, where the text export of its capture lies beside it (ingest
    and `rlwh check` say so in these words); None otherwise."""
    text = [name for name in TEXT_EXPORT_FILES if (path.parent / name).is_file()]
    if not text:
        return None
    return (f"{path}: not loaded: the text export of this capture beside it ({', '.join(text)}) is loaded "
            "instead, so no row lands twice")


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    beside = not_loaded_beside(path)
    if beside:
        return ReadOutcome(status="ignored", message=beside)
    cut = check_header(path)
    try:
        con = connect_read_only(path)
        reader = _Reader(path, con, sink)
    except sqlite3.DatabaseError as exc:
        raise SourceError(f"{path}: {cut + '; ' if cut else ''}SQLite cannot read it ({exc})") from None
    try:
        if cut:
            reader.problems.append(cut)
        reader.analysis = _open_analysis(path, reader.problems)
        strings = reader.strings()
        steps = [("OP_MEMORY", lambda: _memory_records(reader)),
                 ("MEMORY_RECORD", lambda: _memory_usage(reader, strings)),
                 ("NPU_MODULE_MEM", lambda: _npu_module_memory(reader)),
                 ("STEP_TIME", lambda: _step_times(reader)),
                 ("PYTORCH_API", lambda: _cpu_ops(reader, strings)),
                 ("PYTORCH_API", lambda: _mstx_ranges(reader)),
                 ("OVERLAP_ANALYSIS", lambda: _overlap_ranges(reader))]
        for table, step in steps:
            if table in reader.tables or table == "STEP_TIME":
                step()
        _device_ops(reader)
        _communication_links(reader)
        _collective_transfers(reader)
    except sqlite3.DatabaseError as exc:
        reader.problems.append(f"unreadable ({exc})")
    finally:
        con.close()
        if reader.analysis is not None:
            reader.analysis.close()
    if not reader.problems:
        return ReadOutcome()
    problems = reader.problems
    shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
    if reader.rows == 0:
        raise SourceError(f"{path}: no readable rows: {shown}")
    return ReadOutcome(status="partial", message=f"{path}: kept {reader.rows} rows: {shown}")
