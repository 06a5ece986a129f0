"""A Kineto trace's top-level object token by token: the keys before traceEvents, and the
events and the keys after them of a file the typed decoder cannot cut (damaged, cut).

Why its own builder: ijson's parse and items give each token its prefix, a text as long
as the nesting, which costs the square of a value's depth (an event whose args nest
200,000 deep, 400 KB: minutes, and then RecursionError). basic_parse gives the tokens
alone; the builder here keeps the depth itself and builds no value past MAX_DEPTH levels,
because Python's own recursion (the JSON decoders, what reads the values) stops near
1,000: an event holding one is Malformed (skipped, its place named), a top-level key
holding one fails the file (TooDeep).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from decimal import Decimal

import ijson

from rlwh.errors import SourceError
from rlwh.readers.kineto_events import MAX_DEPTH, Event, Malformed, event_or_none

_OPEN = ("start_map", "start_array")
_WS = re.compile(r"\s*")
_CLOSE = ("end_map", "end_array")


class TooDeep(SourceError):
    """A top-level value nests past MAX_DEPTH levels (the reader adds the file's path)."""


class _Deep:
    """What _value gives for a value past MAX_DEPTH levels."""


_DEEP = _Deep()


class TopLevel:
    """The trace's top-level object read from `stream` (which counts .offset, the bytes
    read so far), its keys other than traceEvents left in .keys."""

    def __init__(self, stream, buf_size: int):
        self._stream = stream
        self._tokens = ijson.basic_parse(stream, use_float=False, buf_size=buf_size)
        self.keys: dict = {}

    def until_events(self) -> bool:
        """Read the keys up to traceEvents (True) or to the object's end (False; also when
        it is no object). ijson.JSONError where the JSON breaks."""
        event, _ = next(self._tokens, ("", None))
        if event != "start_map":
            return False
        return self._keys()

    def events(self) -> Iterator[Event | Malformed | None]:
        """traceEvents' elements (None for one that is no event), then the keys after it;
        call after until_events() said True."""
        event, value = next(self._tokens)
        if event != "start_array":
            self._value(event, value, "traceEvents")
        else:
            for event, value in self._tokens:
                if event == "end_array":
                    break
                item = _value(event, value, self._tokens)
                if item is _DEEP:
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
            if value == "traceEvents":
                return True
            first, first_value = next(self._tokens)
            self.keys[value] = self._value(first, first_value, value)
        raise ijson.IncompleteJSONError("the JSON ends inside the top-level object")

    def _value(self, event: str, value, key: str):
        built = _value(event, value, self._tokens)
        if built is _DEEP:
            raise TooDeep(f"the value of the top-level key {key!r} nests past {MAX_DEPTH} levels (at or before "
                          f"uncompressed byte {self._stream.offset}): no trace rlwh can read")
        return built


def _value(event: str, value, tokens: Iterator[tuple[str, object]]):
    """The JSON value that starts with (event, value), its other tokens taken from tokens;
    _DEEP (its tokens taken all the same) when it nests past MAX_DEPTH levels."""
    if event not in _OPEN:
        return value
    top: dict | list = {} if event == "start_map" else []
    stack: list = [top]
    key = None
    level = 1
    for event, value in tokens:
        if event == "map_key":
            key = value
        elif event in _OPEN:
            level += 1
            if level > MAX_DEPTH or not stack:
                stack = []  # past the limit: the rest is only counted
                continue
            child: dict | list = {} if event == "start_map" else []
            parent = stack[-1]
            if parent.__class__ is dict:
                parent[key] = child
            else:
                parent.append(child)
            stack.append(child)
        elif event in _CLOSE:
            level -= 1
            if level == 0:
                return top if stack else _DEEP
            if stack:
                stack.pop()
        elif stack:
            parent = stack[-1]
            if parent.__class__ is dict:
                parent[key] = value
            else:
                parent.append(value)
    raise ijson.IncompleteJSONError("the JSON ends inside a value")


def nests_past(value, limit: int = MAX_DEPTH) -> bool:
    """Whether a value built elsewhere (json, msgspec) nests past `limit` levels; found
    without recursion."""
    todo = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            if level > limit:
                return True
            todo.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


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
        try:
            key, i = dec.raw_decode(text, _skip_space(text, i + 1))
            i = _skip_space(text, i)
            if not (isinstance(key, str) and text.startswith(":", i)):
                return None
            out[key], i = dec.raw_decode(text, _skip_space(text, i + 1))
        except ValueError:
            return None
        except RecursionError:
            raise TooDeep("a key after traceEvents nests deeper than the JSON decoders follow: "
                          "no trace rlwh can read") from None
        if nests_past(out[key]):
            raise TooDeep(f"the value of the key {key!r} after traceEvents nests past {MAX_DEPTH} levels: "
                          "no trace rlwh can read")
