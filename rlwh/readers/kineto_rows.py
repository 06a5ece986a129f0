"""A run of decoded Kineto events as the reader's rows: Arrow columns, kind by kind.

Why: building rows one event at a time in Python cost more than decoding the events.
Here a run of FastEvents (rlwh.readers.kineto_events) becomes columns with one list
comprehension per field and Arrow compute for the rest: the route of each event from its
category, the times as exact integer ns straight from their text (Arrow's decimal parse:
what int(Decimal(text) * 1000) gives, with no float in between), ids and counts as int64.
A run that holds anything else (Events of the general shape, None for a malformed event,
a time with more than three decimals, a value beyond BIGINT) is built by the
event-by-event path below, the reader's earlier rules.

Rows are local to their run: an op's seq counts from 1 and a memory event's idx from 0
within the run, names are text; the reader (rlwh.readers.torch_trace) offsets and interns
them, so runs can be built in any process and in any order. A run names its first
malformed event (its place in the run, its byte when the run's text is at hand, why),
so that the reader's message can point at one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from rlwh.readers.kineto_events import (
    NO_ARGS,
    Body,
    Event,
    FastArgs,
    FastEvent,
    Malformed,
    decode_piece,
    element_byte,
    general_events,
)

_I, _S = pa.int64(), pa.string()
# Kineto's categories of device work and of the runtime calls that launch it (ROCm's too).
# Here, not in rlwh.readers.torch_device, whose imports (DuckDB) a decoding process does
# not need: 0.2 s of its start.
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver", "mtia_runtime")
# Kineto's category names before PyTorch 1.9, read as today's.
OLD_CATEGORIES = {"Operator": "cpu_op", "Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy",
                  "Memset": "gpu_memset", "User Annotations": "user_annotation"}
ANNOTATION_DOMAINS = {"user_annotation": "default", "gpu_user_annotation": "gpu"}
# PyTorch's DeviceType codes as PyTorch names the device (ROCm builds say cuda; 19 is MTIA,
# 20 PrivateUse1, the NPU under torch_npu). internal.torch_memory_pairs spells them the same way.
DEVICE_LABELS = {1: "cuda", 6: "cuda", 12: "xpu", 13: "mps", 19: "mtia", 20: "npu"}

SCHEMAS = {
    "ops": pa.schema([("seq", _I), ("name", _S), ("ts", _I), ("dur", _I), ("pid", _I), ("tid", _I),
                      ("seq_no", _I), ("fwd_tid", _I), ("stack", _S)]),
    "py": pa.schema([("ts", _I), ("end", _I), ("pid", _I), ("tid", _I), ("pyid", _I), ("parent", _I),
                     ("name", _S)]),
    "mem": pa.schema([("idx", _I), ("ts", _I), ("bytes", _I), ("addr", _I), ("alloc", _I), ("reserved", _I),
                      ("dtype", _I), ("did", _I), ("pid", _I), ("tid", _I)]),
    "ranges": pa.schema([("source", _S), ("domain", _S), ("name", _S), ("ts", _I), ("end", _I), ("pid", _I),
                         ("tid", _I)]),
    "dev": pa.schema([("cat", _S), ("name", _S), ("ts", _I), ("dur", _I), ("pid", _I), ("tid", _I),
                      ("device", _I), ("stream", _I), ("correlation", _I), ("collective_name", _S),
                      ("pg", _S), ("nelems", _I), ("dtype", _S), ("seq", _I)]),
    "launch": pa.schema([("correlation", _I), ("ts", _I), ("pid", _I), ("tid", _I)]),
}

# Where an event goes, by category (after OLD_CATEGORIES).
_ROUTES = {"cpu_op": "op", "python_function": "py", "cpu_instant_event": "instant",
           "user_annotation": "annotation", "gpu_user_annotation": "annotation", "Trace": "window",
           **{cat: "device" for cat in DEVICE_CATEGORIES}, **{cat: "launch" for cat in LAUNCH_CATEGORIES}}
_CODES = ["op", "py", "instant", "annotation", "window", "device", "launch"]
_CODE = {route: i for i, route in enumerate(_CODES)}
_NONE = len(_CODES)  # no route (or no category)
# What a malformed event raises in the event-by-event path: it counts as malformed.
_MALFORMED = (TypeError, ValueError, ArithmeticError, AttributeError, KeyError)


def kineto_int(v) -> int | None:
    """An id or count as int; None for Kineto's non-numeric ones ("Spans", "")."""
    if v.__class__ is int or v is None:
        return v
    if isinstance(v, (Decimal, float)):
        return int(v) if v == int(v) else None
    if isinstance(v, str):
        s = v.strip()
        return int(s) if s.lstrip("-").isdigit() else None
    return None


