"""trace_view.json (Ascend) -> cpu_ops, call_stacks, ranges (mstx, overlap).

One read of the file: DuckDB scans the JSON array once and writes the events rlwh keeps
to a Parquet staging file, with each stack's text as it is (Parquet's dictionary
encoding stores a repeated stack once, so this costs little). Everything else is
derived from that small file. DuckDB returns nothing for an array cut mid-write, so
then ijson re-reads the file, keeps every complete event before the cut and the file
is marked partial.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import ijson
import pyarrow as pa

from rlwh.readers.base import ReadOutcome, TableSink, trimmed_sql, us_text_to_ns_sql

OVERLAP_PROCESS = "Overlap Analysis"
OVERLAP_NAMES = ("Computing", "Communication", "Communication(Not Overlapped)", "Free")

# Raw event fields kept by the scan, all as text so "ts" strings stay exact.
RAW_COLUMNS = {
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "ph": "VARCHAR",
    "ts": "VARCHAR",
    "dur": "VARCHAR",
    "pid": "VARCHAR",
    "tid": "VARCHAR",
    "args": 'STRUCT("Call stack" VARCHAR, "domain" VARCHAR, "name" VARCHAR)',
}
RAW_SCHEMA = pa.schema(
    [(c, pa.string()) for c in ("cat", "name", "ph", "ts", "dur", "pid", "tid", "stack", "domain", "meta_name")]
)
KEEP = (
    "cat in ('cpu_op', 'mstx') or ph = 'M' "
    f"or (ph = 'X' and name in ({', '.join(repr(n) for n in OVERLAP_NAMES)}))"
)



def _ns(column: str) -> str:
    """Microseconds as decimal text -> exact ns; a number DuckDB printed in another form
    (scientific notation) falls back to DOUBLE."""
    exact = us_text_to_ns_sql(f"{column}_text", strict=False)
    return f"coalesce({exact}, cast(round(try_cast({column} as double) * 1000) as bigint))"
# Ascend joins frames with ";\r\n"; tolerate "\n" and "\r\n" alone.
_NORMALIZED_STACK = (
    "nullif(trim(regexp_replace(regexp_replace(trim(stack), '[ \\t]*;?[ \\t]*\\r?\\n[ \\t]*', chr(10), 'g'),"
    " ';$', '')), '')"
)


def _q(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def _raw_copy(con: duckdb.DuckDBPyConnection, source: str, raw: Path) -> None:
    """Write the kept events of `source` (a scan giving the raw text fields) to `raw`,
    with times as exact ns and a fast hash of each stack text, in the same pass."""
    con.execute(
        f"""copy (
          select cat, name, ph, {_ns('ts')} as ts_ns, {_ns('dur')} as dur_ns, pid, tid, stack, domain, meta_name,
            if(stack is null, null, hash(stack)) as stack_hash
          from (
            select *, {trimmed_sql('ts')} as ts_text, {trimmed_sql('dur')} as dur_text
            from {source}
            where {KEEP}
          )
        ) to {_q(raw)} (format parquet)"""
    )


def _scan_with_duckdb(con: duckdb.DuckDBPyConnection, path: Path, raw: Path) -> None:
    columns = "{" + ", ".join(f"{k}: '{v}'" for k, v in RAW_COLUMNS.items()) + "}"
    scan = (
        f"""(select cat, name, ph, ts, dur, pid, tid, args."Call stack" as stack, args."domain" as domain,
              args."name" as meta_name
            from read_json({_q(path)}, format = 'array', columns = {columns}))"""
    )
    _raw_copy(con, scan, raw)


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return None
    return str(value)


class _CountingFile:
    """A binary file that remembers how far the parser has read, for error offsets."""

    def __init__(self, handle):
        self.handle = handle
        self.offset = 0

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.offset += len(data)
        return data


def _salvage_with_ijson(path: Path, sink: TableSink, raw: Path) -> tuple[int, str]:
    """Stream events until the damage; return (complete events, description of the damage)."""
    import pyarrow.parquet as pq

    rows: list[dict] = []
    kept_events = 0
    writer = pq.ParquetWriter(raw, RAW_SCHEMA)
    damage = "the file ends before the closing ']'"
    with open(path, "rb") as handle:
        counting = _CountingFile(handle)
        try:
            for event in ijson.items(counting, "item", use_float=False, buf_size=16384):
                kept_events += 1
                if not isinstance(event, dict):
                    continue
                args = event.get("args") if isinstance(event.get("args"), dict) else {}
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
                }
                keep = row["cat"] in ("cpu_op", "mstx") or row["ph"] == "M" or (
                    row["ph"] == "X" and row["name"] in OVERLAP_NAMES
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
    return kept_events, damage


def _derive_tables(con: duckdb.DuckDBPyConnection, raw: Path, sink: TableSink) -> None:
    ts_ns, end_ns = "ts_ns", "ts_ns + coalesce(dur_ns, 0)"
    con.execute(f"create or replace temp view raw as select * from read_parquet({_q(raw)})")
    # Each distinct stack text once: found by its fast hash, normalized, given its id.
    con.execute(
        f"""create or replace temp table stacks as
        select stack_hash, normalized, (md5_number_lower(normalized) >> 1)::bigint as stack_id
        from (
          select stack_hash, {_NORMALIZED_STACK} as normalized
          from (select stack_hash, any_value(stack) as stack from raw
                where cat = 'cpu_op' and stack is not null group by stack_hash)
        )
        where normalized is not null"""
    )
    con.execute(
        f"""copy (
          select r.name, r.ts_ns, r.dur_ns,
            try_cast(r.pid as bigint) as pid, try_cast(r.tid as bigint) as tid, s.stack_id
          from raw r left join stacks s on r.stack_hash = s.stack_hash
          where r.cat = 'cpu_op'
        ) to {_q(sink.parquet_path('cpu_ops'))} (format parquet)"""
    )
    con.execute(
        f"""copy (
          select distinct stack_id, normalized as stack,
            split_part(normalized, chr(10), 1) as top_frame,
            len(string_split(normalized, chr(10)))::integer as depth
          from stacks
        ) to {_q(sink.parquet_path('call_stacks'))} (format parquet)"""
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
        ) to {_q(sink.parquet_path('ranges'))} (format parquet)"""
    )


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    raw = sink.root / "_raw_events.parquet"
    sink.root.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    try:
        con.execute("set threads = 1")  # one JSON array does not scan faster with more
        con.execute("set enable_progress_bar = false")
        con.execute("set memory_limit = ?", [context.get("memory_limit", "384MB")])
        con.execute("set preserve_insertion_order = false")
        outcome = ReadOutcome()
        try:
            _scan_with_duckdb(con, path, raw)
        except duckdb.Error as exc:
            salvaged = sink.root / "_salvaged_events.parquet"
            events, damage = _salvage_with_ijson(path, sink, salvaged)
            _raw_copy(con, f"read_parquet({_q(salvaged)})", raw)
            salvaged.unlink()
            first_line = str(exc).strip().splitlines()[0]
            outcome = ReadOutcome(message=f"{path}: read by the streaming fallback ({first_line})")
            if damage:
                from rlwh.errors import SourceError

                if events == 0:
                    raise SourceError(f"{path}: no complete event: {damage}") from None
                outcome = ReadOutcome(
                    status="partial", message=f"{path}: kept the {events} complete events before the damage: {damage}"
                )
        _derive_tables(con, raw, sink)
        return outcome
    finally:
        con.close()
        raw.unlink(missing_ok=True)
