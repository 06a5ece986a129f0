"""A Kineto trace's top-level object token by token: the keys before traceEvents, and the
events and the keys after them of a file the typed decoder cannot cut (damaged, cut).

Why token by token: the values are built by rlwh.readers.json_tokens, linear in their
depth and none past MAX_DEPTH levels (ijson's own items cost the square of the depth):
an event past it is Malformed (skipped, its place named), a top-level key past it fails
the file (TooDeep, as soon as its depth shows; the reader and check name its byte from
the file's first bytes, rlwh.readers.json_outline).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from decimal import Decimal

import ijson

from rlwh.errors import SourceError
from rlwh.readers.json_outline import json_break, outline
from rlwh.readers.json_tokens import MAX_DEPTH, TOO_DEEP, nests_past, tokens, value_of
from rlwh.readers.kineto_events import Event, Malformed, event_or_none

_WS = re.compile(r"\s*")


class TooDeep(SourceError):
    """A top-level key's value nests past MAX_DEPTH levels (or past what the decoders
    follow): no trace rlwh can read. .byte: where, in the file, once known."""

    def __init__(self, key: str, after: bool, byte: int | None = None):
        super().__init__(key, after, byte)
        self.key, self.after, self.byte = key, after, byte

    def __str__(self) -> str:
        where = "" if self.byte is None else f" at uncompressed byte {self.byte}"
        return (f"the value of the top-level key {self.key!r}{' after traceEvents' if self.after else ''} nests "
                f"past {MAX_DEPTH} levels{where}: no trace rlwh can read")


_VALUE_KINDS = {"string": "a string", "number": "a number", "boolean": "a boolean", "null": "null",
                "start_map": "an object"}


class EventsNotAList(SourceError):
    """traceEvents holds something else than a list of events: no trace rlwh can read."""

    def __init__(self, token: str):
        super().__init__(token)
        self.kind = _VALUE_KINDS.get(token, token)

    def __str__(self) -> str:
        return f"traceEvents is {self.kind}, not a list of events: no trace rlwh can read"


def deep_byte(data: bytes) -> int | None:
    """The first byte of `data` (an object's or an array's text, from its first byte) past
    MAX_DEPTH levels within one of its members."""
    deep = outline(data, MAX_DEPTH + 1).deep
    return deep[0] if deep else None


def broken_before_events(data: bytes, stream_error: str | None, read: int) -> str:
    """How the JSON broke off before traceEvents, in the reader's words (check's too): the
    byte where `data` (the file's first bytes, all that was read) stops being JSON, else
    where the stream ended (`read` bytes in) and why."""
    broke = json_break(data)
    if stream_error is None and broke is not None and broke[0] < len(data) - 1:
        return f"the JSON breaks at uncompressed byte {broke[0]} ({broke[1]}) before them"
    return f"{stream_error or 'the JSON ends'} before them, at uncompressed byte {read}"


class TopLevel:
    """The trace's top-level object read from `stream` (which counts .offset, the bytes
    read so far), its keys other than traceEvents left in .keys."""

    def __init__(self, stream, buf_size: int):
        self._stream = stream
        self._tokens = tokens(stream, buf_size)
        self.keys: dict = {}
        self._after = False

    def until_events(self) -> bool:
        """Read the keys up to traceEvents (True) or to the object's end (False; also when
        it is no object). ijson.JSONError where the JSON breaks; TooDeep; EventsNotAList
        where traceEvents is no array."""
        event, _ = next(self._tokens, ("", None))
        if event != "start_map":
            return False
        return self._keys()

    def events(self) -> Iterator[Event | Malformed | None]:
        """traceEvents' elements (None for one that is no event), then the keys after it;
        call after until_events() said True."""
        self._after = True
        for event, value in self._tokens:  # until_events() read the array's '['
            if event == "end_array":
                break
            item = value_of(event, value, self._tokens)
            if item is TOO_DEEP:
                yield Malformed(f"nested past {MAX_DEPTH} levels, deeper than the JSON decoders follow, at or "
                                f"before uncompressed byte {self._stream.offset}")
            else:
                yield event_or_none(item) if item.__class__ is dict else None
        self._keys()

    def _keys(self) -> bool:
        for event, value in self._tokens:
            if event == "end_map":
                return False
            if event != "map_key":
                raise ijson.JSONError(f"unexpected {event} among the top-level keys")
            if value == "traceEvents" and not self._after:
                opened = next(self._tokens, None)  # its '[' (events() goes on from there)
                if opened is None:
                    raise ijson.IncompleteJSONError("the JSON ends after traceEvents")
                if opened[0] != "start_array":
                    raise EventsNotAList(opened[0])
                return True
            first, first_value = next(self._tokens)
            self.keys[value] = self._value(first, first_value, str(value))
        raise ijson.IncompleteJSONError("the JSON ends inside the top-level object")

    def _value(self, event: str, value, key: str):
        built = value_of(event, value, self._tokens, give_up=True)
        if built is TOO_DEEP:
            raise TooDeep(key, self._after)
        return built


def _skip_space(text: str, i: int) -> int:
    """The index of the first non-space character of text at or after i."""
    space = _WS.match(text, i)
    assert space is not None  # \s* matches everywhere, if only the empty string
    return space.end()


def trailing_keys(text: str, i: int) -> dict | None:
    """The keys after the traceEvents array: parse ', "key": value ... }' from text[i] to
    the end; None unless it is exactly that. TooDeep for a value nested past what the
    decoders follow (or past MAX_DEPTH levels)."""
    dec = json.JSONDecoder(parse_float=Decimal)
    out: dict[str, object] = {}
    while True:
        i = _skip_space(text, i)
        if text.startswith("}", i):
            return out if _skip_space(text, i + 1) == len(text) else None
        if not text.startswith(",", i):
            return None
        key = None
        try:
            key, i = dec.raw_decode(text, _skip_space(text, i + 1))
            i = _skip_space(text, i)
            if not (isinstance(key, str) and text.startswith(":", i)):
                return None
            out[key], i = dec.raw_decode(text, _skip_space(text, i + 1))
        except ValueError:
            return None
        except RecursionError:
            raise TooDeep(str(key), True) from None
        if nests_past(out[key]):
            raise TooDeep(key, True)