class _Slow(Exception):
    """This run is not of the common shape: build it event by event."""


@dataclass
class FirstBad:
    """The first malformed event of a run (or of a file, once the reader counts the runs before)."""

    index: int  # 0-based, among the run's events
    byte: int | None = None  # its first byte in the (uncompressed) file, when known
    why: str | None = None

    def said(self) -> str:
        """How a message names it."""
        where = f"element {self.index + 1} of traceEvents"
        if self.byte is not None:
            where += f", at uncompressed byte {self.byte}"
        return where + (f": {self.why}" if self.why else "")


@dataclass
class Rows:
    """A run's rows (local seq / idx, names as text) and the facts it adds to the file's."""

    n: int  # events in the run
    tables: dict[str, pa.Table]
    bad: int = 0  # malformed events, and rows dropped for a value beyond BIGINT
    min_ts: int | None = None  # ns, over every timed event but metadata
    start: int | None = None  # ns: what the events cover, beside the declared window
    end: int | None = None
    devices: Counter = field(default_factory=Counter)
    first_bad: FirstBad | None = None


def build(events: list, general: Callable[[], list] | None = None) -> Rows:
    """The rows of a run of events, in bulk where the run allows it. general() gives the
    run again as Events (decoded with the general rules), for a run of FastEvents that
    cannot be built in bulk."""
    if events and events[0].__class__ is FastEvent:
        try:
            return _bulk(events)
        except (_Slow, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            if general is None:
                raise
            events = general()
    return _one_by_one(events)


def rows_of(events: list, piece: bytes, at: int = 0) -> Rows:
    """The rows of a piece's events (piece: their JSON text, its '[' at byte `at` of the
    file, read again with the general rules where the bulk path cannot take them)."""
    rows = build(events, lambda: general_events(piece, at) or [])
    if rows.first_bad is not None:
        rows.first_bad.byte = at + element_byte(piece, rows.first_bad.index)
    return rows


def decode_rows(body: Body) -> tuple[str, Rows | None]:
    """A piece cut by kineto_events.pieces, decoded and built: what a decoding process does."""
    return decode_piece(body, rows_of)


# A FastEvent's texts are str or None and its ids int, str or None (msgspec checked them):
# arrays of a given type, which pyarrow builds in half the time it takes to infer one.
def _texts(values: list) -> pa.Array:
    return pa.array(values, _S)  # ArrowTypeError for anything but str and None: event by event


def _ints(values: list) -> pa.Array:
    """Ids and counts as kineto_int reads them; ints (and None) in bulk."""
    try:
        return pa.array(values, _I)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # ints beside texts ("Spans"): value by value
        return pa.array([kineto_int(v) for v in values], _I)  # OverflowError: a value beyond BIGINT


def _ns(values: list) -> pa.Array:
    """Kineto µs (ints, or texts of decimal numbers) as exact integer ns. A text with more
    than 3 decimals (its ns would not be whole, and sums of ns not exact) raises
    ArrowInvalid, as does one beyond BIGINT ns: the run is built event by event."""
    try:
        arr = pa.array(values, _S)  # the common case: every one a text
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        arr = pa.array(values)  # ints; a mix raises: event by event
        if arr.type == _I or arr.type == pa.null():
            return pc.multiply_checked(arr.cast(_I), 1000)
        raise _Slow() from None
    # Arrow parses the text as a decimal, exactly; 33 digits leave room for the product.
    us = pc.cast(arr, pa.decimal128(33, 3))
    return pc.cast(pc.multiply(us, pa.scalar(1000, pa.decimal128(4, 0))), _I)


def _take(values: list, idx: pa.Array) -> list:
    return [values[i] for i in idx.to_pylist()]


def _args(events: list) -> list:
    return [a if (a := e.args).__class__ is FastArgs else NO_ARGS for e in events]


def _bulk(events: list[FastEvent]) -> Rows:
    n = len(events)
    ph = _texts([e.ph for e in events])
    cat = _texts([e.cat for e in events])
    name = _texts([e.name for e in events])
    ts = _ns([e.ts for e in events])
    dur = _ns([e.dur for e in events])
    timed = pc.is_valid(ts)
    # Categories to routes: each distinct category looked up once.
    enc = pc.dictionary_encode(cat).combine_chunks() if isinstance(cat, pa.ChunkedArray) else pc.dictionary_encode(cat)
    known: list[str] = [OLD_CATEGORIES.get(c, c) for c in enc.dictionary.to_pylist()]
    which = enc.indices.fill_null(len(known))
    route = pc.take(pa.array([_CODE.get(_ROUTES.get(c, ""), _NONE) for c in known] + [_NONE], pa.int8()), which)
    cat_now = pc.take(pa.array(known + [None], _S), which)
    is_memory = pc.fill_null(pc.equal(name, "[memory]"), False)
    out: dict[str, pa.Table] = {}
    devices: Counter = Counter()

    # What the file covers: every timed event but metadata ('M'), and but the profiler's span.
    not_meta = pc.and_(timed, pc.fill_null(pc.not_equal(ph, "M"), True))
    min_ts = pc.min(pc.filter(ts, not_meta)).as_py()
    covered = pc.and_(not_meta, pc.fill_null(pc.not_equal(cat_now, "Trace"), True))
    start = pc.min(pc.filter(ts, covered)).as_py()
    end = pc.max(pc.filter(pc.add_checked(ts, pc.fill_null(dur, 0)), covered)).as_py()

    def select(code: int) -> pa.Array:
        return pc.indices_nonzero(pc.and_(pc.equal(route, code), timed))

    if len(idx := select(_CODE["op"])):
        sub = _take(events, idx)
        args = _args(sub)
        stack = _texts([a.call_stack for a in args])
        out["ops"] = pa.table([
            pc.add(idx.cast(_I), 1), name.take(idx), ts.take(idx), dur.take(idx),
            _ints([e.pid for e in sub]), _ints([e.tid for e in sub]),
            _ints([a.sequence_number for a in args]), _ints([a.fwd_thread_id for a in args]),
            pc.if_else(pc.equal(stack, ""), pa.scalar(None, _S), stack)], schema=SCHEMAS["ops"])
    if len(idx := select(_CODE["py"])):
        sub = _take(events, idx)
        args = _args(sub)
        t = ts.take(idx)
        out["py"] = pa.table([
            t, pc.add_checked(t, pc.fill_null(dur.take(idx), 0)), _ints([e.pid for e in sub]),
            _ints([e.tid for e in sub]), _ints([a.python_id for a in args]),
            _ints([a.python_parent_id for a in args]), name.take(idx)], schema=SCHEMAS["py"])
    mem_mask = pc.and_(pc.or_(pc.equal(route, _CODE["instant"]), pc.equal(route, _NONE)), pc.and_(is_memory, timed))
    if len(idx := pc.indices_nonzero(mem_mask)):
        sub = _take(events, idx)
        args = _args(sub)
        dtype, did = _ints([a.device_type for a in args]), _ints([a.device_id for a in args])
        out["mem"] = pa.table([
            pa.array(range(len(idx)), _I), ts.take(idx), _ints([a.bytes for a in args]),
            _ints([a.addr for a in args]), _ints([a.total_allocated for a in args]),
            _ints([a.total_reserved for a in args]), dtype, did,
            _ints([e.pid for e in sub]), _ints([e.tid for e in sub])], schema=SCHEMAS["mem"])
        for (dt, d), count in Counter(zip(dtype.to_pylist(), did.to_pylist())).items():
            if dt in DEVICE_LABELS and d is not None and d >= 0:
                devices[(DEVICE_LABELS[dt], d)] += count
    ranges = []
    if len(idx := select(_CODE["annotation"])):
        keep = idx.filter(pc.fill_null(pc.equal(ph.take(idx), "X"), True))
        if len(keep):
            sub = _take(events, keep)
            t = ts.take(keep)
            ranges.append(pa.table([
                pa.array(["torch_annotation"] * len(keep), _S),
                pa.array([ANNOTATION_DOMAINS[c] for c in cat_now.take(keep).to_pylist()], _S),
                name.take(keep), t, pc.add_checked(t, pc.fill_null(dur.take(keep), 0)),
                _ints([e.pid for e in sub]), _ints([e.tid for e in sub])], schema=SCHEMAS["ranges"]))
    if len(idx := select(_CODE["window"])):  # the profiler's own span ("PyTorch Profiler (0)")
        keep = idx.filter(pc.and_(pc.fill_null(pc.equal(ph.take(idx), "X"), False), pc.is_valid(dur.take(idx))))
        if len(keep):
            t = ts.take(keep)
            ranges.append(pa.table([
                pa.array(["profiler"] * len(keep), _S), pa.array(["default"] * len(keep), _S),
                name.take(keep), t, pc.add_checked(t, dur.take(keep)),
                pa.nulls(len(keep), _I), pa.nulls(len(keep), _I)], schema=SCHEMAS["ranges"]))
    if ranges:
        out["ranges"] = pa.concat_tables(ranges)
    if len(idx := select(_CODE["device"])):  # kernels, memcpy, memset, MTIA device events
        sub = _take(events, idx)
        args = _args(sub)
        device = _ints([a.device for a in args])
        cats = cat_now.take(idx)
        stream = [a.stream if a.stream is not None else a.stream_id for a in args]
        seq = [a.seq if a.seq is not None else a.seq_lower for a in args]
        table = pa.table([
            cats, name.take(idx), ts.take(idx), dur.take(idx), _ints([e.pid for e in sub]),
            _ints([e.tid for e in sub]), device, _ints(stream), _ints([a.correlation for a in args]),
            _texts([a.collective_name for a in args]), _texts([a.process_group_name for a in args]),
            _ints([a.in_msg_nelems for a in args]), _texts([a.dtype for a in args]), _ints(seq)],
            schema=SCHEMAS["dev"])
        keep = pc.fill_null(pc.equal(ph.take(idx), "X"), True)
        out["dev"] = table.filter(keep)
        for c, d in zip(cats.to_pylist(), device.to_pylist()):
            if c != "mtia_ccp_events" and d is not None:
                devices[("cuda", d)] += 1
    if len(idx := select(_CODE["launch"])):  # the runtime calls that launched them
        sub = _take(events, idx)
        args = _args(sub)
        correlation, device = _ints([a.correlation for a in args]), _ints([a.device for a in args])
        table = pa.table([correlation, ts.take(idx), _ints([e.pid for e in sub]), _ints([e.tid for e in sub])],
                         schema=SCHEMAS["launch"])
        out["launch"] = table.filter(pc.is_valid(correlation))
        for c, d in zip(cat_now.take(idx).to_pylist(), device.to_pylist()):
            if c == "mtia_runtime" and d is not None:
                devices[("mtia", d)] += 1
    return Rows(n, out, 0, min_ts, start, end, devices)


def _one_by_one(events: list) -> Rows:
    """The rows of a run event by event: a run holding a malformed event (None, or a field
    of no usable type) is taken again one event at a time, and each event that fails alone
    counts as malformed."""
    rows = _Rows()
    try:
        rows.take(events, 0)
    except _MALFORMED:
        for i, ev in enumerate(events):
            try:
                rows.take([ev], i)
            except _MALFORMED:
                rows.bad += 1
                if rows.first_bad is None:
                    rows.first_bad = FirstBad(i, None, ev.why if ev.__class__ is Malformed else None)
    return rows.done(len(events))


def _ns_of(us) -> int:
    """Kineto µs (int or Decimal) as exact integer ns."""
    return us * 1000 if us.__class__ is int else int(us * 1000)


def _text(v) -> str | None:
    return None if v is None or isinstance(v, (dict, list)) else str(v)


class _Rows:
    """Rows built event by event, with the reader's rules for every value."""

    def __init__(self):
        self.rows: dict[str, list] = {k: [] for k in SCHEMAS}
        self.bad = self.n_mem = 0
        self.min_ts = self.start = self.end = None
        self.devices: Counter = Counter()
        self.first_bad: FirstBad | None = None

    def take(self, events: list, first: int) -> None:
        """Build every row of the run, then commit them all (or nothing, when one raises)."""
        routed: dict[str, list] = {}
        lowest, start, end = self.min_ts, self.start, self.end
        for seq, ev in enumerate(events, first + 1):
            if ev is None or ev.__class__ is Malformed:
                raise ValueError("not an object of a trace event's shape")
            ts = ev.ts
            if ts is None:
                continue
            ph, cat = ev.ph, ev.cat
            if ph != "M":  # metadata events may say ts 0
                t = _ns_of(ts)
                lowest = t if lowest is None or t < lowest else lowest
                if cat != "Trace":  # what the events cover, beside the declared window
                    start = t if start is None or t < start else start
                    stop = _ns_of(ts if ev.dur is None else ts + ev.dur)
                    end = stop if end is None or stop > end else end
            if cat in OLD_CATEGORIES:
                cat = OLD_CATEGORIES[cat]
            route = _ROUTES.get(cat) if cat is not None else None
            if route is None or route == "instant":
                if ev.name != "[memory]":
                    continue
                route = "mem"
            routed.setdefault(route, []).append((seq, ev, ts, cat))
        rows: dict[str, list] = {}
        devices: Counter = Counter()
        ki, ns = kineto_int, _ns_of
        if ops := routed.get("op"):
            rows["ops"] = [(seq, e.name, ns(ts), None if e.dur is None else ns(e.dur), ki(e.pid), ki(e.tid),
                            ki(a.sequence_number), ki(a.fwd_thread_id),
                            a.call_stack if a.call_stack.__class__ is str and a.call_stack else None)
                           for seq, e, ts, _ in ops for a in (e.arguments,)]
        if py := routed.get("py"):
            rows["py"] = [(t, t + ns(e.dur or 0), ki(e.pid), ki(e.tid), ki(a.python_id), ki(a.python_parent_id),
                           e.name)
                          for _, e, ts, _ in py for a, t in ((e.arguments, ns(ts)),)]
        if mem := routed.get("mem"):
            rows["mem"] = [(self.n_mem + i, ns(ts), ki(a.bytes), ki(a.addr), ki(a.total_allocated),
                            ki(a.total_reserved), ki(a.device_type), ki(a.device_id), ki(e.pid), ki(e.tid))
                           for i, (_, e, ts, _) in enumerate(mem) for a in (e.arguments,)]
            for row in rows["mem"]:
                dtype, did = row[6], row[7]
                if dtype in DEVICE_LABELS and did is not None and did >= 0:
                    devices[(DEVICE_LABELS[dtype], did)] += 1
        ranges = []
        for _, e, ts, cat in routed.get("annotation", ()):
            if e.ph in ("X", None):
                t = ns(ts)
                ranges.append(("torch_annotation", ANNOTATION_DOMAINS[cat], e.name, t, t + ns(e.dur or 0),
                               ki(e.pid), ki(e.tid)))
        for _, e, ts, _ in routed.get("window", ()):  # the profiler's own span ("PyTorch Profiler (0)")
            if e.ph == "X" and e.dur is not None:
                t = ns(ts)
                ranges.append(("profiler", "default", e.name, t, t + ns(e.dur), None, None))
        if ranges:
            rows["ranges"] = ranges
        if device := routed.get("device"):  # kernels, memcpy, memset, MTIA device events
            rows["dev"] = [_device_row(e, cat, ns(ts)) for _, e, ts, cat in device if e.ph in ("X", None)]
            devices.update(("cuda", did) for _, e, _ts, cat in device
                           if cat != "mtia_ccp_events" and (did := ki(e.arguments.device)) is not None)
        if launch := routed.get("launch"):  # the runtime calls that launched them
            rows["launch"] = [(c, ns(ts), ki(e.pid), ki(e.tid)) for _, e, ts, _ in launch
                              if (c := ki(e.arguments.correlation)) is not None]
            devices.update(("mtia", did) for _, e, _ts, cat in launch
                           if cat == "mtia_runtime" and (did := ki(e.arguments.device)) is not None)
        for kind, kept in rows.items():
            self.rows[kind].extend(kept)
        self.n_mem += len(rows.get("mem", ()))
        self.devices.update(devices)
        self.min_ts, self.start, self.end = lowest, start, end

    def done(self, n: int) -> Rows:
        tables = {}
        for kind, rows in self.rows.items():
            if not rows:
                continue
            schema = SCHEMAS[kind]
            kept = [r for r in rows if _fits(r, schema)]
            self.bad += len(rows) - len(kept)
            if kept:
                tables[kind] = pa.table([pa.array(c, t) for c, t in zip(zip(*kept), schema.types)], schema=schema)
        return Rows(n, tables, self.bad, self.min_ts, self.start, self.end, self.devices, self.first_bad)


def _device_row(ev: Event, cat: str, ts_ns: int) -> tuple:
    """One dev row (times relative to baseTimeNanoseconds, as the reader's others)."""
    a, ki = ev.arguments, kineto_int
    return (cat, ev.name, ts_ns, None if ev.dur is None else int(ev.dur * 1000), ki(ev.pid),
            ki(ev.tid), ki(a.device), ki(a.stream if a.stream is not None else a.stream_id),
            ki(a.correlation), _text(a.collective_name), _text(a.process_group_name),
            ki(a.in_msg_nelems), _text(a.dtype), ki(a.seq if a.seq is not None else a.seq_lower))


def _fits(row: tuple, schema: pa.Schema) -> bool:
    """Whether every value of a row fits its column (int64 or text)."""
    for value, kind in zip(row, schema.types):
        if value is None:
            continue
        if kind == _I and not (value.__class__ is int and -(2**63) <= value < 2**63):
            return False
        if kind != _I and not isinstance(value, str):
            return False
    return True

