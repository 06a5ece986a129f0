"""A CSV's header row as every CSV reader takes it, and its first rows as check sees them.

Why one place: the header decides a file's fate (its columns, its encoding), and `rlwh
check` must say what ingest will. A UTF-8 BOM is skipped (Excel writes one); UTF-16 or
UTF-32 text fails naming its encoding (the readers, and DuckDB's read_csv, take UTF-8
only); any other byte that is no UTF-8 fails naming its byte. Check also counts the cells
of the rows within its head against the header, as the row-by-row reads do: a header
that lost a column, or a small file cut short, gets ingest's verdict.
"""

from __future__ import annotations

import csv
from pathlib import Path

from rlwh.errors import SourceError
from rlwh.readers.text_encoding import NotUtf8, utf8_text, wide_text_said


def header_cells(path: Path) -> list[str]:
    """The header row's cells as written (a UTF-8 BOM skipped); SourceError saying what else
    the first line is: wide Unicode text, a byte that is no UTF-8, no CSV line, nothing."""
    with open(path, "rb") as handle:
        first = handle.readline()  # only the header line: a bad byte further on is a bad row
    try:
        text, _ = utf8_text(first)
    except NotUtf8 as exc:
        if exc.wide:
            raise SourceError(f"{path}: row 0 (header) is {wide_text_said(exc.wide)}") from None
        raise SourceError(f"{path}: row 0 (header) is not UTF-8 text (byte {exc.byte}: 0x{exc.value:02x})") from exc
    try:
        cells = next(csv.reader([text]), [])
    except csv.Error as exc:
        raise SourceError(f"{path}: row 0 (header) is not a CSV line ({exc})") from exc
    if not any(cell.strip() for cell in cells):
        raise SourceError(f"{path}: empty file, no CSV header")
    return cells


def rows_problem(head: bytes, whole: bool, width: int) -> tuple[str, str] | None:
    """What the complete rows within `head` (the file's first bytes, the whole file when
    `whole`) say against a header of `width` cells, as the row-by-row reads word it:
    ("failed", "no readable rows: row 1: ...") when every one has another count of cells
    (a header that lost a column; past the head the rest is taken to be the same),
    ("partial", "row k: ...") for the first that has; None when none has."""
    text = head.decode("utf-8", "replace")
    if not whole:
        text = text[: text.rfind("\n") + 1]
    lines = text.splitlines(keepends=True)[1:]
    rows = list(csv.reader(lines))
    if not whole and rows:
        rows.pop()  # the head may stop inside its last record (a quoted newline)
    bad, good = None, 0
    for number, cells in enumerate(rows, start=1):
        if not any(c.strip() for c in cells):
            continue  # a blank line is no row
        if len(cells) == width:
            good += 1
        elif bad is None:
            bad = f"row {number}: {len(cells)} cells, the header has {width}"
    if bad is None:
        return None
    return ("partial", bad) if good else ("failed", f"no readable rows: {bad}")
