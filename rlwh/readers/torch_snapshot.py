"""PyTorch memory snapshots (torch.cuda.memory._snapshot(), torch_npu.npu.memory._snapshot()
pickled) -> snapshot_segments, snapshot_blocks, snapshot_trace_blocks and call_stacks.

A snapshot is untrusted input and a plain pickle of dicts, lists, numbers and strings, so
the unpickler resolves no global at all: a pickle that asks for any class or function
(or a persistent id) is refused before anything it names is imported or called.

device_traces are read in trace order per device: an alloc opens a block at its address,
the next free_completed of that address closes it (free_requested is kept as a note), and
an alloc at an address still open ends the earlier block, whose free fell outside the
trace. Newer PyTorch stamps entries with time_us (epoch); the torch_npu snapshots have no
time, so the entry's position is the only clock and the rows say so.

The trace records only what happened after recording began; the segments are the
allocator's state at snapshot time, blocks allocated before recording included. The
warehouse replays the segments backwards through the trace (sql/internal/snapshot_held_blocks.sql,
ingest/derived/memory.sql), so the reader checks that the two can both be true
(disagreements()) and lands a file where they cannot as partial, every row kept.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import re
from pathlib import Path
from typing import Any, Literal, overload

import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers.base import CALL_STACKS_SCHEMA, ReadOutcome, TableSink, call_stack_row, normalize_stack

BATCH_ROWS = 65536

SEGMENTS_SCHEMA = pa.schema([
    ("segment_index", pa.int64()), ("device", pa.string()), ("device_index", pa.int32()),
    ("address", pa.int64()), ("total_size_bytes", pa.int64()), ("allocated_bytes", pa.int64()),
    ("active_bytes", pa.int64()), ("requested_bytes", pa.int64()), ("segment_type", pa.string()),
    ("stream", pa.int64()), ("is_expandable", pa.bool_()), ("blocks", pa.int64()),
])
BLOCKS_SCHEMA = pa.schema([
    ("segment_index", pa.int64()), ("block_index", pa.int64()), ("device", pa.string()),
    ("device_index", pa.int32()), ("segment_address", pa.int64()), ("address", pa.int64()),
    ("size_bytes", pa.int64()), ("requested_bytes", pa.int64()), ("state", pa.string()), ("stack_id", pa.int64()),
])
TRACE_SCHEMA = pa.schema([
    ("device", pa.string()), ("device_index", pa.int32()), ("clock", pa.string()),
    ("alloc_seq", pa.int64()), ("release_seq", pa.int64()), ("free_requested_seq", pa.int64()),
    ("alloc_ns", pa.int64()), ("release_ns", pa.int64()), ("free_requested_ns", pa.int64()),
    ("release_action", pa.string()), ("addr", pa.int64()), ("size_bytes", pa.int64()),
    ("stream", pa.int64()), ("stack_id", pa.int64()),
])


class _Refused(Exception):
    """The pickle asked for something beyond plain data."""


class _PlainData(pickle.Unpickler):
    """Builds only what the pickle opcodes build themselves: no global is ever resolved."""

    def find_class(self, module, name):
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid):
        raise _Refused(f"persistent id {pid!r}")


_ASKING_OPCODES = {"GLOBAL", "STACK_GLOBAL", "INST", "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"}


def _asking_offset(path: Path) -> str:
    """Byte offset of the first opcode that names a global or persistent id (only on refusal:
    pickletools walks the opcodes in Python, and nothing is built or run)."""
    try:
        with open(path, "rb") as handle:
            for opcode, _arg, position in pickletools.genops(handle):
                if opcode.name in _ASKING_OPCODES:
                    return f"opcode {opcode.name} at byte {position}"
    except (ValueError, EOFError, MemoryError, OverflowError):
        pass
    return "offset unknown"


def _printable(text: str) -> str:
    """`text` with every character that does not print escaped (a reason never prints raw bytes)."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _refusal(path, exc: _Refused, where: str) -> str:
    return (f"{path}: refused: the pickle asks for {_printable(str(exc))} ({where}); a memory snapshot is "
            "plain dicts and lists, and rlwh runs no pickle code")


class _HeadEnds(Exception):
    """The first bytes read so far end before the pickle does: only the whole file says more."""


_LOAD_ERRORS = (pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError, KeyError,
                MemoryError, RecursionError, UnicodeDecodeError, OverflowError)


