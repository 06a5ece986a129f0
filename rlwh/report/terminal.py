"""Turning query results into text for the terminal: table, CSV or JSON.

The table is for people: floats are rounded, numbers right-aligned, and a multi-line
value (a call stack, frames joined by newlines) is printed as lines inside its cell.
Nothing is ever cut: a path or a frame cut at the end cannot be told from its
neighbours (144 GMM dumps all read `gmm/step_1/…`). CSV and JSON are for programs and
keep every value exactly.
"""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import date, datetime
from decimal import Decimal

from rlwh.errors import RlwhError
from rlwh.warehouse.catalog import QueryResult


def _plain(value):
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def format_float(value: float) -> str:
    """Three decimals at or above 1, four significant digits below; trailing zeros dropped.

    0.3551602115841266 -> 0.3552, 1536.12345 -> 1536.123, 2.0 -> 2, 1.5e-07 -> 1.5e-07.
    """
    if not math.isfinite(value) or value == 0:
        return str(value) if value != 0 else "0"
    magnitude = abs(value)
    if magnitude < 1e-4:
        return f"{value:.4g}"
    if magnitude >= 1:
        text = f"{value:.3f}"
    else:
        decimals = 3 - math.floor(math.log10(magnitude))  # four significant digits
        text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _cell(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return format_float(value)
    return str(_plain(value))


def _is_number(value) -> bool:
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


# A terminal table's widest line of a value; a longer one (a C++ kernel name of 385
# characters) is cut, and the table says so and how to get it whole.
MAX_CELL = 100


def _cut(line: str) -> str:
    return line if len(line) <= MAX_CELL else line[:MAX_CELL - 1] + "…"


def as_table(result: QueryResult) -> str:
    """Aligned columns; multi-line values span several lines of their row, rows with
    such values are separated by a blank line so each row's extent is visible. A line
    of a value longer than MAX_CELL is cut, and a last line says so."""
    whole = [[_cell(v).replace("\r\n", "\n").split("\n") for v in row] for row in result.rows]
    cells = [[[_cut(line) for line in lines] for lines in row] for row in whole]
    cut = cells != whole
    numeric = [
        bool(result.rows) and all(row[i] is None or _is_number(row[i]) for row in result.rows)
        for i in range(len(result.columns))
    ]
    widths = [
        max([len(name)] + [len(line) for row in cells for line in row[i]])
        for i, name in enumerate(result.columns)
    ]

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    multi_line = any(len(lines) > 1 for row in cells for lines in row)
    out = [line(list(result.columns)), line(["-" * w for w in widths])]
    for number, row in enumerate(cells):
        if multi_line and number:
            out.append("")
        for k in range(max((len(lines) for lines in row), default=1)):
            out.append(line([lines[k] if k < len(lines) else "" for lines in row]))
    out.append(f"({len(result.rows)} row{'s' if len(result.rows) != 1 else ''})")
    if cut:
        out.append(f"(values longer than {MAX_CELL} characters are cut at \u2026: --format csv or "
                   "--format json prints them whole)")
    return "\n".join(out)


def as_csv(result: QueryResult) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([[_plain(v) for v in row] for row in result.rows])
    return buffer.getvalue().rstrip("\n")


def _json_value(value):
    """JSON has no NaN or infinity (json.dumps would write invalid JSON): null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return _plain(value)


def as_json(result: QueryResult) -> str:
    twice = sorted({c for c in result.columns if result.columns.count(c) > 1})
    if twice:  # a JSON object keeps one value per name: the others would vanish
        raise RlwhError(f"--format json needs distinct column names, and {', '.join(map(repr, twice))} "
                        "is named twice: give the columns names of their own (select a.run as a_run, ...), "
                        "or use --format csv")
    records = [{c: _json_value(v) for c, v in zip(result.columns, row)} for row in result.rows]
    return json.dumps(records, indent=2, default=str, allow_nan=False)


FORMATS = {"table": as_table, "csv": as_csv, "json": as_json}
