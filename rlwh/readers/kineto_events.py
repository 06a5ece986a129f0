"""A Kineto trace's events, decoded typed in native code, a byte range at a time.

Why: decoding is most of what reading a trace costs, and rlwh keeps a dozen fields of
each event. msgspec decodes only those (Event, Args below; every other key is skipped in
C) straight into small objects, ~8x faster than ijson's dicts; times come as Decimal, so
they stay exact (JSON numbers never pass through a float).

How: the traceEvents array is cut into pieces of about PIECE_BYTES at event boundaries.
A boundary is a '},' followed by '{'; one inside a string or a nested value leaves the
piece unbalanced, which the decoder rejects at the piece's very end, and the cut moves back
to an earlier candidate (or, after a few, waits for more bytes), so a piece that decodes is
exactly a run of whole events. In a plain file a piece is a byte range (Span) that the
process decoding it reads itself, so its bytes never pass through the process that cuts
it; a gzipped one is cut from the inflated bytes. At the end the array's own ']' is the one after which the
rest of the file reads as the trailing keys (searched in the last TAIL_BYTES only). A piece
that is valid JSON but has an event of another shape (a ts that is no number) is decoded
event by event, and an event that still does not fit is None (malformed), as it is in the
streaming parser's pass. An event nested deeper than the decoders follow (they raise
RecursionError near 1,000 levels, with no position) is found by rlwh.readers.json_outline
and stands as Malformed, with its byte. Anything else (a bad byte mid-file, a file cut
mid-write, damaged gzip, no '[' after "traceEvents") raises NotTyped at once, with the
byte where the decoder found the damage when it knows it: the caller reads the file with
the streaming parser, which keeps every complete event before a cut.

Each piece knows its first byte in the (uncompressed) file (a Span's start, a gzipped
file's Chunk's): a Span's bytes are the file's, and the bytes dropped between two Chunks
are put back as blanks when they are joined, so a byte in a piece is a byte of the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections import deque
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any, NamedTuple, Optional, Union

import msgspec

from rlwh.errors import SourceError
from rlwh.readers.json_outline import outline
from rlwh.readers.json_tokens import MAX_DEPTH  # an event nested past it may be too deep: tried alone

PIECE_BYTES = 16 << 20
MAX_PIECE_BYTES = 64 << 20  # no boundary in this many bytes (one giant event?): not typed
TAIL_BYTES = 4 << 20  # the keys after traceEvents must fit here (both passes), else a slow rescan
EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_TRAILER_START = re.compile(r"\](?=\s*[,}])")  # where the array may end: a ']' before ',' or '}'
_WS = b" \t\r\n"


class NotTyped(Exception):
    """The file is not a run of whole events this decoder can cut; read it another way.
    .at: the byte of the file where the decoder found damage, when it knows it."""

    def __init__(self, message: str, at: int | None = None):
        super().__init__(message, at)  # both in args: it crosses from a decoding process
        self.message, self.at = message, at

    def __str__(self) -> str:
        return self.message


class Malformed:
    """An event no decoder can take (nested too deep), in its place in a run of events."""

    def __init__(self, why: str):
        self.why = why




class _ArrayEnds(Exception):
    """A piece ran past the end of the traceEvents array: what follows is the trailer.
    .close: the array's ']' in the piece."""

    def __init__(self, close: int):
        super().__init__(close)
        self.close = close


def _arg(name: str) -> Any:
    return msgspec.field(default=None, name=name)