def _unpickle(handle, path: Path, size: int, whole: bool = True):
    """The object `handle` holds; SourceError in the words ingest records. With whole False
    (the file's first bytes only), _HeadEnds where those bytes end before the pickle."""
    try:
        return _PlainData(handle).load()
    except _Refused as exc:
        raise SourceError(_refusal(path, exc, _asking_offset(path))) from None
    except (EOFError, *_LOAD_ERRORS) as exc:
        cut = isinstance(exc, EOFError) or "truncated" in str(exc)
        if cut and not whole:
            raise _HeadEnds from None
        if cut:
            raise SourceError(f"{path}: cut short: the pickle ends at byte {size} before it is complete "
                              f"({_printable(str(exc))})") from None
        where = _bad_opcode_offset(path) if isinstance(exc, pickle.UnpicklingError) else None
        said = _printable(str(exc)) if where is None else f"{_printable(str(exc)).rstrip('.')} at byte {where}"
        raise SourceError(f"{path}: not a readable pickle ({size} bytes): {type(exc).__name__}: {said}") from None


_UNKNOWN_OPCODE_AT = re.compile(r"at position (\d+), opcode .* unknown")


def _bad_opcode_offset(path: Path) -> int | None:
    """The byte of the first opcode that is none (what 'invalid load key' means), walked
    by pickletools as for a refusal (only on failure: nothing is built or run)."""
    try:
        with open(path, "rb") as handle:
            for _ in pickletools.genops(handle):
                pass
    except ValueError as exc:
        found = _UNKNOWN_OPCODE_AT.search(str(exc))
        return int(found.group(1)) if found else None
    except (EOFError, MemoryError, OverflowError):
        pass
    return None


def load_plain(path: Path):
    """The pickled object, or SourceError naming the file and what went wrong where."""
    size = path.stat().st_size
    if size == 0:
        raise SourceError(f"{path}: empty file (0 bytes), no pickle")
    with open(path, "rb") as handle:
        return _unpickle(handle, path, size)


HEAD_BYTES = 1 << 20


def head_verdict(path: Path, head_bytes: int = HEAD_BYTES) -> str | None:
    """What load_plain would say of `path` where its first head_bytes already say it (a
    global it asks for, an opcode that is none), else None: `rlwh check` judges a pickle
    too large to load whole by its head, in ingest's words. The unpickler reads in order,
    so an error inside the head is the whole file's first error. (A MiB, not check's
    64 KiB head: protocol 4 reads a frame of up to 64 KiB whole before its first opcode.)"""
    with open(path, "rb") as handle:
        head = handle.read(head_bytes)
    try:
        _unpickle(io.BytesIO(head), path, path.stat().st_size, whole=False)
    except SourceError as exc:
        return str(exc)
    except _HeadEnds:
        return None
    return None


def _device_kind(snapshot: dict) -> str:
    """NPU when the stacks show torch_npu (the Ascend snapshots), else cuda: the pickle
    itself does not say which device kind it came from."""
    for trace in snapshot.get("device_traces") or []:
        for entry in trace if isinstance(trace, list) else []:
            for frame in (entry.get("frames") or []) if isinstance(entry, dict) else []:
                if isinstance(frame, dict) and "torch_npu" in str(frame.get("filename", "")):
                    return "NPU"
    return "cuda"


class _Stacks:
    """Frames (innermost first, as PyTorch records them) -> stack_id, each distinct stack once."""

    def __init__(self) -> None:
        self.rows: dict[int, dict] = {}
        self._ids: dict[tuple, int | None] = {}

    def of(self, frames, where: str) -> int | None:
        if not frames:
            return None
        if not isinstance(frames, list) or not all(isinstance(f, dict) for f in frames):
            raise SourceError(f"{where}: frames is not a list of dicts")
        key = tuple((f.get("filename"), f.get("line"), f.get("name")) for f in frames)
        if key not in self._ids:
            stack = normalize_stack("\n".join(f"{file}({line}): {name}" for file, line, name in key))
            if not stack:
                self._ids[key] = None
            else:
                row = call_stack_row(stack)
                self.rows.setdefault(row["stack_id"], row)
                self._ids[key] = row["stack_id"]
        return self._ids[key]


@overload
def _int(value, where, required: Literal[True] = True) -> int: ...
@overload
def _int(value, where, required: bool) -> int | None: ...
def _int(value, where, required: bool = True) -> int | None:
    """`value` when it is an integer; where (text, or a function giving it) names it otherwise."""
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        where = where() if callable(where) else where
        raise SourceError(f"{where}: expected an integer, found {type(value).__name__} {value!r:.40}")
    return value


