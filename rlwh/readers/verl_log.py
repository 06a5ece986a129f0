"""Reader for VeRL training console logs: one `step:N - key:value - ...` record per step.

VeRL's console logger prints every numeric metric of an optimizer step on one line,
`step:N - key:value - key:value`. Why the reader is built this way:
- Streaming, line by line: a run's log grows for days; memory holds one line (at most
  MAX_LINE_BYTES of it) and a batch of rows.
- A record starts at `step:N - ` at the start of a line, after what a wrapper puts in
  front: ANSI colour codes, Ray's `(TaskRunner pid=N)` prefix (and its `[repeated Nx
  across cluster]` note), a timestamp or logger name. `global_step:5 - ` and
  `training/global_step:5` never start one (no word character, `/`, `.`, `-`, `@` or
  quote may stand right before `step`). tqdm bars redrawn
  with `\\r` share a line with records: each `\\r` segment is looked at on its own.
- Values are numbers as Python and numpy print them: `0.1`, `1e-06`, `nan`, `inf`,
  `True`, `np.float64(0.1)`, `np.int32(3)`. The reader hands them as printed; the ingest
  job (ingest/verl_log.sql) unwraps and casts them, where the mapping is readable.
  A key is everything before the last `:` that leaves a number after it, so keys with
  `@`, `(`, `)` or `:` in them stay whole.
- A record cut short keeps its whole fields and drops the cut one: wandb's output.log
  cuts every line to 4,096 characters (LINE_CAP: a line of exactly that length lost its
  end; a longer one, from `tee`, was never cut), and a log can end mid-record (a run
  stopped, or still writing). The outcome names how many were cut and where.
- A record wrapped over several lines (a terminal's width, Ray splitting a long line) is
  joined when the next line, under the same prefix, is the rest of it: `key:value`
  fields after ` - `, or the cut field's own tail.
- Not records: pprinted validation dicts over many lines, the config dump, tqdm bars.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers.base import ReadOutcome, TableSink

TABLE = "train_metrics"
SCHEMA = pa.schema([("line", pa.int64()), ("step", pa.int64()), ("key", pa.string()), ("value", pa.string())])
BATCH_ROWS = 65536
LINE_CAP = 4096  # wandb's output.log keeps the first 4,096 characters of a line
MAX_LINE_BYTES = 1 << 20  # more of one line than any record holds: a tqdm line redrawn for hours
SNIFF_BYTES = 64 << 20  # how far discovery looks for a first record

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")
# Ray's per-line prefix: (TaskRunner pid=123), (main_task pid=9, ip=10.0.0.1), (pid=7).
_RAY_PREFIX = re.compile(r"\((?:[^()\s]+ )?pid=\d+(?:, ip=[^()]*)?\) ?")
# `step:` after the line start or a delimiter a prefix ends with (space, `]`, `)`, `:`, `|`),
# never inside a key (global_step:, training/global_step:) or a quoted text.
_RECORD_START = re.compile(r"(?<![\w/.@'\"-])step:(\d{1,9}) - ")
# Ray's note on a line it folded with its repeats from other processes.
_RAY_REPEATS = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|infinity)"
VALUE = re.compile(rf"np\.[A-Za-z_][A-Za-z0-9_]*\({_NUMBER}\)|{_NUMBER}|True|False", re.IGNORECASE)
_VALUE_MATCH = VALUE.fullmatch


@dataclass
class _Record:
    line: int
    step: int
    text: str  # after `step:N - `
    prefix: str | None
    closed: bool = False  # at the line cap or joined as far as it goes: no continuation
    cut: bool = False  # its last field was cut (the line cap, the end of the file)


@dataclass
class LogStats:
    records: int = 0
    rows: int = 0
    cut: list[int] = field(default_factory=list)  # lines of records cut short
    bad: list[str] = field(default_factory=list)  # fields that are no key:number, "line N: text"


def strip_line(raw: str) -> tuple[str | None, str]:
    """(Ray prefix or None, the rest) of one line, its ANSI codes and Ray's repeat note removed."""
    text = _ANSI.sub("", raw) if "\x1b" in raw else raw
    if "[repeated " in text:
        text = _RAY_REPEATS.sub("", text)
    body = text.lstrip(" ")
    prefix = _RAY_PREFIX.match(body)
    if prefix:
        return prefix.group(0).strip(), body[prefix.end():]
    return None, text


def record_start(text: str) -> re.Match | None:
    """The `step:N - ` that starts a record in one `\\r` segment of a line, or None."""
    return _RECORD_START.search(text)


def _segments(text: str) -> list[str]:
    return text.rstrip("\r").split("\r")


def split_fields(text: str) -> list[tuple[str | None, str]]:
    """The fields of a record's body in order: (key, value text), or (None, the piece)
    for a piece that is no key:number. The key ends at the last `:` (no value holds one)."""
    fields: list[tuple[str | None, str]] = []
    for piece in text.split(" - "):
        piece = piece.strip()
        key, colon, value = piece.rpartition(":")
        fields.append((key, value) if colon and key and _VALUE_MATCH(value) else (None, piece))
    return fields


def _is_continuation(record: _Record, prefix: str | None, text: str) -> bool:
    """The line after a record is its wrapped rest: same prefix, no record of its own, and
    joined to the record (no separator: a wrap keeps every character) every field from the
    record's last one on reads as key:number."""
    if record.closed or prefix != record.prefix:
        return False
    body = text.rstrip()
    if not body or record_start(body) or "\r" in body:
        return False
    last = record.text.rsplit(" - ", 1)[-1]
    return all(key is not None for key, _ in split_fields(last + body))


