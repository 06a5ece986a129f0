"""Turning query results into text for the terminal: table, CSV or JSON."""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime
from decimal import Decimal

from rlwh.catalog import QueryResult


def _plain(value):
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def as_table(result: QueryResult, max_width: int = 60) -> str:
    def cell(value) -> str:
        text = "NULL" if value is None else str(_plain(value))
        text = text.replace("\n", "\\n")
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    rows = [[cell(v) for v in row] for row in result.rows]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(result.columns)]
    line = lambda values: "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()  # noqa: E731
    out = [line(result.columns), line(["-" * w for w in widths])] + [line(r) for r in rows]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def as_csv(result: QueryResult) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([[_plain(v) for v in row] for row in result.rows])
    return buffer.getvalue().rstrip("\n")


def as_json(result: QueryResult) -> str:
    records = [{c: _plain(v) for c, v in zip(result.columns, row)} for row in result.rows]
    return json.dumps(records, indent=2, default=str)


FORMATS = {"table": as_table, "csv": as_csv, "json": as_json}