def _text(value) -> str | None:
    return None if value is None else str(value)


def _block_frames(block: dict):
    """Newer snapshots keep a block's frames; PyTorch 2.0 kept them in its history."""
    if block.get("frames"):
        return block["frames"]
    history = block.get("history")
    if isinstance(history, list) and history and isinstance(history[-1], dict):
        return history[-1].get("frames")
    return None


# Block states of memory the allocator still holds at snapshot time: allocated, or freed
# by the program while a stream still uses it (its free_completed is yet to come).
HELD_STATES = ("active_allocated", "active_pending_free")


def _segments(path: Path, snapshot: dict, kind: str, stacks: _Stacks,
              sink: TableSink) -> tuple[set[str], dict[int, set[int]]]:
    """Write segments and blocks; return their devices and, per device index, the addresses
    of the blocks held at snapshot time."""
    segments = snapshot["segments"]
    if not isinstance(segments, list):
        raise SourceError(f"{path}: segments is a {type(segments).__name__}, not a list")
    seg_rows: list[dict[str, Any]] = []
    block_rows: list[dict[str, Any]] = []
    held: dict[int, set[int]] = {}
    for i, seg in enumerate(segments):
        where = f"{path}: segments[{i}]"
        if not isinstance(seg, dict):
            raise SourceError(f"{where} is a {type(seg).__name__}, not a dict")
        device = _int(seg.get("device"), f"{where}.device")
        address = _int(seg.get("address"), f"{where}.address")
        blocks = seg.get("blocks") or []
        if not isinstance(blocks, list):
            raise SourceError(f"{where}.blocks is not a list")
        seg_rows.append({
            "segment_index": i, "device": f"{kind}:{device}", "device_index": device, "address": address,
            "total_size_bytes": _int(seg.get("total_size"), f"{where}.total_size"),
            "allocated_bytes": _int(seg.get("allocated_size"), f"{where}.allocated_size", False),
            "active_bytes": _int(seg.get("active_size"), f"{where}.active_size", False),
            "requested_bytes": _int(seg.get("requested_size"), f"{where}.requested_size", False),
            "segment_type": _text(seg.get("segment_type")),
            "stream": _int(seg.get("stream"), f"{where}.stream", False),
            "is_expandable": seg.get("is_expandable") if isinstance(seg.get("is_expandable"), bool) else None,
            "blocks": len(blocks),
        })
        offset = address
        for j, block in enumerate(blocks):
            bwhere = f"{where}.blocks[{j}]"
            if not isinstance(block, dict):
                raise SourceError(f"{bwhere} is a {type(block).__name__}, not a dict")
            size = _int(block.get("size"), f"{bwhere}.size")
            block_address = _int(block.get("address"), f"{bwhere}.address", False)
            block_rows.append({
                "segment_index": i, "block_index": j, "device": f"{kind}:{device}", "device_index": device,
                "segment_address": address, "address": offset if block_address is None else block_address,
                "size_bytes": size,
                "requested_bytes": _int(block.get("requested_size"), f"{bwhere}.requested_size", False),
                "state": _text(block.get("state")), "stack_id": stacks.of(_block_frames(block), bwhere),
            })
            if block_rows[-1]["state"] in HELD_STATES:
                held.setdefault(device, set()).add(block_rows[-1]["address"])
            offset += size
    _write(sink, "snapshot_segments", seg_rows, SEGMENTS_SCHEMA)
    _write(sink, "snapshot_blocks", block_rows, BLOCKS_SCHEMA)
    return {r["device"] for r in seg_rows}, held


def _has_time(traces: list) -> bool:
    """True when every entry carries a time_us (then times are epoch ns)."""
    entries = [e for trace in traces for e in trace]
    return bool(entries) and all(isinstance(e.get("time_us"), int) and not isinstance(e.get("time_us"), bool)
                                 for e in entries)


def _block(i, ns, addr, entry, where, stacks: _Stacks | None) -> dict:
    """A block opened by trace entry i; stacks is None for a block whose alloc preceded the trace."""
    return {
        "alloc_seq": i if stacks else None, "release_seq": None, "free_requested_seq": None,
        "alloc_ns": ns if stacks else None, "release_ns": None, "free_requested_ns": None, "release_action": None,
        "addr": addr, "size_bytes": _int(entry.get("size"), lambda: f"{where()}.size", stacks is not None),
        "stream": _int(entry.get("stream"), lambda: f"{where()}.stream", False),
        "stack_id": stacks.of(entry.get("frames"), where()) if stacks and entry.get("frames") else None,
    }


