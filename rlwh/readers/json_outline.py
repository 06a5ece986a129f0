"""The outline of a JSON array's text: where its elements end and how deep they nest.

Why: the native decoders stop without a position where a reader needs one. msgspec and
json raise RecursionError near 1,000 levels of nesting and say no byte; a run of decoded
events says which one is malformed but not where it lies. The outline finds, from the
bytes alone, the commas that separate the array's elements (outside strings, at the
array's own level), so element k's byte and the element that holds any byte are known.

It is computed in bulk (Arrow compute over 1 MiB at a time: which bytes are quotes,
brackets and commas, the running count of quotes and the running depth) and only where
a reader already has a problem, so the common path never pays for it. json_break says
where a text stops being JSON, by msgspec's byte.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

_ERROR_AT = re.compile(r"\s*\(byte (\d+)\)")
_ESCAPED = re.compile(rb"\\.", re.DOTALL)  # a backslash and the byte it escapes: never a quote
_STEP = 1 << 20
_I = pa.int64()


@dataclass
class Outline:
    """Where the top-level array's elements are in a text that starts with its '['."""

    commas: list[int] = field(default_factory=list)  # the commas between elements, in order
    close: int | None = None  # the array's own ']' (None: the text ends first)
    deep: list[int] = field(default_factory=list)  # per element deeper than the limit: its first byte past it

    def start(self, k: int) -> int:
        """The byte right before element k (0-based): the '[' or the comma before it."""
        return 0 if k == 0 else self.commas[k - 1]

    def element_at(self, byte: int) -> int:
        """The 0-based element that holds `byte`."""
        return bisect_right(self.commas, byte)

    def ended_before(self, byte: int) -> int:
        """How many elements end (at their comma, or at the array's ']') before `byte`."""
        whole = bisect_right(self.commas, byte - 1)
        return whole + 1 if self.close is not None and self.close < byte else whole


def outline(text: bytes, limit: int | None = None, elements: int | None = None) -> Outline:
    """The outline of `text`, a JSON array, whole or cut or damaged past some point. With
    `limit`, .deep holds, for each element that nests deeper than `limit` levels (the
    array's own level is 1), the first byte past the limit. With `elements`, it may stop
    once that many commas are known."""
    plain = _ESCAPED.sub(b"__", text)  # same length: every byte keeps its place
    buffer = pa.py_buffer(plain)
    found = Outline()
    quotes = depth = 0
    for at in range(0, len(plain), _STEP):
        chunk = pa.Array.from_buffers(pa.uint8(), min(_STEP, len(plain) - at), [None, buffer], 0, at)
        is_quote = pc.equal(chunk, 34).cast(_I)
        outside = pc.equal(pc.bit_wise_and(pc.add(pc.cumulative_sum(is_quote), quotes), 1), 0)
        opens = pc.and_(pc.or_(pc.equal(chunk, 91), pc.equal(chunk, 123)), outside)
        closes = pc.and_(pc.or_(pc.equal(chunk, 93), pc.equal(chunk, 125)), outside)
        level = pc.add(pc.cumulative_sum(pc.subtract(opens.cast(_I), closes.cast(_I))), depth)
        is_comma = pc.and_(pc.and_(pc.equal(chunk, 44), outside), pc.equal(level, 1))
        ends = pc.indices_nonzero(pc.and_(closes, pc.equal(level, 0)))
        stop = ends[0].as_py() if len(ends) else len(chunk)
        found.commas += [i + at for i in pc.indices_nonzero(is_comma.slice(0, stop)).to_pylist()]
        if limit is not None:
            _deep(found, pc.greater(level, limit).slice(0, stop), is_comma.slice(0, stop), at)
        if len(ends):
            found.close = stop + at
            break
        if elements is not None and len(found.commas) >= elements:
            break
        quotes += pc.sum(is_quote).as_py()
        depth = level[-1].as_py()
    return found


def _deep(found: Outline, over: pa.Array, is_comma: pa.Array, at: int) -> None:
    """Add to found.deep the first byte past the limit of each element in this chunk."""
    where = pc.indices_nonzero(over)
    if not len(where):
        return
    before = len(found.commas) - pc.sum(is_comma.cast(_I)).as_py()  # commas before this chunk
    element = pc.add(pc.cumulative_sum(is_comma.cast(_I)), before).take(where)  # non-decreasing
    changes = pc.indices_nonzero(pc.not_equal(element.slice(1), element.slice(0, len(element) - 1)))
    firsts = pa.concat_arrays([pa.array([0], pa.uint64()), pc.add(changes, 1).cast(pa.uint64())])
    for k, i in zip(element.take(firsts).to_pylist(), where.take(firsts).to_pylist()):
        if not found.deep or found.element_at(found.deep[-1]) != k:  # an element that began in an earlier chunk
            found.deep.append(i + at)


def json_break(data: bytes) -> tuple[int, str] | None:
    """(byte, why) where `data` (a JSON text from its first byte, a UTF-8 BOM skipped) stops
    being JSON; None where it is JSON, or only ends too soon (the first bytes of a file)."""
    skip = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        msgspec.json.decode(data[skip:])
    except msgspec.DecodeError as exc:
        found = _ERROR_AT.search(str(exc))
        if found is not None:
            return skip + int(found.group(1)), _ERROR_AT.sub("", str(exc))
    except RecursionError:
        pass
    return None
