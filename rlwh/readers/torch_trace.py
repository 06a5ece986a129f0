"""Reader for PyTorch (Kineto) Chrome traces: *.pt.trace.json(.gz), prof_*.json(.gz).

Why it is built this way:
- Kineto writes python_function events after the cpu_ops they enclose, and may put
  baseTimeNanoseconds / distributedInfo after traceEvents. So one pass spills compact
  rows (relative ns, no base yet) to Parquet in a temp dir; DuckDB sorts them by thread
  and time out of core; set operations over batches of the sorted rows
  (rlwh.readers.kineto_nesting, no Python per event) give every op its call stack and
  every "[memory]" event its enclosing op. Peak memory does not grow with the trace.
- The pass decodes the events typed, 16 MB of the file at a time, in native code
  (rlwh.readers.kineto_events), on up to context["workers"] processes
  (rlwh.readers.kineto_decoding), each piece's rows built as Arrow columns
  (rlwh.readers.kineto_rows) and taken back in file order (_Scan.take); a file it cannot
  cut (damaged, cut mid-write) is read token by token instead (rlwh.readers.kineto_stream,
  which also reads the keys before traceEvents). The typed pass reads the keys after
  traceEvents from its last piece, the streaming one as it comes to them: the file is
  read once.
- Times stay exact: integer ns straight from each time's text (or from the streaming
  parser's Decimal µs), never through a float. Epoch ns = baseTimeNanoseconds + ts * 1000
  (Kineto writes ts relative to that base).
- A trace cut mid-write (plain or gzip) keeps every complete event and says where the
  cut is, in uncompressed bytes; a malformed event (of other types, or nested deeper
  than the decoders follow) is skipped, and the message names the first one's place.
- user_annotation ranges land with domain 'default'; gpu_user_annotation (Kineto's copy of
  the same annotation projected onto a GPU stream) lands with domain 'gpu', pid = device
  and tid = stream, so timelines can pick either without double counting.
- Two spans per trace land in ranges: the profiler's declared window ('profiler', the
  "PyTorch Profiler (0)" event) and what the events cover ('recorded': the earliest start
  to the latest end of every other timed event, device activity included), which is what
  the rank recorded: real traces hold events well outside the declared window.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
import zlib
from collections import Counter
from concurrent.futures.process import BrokenProcessPool
from decimal import Decimal
from pathlib import Path

import duckdb
import ijson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rlwh.errors import SourceError
from rlwh.readers import kineto_decoding as decoding
from rlwh.readers.base import CALL_STACKS_SCHEMA, ReadOutcome, TableSink, call_stack_row, normalize_stack
from rlwh.readers.inflate import salvage
from rlwh.readers.kineto_events import Event, Malformed, NotTyped, bytes_bodies, pieces, spans
from rlwh.readers.kineto_nesting import EVENTS, SWEEP_ORDER, Nesting, nest_batches
from rlwh.readers.kineto_rows import FirstBad, Rows, build, kineto_int, rows_of
from rlwh.readers.kineto_stream import EventsNotAList, TooDeep, TopLevel, broken_before_events, deep_byte, trailing_keys
from rlwh.readers.reader_db import file_bytes, reader_db
from rlwh.readers.text_encoding import UTF8_BOM
from rlwh.readers.torch_device import DEVICE_SPILL, LAUNCH_SPILL, copy_device_ops

BATCH_ROWS = 65536
READ_BYTES = 256 << 10
HEAD_READ_BYTES = 64 << 10  # the keys before traceEvents: read in small steps, they are few
TYPED_READ_BYTES = 4 << 20
STREAMING_RUN = 4096  # events the streaming parser hands to _Scan.take at once
NEST_ROWS = 1 << 18  # events nested at once (rlwh.readers.kineto_nesting): what bounds its memory
DUCKDB_MEMORY = "128MB"  # the sort spills to disk beyond this; context["memory_limit"] overrides
STACKS_MEMORY = "32MB"  # what building one batch's call paths as text may use (_StackIds)
_RANK_IN_NAME = re.compile(r"(?<![a-z])rank[-_]?(\d+)", re.IGNORECASE)

CPU_OPS_SCHEMA = pa.schema([("name", pa.string()), ("ts_ns", pa.int64()), ("dur_ns", pa.int64()),
                            ("pid", pa.int64()), ("tid", pa.int64()), ("stack_id", pa.int64()),
                            ("seq_no", pa.int64()), ("fwd_tid", pa.int64())])
RANGES_SCHEMA = pa.schema([("source", pa.string()), ("domain", pa.string()), ("name", pa.string()),
                           ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("pid", pa.int64()),
                           ("tid", pa.int64()), ("thread", pa.string())])
MEMORY_SCHEMA = pa.schema([("event_index", pa.int64()), ("ts_ns", pa.int64()), ("bytes", pa.int64()),
                           ("addr", pa.int64()), ("total_allocated_bytes", pa.int64()),
                           ("total_reserved_bytes", pa.int64()), ("device_type", pa.int32()),
                           ("device_id", pa.int32()), ("tid", pa.int64()), ("op_name", pa.string()),
                           ("stack_id", pa.int64()), ("op_ts_ns", pa.int64())])
_OP_STACKS = pa.schema([("seq", pa.int64()), ("stack_id", pa.int64())])
_MEMORY_OPS = pa.schema([("idx", pa.int64()), ("op_seq", pa.int64())])
# Spilled rows: times relative to baseTimeNanoseconds, in ns; op and frame names as
# indexes into _Scan.names, which keeps the sort narrow.
_I = pa.int64()
_SPILLS = {
    "ops": pa.schema([("seq", _I), ("name", _I), ("ts", _I), ("dur", _I), ("pid", _I), ("tid", _I),
                      ("seq_no", _I), ("fwd_tid", _I), ("stack", _I)]),
    "py": pa.schema([("ts", _I), ("end", _I), ("pid", _I), ("tid", _I), ("pyid", _I), ("parent", _I),
                     ("name", _I)]),
    "mem": pa.schema([("idx", _I), ("ts", _I), ("bytes", _I), ("addr", _I), ("alloc", _I), ("reserved", _I),
                      ("dtype", _I), ("did", _I), ("pid", _I), ("tid", _I)]),
    "ranges": pa.schema([("source", pa.string()), ("domain", pa.string()), ("name", pa.string()), ("ts", _I),
                         ("end", _I), ("pid", _I), ("tid", _I)]),
    # Device activity and the runtime calls that launched it (rlwh.readers.torch_device).
    "dev": DEVICE_SPILL,
    "launch": LAUNCH_SPILL,
}


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    """Parse one Kineto trace into cpu_ops, call_stacks, ranges and torch_memory_events.

    context: rank_id (used when neither distributedInfo nor the file name gives one),
    memory_limit (DuckDB's budget for the sort) and workers (processes that decode the
    trace's pieces at once; rlwh.readers.kineto_decoding), all optional.
    """
    path = Path(path)
    try:  # the spill beside the output (the sink's root), where ingest put it
        with tempfile.TemporaryDirectory(prefix="_spill-", dir=sink.root) as tmp:
            scan, rank = _read(path, Path(tmp), sink, context)
    except (TooDeep, EventsNotAList) as exc:
        raise SourceError(f"{path}: {exc}") from None
    said = [scan["error"]] if scan["error"] is not None else []
    if scan["bad"]:
        n, first = scan["bad"], scan["first_bad"]
        said.append(f"skipped {n} malformed event{'s' if n > 1 else ''}"
                    + (f" (the first: {first.said()})" if first is not None else ""))
    return ReadOutcome("partial", f"{path}: {'; '.join(said)}", rank) if said else ReadOutcome("ok", None, rank)


def _read(path: Path, tmp: Path, sink: TableSink, context: dict) -> tuple[dict, dict]:
    head, has_events, broken = _head_keys(path)
    if not has_events:
        decoding.forget_pool()  # started for this trace (rlwh.ingest.early), not needed
        raise SourceError(f"{path}: no traceEvents ({broken or 'not a PyTorch trace'})")
    spill = _Spill(tmp)
    try:
        scan = _scan_events(path, spill, int(context.get("workers") or 1))
        meta = {**head, **(scan["tail"] or {})}
        base = kineto_int(meta.get("baseTimeNanoseconds")) or 0
        rank = _rank_facts(path, meta, scan, base, context)
    finally:
        spill.close()
        # Idle from here on, each decoding process would hold ~170 MB through the
        # resolve, the landing and derive, where an ingest's process tree peaks.
        decoding.forget_pool()
    _resolve(tmp, spill, sink, base, scan["names"], context.get("memory_limit") or DUCKDB_MEMORY)
    return scan, rank


CUT = "the JSON does not end with its closing '}' (cut while being written)"  # check's words too


class _Stream:
    """The trace's bytes, gunzipped when the magic says so (never by name).

    Counts the uncompressed offset; skips a UTF-8 BOM unless told not to (the typed pass
    counts bytes from the file's first, and its search for traceEvents passes over one). Gzip is inflated here
    rather than by GzipFile, whose buffered read drops the bytes it had inflated when a
    cut stream raises: a damaged stream ends early instead (noted in .error), so the
    parser keeps every event before the cut.
    """

    def __init__(self, path: Path, skip_bom: bool = True):
        self._raw = open(path, "rb")
        self.gzipped = self._raw.read(2) == b"\x1f\x8b"
        self._raw.seek(0)
        self._inflate = zlib.decompressobj(31) if self.gzipped else None
        self._pending = b""
        self.offset = 0
        self.error: str | None = None
        self._skip_bom = skip_bom

    def read(self, n: int = -1) -> bytes:
        if n == 0:  # ijson probes with read(0) for bytes vs str
            return b""
        n = n if n > 0 else READ_BYTES
        data = self._gunzip(n) if self.gzipped else self._raw.read(n)
        self.offset += len(data)
        if self._skip_bom and self.offset == len(data) and data.startswith(UTF8_BOM):
            data = data[len(UTF8_BOM):]  # a BOM is no JSON: skipped, as the CSV and log readers do
        return data

    def _gunzip(self, n: int) -> bytes:
        assert self._inflate is not None  # only a gzipped file is read here
        out = b""
        while not out and self.error is None:
            if self._inflate.eof:  # end of a gzip member: another may follow
                if not self._pending.strip(b"\0"):
                    return b""
                self._inflate = zlib.decompressobj(31)
            src = self._pending or self._raw.read(1 << 16)
            if not src:
                self.error = "gzip stream ends early"
                break
            saved = self._inflate.copy()
            try:
                out = self._inflate.decompress(src, n)
            except zlib.error as exc:
                self.error = f"gzip data damaged ({exc})"
                out = salvage(saved, src)  # every byte before the damage (zlib drops this call's)
                break
            self._pending = self._inflate.unused_data if self._inflate.eof else self._inflate.unconsumed_tail
        return out

    def close(self) -> None:
        self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _head_keys(path: Path) -> tuple[dict, bool, str | None]:
    """Top-level keys before traceEvents, whether traceEvents comes, and where and how the
    JSON broke off before it (None if it did not: kineto_stream.broken_before_events)."""
    with _Stream(path) as stream:
        top = TopLevel(stream, HEAD_READ_BYTES)
        try:
            return top.keys, top.until_events(), None
        except ijson.JSONError:  # a damaged file: what was read is all there is
            read = stream.offset
            return top.keys, False, broken_before_events(_first_bytes(path, read), stream.error, read)
        except TooDeep as exc:
            exc.byte = deep_byte(_first_bytes(path, stream.offset))
            raise


def _first_bytes(path: Path, n: int) -> bytes:
    """The file's first n (uncompressed) bytes, a BOM included."""
    out = bytearray()
    with _Stream(path, skip_bom=False) as stream:
        while len(out) < n and (data := stream.read(min(READ_BYTES, n - len(out)))):
            out += data
    return bytes(out)


def _scan_events(path: Path, spill: _Spill, workers: int = 1) -> dict:
    """One pass over the events: spill the rows the tables need, collect per-file facts.
    Typed decoding of byte ranges (rlwh.readers.kineto_events) where the file allows it,
    else the streaming parser, which also keeps every complete event of a damaged file."""
    try:
        try:
            return _scan_typed(path, spill, workers)
        except BrokenProcessPool:  # a decoding process died (killed, out of memory): here, again
            decoding.forget_pool()
            spill.reset()
            return _scan_typed(path, spill, 1)
    except NotTyped as refused:
        spill.reset()
        return _scan_streaming(path, spill, refused)


def _scan_typed(path: Path, spill: _Spill, workers: int = 1) -> dict:
    """A plain file's pieces are byte ranges that each decoding process reads itself; a
    gzipped file's are cut from the inflated stream here (its bytes counted from the
    first, a BOM included, as a plain file's are)."""
    scan = _Scan(spill)
    out: dict = {}
    decode = decoding.starter(workers, path)
    with _Stream(path, skip_bom=False) as stream:
        bodies = bytes_bodies(_chunks(stream)) if stream.gzipped else spans(str(path))
        for rows in pieces(bodies, trailing_keys, out, decode, workers + 1, rows_of):
            scan.take(rows)
    return scan.facts(None, out["trailer"])


def _chunks(stream: _Stream):
    """The stream's bytes; NotTyped when it ends on damage (the streaming parser says where)."""
    while data := stream.read(TYPED_READ_BYTES):
        yield data
    if stream.error:
        raise NotTyped(stream.error)


def _scan_streaming(path: Path, spill: _Spill, refused: NotTyped | None = None) -> dict:
    """The events token by token (rlwh.readers.kineto_stream). refused: why the typed
    decoder gave up; the byte where it found the file damaged is named when the stream
    breaks there too."""
    scan = _Scan(spill)
    error = None
    run: list[Event | Malformed | None] = []
    with _Stream(path) as stream:
        top = TopLevel(stream, READ_BYTES)
        try:
            top.until_events()
            for event in top.events():
                run.append(event)
                if len(run) >= STREAMING_RUN:
                    scan.take(build(run))
                    run = []
            scan.take(build(run))
        except ijson.JSONError as exc:
            scan.take(build(run))
            if stream.error is None and refused is not None and refused.at is not None \
                    and refused.at <= stream.offset:
                where = f"JSON breaks at uncompressed byte {refused.at} ({refused})"
            elif stream.error is None and "premature EOF" in str(exc) and not stream.read():
                where = f"{CUT} at uncompressed byte {stream.offset}"
            else:
                what = stream.error or f"JSON ends or breaks early ({' '.join(str(exc).split())[:80]})"
                where = f"{what} at or before uncompressed byte {stream.offset}"
            error = f"{where}; kept the {scan.seq} complete events before it"
    return scan.facts(error, None if error else top.keys)


class _Scan:
    """The file's rows, a run at a time (rlwh.readers.kineto_rows builds each run's):
    an op's seq becomes its 1-based place in the file, a memory event's idx its 0-based
    place among them, names become indexes into .names; then spilled."""

    def __init__(self, spill: _Spill):
        self.spill = spill
        self.seq = self.n_mem = self.bad = 0
        self.min_ts: int | None = None
        self.start: int | None = None  # what the events cover ('recorded'), ns
        self.end: int | None = None
        self.devices: Counter = Counter()
        self.names: list = []
        self._name_ids: dict = {}
        self.first_bad: FirstBad | None = None

    def take(self, rows: Rows) -> None:
        for kind, table in rows.tables.items():
            if kind == "ops":
                table = table.set_column(0, "seq", pc.add(table["seq"], self.seq))
                table = table.set_column(1, "name", self._ids(table["name"]))
                table = table.set_column(8, "stack", self._ids(table["stack"], keep_null=True))
            elif kind == "py":
                table = table.set_column(6, "name", self._ids(table["name"]))
            elif kind == "dev":
                table = table.set_column(1, "name", self._ids(table["name"]))
            elif kind == "mem":
                table = table.set_column(0, "idx", pc.add(table["idx"], self.n_mem))
                self.n_mem += table.num_rows
            self.spill.write(kind, table)
        if self.first_bad is None and rows.first_bad is not None:
            first = rows.first_bad
            self.first_bad = FirstBad(self.seq + first.index, first.byte, first.why)
        self.seq += rows.n
        self.bad += rows.bad
        self.min_ts = _least(self.min_ts, rows.min_ts)
        self.start = _least(self.start, rows.start)
        self.end = _most(self.end, rows.end)
        self.devices.update(rows.devices)

    def _ids(self, names: pa.ChunkedArray, keep_null: bool = False) -> pa.Array:
        """Names as indexes into .names, each distinct name looked up once (None is a name,
        unless keep_null)."""
        enc = pc.dictionary_encode(names.combine_chunks())
        ids = [self.name_id(v) for v in enc.dictionary.to_pylist()]
        if keep_null:
            return pc.take(pa.array(ids, _I), enc.indices)
        ids.append(self.name_id(None))
        return pc.take(pa.array(ids, _I), enc.indices.fill_null(len(ids) - 1))

    def facts(self, error: str | None, tail: dict | None) -> dict:
        """What the pass found beside the spilled rows; the 'recorded' range joins them."""
        if self.start is not None:
            self.spill.write("ranges", pa.table(
                [["recorded"], ["default"], ["recorded events"], [self.start], [self.end], [None], [None]],
                schema=_SPILLS["ranges"]))
        return {"error": error, "bad": self.bad, "tail": tail, "devices": self.devices, "names": self.names,
                "min_ts": self.min_ts, "first_bad": self.first_bad}

    def name_id(self, name) -> int:
        nid = self._name_ids.get(name)
        if nid is None:
            nid = self._name_ids[name] = len(self.names)
            self.names.append(name)
        return nid


def _least(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _most(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _spill_writer(path: Path, schema: pa.Schema) -> pq.ParquetWriter:
    """A Parquet file read back once, by this reader's DuckDB: neither compressed nor
    dictionary-encoded (the encoding was most of the spill's cost, 5x a plain write)."""
    return pq.ParquetWriter(path, schema, compression="none", use_dictionary=False)


class _Spill:
    """The rows of each kind, written to one Parquet file per kind as they come; .rows
    counts them (a kind with none needs no query: ~40 ms each, most of a small trace)."""

    def __init__(self, root: Path):
        self.root = root
        self._writers = {k: _spill_writer(root / f"{k}.parquet", s) for k, s in _SPILLS.items()}
        self.rows = dict.fromkeys(_SPILLS, 0)

    def path(self, kind: str) -> str:
        return str(self.root / f"{kind}.parquet")

    def write(self, kind: str, table: pa.Table) -> None:
        self._writers[kind].write_table(table.cast(_SPILLS[kind]), BATCH_ROWS)
        self.rows[kind] += table.num_rows

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def reset(self) -> None:
        """Forget every row spilled so far (a pass that has to start again)."""
        self.close()
        self.__init__(self.root)  # type: ignore[misc]


def _resolve(tmp: Path, spill: _Spill, sink: TableSink, base: int, names: list, memory_limit: str) -> None:
    """Nest the spilled rows (rlwh.readers.kineto_nesting), write the final tables to the sink."""
    input_bytes = file_bytes(*(spill.path(kind) for kind in _SPILLS))
    # One sort thread (reader_db): each thread holds its own sort buffers, and two of them
    # ran a 1 GB trace out of the worker's 256 MB; the other core parses another file.
    with contextlib.ExitStack() as stack:
        con = stack.enter_context(reader_db(input_bytes, memory_limit, spill=tmp / "duckdb", keep_order=False))
        spilled = {"py": spill.path("py"), "ops": spill.path("ops"), "mem": spill.path("mem")}
        names_table = pa.table({"id": pa.array(range(len(names)), _I), "name": pa.array(names, pa.string())})
        con.register("_names", names_table)
        stacks = stack.enter_context(_StackIds(names_table, names, tmp, input_bytes))
        with _spill_writer(tmp / "op_stacks.parquet", _OP_STACKS) as op_stacks, \
                _spill_writer(tmp / "memory_ops.parquet", _MEMORY_OPS) as memory_ops:
            # Sorted from a table: the same sort straight over the three Parquet scans ran
            # out of its 256 MB in 1-7 of 10 tries on a 3 GB trace (DuckDB 2.0.0), 0.3 s in.
            con.execute(f"create temp table _events as {EVENTS}", spilled)
            sorted_events = con.sql(f'select kind, pid, tid, ts, "end", id, parent, name from _events {SWEEP_ORDER}'
                                    ).to_arrow_reader(NEST_ROWS)
            for nesting in nest_batches(sorted_events):
                op_stacks.write_table(stacks.of_ops(nesting))
                memory_ops.write_table(nesting.memory_ops.cast(_MEMORY_OPS))
        con.execute("drop table _events")
        stacks.close()
        nested = {"op_stacks": str(tmp / "op_stacks.parquet"), "memory_ops": str(tmp / "memory_ops.parquet")}
        # Each table's query gives a row per spilled row of its kind: a kind without any is skipped.
        _copy(con, sink, spill.rows["ops"], "cpu_ops", CPU_OPS_SCHEMA, """
            select n.name, o.ts + $base, o.dur, o.pid, o.tid, s.stack_id, o.seq_no, o.fwd_tid
            from read_parquet($ops) o join read_parquet($op_stacks) s using (seq) join _names n on n.id = o.name""",
              {"base": base, "ops": spill.path("ops"), "op_stacks": nested["op_stacks"]})
        rows = list(stacks.rows.values())
        for i in range(0, len(rows), BATCH_ROWS):
            sink.write("call_stacks", pa.RecordBatch.from_pylist(rows[i:i + BATCH_ROWS], schema=CALL_STACKS_SCHEMA))
        _copy(con, sink, spill.rows["mem"], "torch_memory_events", MEMORY_SCHEMA, """
            select m.idx, m.ts + $base, m.bytes, m.addr, m.alloc, m.reserved, m.dtype, m.did,
                   m.tid, n.name, s.stack_id, o.ts + $base
            from read_parquet($mem) m
            left join read_parquet($memory_ops) a using (idx)
            left join read_parquet($ops) o on o.seq = a.op_seq
            left join read_parquet($op_stacks) s on s.seq = a.op_seq
            left join _names n on n.id = o.name
            order by m.idx""", {"base": base, "mem": spill.path("mem"), "ops": spill.path("ops"), **nested})
        copy_device_ops(con, sink, spill.rows["dev"], base, names, spill.path("dev"), spill.path("launch"),
                        spill.path("ops"), spill.path("ranges"))
        _copy(con, sink, spill.rows["ranges"], "ranges", RANGES_SCHEMA, """
            select source, domain, name, ts + $base, "end" + $base, pid, tid, null
            from read_parquet($ranges)""", {"base": base, "ranges": spill.path("ranges")})


def _copy(con, sink: TableSink, spilled: int, table: str, schema: pa.Schema, sql: str, params: dict) -> None:
    """`sql`'s rows into the sink's `table`; not asked when its kind spilled no row (`spilled`: how many)."""
    if not spilled:
        return
    for batch in con.sql(sql, params=params).to_arrow_reader(BATCH_ROWS):
        sink.write(table, pa.RecordBatch.from_arrays(
            [c.cast(t) for c, t in zip(batch.columns, schema.types)], schema=schema))


# Each call path an op stands in (its innermost open frame's trie node) as text, innermost
# frame first: the names of the node and its ancestors in the trie, one line each.
_PATH_TEXTS = """
    with recursive chain(path, node, level) as (
      select node, node, 0
      from (select distinct node from _op_frames where own_stack is null and node > 0)
      union all
      select c.path, t.parent, c.level + 1
      from chain c join _trie t on t.node = c.node
      where t.parent > 0
    )
    select c.path, string_agg(coalesce(n.name, ''), chr(10) order by c.level) as text
    from chain c join _trie t on t.node = c.node left join _names n on n.id = t.name
    group by c.path
"""


class _StackIds:
    """The stack of each op: the "Call stack" it carries (PyTorch 1.8, frames split by
    ';'), else the call path of its innermost open frame. Each distinct path or text of a
    batch is built once (in SQL), normalized and hashed once per trace (a stack that
    normalizes to nothing is no stack); .rows keeps one call_stacks row per stack.

    Its SQL runs on a connection of its own (rlwh.readers.reader_db), made when a batch
    first has call paths to spell (a trace recorded without stacks never needs one). For a
    large trace that is a DuckDB of its own: the sort the batches stream from holds all of
    the reader's DuckDB's memory, and a second connection to it would share that budget.
    A small trace's is a cursor of the process's DuckDB, beside the sort's."""

    def __init__(self, names_table: pa.Table, names: list, tmp: Path, input_bytes: int):
        self.names, self._names_table, self._tmp, self._input_bytes = names, names_table, tmp, input_bytes
        self._con: duckdb.DuckDBPyConnection | None = None
        self._open = contextlib.ExitStack()
        self.rows: dict[int, dict] = {}
        self._ids: dict[str, int | None] = {}

    def _connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            self._con = self._open.enter_context(reader_db(self._input_bytes, STACKS_MEMORY,
                                                           self._tmp / "duckdb-stacks"))
            self._con.register("_names", self._names_table)
        return self._con

    def _path_texts(self, nesting: Nesting) -> list[tuple[int, str]]:
        """(node, text) of each call path the batch's ops without a stack of their own stand in."""
        frames = nesting.op_frames
        if not pc.any(pc.and_(pc.is_null(frames["own_stack"]), pc.greater(frames["node"], 0))).as_py():
            return []
        con = self._connection()
        con.register("_op_frames", frames)
        con.register("_trie", nesting.trie)
        return con.sql(_PATH_TEXTS).fetchall()

    def of_ops(self, nesting: Nesting) -> pa.Table:
        """(seq, stack_id) of a batch's ops."""
        paths = self._path_texts(nesting)
        path_ids = pa.array([self._id(text) for _, text in paths], _I)
        own = nesting.op_frames["own_stack"].combine_chunks()
        texts = pc.unique(own.drop_null())
        text_ids = pa.array([self._id(self.names[i].replace(";", "\n")) for i in texts.to_pylist()], _I)
        by_path = _lookup(nesting.op_frames["node"].combine_chunks(), pa.array([p for p, _ in paths], _I), path_ids)
        by_text = _lookup(own, texts, text_ids)
        return pa.table({"seq": nesting.op_frames["seq"], "stack_id": pc.if_else(pc.is_valid(own), by_text, by_path)},
                        schema=_OP_STACKS)

    def _id(self, raw: str) -> int | None:
        if raw not in self._ids:
            text = normalize_stack(raw)
            row = call_stack_row(text) if text else None
            if row is not None:
                self.rows.setdefault(row["stack_id"], row)
            self._ids[raw] = None if row is None else row["stack_id"]
        return self._ids[raw]

    def close(self) -> None:
        self._open.close()
        self._con = None

    def __enter__(self) -> _StackIds:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _lookup(keys: pa.Array, known: pa.Array, values: pa.Array) -> pa.Array:
    """values at the place of each key in known (null where it is not there)."""
    where = pc.index_in(keys, value_set=known)
    return values.take(where) if len(values) else pa.nulls(len(keys), _I)


def _rank_facts(path: Path, meta: dict, scan: dict, base: int, context: dict) -> dict:
    """The ranks-table facts: rank from distributedInfo, else the file name, else discovery."""
    dist = info if isinstance(info := meta.get("distributedInfo"), dict) else {}
    rank_id = kineto_int(dist.get("rank"))
    if rank_id is None and (m := _RANK_IN_NAME.search(path.name)):
        rank_id = int(m.group(1))
    if rank_id is None:
        rank_id = context.get("rank_id")
    if rank_id is None and context.get("single_process_rank0"):
        note = f"{path.name}: no distributedInfo.rank and no rank in its path: read as rank 0 (a single-process trace)"
        return {**_rank_facts(path, meta, scan, base, {**context, "rank_id": 0}), "note": note}
    if rank_id is None:
        raise SourceError(f"{path}: no rank: the trace has no distributedInfo.rank and the file "
                          "name has no rank<k> (e.g. prof_rank-0_031904.json.gz)")
    props = meta.get("deviceProperties")
    gpus = [kineto_int(p.get("id")) for p in props if isinstance(p, dict)] if isinstance(props, list) else []
    if scan["devices"]:  # the device the trace's kernels and allocations ran on, as PyTorch labels it
        label, did = scan["devices"].most_common(1)[0][0]
        device = f"{label}:{did}"
    elif gpus:  # visible devices, none used in the trace: only a lone one names the device
        device = f"cuda:{gpus[0]}" if len(gpus) == 1 and gpus[0] is not None else "cuda"
    else:
        device = "cpu"
    versions = {k: v for k, v in meta.items() if k == "schemaVersion" or k.lower().endswith("_version")}
    if "nccl_version" in dist:
        versions["nccl_version"] = dist["nccl_version"]
    config = {k: v for k, v in meta.items() if k.startswith(("with_", "profile_", "record_"))}
    other = {k: v for k, v in meta.items() if k not in versions and k not in config}
    return {
        "rank_id": rank_id,
        "world_size": kineto_int(dist.get("world_size")),
        "device": device,
        "capture_started_ns": None if scan["min_ts"] is None else base + scan["min_ts"],
        "versions": _jsonable(versions),
        "profiler_config": _jsonable(config) or None,
        "parallel_groups": _jsonable(dist.get("pg_config")),
        "metadata": _jsonable(other),
    }


def _jsonable(v):
    """Metadata as plain JSON values (ijson gives Decimal for non-integers)."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v