def pair_trace(trace: list, where: str, stacks: _Stacks, epoch: bool):
    """Yield the blocks of one device's trace as each ends (alloc paired with the next
    free_completed of its address), then those still live at snapshot time."""
    live: dict[int, dict] = {}
    for i, entry in enumerate(trace):
        def at(i=i) -> str:
            return f"{where}[{i}]"

        if not isinstance(entry, dict):
            raise SourceError(f"{at()} is a {type(entry).__name__}, not a dict")
        action = entry.get("action")
        if action not in ("alloc", "free_requested", "free_completed"):
            continue  # segment_alloc/free/map/unmap, snapshot, oom: not blocks
        addr = _int(entry.get("addr"), lambda: f"{at()}.addr")
        ns = entry["time_us"] * 1000 if epoch else None
        if action == "alloc":
            earlier = live.pop(addr, None)
            if earlier is not None:
                earlier.update(release_seq=i, release_ns=ns, release_action="alloc")
                yield earlier
            live[addr] = _block(i, ns, addr, entry, at, stacks)
        elif action == "free_requested":
            block = live.get(addr)
            if block is None:  # allocated before the trace began: its free_completed follows
                block = live[addr] = _block(i, ns, addr, entry, at, None)
            if block["free_requested_seq"] is None:
                block.update(free_requested_seq=i, free_requested_ns=ns)
        else:
            block = live.pop(addr, None) or _block(i, ns, addr, entry, at, None)
            block.update(release_seq=i, release_ns=ns, release_action="free_completed")
            yield block
    yield from live.values()


def disagreements(trace: list, held: set[int]) -> list[str]:
    """Where one device's trace and its segments cannot both be true, as phrases (the
    allocator's live bytes are replayed backwards from the segments through the trace,
    so there they may be off):
    - an alloc at an address the trace still holds (the earlier block's free is missing);
    - a free of a block that neither holds: no alloc in the trace since the address was
      last freed;
    - a block the trace leaves allocated that no held block of the segments starts at;
    - a held block of the segments whose address the trace freed last and never reallocated."""
    live: set[int] = set()
    freed: set[int] = set()
    found: dict[str, list[int]] = {"realloc": [], "free": []}
    for i, entry in enumerate(trace):
        action, addr = entry.get("action"), entry.get("addr")
        if action == "alloc":
            if addr in live:
                found["realloc"].append(i)
            live.add(addr)
            freed.discard(addr)
        elif action == "free_completed":
            if addr not in live and addr in freed:
                found["free"].append(i)
            live.discard(addr)
            freed.add(addr)
    phrases = []
    if found["realloc"]:
        phrases.append(f"{len(found['realloc'])} allocs at an address the trace still held (first at entry "
                       f"{found['realloc'][0]})")
    if found["free"]:
        phrases.append(f"{len(found['free'])} frees of a block neither the trace nor the segments hold (first at "
                       f"entry {found['free'][0]})")
    if unheld := live - held:
        phrases.append(f"{len(unheld)} blocks the trace leaves allocated that the segments do not hold "
                       f"(e.g. address {min(unheld):#x})")
    if gone := held & freed:
        phrases.append(f"{len(gone)} blocks the segments hold that the trace freed last (e.g. address {min(gone):#x})")
    return phrases


class _Rows:
    """One table's rows, written BATCH_ROWS at a time so a long trace never sits in memory as dicts."""

    def __init__(self, sink: TableSink, table: str, schema: pa.Schema):
        self.sink, self.table, self.schema = sink, table, schema
        self.rows: list[dict] = []

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        self.sink.write(self.table, pa.RecordBatch.from_pylist(self.rows, schema=self.schema))
        self.rows = []


def _traces(path: Path, snapshot: dict, kind: str, stacks: _Stacks, sink: TableSink,
            held: dict[int, set[int]]) -> tuple[str, set, int | None, list[str]]:
    """Write the trace blocks; return the clock, the devices whose trace has entries, the
    first entry's epoch ns (None on a sequence clock) and where trace and segments disagree."""
    traces = snapshot.get("device_traces") or []
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SourceError(f"{path}: device_traces is not a list of lists")
    epoch = _has_time(traces)
    clock = "epoch" if epoch else "sequence"
    first = min((t[0]["time_us"] * 1000 for t in traces if t), default=None) if epoch else None
    devices = {f"{kind}:{d}" for d, t in enumerate(traces) if t}
    rows = _Rows(sink, "snapshot_trace_blocks", TRACE_SCHEMA)
    disagree = []
    for device in range(len(traces)):
        keys = {"device": f"{kind}:{device}", "device_index": device, "clock": clock}
        for block in pair_trace(traces[device], f"{path}: device_traces[{device}]", stacks, epoch):
            rows.add({**keys, **block})
        if traces[device]:
            disagree += [f"{kind}:{device}: {p}" for p in disagreements(traces[device], held.get(device, set()))]
        traces[device] = None  # its entries are no longer needed: free them before the next device
    rows.flush()
    return clock, devices, first, disagree


