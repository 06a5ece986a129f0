"""trace_view.json (Ascend) -> cpu_ops, call_stacks, ranges (mstx, overlap), device_ops.

Read in place (read_in_place): the warehouse's own connection scans a batch of files in
one read_json, keeping the events rlwh uses with a hash of each stack text (not the text),
then reads the distinct stack texts in a second, narrow scan and normalizes each once for
the batch; every table is a SELECT over those two temp tables, each row with the `_file`
it came from. `read` runs the same SELECTs over one file into Parquet parts, for the
routes that still parse in workers, and for a damaged file: DuckDB returns nothing for an
array cut mid-write, so then ijson's tokens re-read the file (built by
rlwh.readers.json_tokens, linear in the depth), every complete event before the cut is
kept and the file is marked partial; an event nested too deep is skipped and counted. A
UTF-8 BOM is skipped, as read_json skips it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import ijson
import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers import json_pieces
from rlwh.readers.ascend_device import device_ops_sql, list_kernels
from rlwh.readers.base import ReadOutcome, TableSink, trimmed_sql, us_text_to_ns_sql
from rlwh.readers.json_tokens import MAX_DEPTH, TOO_DEEP, array_items, tokens
from rlwh.readers.reader_db import file_bytes, reader_db
from rlwh.readers.text_encoding import UTF8_BOM, wide_text_said, wide_unicode
from rlwh.sqltext import has_relation, one_value, sql_literal
from rlwh.stacks import top_frame_sql

CUT = "the JSON does not end with its closing ']' (cut while being written)"  # check's words too
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


# A number as JSON or as text (DuckDB reads these fields as text, so NaN, Infinity and
# 1e309 stay words and never become floats).
_NUMBER_TEXT = "[-+]?([0-9]*[.]?[0-9]+(e[-+]?[0-9]+)?|nan|inf|infinity)"


def _unusable_sql() -> str:
    """SQL over a scan's raw text fields (dur, pid, tid, ph) and its times (_times_sql): true
    for an event that is skipped because a number field rlwh uses holds no finite number it can read: a ts
    that is no time in µs that fits in ns, such a dur, or a pid or tid that is a number but
    no integer (NaN, Infinity, 1e309). One rule with the CSV readers, which refuse such rows."""
    def bad_id(c: str) -> str:
        return (f"({c} is not null and try_cast({c} as bigint) is null "
                f"and regexp_full_match(lower({c}), '{_NUMBER_TEXT}'))")
    return (f"(ph is distinct from 'M' and (ts_ns is null or (dur is not null and dur_ns is null)"
            f" or {bad_id('pid')} or {bad_id('tid')}))")


def _times_sql(events: str) -> str:
    """`events` (a query with the raw text fields ts and dur) with ts_ns and dur_ns, each
    computed once an event: the text-to-ns rule is a third of a trace scan's cost, and an
    expression written twice (the time, and the test for an unusable one) ran twice."""
    return (f"select *, {_ns('ts')} as ts_ns, {_double_ns('dur')} as dur_ns "
            f"from (select *, {trimmed_sql('ts')} as ts_text from ({events}))")


def _load_raw(con: duckdb.DuckDBPyConnection, source: str) -> None:
    """`_raw_events`: the kept events of `source` (a scan giving the raw text fields and
    `_file`, which file of the batch), times as exact ns and a fast hash of each stack
    text in place of the text (the text on every row doubled a scan's cost, DESIGN.md);
    `raw`: those without an unusable number (_unusable_sql)."""
    con.execute(
        f"""create or replace temp table _raw_events as
          select _file, {_unusable_sql()} as unusable, cat, name, ph, ts_ns, dur_ns,
            pid, tid, domain, meta_name,
            if(stack is null, null, hash(stack)) as stack_hash,
            try_cast(seq_no as bigint) as seq_no, try_cast(fwd_tid as bigint) as fwd_tid,
            flow_id, {', '.join(DEVICE_FIELDS.values())}
          from ({_times_sql(f"select * from {source} where {KEEP}")})"""
    )
    con.execute("create or replace temp view raw as select * exclude (unusable) from _raw_events where not unusable")


def _listed(sources: list[tuple[int, Path]]) -> tuple[str, str]:
    """SQL lists of the files read and of the batch index each belongs to."""
    return ("[" + ", ".join(sql_literal(p) for _, p in sources) + "]",
            "[" + ", ".join(str(i) for i, _ in sources) + "]")


def _scan_sql(sources: list[tuple[int, Path]]) -> str:
    """A read_json of the files `sources` ((index in the batch, path): whole files, or the
    pieces of one); each row carries `_file`, that index (read_json's filename matched
    against the list)."""
    columns = "{" + ", ".join(f"{k}: '{v}'" for k, v in RAW_COLUMNS.items()) + "}"
    paths, indexes = _listed(sources)
    return (
        f"""(select {indexes}[list_position({paths}, filename)] as _file, cat, name, ph, ts, dur, pid, tid,
              args."Call stack" as stack, args."domain" as domain,
              args."name" as meta_name, args."Sequence number" as seq_no, args."Fwd thread id" as fwd_tid,
              id as flow_id, {', '.join(f'args."{k}" as {v}' for k, v in DEVICE_FIELDS.items())}
            from read_json({paths}, format = 'array', columns = {columns}, filename = true))"""
    )


def _stack_texts_sql(sources: list[tuple[int, Path]]) -> str:
    """The distinct stack texts of the cpu_ops of `sources`, by their fast hash: a second scan
    that reads only the fields a stack needs (cheaper than carrying each text on its row)."""
    columns = "{cat: 'VARCHAR', args: 'STRUCT(\"Call stack\" VARCHAR)'}"
    listed, _ = _listed(sources)
    return (f"""(select hash(stack) as stack_hash, any_value(stack) as stack
                 from (select cat, args."Call stack" as stack
                       from read_json({listed}, format = 'array', columns = {columns}))
                 where cat = 'cpu_op' and stack is not null group by all)""")


# The stack texts a batch may take as known: a temp view of (text_md5, stack_id) that
# rlwh.ingest.landing defines over the scratch database and the warehouse it will append
# to; over the connection's own tables where nobody defined it.
KNOWN_STACK_TEXTS = "_known_stack_texts"


def known_stack_texts_sql(catalog: str | None = None) -> str:
    """The cached texts of a warehouse (`catalog`, else the connection's own) whose stack it
    holds: an entry naming no call_stacks row is not trusted."""
    at = f"{catalog}." if catalog else ""
    return (f"select k.text_md5, k.stack_id from {at}internal.stack_texts as k "
            f"semi join {at}call_stacks as c on k.stack_id = c.stack_id")


def _make_stacks(con: duckdb.DuckDBPyConnection, texts: str, known: bool = False) -> None:
    """`stacks`: each distinct stack text of `texts` (stack_hash, stack) once, normalized,
    given its id, its top frame and depth; `new` says whether call_stacks may lack it.

    known: the connection is a warehouse's, whose internal.stack_texts maps raw texts
    (by MD5) to the call_stacks rows they normalize to: those texts are taken from there
    (KNOWN_STACK_TEXTS), not normalized again (the ranks of a run share their code, so
    most of a batch's texts are known after its first), and the new ones are added to it.

    The normalized texts are materialized first: as a subquery DuckDB inlined their two
    regexes into each of the four uses (2.4x the time: 2.3 s against 0.95 s for 30,000
    stacks of 1.5 KB)."""
    if known:
        if not has_relation(con, f"temp.{KNOWN_STACK_TEXTS}"):
            con.execute(f"create temp view {KNOWN_STACK_TEXTS} as {known_stack_texts_sql()}")
        lookup = f""", found as (
            select t.stack_hash, k.stack_id from texts as t join {KNOWN_STACK_TEXTS} as k on t.text_md5 = k.text_md5)"""
        todo = "(select * from texts anti join found using (stack_hash))"
        old = "union all select stack_hash, null, null, stack_id, null, null, false from found"
    else:
        lookup, todo, old = "", "texts", ""
    con.execute(
        f"""create or replace temp table stacks as
        with texts as materialized (select stack_hash, stack, unhex(md5(stack)) as text_md5 from {texts}){lookup},
        normal as materialized (select stack_hash, text_md5, {_NORMALIZED_STACK} as normalized from {todo})
        select stack_hash, text_md5, normalized, (md5_number_lower(normalized) >> 1)::bigint as stack_id,
          {top_frame_sql('normalized')} as top_frame,
          len(string_split(normalized, chr(10)))::integer as depth, true as new
        from normal
        where normalized is not null
        {old}"""
    )
    if known:
        con.execute("insert or ignore into internal.stack_texts select text_md5, stack_id from stacks where new")


# The tables a trace fills, each a SELECT over `raw` and `stacks` with the `_file` of its
# rows (call_stacks, shared by every file, has none).
def _table_selects() -> dict[str, str]:
    ts_ns, end_ns = "ts_ns", "ts_ns + coalesce(dur_ns, 0)"
    overlap_names = ", ".join(repr(n) for n in OVERLAP_NAMES)
    return {
        "cpu_ops": """
          select r._file, r.name, r.ts_ns, r.dur_ns,
            try_cast(r.pid as bigint) as pid, try_cast(r.tid as bigint) as tid, s.stack_id, r.seq_no, r.fwd_tid
          from raw r left join stacks s on r.stack_hash = s.stack_hash
          where r.cat = 'cpu_op'""",
        "call_stacks": "select distinct stack_id, normalized as stack, top_frame, depth from stacks where new",
        "ranges": f"""
          with threads as (
            select distinct _file, pid, tid, meta_name as thread from raw where ph = 'M' and name = 'thread_name'
          ),
          overlap_pids as (
            select distinct _file, pid from raw
            where ph = 'M' and name = 'process_name' and meta_name = '{OVERLAP_PROCESS}'
          ),
          mstx as (
            select _file, 'mstx' as source, coalesce(domain, 'default') as domain, name, {ts_ns} as start_ns,
              case when ph = 'X' then {end_ns} else {ts_ns} end as end_ns, pid, tid
            from raw where cat = 'mstx' and ph in ('X', 'i', 'I', 'R', 'n')
          ),
          overlap as (
            select _file, 'overlap' as source, 'default' as domain, name, {ts_ns} as start_ns, {end_ns} as end_ns,
              pid, tid
            from raw where ph = 'X' and name in ({overlap_names}) and (cat is null or cat <> 'cpu_op')
              and (_file, pid) in (select (_file, pid) from overlap_pids)
          ),
          both_sources as (select * from mstx union all select * from overlap)
          select b._file, b.source, b.domain, b.name, b.start_ns, b.end_ns,
            try_cast(b.pid as bigint) as pid, try_cast(b.tid as bigint) as tid, t.thread
          from both_sources b left join threads t on b._file = t._file and b.pid = t.pid and b.tid = t.tid""",
        "device_ops": device_ops_sql(ts_ns, end_ns),
    }


def _unusable_events(con: duckdb.DuckDBPyConnection) -> dict[int, int]:
    """Per file of the batch: the events skipped for an unusable number (_unusable_sql)."""
    return dict(con.execute("select _file, count(*) from _raw_events where unusable group by _file").fetchall())


def _first_unusable(path: Path) -> str:
    """Where the file's first skipped event is ("element 7 (name 'x')"), by a scan of its own:
    asked for only when a file has one. Empty when the file cannot be scanned whole."""
    columns = "{" + ", ".join(f"{k}: 'VARCHAR'" for k in ("name", "ph", "ts", "dur", "pid", "tid")) + "}"
    events = f"select row_number() over () as element, * from read_json(?, format = 'array', columns = {columns})"
    try:
        with reader_db(file_bytes(path)) as con:
            found = con.execute(f"select element, name from ({_times_sql(events)}) where {_unusable_sql()} limit 1",
                                [str(path)]).fetchone()
    except duckdb.Error:
        return ""
    return f" (the first: element {found[0]}, name {found[1]!r})" if found else ""


def _write_sink(con: duckdb.DuckDBPyConnection, sink: TableSink, path: Path) -> int:
    """Write the tables of the one file in `raw` (`path`) to `sink`; return its unusable events."""
    list_kernels(con, [path])
    for table, select in _table_selects().items():
        rows = select if table == "call_stacks" else f"select * exclude (_file) from ({select})"
        con.execute(f"copy ({rows}) to {sql_literal(sink.parquet_path(table))} (format parquet)")
    return _unusable_events(con).get(0, 0)


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
        first = self.offset == 0
        self.offset += len(data)
        if first and data.startswith(UTF8_BOM):
            data = data[len(UTF8_BOM):]  # a BOM is no JSON: skipped, as DuckDB's read_json skips it
        return data.translate(_CONTROL_AS_SPACE)


def _edge_byte(path: Path, last: bool) -> bytes:
    """The first (or last) non-whitespace byte of the file; b"" when there is none."""
    with open(path, "rb") as handle:
        if last:
            handle.seek(max(0, path.stat().st_size - 65536))
            return handle.read().rstrip()[-1:]
        skip = UTF8_BOM if handle.read(len(UTF8_BOM)) == UTF8_BOM else b""  # as read_json skips it
        handle.seek(len(skip))
        while chunk := handle.read(65536):
            if chunk.lstrip():
                return chunk.lstrip()[:1]
    return b""


def _salvage_with_ijson(path: Path, raw: Path) -> tuple[int, str]:
    """Stream events until the damage; return (complete events, description of the damage)."""
    import pyarrow.parquet as pq

    rows: list[dict] = []
    kept_events = skipped = first_skipped = deep = first_deep = 0
    writer = pq.ParquetWriter(raw, RAW_SCHEMA)
    damage = "the file ends before the closing ']'"
    with open(path, "rb") as handle:
        counting = _CountingFile(handle)
        try:
            for i, event in enumerate(_elements(counting), start=1):
                if event is TOO_DEEP:
                    deep, first_deep = deep + 1, first_deep or i
                    continue
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
            if "premature EOF" in detail and counting.offset == path.stat().st_size:
                damage = f"{CUT} at byte {counting.offset}"
    if rows:
        writer.write_batch(pa.RecordBatch.from_pylist(rows, RAW_SCHEMA))
    writer.close()
    if skipped:
        note = f"skipped {skipped} array elements that are not event objects (the first is element {first_skipped})"
        damage = f"{damage}; {note}" if damage else note
    if deep:
        note = (f"skipped {deep} events nested past {MAX_DEPTH} levels, deeper than the JSON decoders follow (the "
                f"first is element {first_deep})")
        damage = f"{damage}; {note}" if damage else note
    return kept_events, damage


def _elements(stream: _CountingFile) -> Iterator[object]:
    """The top-level array's elements, built linearly in their depth (rlwh.readers.json_tokens;
    ijson's items cost the square of it); what follows the array must be nothing."""
    found = tokens(stream, 16384)
    event, _ = next(found, ("", None))
    if event != "start_array":
        raise ijson.common.JSONError(f"the file is no JSON array (it starts with {event or 'nothing'})")
    yield from array_items(found)
    for _ in found:  # yajl refuses anything after the array's end
        pass


def _check_start(path: Path) -> None:
    with open(path, "rb") as handle:
        wide = wide_unicode(handle.read(64))
    if wide is not None:
        raise SourceError(f"{path}: {wide_text_said(wide)}")
    first = _edge_byte(path, last=False)
    if not first:
        raise SourceError(f"{path}: empty file ({path.stat().st_size} bytes), no trace events")
    if first != b"[":
        raise SourceError(f"{path}: not a JSON array of trace events (it starts with {first.decode('latin-1')!r})")


def _outcome(status: str, notes: list[str], unusable: int, path: Path) -> ReadOutcome:
    if unusable:
        status = "partial"
        notes.append(f"skipped {unusable} events whose ts, dur, pid or tid is not a finite number that fits "
                     f"(ts and dur in microseconds, to the ns){_first_unusable(path)}")
    return ReadOutcome(status=status, message=(f"{path}: " + "; ".join(notes)) if notes else None)


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    """Read one trace into `sink`'s Parquet parts (the route of the formats DuckDB cannot
    read alone: Ray's and dataset mode's workers, and a damaged file's salvage); a cut or
    damaged array keeps every complete event and the file is partial."""
    _check_start(path)
    with reader_db(file_bytes(path), context.get("memory_limit", "384MB"), keep_order=False) as con:
        status, notes = _load_one(con, path, sink.root)
        return _outcome(status, notes, _write_sink(con, sink, path), path)


def _load_one(con: duckdb.DuckDBPyConnection, path: Path, scratch: Path) -> tuple[str, list[str]]:
    """`raw` and `stacks` of one file, read whole by DuckDB or, where it cannot, salvaged
    by ijson to its last complete event; return the status and notes so far."""
    status, notes = "ok", []
    try:
        _load_raw(con, _scan_sql([(0, path)]))
        _make_stacks(con, _stack_texts_sql([(0, path)]))
        # DuckDB reads an array cut right after a comma as if it were whole.
        if _edge_byte(path, last=True) != b"]":
            status = "partial"
            notes.append(f"no closing ']' at byte {path.stat().st_size}: the file was cut while being written; "
                         "kept every complete event")
    except duckdb.Error as exc:
        scratch.mkdir(exist_ok=True)
        salvaged = scratch / "_salvaged_events.parquet"
        try:
            events, damage = _salvage_with_ijson(path, salvaged)
            rows = f"(select 0 as _file, * from read_parquet({sql_literal(salvaged)}))"
            _load_raw(con, rows)
            _make_stacks(con, f"(select hash(stack) as stack_hash, any_value(stack) as stack from {rows} "
                              "where cat = 'cpu_op' and stack is not null group by all)")
        finally:
            salvaged.unlink(missing_ok=True)
        if damage and events == 0:
            raise SourceError(f"{path}: no complete event: {damage}") from None
        if damage:
            status = "partial"
            notes.append(f"kept the {events} complete events before the damage: {damage}")
        else:
            notes.append(f"read by the streaming fallback ({str(exc).strip().splitlines()[0]})")
    return status, notes


def read_in_place(con: duckdb.DuckDBPyConnection, paths: list[Path], context: dict,
                  scratch: Path) -> list[ReadOutcome]:
    """Read whole trace files (a batch, or one) in the warehouse's own connection: one
    read_json over all of them on DuckDB's threads, each distinct stack text normalized
    once for the batch, and each table's rows of every file into a temp table
    `_rows_<table>` whose `_file` says which of `paths` a row is from (rlwh.ingest.in_place
    lands them). A file of 2 PIECE_BYTES or more is read as pieces (rlwh.readers.json_pieces,
    written under `scratch`), so its one line of JSON is read on every thread. Returns one
    outcome per file.

    Raises on anything a whole-file read cannot take (a file that does not start as an
    array or does not end with ']', a damaged event, a DuckDB error): the caller then
    reads that file by `read`, which names the damage and salvages what it can.
    """
    if len(set(paths)) < len(paths):
        raise SourceError("a batch names a file twice")  # its rows could not be told apart
    for path in paths:
        _check_start(path)
        if _edge_byte(path, last=True) != b"]":
            raise SourceError(f"{path}: no closing ']': read alone")
    sources = [(i, piece) for i, path in enumerate(paths) for piece in json_pieces.cut(path, scratch / str(i))]
    _load_raw(con, _scan_sql(sources))
    if one_value(con.execute("select count(*) from _raw_events where _file is null")):
        raise SourceError("read_json named a file outside the batch")  # never lose rows to a name mismatch
    _make_stacks(con, _stack_texts_sql(sources), known=True)
    list_kernels(con, paths)
    for table, select in _table_selects().items():
        con.execute(f"create or replace temp table _rows_{table} as {select}")
    unusable = _unusable_events(con)
    con.execute("drop table _raw_events")
    return [_outcome("ok", [], unusable.get(i, 0), path) for i, path in enumerate(paths)]
