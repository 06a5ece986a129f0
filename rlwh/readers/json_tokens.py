"""JSON values built from ijson's basic_parse tokens, none deeper than MAX_DEPTH levels.

Why: ijson's parse and items give each token its prefix, a text as long as the nesting,
which costs the square of a value's depth (an event nested 200,000 deep, 400 KB: minutes,
and memory until the process is killed). basic_parse gives the tokens alone; the builder
here keeps the depth itself and builds no value past MAX_DEPTH levels, because Python's
own recursion (the JSON decoders, code that walks a value) stops near 1,000: such a value
is TOO_DEEP, its tokens taken all the same, so the stream goes on after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ijson

MAX_DEPTH = 256
_OPEN = ("start_map", "start_array")
_STRUCTURE = frozenset(("start_map", "start_array", "end_map", "end_array"))


class _TooDeep:
    """What value_of gives for a value past MAX_DEPTH levels."""


TOO_DEEP = _TooDeep()


def tokens(stream, buf_size: int) -> Iterator[tuple[str, object]]:
    """The stream's tokens (numbers as int or Decimal, never float)."""
    return ijson.basic_parse(stream, use_float=False, buf_size=buf_size)


def value_of(event: str, value, tokens: Iterator[tuple[str, object]], give_up: bool = False):
    """The JSON value that starts with the token (event, value), its other tokens taken
    from tokens; TOO_DEEP when it nests past MAX_DEPTH levels (its own is the first):
    then at once with give_up, else once its tokens are all taken. (The loop tests the
    commonest tokens first, keys and scalars: it is the streaming pass's own cost.)"""
    if event not in _OPEN:
        return value
    top: dict | list = {} if event == "start_map" else []
    stack: list = [top]
    here: Any = top
    in_map = event == "start_map"
    key = None
    level, deep = 1, False
    for event, value in tokens:
        if event == "map_key":
            key = value
        elif event not in _STRUCTURE:  # a scalar
            if deep:
                continue
            if in_map:
                here[key] = value
            else:
                here.append(value)
        elif event in _OPEN:
            level += 1
            if deep or level > MAX_DEPTH:
                if give_up:
                    return TOO_DEEP
                deep = True  # past the limit: the rest is only counted
                continue
            child: dict | list = {} if event == "start_map" else []
            if in_map:
                here[key] = child
            else:
                here.append(child)
            stack.append(child)
            here, in_map = child, event == "start_map"
        else:
            level -= 1
            if level == 0:
                return TOO_DEEP if deep else top
            if not deep:
                stack.pop()
                here = stack[-1]
                in_map = here.__class__ is dict
    raise ijson.IncompleteJSONError("the JSON ends inside a value")


def array_items(tokens: Iterator[tuple[str, object]]) -> Iterator[object]:
    """The elements of the array whose '[' was the last token taken (TOO_DEEP for one too
    deep), up to its ']'."""
    for event, value in tokens:
        if event == "end_array":
            return
        yield value_of(event, value, tokens)
    raise ijson.IncompleteJSONError("the JSON ends inside the array")


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