def _write(sink: TableSink, table: str, rows: list[dict], schema: pa.Schema) -> None:
    for start in range(0, len(rows), BATCH_ROWS):
        sink.write(table, pa.RecordBatch.from_pylist(rows[start:start + BATCH_ROWS], schema=schema))


NOT_A_SNAPSHOT = ("not a memory snapshot (a dict with segments and device_traces, as "
                  "torch.cuda.memory._snapshot() returns, or a list of segments, as torch.cuda.memory_snapshot() does)")
LIST_FORMAT = ("an old list-format snapshot (a list of segments, as torch.cuda.memory_snapshot() returns): "
               "segments only, no device_traces")
# What a snapshot dict is named by (torch writes segments first, then device_traces), and
# what every segment of the old list format holds.
SNAPSHOT_KEYS = ("segments", "device_traces")
SEGMENT_KEYS = ("total_size", "blocks")


def _shown_keys(d: dict) -> str:
    keys = sorted(d, key=str)
    shown = ", ".join(repr(k)[:40] for k in keys[:6])
    return shown + (f", ... ({len(keys)} keys)" if len(keys) > 6 else "")


def _found(obj) -> str:
    """What a pickle that is no snapshot holds, in a few printable words."""
    if isinstance(obj, dict):
        return f"a dict with keys {_shown_keys(obj)}" if obj else "an empty dict"
    if isinstance(obj, list):
        if not obj:
            return "an empty list"
        first = obj[0]
        if isinstance(first, dict):
            what = f"a dict with keys {_shown_keys(first)}" if first else "an empty dict"
        else:
            what = f"a {type(first).__name__}"
        return f"a list of {len(obj)} items, the first {what}"
    return f"a {type(obj).__name__}"


def _is_segment_list(obj) -> bool:
    return (isinstance(obj, list) and bool(obj)
            and all(isinstance(s, dict) and all(k in s for k in SEGMENT_KEYS) for s in obj))


def as_snapshot(obj, path: Path) -> dict:
    """The unpickled object as a snapshot dict (a list of segments, the old format, becomes
    one without device_traces); SourceError when it is none: ingest and `rlwh check` fail
    such a pickle in these words (one kept beside a profile under a snapshot's name is
    more likely a snapshot gone wrong than data to pass over)."""
    if isinstance(obj, dict) and "segments" in obj:
        return obj
    if _is_segment_list(obj):
        return {"segments": obj, "device_traces": []}
    raise SourceError(f"{path}: {NOT_A_SNAPSHOT}; found {_found(obj)}")


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    """A pickle that is no snapshot, asks for code or is cut fails; an old list-format
    snapshot loads its segments."""
    loaded = load_plain(path)
    snapshot = as_snapshot(loaded, path)
    kind = _device_kind(snapshot)
    stacks = _Stacks()
    segment_devices, held = _segments(path, snapshot, kind, stacks, sink)
    clock, traced, first_ns, disagree = _traces(path, snapshot, kind, stacks, sink, held)
    _write(sink, "call_stacks", list(stacks.rows.values()), CALL_STACKS_SCHEMA)
    devices = sorted(segment_devices | traced)
    # A ranks row for the capture: its device when it has one, its trace's first time.
    rank = {"device": devices[0] if len(devices) == 1 else None, "capture_started_ns": first_ns,
            "metadata": {"snapshot_devices": devices, "snapshot_clock": clock}}
    if context.get("rank_id") is None and context.get("single_process_rank0"):
        rank.update(rank_id=0, note=f"{path.name}: no rank in its path: read as rank 0 (a single-process snapshot)")
    if disagree:
        return ReadOutcome(status="partial", rank=rank, message=(
            f"{path}: segments and device_traces disagree, so the allocator's live bytes replayed from the "
            f"segments may be off there (every row is loaded): {'; '.join(disagree)}"))
    return ReadOutcome(rank=rank, message=f"{path}: {LIST_FORMAT}" if isinstance(loaded, list) else None)
