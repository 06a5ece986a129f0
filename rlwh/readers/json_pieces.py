"""One big JSON array file as pieces that DuckDB reads on every thread.

A real trace_view.json is one line, one JSON array: read_json reads it on one thread
(BENCHMARKS.md, 2026-12-03: 0.98 s for 300 MB with 1 or 2 threads), while it reads several
files side by side. So a big file is cut, at boundaries between the array's elements, into
piece files ('[' + elements + ']') that one read_json reads together.

A cut is made at the first '}' ',' '{' (whitespace allowed between them) after each
PIECE_BYTES. That pattern also occurs inside a string or inside a nested array of
objects, so a cut is proven by the read itself: a piece that starts at a true element
boundary parses as a whole array exactly when its end is one too (a cut inside a string
leaves that string unterminated, a cut inside a nested value leaves it unclosed, and
DuckDB's read_json refuses both: tests/test_json_pieces.py), and the first piece starts
right after the file's '['. Every piece parsing is thus proof that the pieces hold the
file's elements, in order, each once. When one does not, the caller reads the file whole.
"""

from __future__ import annotations

import mmap
import re
from pathlib import Path

PIECE_BYTES = 32 * 2**20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


def cut(path: Path, folder: Path, piece_bytes: int = PIECE_BYTES) -> list[Path]:
    """`path` itself when it is under 2 piece_bytes; else its pieces, written to `folder`.
    The file must start with '[' and end with ']' (whitespace aside), as the caller checked."""
    size = path.stat().st_size
    if size < 2 * piece_bytes:
        return [path]
    folder.mkdir(parents=True, exist_ok=True)
    pieces = []
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        start = data.find(b"[") + 1
        end = data.rfind(b"]")
        for i, (a, b) in enumerate(_spans(data, start, end, piece_bytes)):
            piece = folder / f"piece-{i}.json"
            with open(piece, "wb") as out:
                out.write(b"[")
                out.write(data[a:b])
                out.write(b"]")
            pieces.append(piece)
    return pieces


def _spans(data: mmap.mmap, start: int, end: int, piece_bytes: int) -> list[tuple[int, int]]:
    """[start, end) cut into spans of at least piece_bytes at candidate boundaries: each
    span ends after a '}' and the next starts at the '{' after the ','."""
    spans = []
    while end - start >= 2 * piece_bytes:
        found = _BOUNDARY.search(data, start + piece_bytes, end)
        if found is None:
            break
        spans.append((start, found.start() + 1))
        start = found.end() - 1
    spans.append((start, end))
    return spans
