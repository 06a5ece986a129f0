"""communication_matrix.json (and analysis.db's CommAnalyzerMatrix) -> communication_links.

The Ascend profiler's communication matrix says, per step, per op and per link from this
rank to a peer, how the bytes went: {"step<n>": {"collective" | "p2p": {"<label>@<group>":
{"<src>-<dst>": {"Transport Type", "Transit Size(MB)", "Transit Time(ms)",
"Bandwidth(GB/s)", "Op Name"}}}}}. A label is the op type and which op of that type it
stands for (allreduce-top1/-middle/-bottom<k>: the longest, median and shortest ops),
and <type>-total sums every op of that type on the link. MB here is 10^6 bytes
(Transit Size(MB) x 10^6 is a whole byte count; Bandwidth(GB/s) = MB / ms), so sizes and
times are scaled exactly from the numbers' shortest decimal text.

A link whose figures are no numbers is named by its place in the file and dropped (the
file is then partial); a file that is no JSON object fails naming line and column.
"""

from __future__ import annotations

import math
import re
from decimal import InvalidOperation
from pathlib import Path

import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers.ascend_info import load_json
from rlwh.readers.base import ReadOutcome, TableSink, scaled

TABLE = "communication_links"
SCHEMA = pa.schema([
    ("source_row", pa.int64()), ("step", pa.int64()), ("op_kind", pa.string()), ("name", pa.string()),
    ("group", pa.string()), ("is_total", pa.bool_()), ("op_name", pa.string()), ("src_rank", pa.int64()),
    ("dst_rank", pa.int64()), ("transport_type", pa.string()), ("size_bytes", pa.int64()),
    ("duration_ns", pa.int64()), ("bandwidth_gbps", pa.float64()),
])
SIZE, TIME, BANDWIDTH = "Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)"
MB_BYTES = 10**6
MS_NS = 10**6
_STEP = re.compile(r"(?:step)?\s*(\d{1,9})", re.IGNORECASE)
_LINK = re.compile(r"\s*(\d{1,9})\s*(?:->|-)\s*(\d{1,9})\s*")
SHOWN_PROBLEMS = 5


class BadLink(ValueError):
    """A link entry whose figures cannot be read as what they mean."""


def step_of(key: str) -> int | None:
    """'step50' or '50' -> 50; None for a key that names no number."""
    match = _STEP.fullmatch(key.strip())
    return int(match.group(1)) if match else None


def _number_text(value, what: str) -> str | None:
    """A JSON or SQLite number as its shortest decimal text; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadLink(f"{what} {value!r} is not a number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadLink(f"{what} {value!r} is not a finite number")
        return repr(value)
    return str(value).strip()


def _scaled(value, factor: int, what: str) -> int | None:
    text = _number_text(value, what)
    if text is None:
        return None
    try:
        return scaled(text, factor)
    except (InvalidOperation, ArithmeticError, ValueError):
        raise BadLink(f"{what} {value!r} is not a number") from None


def _bandwidth(value) -> float | None:
    text = _number_text(value, BANDWIDTH)
    if text is None:
        return None
    try:
        number = float(text)
    except ValueError:
        raise BadLink(f"{BANDWIDTH} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise BadLink(f"{BANDWIDTH} {value!r} is not a finite number")
    return number


def _rank(value, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise BadLink(f"{what} {value!r} is not a rank")


def link_row(step: int | None, op_kind: str | None, label: str, src, dst, figures: dict) -> dict:
    """One communication_links row (without source_row) from an entry's parts; BadLink
    when a figure is no number or a rank no integer."""
    before, at, after = label.rpartition("@")
    name, group = (before, after) if at else (label, None)
    transport, op_name = figures.get("Transport Type"), figures.get("Op Name")
    return {
        "step": step, "op_kind": op_kind, "name": name, "group": group,
        "is_total": name.lower().endswith("-total"),
        "op_name": None if op_name in (None, "") else str(op_name),
        "src_rank": _rank(src, "source rank"), "dst_rank": _rank(dst, "destination rank"),
        "transport_type": None if transport in (None, "") else str(transport),
        **transit_figures(figures),
    }


def transit_figures(figures: dict) -> dict:
    """Transit Size(MB), Transit Time(ms) and Bandwidth(GB/s) as size_bytes, duration_ns and
    bandwidth_gbps (communication_matrix.json's links, communication.json's transports);
    BadLink when one is no number."""
    return {
        "size_bytes": _scaled(figures.get(SIZE), MB_BYTES, SIZE),
        "duration_ns": _scaled(figures.get(TIME), MS_NS, TIME),
        "bandwidth_gbps": _bandwidth(figures.get(BANDWIDTH)),
    }


def matrix_rows(data: dict) -> tuple[list[dict], list[str]]:
    """Every link of the matrix, in the file's order, numbered 1.. (source_row); and what
    could not be read, each named by its place (step / section / op / link)."""
    rows: list[dict] = []
    problems: list[str] = []
    position = 0
    for step_key, sections in data.items():
        if not isinstance(sections, dict):
            problems.append(f"{step_key}: expected an object of collective / p2p ops, found {type(sections).__name__}")
            continue
        step = step_of(str(step_key))
        for section, ops in sections.items():
            if not isinstance(ops, dict):
                problems.append(f"{step_key} / {section}: expected an object of ops, found {type(ops).__name__}")
                continue
            for label, links in ops.items():
                if not isinstance(links, dict):
                    problems.append(f"{step_key} / {section} / {label}: expected an object of links, "
                                    f"found {type(links).__name__}")
                    continue
                for link, figures in links.items():
                    position += 1
                    where = f"{step_key} / {section} / {label} / {link}"
                    match = _LINK.fullmatch(str(link))
                    try:
                        if match is None:
                            raise BadLink("the link key is not <src>-<dst>")
                        if not isinstance(figures, dict):
                            raise BadLink(f"expected an object of figures, found {type(figures).__name__}")
                        row = link_row(step, str(section), str(label), match.group(1), match.group(2), figures)
                    except BadLink as exc:
                        problems.append(f"link {position} ({where}): {exc}")
                        continue
                    rows.append({"source_row": position, **row})
    return rows, problems


def load_matrix(path: Path) -> dict:
    """The file's JSON object; SourceError naming file and position otherwise (`rlwh check`
    asks the same before an ingest)."""
    return load_json(path)


def problems_outcome(path: Path, kept: int, problems: list[str], what: str = "links") -> ReadOutcome:
    """ok; partial naming the first problems; or (nothing kept) a SourceError."""
    if not problems:
        return ReadOutcome()
    shown = "; ".join(problems[:SHOWN_PROBLEMS])
    if len(problems) > SHOWN_PROBLEMS:
        shown += f"; and {len(problems) - SHOWN_PROBLEMS} more"
    if kept == 0:
        raise SourceError(f"{path}: no readable {what}: {shown}")
    return ReadOutcome(status="partial", message=f"{path}: kept {kept} {what}, skipped {len(problems)}: {shown}")


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    rows, problems = matrix_rows(load_matrix(path))
    sink.write(TABLE, pa.Table.from_pylist(rows, SCHEMA))
    sink.ensure(TABLE, SCHEMA)
    return problems_outcome(path, len(rows), problems)
