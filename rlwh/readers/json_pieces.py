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
import os
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
                out.flush()
                _copy_range(handle, out, a, b - a)
                out.write(b"]")
            pieces.append(piece)
    return pieces


def _copy_range(source, out, offset: int, count: int) -> None:
    """`count` bytes of `source` from `offset` appended to `out`: by the kernel where it can
    (copy_file_range: 0.8 s a GB here, against 3.5 s through Python's bytes)."""
    done = 0
    try:
        while done < count:
            copied = os.copy_file_range(source.fileno(), out.fileno(), count - done, offset + done)
            if copied == 0:
                break
            done += copied
    except (AttributeError, OSError):  # no copy_file_range here (or not between these files)
        pass
    source.seek(offset + done)
    while done < count:
        chunk = source.read(min(8 * 2**20, count - done))
        if not chunk:
            raise OSError(f"{source.name}: ended at byte {offset + done} while being cut")
        out.write(chunk)
        done += len(chunk)
    out.flush()


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