# The event types are gc=False: values decoded from JSON cannot form reference cycles, and
# the collector walking a piece's ~130,000 tracked objects took a third of its decoding
# (16 MB pieces: 0.24 -> 0.16 s each, and as much again building the rows).
class Args(msgspec.Struct, gc=False):
    """The args rlwh reads, each as written (ids and counts go through kineto_int)."""

    call_stack: Any = _arg("Call stack")
    sequence_number: Any = _arg("Sequence number")
    fwd_thread_id: Any = _arg("Fwd thread id")
    python_id: Any = _arg("Python id")
    python_parent_id: Any = _arg("Python parent id")
    bytes: Any = _arg("Bytes")
    addr: Any = _arg("Addr")
    total_allocated: Any = _arg("Total Allocated")
    total_reserved: Any = _arg("Total Reserved")
    device_type: Any = _arg("Device Type")
    device_id: Any = _arg("Device Id")
    device: Any = _arg("device")
    stream: Any = _arg("stream")
    stream_id: Any = _arg("stream_id")
    correlation: Any = _arg("correlation")
    collective_name: Any = _arg("Collective name")
    process_group_name: Any = _arg("Process Group Name")
    in_msg_nelems: Any = _arg("In msg nelems")
    dtype: Any = _arg("dtype")
    seq: Any = _arg("Seq")
    seq_lower: Any = _arg("seq")


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One trace event, the fields rlwh reads. ts and dur are exact Decimal µs."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Optional[Decimal] = None
    dur: Optional[Decimal] = None
    pid: Any = None
    tid: Any = None
    # Args where it is an object; anything else written there counts as no args.
    args: Optional[Union[Args, list, str, float, bool]] = None

    @property
    def arguments(self) -> Args:
        return self.args if self.args.__class__ is Args else NO_ARGS


_ID = Union[int, str, None]


class FastArgs(msgspec.Struct, gc=False):
    """Args as the common case writes them: ids and counts as int (or str), texts as str.
    Any other type makes the piece go to Event and Args, which take every JSON value."""

    call_stack: Optional[str] = _arg("Call stack")
    sequence_number: _ID = _arg("Sequence number")
    fwd_thread_id: _ID = _arg("Fwd thread id")
    python_id: _ID = _arg("Python id")
    python_parent_id: _ID = _arg("Python parent id")
    bytes: _ID = _arg("Bytes")
    addr: _ID = _arg("Addr")
    total_allocated: _ID = _arg("Total Allocated")
    total_reserved: _ID = _arg("Total Reserved")
    device_type: _ID = _arg("Device Type")
    device_id: _ID = _arg("Device Id")
    device: _ID = _arg("device")
    stream: _ID = _arg("stream")
    stream_id: _ID = _arg("stream_id")
    correlation: _ID = _arg("correlation")
    collective_name: Optional[str] = _arg("Collective name")
    process_group_name: Optional[str] = _arg("Process Group Name")
    in_msg_nelems: _ID = _arg("In msg nelems")
    dtype: Optional[str] = _arg("dtype")
    seq: _ID = _arg("Seq")
    seq_lower: _ID = _arg("seq")


class FastEvent(msgspec.Struct, gc=False):
    """An event as the common case writes it. ts and dur are kept as written: an int, or
    the text of a non-integral number (float_hook=str), turned into exact ns in bulk by
    rlwh.readers.kineto_rows; no number passes through a float or a Decimal."""

    ph: Optional[str] = None
    cat: Optional[str] = None
    name: Optional[str] = None
    ts: Any = None
    dur: Any = None
    pid: _ID = None
    tid: _ID = None
    args: Optional[Union[FastArgs, list, str, float, bool]] = None


# Non-integral numbers in the args kept as Any come as Decimal, as from the streaming parser.
_PIECE = msgspec.json.Decoder(list[Optional[Event]], float_hook=Decimal)
_FAST_PIECE = msgspec.json.Decoder(list[FastEvent], float_hook=str)
_ERROR_AT = re.compile(r"\(byte (\d+)\)")


def _array_start(chunks: Iterator[bytes]) -> tuple[int, bytes]:
    """The byte where the traceEvents array's elements begin (right after its '['), and
    the bytes from there on in the first chunks (the file's own bytes, from its first)."""
    head = bytearray()
    for chunk in chunks:
        searched = max(0, len(head) - 64)  # the key may straddle two chunks
        head += chunk
        match = EVENTS_KEY.search(head, searched)
        if match:
            return match.end(), bytes(head[match.end():])
        if len(head) > MAX_PIECE_BYTES:
            raise NotTyped("no traceEvents array near the start")
    raise NotTyped("no traceEvents array")


