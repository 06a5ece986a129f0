"""trace_view.json (Ascend) -> cpu_ops, call_stacks, ranges (mstx, overlap).

One read of the file: DuckDB scans the JSON array once and writes the events rlwh keeps
to a Parquet staging file, with each stack's text as it is (Parquet's dictionary
encoding stores a repeated stack once, so this costs little). Everything else is
derived from that small file. DuckDB returns nothing for an array cut mid-write, so
then ijson re-reads the file, keeps every complete event before the cut and the file
is marked partial.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import ijson
import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers.ascend_device import KERNEL_DETAILS, copy_device_ops
from rlwh.readers.base import ReadOutcome, TableSink, trimmed_sql, us_text_to_ns_sql
from rlwh.sqltext import one_value, sql_literal
from rlwh.stacks import top_frame_sql

OVERLAP_PROCESS = "Overlap Analysis"
OVERLAP_NAMES = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")
# Device rows (rlwh.readers.ascend_device): the args fields kept, and their raw column names.
DEVICE_FIELDS = {"Task Type": "task_type", "Physic Stream Id": "stream_id", "connection_id": "connection_id",
                 "data_type": "data_type", "count": "elem_count", "Task Id": "task_id"}
DEVICE_ARGS = "".join(f', "{k}" VARCHAR' for k in DEVICE_FIELDS)

# Raw event fields kept by the scan, all as text so "ts" strings stay exact.
RAW_COLUMNS = {
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "ph": "VARCHAR",
    "ts": "VARCHAR",
    "dur": "VARCHAR",
    "pid": "VARCHAR",
    "tid": "VARCHAR",
    "id": "VARCHAR",
    "args": 'STRUCT("Call stack" VARCHAR, "domain" VARCHAR, "name" VARCHAR, "Sequence number" VARCHAR, '
            '"Fwd thread id" VARCHAR' + DEVICE_ARGS + ')',
}
RAW_SCHEMA = pa.schema(
    [(c, pa.string()) for c in ("cat", "name", "ph", "ts", "dur", "pid", "tid", "stack", "domain", "meta_name",
                                "seq_no", "fwd_tid", "flow_id", *DEVICE_FIELDS.values())]
)
KEEP = (
    "cat in ('cpu_op', 'mstx') or ph = 'M' "
    f"or (ph = 'X' and name in ({', '.join(repr(n) for n in OVERLAP_NAMES)}))"
    " or cat = 'async_npu' or (ph = 'X' and (task_type is not null or task_id is not null or data_type is not null))"
)



def _ns(column: str) -> str:
    """Microseconds as decimal text -> exact ns; a number DuckDB printed in another form
    (scientific notation) falls back to DOUBLE."""
    exact = us_text_to_ns_sql(f"{column}_text", strict=False)
    return f"coalesce({exact}, {_double_ns(column)})"


def _double_ns(column: str) -> str:
    """Microseconds -> ns through a DOUBLE: exact for durations (below 2^53 ns, 104 days).
    DuckDB prints a JSON number such as 9.720 as "9.72", so the text fast path misses."""
    return f"try_cast(round(try_cast({column} as double) * 1000) as bigint)"


# Ascend joins frames with ";\r\n"; tolerate "\n" alone. The same rule as
# rlwh.readers.base.normalize_stack (a test holds them together): trim each line of
# spaces, tabs and carriage returns and trailing ';' (trim, rtrim ';', trim again, so at
# most one run of ';' between two runs of spaces: "[ \t\r]*;*[ \t\r]*$"), then drop
# the lines left empty. Two regexp_replace over the whole text, not a lambda per frame:
# 5-6x faster, and it was the slowest statement of a many-rank ingest (DESIGN.md).
_NORMALIZED_STACK = (
    "nullif(trim(regexp_replace(regexp_replace(stack, '(?m)^[ \\t\\r]+|[ \\t\\r]*;*[ \\t\\r]*$', '', 'g'),"
    " '\\n\\n+', chr(10), 'g'), chr(10)), '')"
)


def _raw_copy(con: duckdb.DuckDBPyConnection, source: str, raw: Path, file_index: bool = False) -> None:
    """Write the kept events of `source` (a scan giving the raw text fields) to `raw`,
    with times as exact ns and a fast hash of each stack text, in the same pass.
    file_index: the scan has a `_file` column (which file of a batch): `raw` is then a
    folder with a Parquet file per file of the batch (`_file=<i>/`), so each file's
    statements read only its own rows."""
    con.execute(
        f"""copy (
          select {'_file, ' if file_index else ''}cat, name, ph, {_ns('ts')} as ts_ns, {_double_ns('dur')} as dur_ns,
            pid, tid, stack, domain, meta_name,
            if(stack is null, null, hash(stack)) as stack_hash,
            try_cast(seq_no as bigint) as seq_no, try_cast(fwd_tid as bigint) as fwd_tid,
            flow_id, {', '.join(DEVICE_FIELDS.values())}
          from (
            select *, {trimmed_sql('ts')} as ts_text
            from {source}
            where {KEEP}
          )
        ) to {sql_literal(raw)} (format parquet{', partition_by (_file)' if file_index else ''})"""
    )


def _scan_sql(paths: list[Path], file_index: bool) -> str:
    """A read_json of one file or of a batch; a batch's rows carry `_file`, the index of
    their file in `paths` (read_json's filename column matched against the list)."""
    columns = "{" + ", ".join(f"{k}: '{v}'" for k, v in RAW_COLUMNS.items()) + "}"
    listed = "[" + ", ".join(sql_literal(p) for p in paths) + "]"
    index = f"list_position({listed}, filename) - 1 as _file, " if file_index else ""
    named = ", filename = true" if file_index else ""
    return (
        f"""(select {index}cat, name, ph, ts, dur, pid, tid, args."Call stack" as stack, args."domain" as domain,
              args."name" as meta_name, args."Sequence number" as seq_no, args."Fwd thread id" as fwd_tid,
              id as flow_id, {', '.join(f'args."{k}" as {v}' for k, v in DEVICE_FIELDS.items())}
            from read_json({listed}, format = 'array', columns = {columns}{named}))"""
    )


def _scan_with_duckdb(con: duckdb.DuckDBPyConnection, path: Path, raw: Path) -> None:
    _raw_copy(con, _scan_sql([path], file_index=False), raw)


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return None
    return str(value)


# Raw control characters are invalid inside JSON strings (a profiler's stray \x01 or
# newline); as spaces they are harmless, and outside strings a space is what they were.
_CONTROL_AS_SPACE = bytes.maketrans(bytes(range(32)), b" " * 32)


class _CountingFile:
    """A binary file that remembers how far the parser has read, for error offsets."""

    def __init__(self, handle):
        self.handle = handle
        self.offset = 0

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.offset += len(data)
        return data.translate(_CONTROL_AS_SPACE)


def _edge_byte(path: Path, last: bool) -> bytes:
    """The first (or last) non-whitespace byte of the file; b"" when there is none."""
    with open(path, "rb") as handle:
        if last:
            handle.seek(max(0, path.stat().st_size - 65536))
            return handle.read().rstrip()[-1:]
        while chunk := handle.read(65536):
            if chunk.lstrip():
                return chunk.lstrip()[:1]
    return b""


def _salvage_with_ijson(path: Path, sink: TableSink, raw: Path) -> tuple[int, str]:
    """Stream events until the damage; return (complete events, description of the damage)."""
    import pyarrow.parquet as pq

    rows: list[dict] = []
    kept_events = skipped = first_skipped = 0
    writer = pq.ParquetWriter(raw, RAW_SCHEMA)
    damage = "the file ends before the closing ']'"
    with open(path, "rb") as handle:
        counting = _CountingFile(handle)
        try:
            for i, event in enumerate(ijson.items(counting, "item", use_float=False, buf_size=16384), start=1):
                if not isinstance(event, dict):
                    skipped, first_skipped = skipped + 1, first_skipped or i
                    continue
                kept_events += 1
                args = found if isinstance(found := event.get("args"), dict) else {}
                row = {
                    "cat": _text(event.get("cat")),
                    "name": _text(event.get("name")),
                    "ph": _text(event.get("ph")),
                    "ts": _text(event.get("ts")),
                    "dur": _text(event.get("dur")),
                    "pid": _text(event.get("pid")),
                    "tid": _text(event.get("tid")),
                    "stack": _text(args.get("Call stack")),
                    "domain": _text(args.get("domain")),
                    "meta_name": _text(args.get("name")),
                    "seq_no": _text(args.get("Sequence number")),
                    "fwd_tid": _text(args.get("Fwd thread id")),
                    "flow_id": _text(event.get("id")),
                    **{column: _text(args.get(field)) for field, column in DEVICE_FIELDS.items()},
                }
                keep = row["cat"] in ("cpu_op", "mstx", "async_npu") or row["ph"] == "M" or (
                    row["ph"] == "X" and (row["name"] in OVERLAP_NAMES or row["task_type"] is not None
                                          or row["task_id"] is not None or row["data_type"] is not None)
                )
                if keep:
                    rows.append(row)
                if len(rows) >= 65536:
                    writer.write_batch(pa.RecordBatch.from_pylist(rows, RAW_SCHEMA))
                    rows = []
            else:
                damage = ""
        except (ijson.common.IncompleteJSONError, ijson.common.JSONError, UnicodeDecodeError) as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "unexpected end of data"
            damage = f"parse error near byte {counting.offset} of {path.stat().st_size} ({detail})"
    if rows:
        writer.write_batch(pa.RecordBatch.from_pylist(rows, RAW_SCHEMA))
    writer.close()
    if skipped:
        note = f"skipped {skipped} array elements that are not event objects (the first is element {first_skipped})"
        damage = f"{damage}; {note}" if damage else note
    return kept_events, damage


def _derive_tables(con: duckdb.DuckDBPyConnection, raw: Path, sink: TableSink, path: Path) -> int:
    """Write the tables of one file; return how many events were skipped for want of a usable ts."""
    _raw_views(con, f"read_parquet({sql_literal(raw)})")
    _make_stacks(con)
    return _write_tables(con, sink, path)


def _raw_views(con: duckdb.DuckDBPyConnection, rows: str) -> None:
    """`all_raw`: the kept events of the file being written; `raw`: those with a usable time."""
    con.execute(f"create or replace temp view all_raw as select * from {rows}")
    con.execute("create or replace temp view raw as select * from all_raw where ts_ns is not null or ph = 'M'")


def _make_stacks(con: duckdb.DuckDBPyConnection) -> None:
    """Each distinct stack text of `raw` once (a file, or every file of a batch): found by
    its fast hash, normalized, given its id, its top frame and depth."""
    con.execute(
        f"""create or replace temp table stacks as
        select stack_hash, normalized, (md5_number_lower(normalized) >> 1)::bigint as stack_id,
          {top_frame_sql('normalized')} as top_frame,
          len(string_split(normalized, chr(10)))::integer as depth
        from (
          select stack_hash, {_NORMALIZED_STACK} as normalized
          from (select stack_hash, any_value(stack) as stack from raw
                where cat = 'cpu_op' and stack is not null group by stack_hash)
        )
        where normalized is not null"""
    )


def _write_tables(con: duckdb.DuckDBPyConnection, sink: TableSink, path: Path) -> int:
    """Write the tables of the file in `raw` (the stacks table holds its stacks, and maybe
    others of its batch); return how many events were skipped for want of a usable ts."""
    ts_ns, end_ns = "ts_ns", "ts_ns + coalesce(dur_ns, 0)"
    con.execute(
        f"""copy (
          select r.name, r.ts_ns, r.dur_ns,
            try_cast(r.pid as bigint) as pid, try_cast(r.tid as bigint) as tid, s.stack_id, r.seq_no, r.fwd_tid
          from raw r left join stacks s on r.stack_hash = s.stack_hash
          where r.cat = 'cpu_op'
        ) to {sql_literal(sink.parquet_path('cpu_ops'))} (format parquet)"""
    )
    con.execute(
        f"""copy (
          select distinct stack_id, normalized as stack, top_frame, depth
          from stacks
          where stack_hash in (select stack_hash from raw where cat = 'cpu_op')
        ) to {sql_literal(sink.parquet_path('call_stacks'))} (format parquet)"""
    )
    overlap_names = ", ".join(repr(n) for n in OVERLAP_NAMES)
    con.execute(
        f"""copy (
          with threads as (
            select distinct pid, tid, meta_name as thread from raw where ph = 'M' and name = 'thread_name'
          ),
          overlap_pids as (
            select distinct pid from raw where ph = 'M' and name = 'process_name' and meta_name = '{OVERLAP_PROCESS}'
          ),
          mstx as (
            select 'mstx' as source, coalesce(domain, 'default') as domain, name, {ts_ns} as start_ns,
              case when ph = 'X' then {end_ns} else {ts_ns} end as end_ns, pid, tid
            from raw where cat = 'mstx' and ph in ('X', 'i', 'I', 'R', 'n')
          ),
          overlap as (
            select 'overlap' as source, 'default' as domain, name, {ts_ns} as start_ns, {end_ns} as end_ns, pid, tid
            from raw where ph = 'X' and name in ({overlap_names}) and (cat is null or cat <> 'cpu_op')
              and pid in (select pid from overlap_pids)
          ),
          both_sources as (select * from mstx union all select * from overlap)
          select b.source, b.domain, b.name, b.start_ns, b.end_ns,
            try_cast(b.pid as bigint) as pid, try_cast(b.tid as bigint) as tid, t.thread
          from both_sources b left join threads t on b.pid = t.pid and b.tid = t.tid
        ) to {sql_literal(sink.parquet_path('ranges'))} (format parquet)"""
    )
    copy_device_ops(con, sink, ts_ns, end_ns, path.with_name(KERNEL_DETAILS))
    return one_value(con.execute("select count(*) from all_raw where ts_ns is null and ph is distinct from 'M'"))


def _connect(context: dict) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("set threads = 1")  # a worker per core: files and batches are read side by side
    con.execute("set enable_progress_bar = false")
    con.execute("set memory_limit = ?", [context.get("memory_limit", "384MB")])
    con.execute("set preserve_insertion_order = false")
    return con


def _check_start(path: Path) -> None:
    first = _edge_byte(path, last=False)
    if not first:
        raise SourceError(f"{path}: empty file ({path.stat().st_size} bytes), no trace events")
    if first != b"[":
        raise SourceError(f"{path}: not a JSON array of trace events (it starts with {first.decode('latin-1')!r})")


def _outcome(status: str, notes: list[str], unusable: int, path: Path) -> ReadOutcome:
    if unusable:
        status = "partial"
        notes.append(f"skipped {unusable} events whose ts is not a time in microseconds that fits in ns")
    return ReadOutcome(status=status, message=(f"{path}: " + "; ".join(notes)) if notes else None)


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    _check_start(path)
    raw = sink.root / "_raw_events.parquet"
    sink.root.mkdir(parents=True, exist_ok=True)
    con = _connect(context)
    try:
        status, notes = "ok", []
        try:
            _scan_with_duckdb(con, path, raw)
            # DuckDB reads an array cut right after a comma as if it were whole.
            if _edge_byte(path, last=True) != b"]":
                status = "partial"
                notes.append(f"no closing ']' at byte {path.stat().st_size}: the file was cut while being written; "
                             "kept every complete event")
        except duckdb.Error as exc:
            salvaged = sink.root / "_salvaged_events.parquet"
            events, damage = _salvage_with_ijson(path, sink, salvaged)
            _raw_copy(con, f"read_parquet({sql_literal(salvaged)})", raw)
            salvaged.unlink()
            if damage and events == 0:
                raise SourceError(f"{path}: no complete event: {damage}") from None
            if damage:
                status = "partial"
                notes.append(f"kept the {events} complete events before the damage: {damage}")
            else:
                notes.append(f"read by the streaming fallback ({str(exc).strip().splitlines()[0]})")
        return _outcome(status, notes, _derive_tables(con, raw, sink, path), path)
    finally:
        con.close()
        raw.unlink(missing_ok=True)


def read_batch(paths: list[Path], sinks: list[TableSink], context: dict, staging: Path) -> list[ReadOutcome]:
    """Read several whole trace files with one read_json: one scan statement, one staging
    file, each distinct stack text normalized once for all of them; then each file's
    tables into its own sink, by the same statements as `read`.

    Raises on anything the batch cannot take (a file that does not start as an array or
    does not end with ']', a damaged event, a DuckDB error): the caller then reads the
    files one by one with `read`, which names the bad file and salvages what it can.
    """
    if len(set(paths)) < len(paths):
        raise SourceError("a batch names a file twice")  # its rows could not be told apart
    for path in paths:
        _check_start(path)
        if _edge_byte(path, last=True) != b"]":
            raise SourceError(f"{path}: no closing ']': read alone")
    staging.mkdir(parents=True, exist_ok=True)
    raw = staging / "_raw_events"
    con = _connect(context)
    try:
        _raw_copy(con, _scan_sql(paths, file_index=True), raw, file_index=True)
        found = sorted(d.name for d in raw.iterdir()) if raw.is_dir() else []
        if not set(found) <= {f"_file={i}" for i in range(len(paths))}:
            raise SourceError("read_json named a file outside the batch")  # never lose rows to a name mismatch
        _raw_views(con, f"read_parquet({sql_literal(str(raw / '*' / '*.parquet'))}, hive_partitioning = false)")
        _make_stacks(con)
        outcomes = []
        for i, (path, sink) in enumerate(zip(paths, sinks)):
            sink.root.mkdir(parents=True, exist_ok=True)
            own = raw / f"_file={i}"
            if own.is_dir():
                _raw_views(con, f"read_parquet({sql_literal(str(own / '*.parquet'))}, hive_partitioning = false)")
            else:  # a file with no kept event: the batch's (typed) columns, no rows
                _raw_views(con, f"(select * from read_parquet({sql_literal(str(raw / '*' / '*.parquet'))}, "
                                "hive_partitioning = false) limit 0)")
            outcomes.append(_outcome("ok", [], _write_tables(con, sink, path), path))
        return outcomes
    finally:
        con.close()
        shutil.rmtree(raw, ignore_errors=True)