def physical_lines(f, limit: int = MAX_LINE_BYTES):
    """(1-based line number, text, ended with a newline, was longer than `limit`) of a
    binary file, decoded as UTF-8 (bad bytes replaced). A longer line keeps its last
    `\\r` segment that fits (a tqdm bar redrawn for hours), else its first `limit` bytes."""
    number = 0
    while True:
        chunk = f.readline(limit)
        if not chunk:
            return
        number += 1
        over = False
        while not chunk.endswith(b"\n"):
            more = f.readline(limit)
            if not more:
                break
            over = True
            chunk += more
            if len(chunk) > 2 * limit:
                chunk = _fit(chunk, limit)
        ended = chunk.endswith(b"\n")
        if over and len(chunk) > limit:
            chunk = _fit(chunk, limit)
        yield number, chunk.rstrip(b"\n").decode("utf-8", "replace"), ended, over


def _fit(chunk: bytes, limit: int) -> bytes:
    """A line over `limit` bytes cut to size: its last carriage-return segment (what a
    redrawn progress bar shows) when that fits, else its first `limit` bytes."""
    cr = chunk.rfind(b"\r", 0, len(chunk) - 1)
    return chunk[cr + 1:] if 0 <= cr and len(chunk) - cr <= limit else chunk[:limit]


def _at_cap(raw: str) -> bool:
    """The line is as long as wandb's cap (in characters or in bytes): its end may be lost.
    A longer line (a `tee` log has no cap) was not cut."""
    return len(raw) == LINE_CAP or len(raw.encode("utf-8", "replace")) == LINE_CAP


def records(f):
    """Every record of the log in `f` (binary), joined over wrapped lines; cut ones flagged."""
    current: _Record | None = None
    for number, raw, ended, over in physical_lines(f):
        if current is None and "step:" not in raw:
            continue  # most lines of a log: no need to look closer
        prefix, text = strip_line(raw)
        if current is not None and _is_continuation(current, prefix, text):
            current.text += text.rstrip("\r")
            current.cut = current.closed = not ended or over or _at_cap(raw)
            continue
        if current is not None:
            yield current
            current = None
        segments = _segments(text)
        for i, segment in enumerate(segments):
            start = record_start(segment)
            if start is None:
                continue
            if current is not None:
                yield current  # two records on one line, between tqdm redraws
            cut = over or _at_cap(raw) or not ended
            current = _Record(number, int(start.group(1)), segment[start.end():].rstrip(), prefix,
                              closed=cut or i < len(segments) - 1, cut=cut)
    if current is not None:
        yield current


def parse_record(record: _Record, stats: LogStats) -> list[tuple[int, int, str, str]]:
    """Rows (line, step, key, value text) of one record; its cut field dropped."""
    fields = split_fields(record.text)
    if record.cut:
        fields.pop()
        stats.cut.append(record.line)
    stats.bad += [f"line {record.line}: {piece[:80]!r}" for key, piece in fields if key is None and piece]
    return [(record.line, record.step, key, value) for key, value in fields if key is not None]


def first_record_line(path: Path, limit: int = SNIFF_BYTES) -> int | None:
    """The line of the first record in the first `limit` bytes, or None: what tells a
    VeRL log from any other text, without reading the whole file."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
            if b"\x00" in head:
                return None
            f.seek(0)
            seen = 0
            for number, raw, _ended, _over in physical_lines(f):
                seen += len(raw) + 1
                if "step:" in raw:
                    _, text = strip_line(raw)
                    if any(record_start(s) for s in _segments(text)):
                        return number
                if seen > limit:
                    return None
    except OSError:
        return None
    return None


def _batch(rows: list[tuple[int, int, str, str]]) -> pa.RecordBatch:
    columns = list(zip(*rows))
    return pa.RecordBatch.from_arrays([pa.array(c, type=t.type) for c, t in zip(columns, SCHEMA)], schema=SCHEMA)


def _lines_text(lines: list[int]) -> str:
    shown = ", ".join(str(n) for n in lines[:10])
    return shown + (f" and {len(lines) - 10} more" if len(lines) > 10 else "")


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    """Parse one VeRL console log into train_metrics rows (one per metric of a record)."""
    path = Path(path)
    name = context.get("rel_path") or str(path)
    stats = LogStats()
    rows: list[tuple[int, int, str, str]] = []
    with open(path, "rb") as f:
        for record in records(f):
            stats.records += 1
            rows += parse_record(record, stats)
            if len(rows) >= BATCH_ROWS:
                sink.write(TABLE, _batch(rows))
                stats.rows += len(rows)
                rows = []
    if rows:
        sink.write(TABLE, _batch(rows))
        stats.rows += len(rows)
    if stats.records == 0:
        raise SourceError(f"{name}: no VeRL step record (a line `step:N - key:value - ...`) in the file")
    if stats.rows == 0:
        found = outcome(name, stats).message or f"{name}: "
        raise SourceError(f"{found}; no whole key:number field in its {stats.records} record(s), nothing loaded")
    return outcome(name, stats)


def outcome(name: str, stats: LogStats) -> ReadOutcome:
    """ok, or partial naming the records cut short and the fields that are no numbers."""
    notes = []
    if stats.cut:
        notes.append(f"{len(stats.cut)} of {stats.records} records cut short (a line cut at {LINE_CAP} characters "
                     f"or the log's end), their whole fields kept and the cut one dropped, at line(s) "
                     f"{_lines_text(stats.cut)}")
    if stats.bad:
        shown = "; ".join(stats.bad[:5]) + (f"; and {len(stats.bad) - 5} more" if len(stats.bad) > 5 else "")
        notes.append(f"{len(stats.bad)} field(s) that are no key:number skipped: {shown}")
    if not notes:
        return ReadOutcome()
    return ReadOutcome(status="partial", message=f"{name}: " + "; ".join(notes))