class Span(NamedTuple):
    """A piece of a plain file as a byte range [start, end): read by whoever decodes it."""

    path: str
    start: int
    end: int

    def read(self) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(self.start)
            return f.read(self.end - self.start)


class Chunk(NamedTuple):
    """A piece of a gzipped file's inflated bytes, and its first byte in them."""

    start: int
    data: bytes

    def read(self) -> bytes:
        return self.data


Body = Union[Span, Chunk]
SPAN_WINDOW = 64 << 10  # bytes read at once while looking for a cut


def spans(path: str) -> Iterator[Span | _Rest]:
    """A plain file's traceEvents array as Spans of about PIECE_BYTES, each ending at a
    candidate boundary (its '}'; the next starts at the '{' after the ','), then the _Rest,
    which a last, shorter Span leaves at about TAIL_BYTES (the caller decodes it alone,
    after the others: 15 MB of it held the decoding processes idle for 0.3 s). Only the
    bytes around each cut are read here."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = _events_offset(f)
        while size - start > PIECE_BYTES:
            found = _next_boundary(f, start + PIECE_BYTES, start + MAX_PIECE_BYTES)
            if found is None:
                break
            at, after = found
            yield Span(path, start, at + 1)
            start = after
        if size - start > 2 * TAIL_BYTES:  # the rest is decoded alone, after the others: keep it short
            with contextlib.suppress(NotTyped):
                if found := _next_boundary(f, size - TAIL_BYTES, size):
                    yield Span(path, start, found[0] + 1)
                    start = found[1]
        f.seek(start)
        yield _Rest(start, f.read())


def _events_offset(f) -> int:
    """The file offset right after the traceEvents array's '['."""
    head = b""
    while len(head) <= MAX_PIECE_BYTES:
        chunk = f.read(SPAN_WINDOW)
        searched = max(0, len(head) - 64)  # the key may straddle two reads
        head += chunk
        match = EVENTS_KEY.search(head, searched)
        if match:
            return match.end()
        if not chunk:
            raise NotTyped("no traceEvents array")
    raise NotTyped("no traceEvents array near the start")


def _next_boundary(f, at: int, limit: int) -> tuple[int, int] | None:
    """(the '}', the '{') of the first '}' ',' '{' from byte `at`; None at the end of the
    file; NotTyped when there is none before `limit`."""
    while at < limit:
        f.seek(at)
        window = f.read(SPAN_WINDOW)
        if len(window) < 3:
            return None
        match = _BOUNDARY.search(window)
        if match:
            return at + match.start(), at + match.end() - 1
        if len(window) < SPAN_WINDOW:
            return None
        at += len(window) - 256  # a boundary that straddles two reads (whitespace aside)
    raise NotTyped(f"no event boundary in {MAX_PIECE_BYTES} bytes")


def _tail_bytes(tail: list[Body]) -> tuple[int, bytes]:
    """The last pieces as one text, and its first byte in the file: from the first Span's
    start to the end of the file as written (a cut may fall in the keys after the array,
    where a ',' would not do), else the Chunks joined."""
    if tail[0].__class__ is Span:
        first = tail[0]
        return first.start, first._replace(end=os.path.getsize(first.path)).read()
    joined = tail[0]
    for after in tail[1:]:
        joined = _joined(joined, after)
    return joined.start, joined.read()


def _size(body: Body) -> int:
    return body.end - body.start if isinstance(body, Span) else len(body.data)


def _joined(body: Body, after: Body) -> Body:
    """A piece and the one after it, as one: two Spans as the range that holds both; two
    Chunks with what lay between them (a ',' and blanks) put back as a ',' and blanks, so
    that every byte keeps its place in the file."""
    if isinstance(body, Span) and isinstance(after, Span):
        return body._replace(end=after.end)
    gap = after.start - body.start - _size(body)
    return Chunk(body.start, body.read() + b"," + b" " * (gap - 1) + after.read())


def decode_piece(body: Body, build: Callable[[list, bytes, int], Any]) -> tuple[str, Any]:
    """One piece cut by pieces(): ("events", build(its events, its text, the text's first
    byte in the file)), ("cut", None) when the cut fell inside an event (the piece breaks
    at its very end), or ("ends", None) when the traceEvents array ends inside it.
    NotTyped for a damaged file."""
    piece = b"[" + body.read() + b"]"
    at = body.start - 1  # the '[' stands where the byte before the body's first was
    try:
        events = _decode(piece, at)
    except _ArrayEnds:
        return "ends", None
    return ("cut", None) if events is None else ("events", build(events, piece, at))


def pieces(bodies: Iterator[Body | _Rest], parse_trailer: Callable[[str, int], dict | None], out: dict,
           decode: Callable[[Body], Callable[[], tuple[str, Any]]], window: int,
           build: Callable[[list, bytes, int], Any]) -> Iterator[Any]:
    """What decode_piece gives for each piece of the trace (bodies: spans(), or
    bytes_bodies() of a stream), in file order: decode(body)
    starts that work (in another process, say) and returns what waits for its result;
    up to `window` pieces wait at once. The last piece is decoded here, with build; the
    keys after the array are left in out["trailer"].

    A piece is cut before it is decoded, at the last '}' ',' '{' after PIECE_BYTES. The
    first piece starts right after the array's '['; a piece that decodes from a true start
    ends at a true boundary, so the next one starts at one too. A piece whose cut fell in
    a string or a nested value breaks at its very end ("cut"): it is joined to the next
    and decoded again. A piece in which the array ends ("ends") is, with everything after
    it, the last piece. A damaged piece raises NotTyped from its result."""
    waiting: deque = deque()  # (result getter, body), in file order
    tail: list | None = None
    rest: list[Body] = []
    for body in bodies:
        if isinstance(body, _Rest):
            rest = [body.chunk]
            break
        waiting.append((decode(body), body))
        while tail is None and len(waiting) > window:
            kind, value = _settle(waiting, decode)
            if kind == "events":
                yield value
            elif kind == "tail":  # the array ends in this body: the rest is the last piece
                tail = [value, *(b for _, b in waiting), *(b.chunk if isinstance(b, _Rest) else b for b in bodies)]
                waiting.clear()
        if tail is not None:
            break
    while tail is None and waiting:
        kind, value = _settle(waiting, decode)
        if kind == "events":
            yield value
        elif kind == "tail":
            tail = [value, *(b for _, b in waiting), *rest]
            waiting.clear()
    at, buf = _tail_bytes(tail if tail is not None else rest)
    events, piece, out["trailer"] = _last(buf, at, parse_trailer)
    yield build(events, piece, at - 1)


class _Rest:
    """What follows the last cut: the last events and the keys after the array."""

    def __init__(self, start: int, data: bytes):
        self.data, self.chunk = data, Chunk(start, data)


def bytes_bodies(chunks: Iterator[bytes]) -> Iterator[Chunk | _Rest]:
    """The traceEvents array of a stream's bytes (a gzipped file's, from its first byte)
    cut into Chunks."""
    return _bodies(*_array_start(chunks), chunks)


def _bodies(at: int, buf: bytes, chunks: Iterator[bytes]) -> Iterator[Chunk | _Rest]:
    """The array's text (from byte `at`) cut into Chunks of about PIECE_BYTES at candidate
    boundaries (the ',' between two dropped), then the _Rest."""
    pending, size = [buf], len(buf)
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size < PIECE_BYTES:
            continue
        buf = b"".join(pending)
        cut = _last_boundary(buf, len(buf))
        if cut < 0:
            if len(buf) > MAX_PIECE_BYTES:
                raise NotTyped(f"no event boundary in {len(buf)} bytes")
            pending, size = [buf], len(buf)
            continue
        yield Chunk(at, buf[:cut + 1])
        skip = buf.index(b",", cut) + 1
        at += skip
        pending, size = [buf[skip:]], len(buf) - skip
    yield _Rest(at, b"".join(pending))


def _last_boundary(buf: bytes, end: int) -> int:
    """The '}' of the last '}' ',' '{' before end, or -1."""
    at = buf.rfind(b"}", 0, end)
    while at >= 0 and not _BOUNDARY.match(buf, at):
        at = buf.rfind(b"}", 0, at)
    return at


def _settle(waiting: deque, decode) -> tuple[str, Any]:
    """The first waiting piece: ("events", its result), ("tail", its body) when the array
    ends in it, or the last cut fell inside an event (the rest joins it), or ("again", None)
    when it was joined to the next piece (a cut in the wrong place) and waits again."""
    result, body = waiting.popleft()
    kind, value = result()
    if kind == "events":
        return "events", value
    if kind == "ends" or not waiting:
        return "tail", body
    _, after = waiting.popleft()  # it starts inside an event: its result is not used
    joined = _joined(body, after)
    if _size(joined) > MAX_PIECE_BYTES:
        raise NotTyped(f"no event boundary in {_size(joined)} bytes")
    waiting.appendleft((decode(joined), joined))
    return "again", None


def _last(buf: bytes, at: int, parse_trailer: Callable[[str, int], dict | None]
          ) -> tuple[list, bytes, dict]:
    """The last events (buf starts at byte `at` of the file), and the keys after the
    array's ']': the last ']' (within the final TAIL_BYTES) after which the rest reads
    as trailing keys and before which the events decode. A ']' that is no candidate (not
    followed by ',' or '}') is passed over in bulk; one inside the trailer (the events
    decode past the array's end) points to the array's own ']', which is tried next."""
    start = max(0, len(buf) - TAIL_BYTES)
    text = buf[start:].decode("utf-8", "surrogateescape")  # one char per undecodable byte: offsets map back
    below = len(text)
    for pos in reversed([m.start() for m in _TRAILER_START.finditer(text)]):
        try:
            if pos >= below or (trailer := parse_trailer(text, pos + 1)) is None:
                continue
        except SourceError as exc:  # a trailing key nested too deep: named by its byte
            end = start + len(text[:pos].encode("utf-8", "surrogateescape"))
            deep = outline(b"{" + buf[end + 1:], MAX_DEPTH + 1).deep
            if deep and getattr(exc, "byte", 0) is None:
                exc.byte = at + end + deep[0]  # type: ignore[attr-defined]
            raise
        end = start + len(text[:pos].encode("utf-8", "surrogateescape"))
        if not _is_utf8(buf, end + 1):  # read again with U+FFFD for each bad byte, as metadata keeps it
            trailer = parse_trailer(buf[end + 1:].decode("utf-8", "replace"), 0)
        head = buf[:end].rstrip(_WS)
        piece = b"[" + head + b"]"
        try:
            events = [] if not head else _decode(piece, at - 1)
        except _ArrayEnds as ended:  # this ']' is in the trailer: the array ended at ended.close
            below = len(buf[start:ended.close].decode("utf-8", "surrogateescape"))  # piece's '[' makes it +1
            continue
        if events is not None and trailer is not None:
            return events, piece, trailer
    raise NotTyped("the traceEvents array does not end (a file cut mid-write?)")


def _is_utf8(buf: bytes, start: int) -> bool:
    try:
        buf[start:].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _decode(piece: bytes, at: int = 0) -> list[FastEvent] | list[Event | Malformed | None] | None:
    """piece (a JSON array; its '[' at byte `at` of the file) as FastEvents where every
    event has the common shape, else as Events (general_events); None when the piece is
    no JSON array of objects (a cut in the wrong place)."""
    try:
        return _FAST_PIECE.decode(piece)
    except (msgspec.ValidationError, RecursionError):
        return general_events(piece, at)  # valid JSON, but not every event of the common shape
    except msgspec.DecodeError as exc:
        _cut_or_damage(piece, exc, at)
        return None


def events_of(piece: bytes, at: int) -> list[FastEvent] | list[Event | Malformed | None] | None:
    """A piece cut elsewhere (rlwh.readers.kineto_head), decoded as pieces() decodes one:
    None where it breaks at its very end or the array ends inside it, NotTyped where it is
    damaged before."""
    try:
        return _decode(piece, at)
    except _ArrayEnds:
        return None


def last_events(buf: bytes, at: int, parse_trailer: Callable[[str, int], dict | None]) -> tuple[list, bytes]:
    """The events of an array's last piece and what follows it (buf, from byte `at` of the
    file), as pieces() reads them: the events and their piece; NotTyped where the array does
    not end (or is damaged before)."""
    events, piece, _ = _last(buf, at, parse_trailer)
    return events, piece


def general_events(piece: bytes, at: int = 0) -> list[Event | Malformed | None] | None:
    """piece (a JSON array; its '[' at byte `at` of the file) as Events, None for each
    malformed one and Malformed for one nested too deep; None when the piece is no JSON
    array of objects."""
    try:
        return list(_PIECE.decode(piece))
    except msgspec.ValidationError:
        pass  # valid JSON, but an event of another shape: one by one below
    except msgspec.DecodeError as exc:
        _cut_or_damage(piece, exc, at)
        return None
    except RecursionError:
        return _without_deep(piece, at)
    try:
        values = json.loads(piece, parse_float=Decimal)
    except ValueError:
        return None
    except RecursionError:
        return _without_deep(piece, at)
    if not isinstance(values, list) or not all(isinstance(v, dict) for v in values):
        return None
    return [event_or_none(v) for v in values]


def _without_deep(piece: bytes, at: int) -> list[Event | Malformed | None] | None:
    """The events of a piece some of which nest deeper than the decoders follow: each of
    those is Malformed, in its place (found by its outline: an element past
    MAX_DEPTH levels that no decoder takes alone); the others decode as usual."""
    shape = outline(piece, MAX_DEPTH + 1)  # the piece's array is a level
    if shape.close is None:
        return None  # the piece ends inside an event: a cut in the wrong place
    if shape.close < len(piece) - 1:
        raise _ArrayEnds(shape.close)
    spans = {}
    for byte in shape.deep:
        k = shape.element_at(byte)
        spans[k] = (shape.start(k) + 1, shape.commas[k] if k < len(shape.commas) else shape.close, byte)
    deep = {k: span for k, span in spans.items() if _too_deep(piece[span[0]:span[1]])} or spans
    text = bytearray(piece)
    for start, end, _ in deep.values():
        text[start:end] = b"null".ljust(end - start)  # the same length: every byte keeps its place
    events = general_events(bytes(text), at)
    if events is None:
        return None
    for k, (_, _, byte) in deep.items():
        events[k] = Malformed(f"nested past {MAX_DEPTH} levels, deeper than the JSON decoders follow, at "
                              f"uncompressed byte {at + byte}")
    return events


def _too_deep(element: bytes) -> bool:
    """Whether the decoder gives up on this one element for its nesting."""
    try:
        _PIECE.decode(b"[" + element + b"]")
    except RecursionError:
        return True
    except msgspec.MsgspecError:
        pass
    return False


def element_byte(piece: bytes, k: int) -> int:
    """The first byte of element k (0-based) of a piece (a JSON array) in the piece."""
    shape = outline(piece, elements=k)
    start = shape.start(k) + 1
    return start + len(piece[start:start + 4096]) - len(piece[start:start + 4096].lstrip(_WS))


def _cut_or_damage(piece: bytes, exc: msgspec.DecodeError, at: int) -> None:
    """Return when the error is a cut in the wrong place, which breaks the piece at its
    very end (an open string, a nested value left open); an error before that is in the
    file itself (NotTyped, with its byte: the piece's '[' is byte `at`), or the array's
    end inside the piece (_ArrayEnds)."""
    where = _ERROR_AT.search(str(exc))  # "truncated" says no byte: the end
    if where is not None and int(where.group(1)) < len(piece) - 2:
        if "trailing characters" in str(exc):
            raise _ArrayEnds(piece.rfind(b"]", 0, int(where.group(1)))) from exc
        raise NotTyped(_ERROR_AT.sub("", str(exc)).strip(), at + int(where.group(1))) from exc


def event_or_none(value: dict) -> Event | None:
    """An event parsed elsewhere (a dict of JSON values, numbers as int or Decimal) as an
    Event; None when its fields are not of these types."""
    try:
        return msgspec.convert(value, Event, strict=False)
    except msgspec.ValidationError:
        return None
