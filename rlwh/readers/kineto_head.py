"""What a Kineto trace's first bytes say of how ingest will read it, for `rlwh check`.

Why: check reads a trace's head (64 KiB) and its tail, never the whole. Where damage lies
in the head, the reader's own code finds it there: the keys before traceEvents are read
by rlwh.readers.kineto_stream, the events that end within the head are decoded by
rlwh.readers.kineto_events and built by rlwh.readers.kineto_rows as the reader does,
each byte counted from the file's first. So a top-level value nested too deep, a damaged,
malformed or too deep first event gets ingest's verdict, in ingest's words.
"""

from __future__ import annotations

import sys

import ijson

from rlwh.readers.json_outline import Outline, json_break, outline
from rlwh.readers.kineto_events import EVENTS_KEY, MAX_DEPTH, NotTyped, events_of, last_events
from rlwh.readers.kineto_rows import FirstBad, rows_of
from rlwh.readers.kineto_stream import EventsNotAList, TooDeep, TopLevel, broken_before_events, deep_byte, trailing_keys
from rlwh.readers.text_encoding import UTF8_BOM

HEAD_READ_BYTES = 64 << 10  # as rlwh.readers.torch_trace reads the keys before traceEvents
KEEPS = "ingest keeps the complete events before the cut"
# An error this close to where the head stops may be the head's own cut (a literal, a
# number cut in two), not damage in the file.
_CUT_MARGIN = 256


class _Head:
    """The head as a stream for TopLevel: counts .offset, skips a BOM, as the reader's does."""

    def __init__(self, head: bytes):
        self._data, self.offset = head, 0

    def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        data = self._data[self.offset:] if n < 0 else self._data[self.offset:self.offset + n]
        first = self.offset == 0
        self.offset += len(data)
        return data[len(UTF8_BOM):] if first and data.startswith(UTF8_BOM) else data


def head_problem(head: bytes, whole: bool, damage: str | None = None) -> tuple[str, str] | None:
    """("failed" or "partial", the reason as ingest words it, and what ingest does about
    it, less the file's name) for what the head shows; None where it shows nothing.
    whole: the head is the whole file; damage: what cut its gzip stream short."""
    try:
        try:
            TopLevel(_Head(head), HEAD_READ_BYTES).until_events()  # the reader's read of the keys before
        except ijson.JSONError:  # where the JSON breaks (or the file ends) within the head, ingest fails it
            broke = json_break(head)
            if whole or damage or (broke is not None and broke[0] < len(head) - _CUT_MARGIN):
                return "failed", f"no traceEvents ({broken_before_events(head, damage, len(head))})"
        except TooDeep as exc:
            exc.byte = deep_byte(head)
            raise
        except EventsNotAList as exc:
            return "failed", str(exc)
        match = EVENTS_KEY.search(head)
        return None if match is None else _events(head, match.end(), whole)
    except TooDeep as exc:
        return "failed", str(exc)


def _events(head: bytes, at: int, whole: bool) -> tuple[str, str] | None:
    """The events from byte `at` (right after the array's '['): damage, a malformed or a
    too deep one, where they lie within the head."""
    text = b"[" + head[at:]
    shape = outline(text, MAX_DEPTH + 1)
    events: list | None
    try:
        if whole and shape.close is not None:
            events, piece = last_events(head[at:], at, trailing_keys)
        else:
            ended = shape.commas[-1] if shape.commas else 0
            piece = text[:ended] + b"]"
            events = events_of(piece, at - 1) if ended else []
            if events is None:
                return None  # the outline misread a damaged text: the decoder says no more
            _cut_off(text, ended, at)
    except NotTyped as exc:
        if exc.at is None:
            return None
        return "partial", f"JSON breaks at uncompressed byte {exc.at} ({exc}): {KEEPS}"
    rows = rows_of(events, piece, at - 1)
    if rows.first_bad is not None:
        return "partial", f"skipped malformed events (the first: {rows.first_bad.said()})"
    if whole and shape.close is None:
        return "partial", f"the JSON does not end with its closing '}}' (cut while being written): {KEEPS}"
    return _deep_at_the_end(text, shape, at, whole)


def _cut_off(text: bytes, ended: int, at: int) -> None:
    """The element the head stops in: NotTyped where it is damaged well before that."""
    rest = b"[" + text[ended + 1:].lstrip() + b"]"
    skipped = len(text[ended + 1:]) - len(text[ended + 1:].lstrip())
    try:
        events_of(rest, at - 1 + ended + skipped)
    except NotTyped as exc:
        if exc.at is not None and exc.at < at - 1 + len(text) - _CUT_MARGIN:
            raise


def _deep_at_the_end(text: bytes, shape: Outline, at: int, whole: bool) -> tuple[str, str] | None:
    """The element the head stops in, when it nests past what the decoders follow even
    within the head: ingest skips it (rlwh.readers.kineto_events._without_deep)."""
    if whole or not shape.deep:
        return None
    last = len(shape.commas)
    byte = shape.deep[-1]
    if shape.element_at(byte) != last or not outline(text[shape.start(last):], sys.getrecursionlimit()).deep:
        return None
    start = shape.start(last) + 1
    start += len(text[start:start + 4096]) - len(text[start:start + 4096].lstrip())
    first = FirstBad(last, at - 1 + start, f"nested past {MAX_DEPTH} levels, deeper than the JSON decoders "
                     f"follow, at uncompressed byte {at - 1 + byte}")
    return "partial", f"skipped malformed events (the first: {first.said()})"
