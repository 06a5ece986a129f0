"""Reader for Nsight Systems `nsys export --type jsonlines` files (worker_process_<pid>.<n>.jsonl).

Why it is built this way:
- Lines come in any order: StringIds and domain records may follow the events that use
  them. Pass 1 keeps only the small lookups (strings, domains, capture start, RANK) and
  pass 2 emits the ranges, so memory grows with distinct strings, never with events.
- A substring test picks the lines worth parsing, since an export also holds every CUDA
  kernel and OS runtime call; NVTX lines are the few that matter.
- A range is a phase inside its export's role (the role discovery gives the export: its
  folder, --role or [roles]), as an MSTX range is inside its rank dir's: update_actor,
  generate_sequences and compute_log_prob of one colocated VeRL worker are phases of that
  worker's role. The range's name is the phase; it never becomes a role.
- pid/tid come from globalTid as the nsys stats scripts decode it:
  pid = (globalTid >> 24) & 0xFFFFFF, tid = globalTid & 0xFFFFFF. Domain ids are per
  process, so a domain is keyed by (globalTid >> 24, domainId).
- One clock per axis: event start/end count ns from the session start. Where the export
  says when that was in UTC (TARGET_INFO_SESSION_START_TIME.utcEpochNs), rows are epoch
  ns (clock 'epoch'). Otherwise they are ANALYSIS_DETAILS.startTime + start/end on the
  nsys session clock (clock 'nsys_session', often boot time: 1970-03 as a date), and the
  capture start is left unknown rather than put among epoch times.
- A legacy `nsys export --type json` file ({"Type":59,"NvtxEvent":...} lines) fails with
  the command that writes jsonlines; a jsonlines export without NVTX events says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa

from rlwh.errors import SourceError
from rlwh.readers.base import ReadOutcome, TableSink

BATCH_ROWS = 65536
MAX_BAD_LINES = 10_000  # beyond this the file is not a jsonlines export at all
MARK = 34
RANGE_TYPES = frozenset((59, 60, 70, 71))  # NVTX push/pop, start/end, and their NVTXT twins
DOMAIN_CREATE = 75
# Lines worth a full parse in each pass (the table is checked again after parsing).
_LOOKUP_LINE = re.compile(
    r'"(?:StringIds|ANALYSIS_DETAILS|META_DATA_CAPTURE|TARGET_INFO_SESSION_START_TIME)"|"eventType"\s*:\s*75\b')
_LEGACY_LINE = re.compile(r'^\s*\{\s*"Type"\s*:\s*\d+')
LEGACY_HELP = ("a legacy `nsys export --type json` file, which rlwh does not read; export jsonlines instead: "
               "nsys export --type jsonlines --output <name>.jsonl <report>.nsys-rep")
EPOCH, SESSION = "epoch", "nsys_session"
_EVENT_LINE = re.compile(r'"NVTX_EVENTS"')
_OBJECT_SHAPE = re.compile(r"\s*\{.*\}\s*$", re.DOTALL)
_ENV = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)=(.*)$', re.DOTALL)
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL", re.IGNORECASE)

# What the reader hands its job (ingest/nvtx_jsonl.sql), in the export's own field names: each
# NVTX_EVENTS record's eventType, start, end and globalTid, its text and domain name looked up
# (textId -> StringIds, domainId -> its domain-create record), the rank from RANK=<k>, and the
# clock its times count from (session_start_ns: the UTC session start, else the nsys session's).
EVENTS_SCHEMA = pa.schema([("text", pa.string()), ("rank_id", pa.int32()), ("domain", pa.string()),
                           ("eventType", pa.int64()), ("start", pa.int64()), ("end", pa.int64()),
                           ("globalTid", pa.int64()), ("session_start_ns", pa.int64()), ("clock", pa.string())])
_LOW_48_BITS = (1 << 48) - 1


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    """Parse one nsys jsonlines export into ranges rows (source 'nvtx')."""
    path = Path(path)
    _refuse_legacy(path)
    look = _Lookups()
    bad: dict[int, str] = {}
    for _, rec in _records(path, _LOOKUP_LINE, bad):
        look.add(rec)
    env_rank = look.env.get("RANK")
    rank_id = int(env_rank) if env_rank is not None and env_rank.isdigit() else context.get("rank_id")
    notes = []
    if rank_id is None and context.get("single_process_rank0"):
        rank_id = 0
        notes.append(f"{path}: no RANK=<k> in the export and no rank in its path: read as rank 0 (one process)")
    if rank_id is None:
        raise SourceError(f"{path}: no rank: no RANK=<k> in META_DATA_CAPTURE and none from discovery")
    rows: list[tuple] = []
    found = 0
    for lineno, rec in _records(path, _EVENT_LINE, bad):
        row = _range_row(rec, look, rank_id)
        if row is not None and row[0] is None:
            # A phase without a name says nothing of what ran (a damaged StringIds line): skipped, its line named.
            bad[lineno] = "an NVTX range whose name is none of the export's strings"
        elif row is not None:
            rows.append(row)
            found += 1
            if len(rows) >= BATCH_ROWS:
                _write(sink, rows)
    _write(sink, rows)
    facts = {"rank_id": rank_id, "capture_started_ns": look.utc_start_ns, "metadata": look.metadata()}
    if not found:
        notes.append(f"{path}: no NVTX ranges or marks (NVTX_EVENTS of type 34, 59, 60, 70 or 71) in the export, "
                     "so nothing to load; was nsys run with --trace=nvtx?")
    if look.env.get("WORLD_SIZE", "").isdigit():
        facts["world_size"] = int(look.env["WORLD_SIZE"])
    if bad:
        first = sorted(bad)[:5]
        where = ", ".join(f"line {n} ({bad[n]})" for n in first)
        more = f" and {len(bad) - len(first)} more" if len(bad) > len(first) else ""
        return ReadOutcome("partial", "; ".join([f"{path}: skipped bad JSON at {where}{more}", *notes]), facts)
    return ReadOutcome("ok", "; ".join(notes) or None, facts)


def _refuse_legacy(path: Path) -> None:
    """Fail a legacy `--type json` export at once, saying how to write jsonlines."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                if _LEGACY_LINE.match(line[:4096]) and '"table"' not in line[:4096]:
                    raise SourceError(f"{path}: line {lineno} starts {line[:24].strip()}...: {LEGACY_HELP}")
                return


def _records(path: Path, wanted: re.Pattern, bad: dict[int, str]):
    """(line number, record) of the lines `wanted` finds; bad lines go to `bad` by line number.

    Other lines are only checked for shape ({...}), which catches a cut last line
    without paying for a full parse of every kernel record. A UTF-8 BOM is skipped, as the
    CSV readers skip one.
    """
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if len(bad) > MAX_BAD_LINES:
                raise SourceError(f"{path}: not an nsys jsonlines export: {len(bad)} bad lines by line {lineno}")
            rec, problem = _judged(line, wanted)
            if problem is not None:
                bad[lineno] = problem
            elif rec is not None:
                yield lineno, rec


def _judged(line: str, wanted: re.Pattern) -> tuple[dict | None, str | None]:
    """(the record, None) for a line `wanted` finds that parses as an object; (None, why)
    for a bad line; (None, None) for a line passed over (only its shape checked)."""
    if wanted.search(line) is None:
        return None, ("not a JSON object" if _OBJECT_SHAPE.match(line) is None and line.strip() else None)
    try:
        rec = json.loads(line)
    except ValueError as exc:
        return None, exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
    except RecursionError:
        return None, "nested deeper than the JSON decoder follows"
    return (rec, None) if isinstance(rec, dict) else (None, "not a JSON object")


def first_bad_line(head: bytes, whole: bool) -> str | None:
    """For `rlwh check`: the first bad line among the complete lines of an export's first
    bytes, as read() names it ("line 3 (Expecting ':' delimiter)"), its second pass's
    reason over its first's; None when there is none."""
    import io

    lines = list(io.TextIOWrapper(io.BytesIO(head), encoding="utf-8-sig", errors="replace"))
    if not whole and lines:
        lines.pop()  # the head may stop inside its last line
    for lineno, line in enumerate(lines, 1):
        problem = _judged(line, _EVENT_LINE)[1] or _judged(line, _LOOKUP_LINE)[1]
        if problem is not None:
            return f"line {lineno} ({problem})"
    return None


def head_rank(head: bytes, whole: bool) -> int | None:
    """For `rlwh check`: the rank RANK=<k> gives among the complete lines of an export's
    first bytes (`whole`: the file itself), as read() takes it; None when they hold none."""
    import io

    lines = list(io.TextIOWrapper(io.BytesIO(head), encoding="utf-8-sig", errors="replace"))
    if not whole and lines:
        lines.pop()  # the head may stop inside its last line
    look = _Lookups()
    for line in lines:
        rec = _judged(line, _LOOKUP_LINE)[0]
        if rec is not None:
            look.add(rec)
    rank = look.env.get("RANK")
    return int(rank) if rank is not None and rank.isdigit() else None


class _Lookups:
    """What pass 1 keeps: strings, domains, the capture start and the captured env."""

    def __init__(self) -> None:
        self.strings: dict[int, str | None] = {}
        self.domains: dict[tuple, dict] = {}
        self.domains_by_id: dict[int, list[dict]] = {}
        self.start_ns: int | None = None
        self.utc_start_ns: int | None = None
        self.analysis: dict = {}
        self.env: dict[str, str] = {}
        self.captures: dict[str, str] = {}

    def add(self, rec: dict) -> None:
        table = rec.get("table")
        if table == "StringIds" and isinstance(rec.get("id"), int):
            self.strings[rec["id"]] = rec.get("value")
        elif table == "ANALYSIS_DETAILS":
            self.analysis = {k: v for k, v in rec.items() if k != "table"}
            if isinstance(rec.get("startTime"), int):
                self.start_ns = rec["startTime"]
        elif table == "TARGET_INFO_SESSION_START_TIME" and isinstance(rec.get("utcEpochNs"), int):
            self.utc_start_ns = rec["utcEpochNs"]
        elif table == "META_DATA_CAPTURE":
            name, value = str(rec.get("name")), str(rec.get("value"))
            m = _ENV.match(value) if name.endswith("ENVIRONMENT_VARIABLE") else None
            if m:
                self.env.setdefault(m.group(1), m.group(2).strip().strip('"'))
            else:
                self.captures[name] = value
        elif table == "NVTX_EVENTS" and rec.get("eventType") == DOMAIN_CREATE:
            # Kept raw: its textId may point at a StringIds line further down.
            domain_id, gtid = rec.get("domainId"), rec.get("globalTid")
            if isinstance(domain_id, int):
                raw = {"text": rec.get("text"), "textId": rec.get("textId")}
                self.domains[(gtid >> 24 if isinstance(gtid, int) else None, domain_id)] = raw
                self.domains_by_id.setdefault(domain_id, []).append(raw)

    def text(self, rec: dict) -> str | None:
        """A record's text: inline "text", else StringIds[textId]."""
        if rec.get("text") is not None:
            return str(rec["text"])
        text_id = rec.get("textId")
        return None if text_id is None else self.strings.get(text_id)

    def domain(self, rec: dict) -> str | None:
        """'default' for domain 0, else the name its domain-create record gave it."""
        domain_id = rec.get("domainId") or 0
        if domain_id == 0:
            return "default"
        gtid = rec.get("globalTid")
        raw = self.domains.get((gtid >> 24 if isinstance(gtid, int) else None, domain_id))
        if raw is None:
            names = {self.text(r) for r in self.domains_by_id.get(domain_id, ())}
            return names.pop() if len(names) == 1 else None
        return self.text(raw)

    def metadata(self) -> dict:
        env = {k: ("<redacted>" if _SECRET.search(k) else v) for k, v in self.env.items()}
        clock = {"clock": EPOCH if self.utc_start_ns is not None else SESSION, "session_start_ns": self.start_ns,
                 "utc_epoch_ns": self.utc_start_ns}
        return {"analysis": self.analysis, "environment": env, "captures": self.captures, "clock": clock}


def _range_row(rec: dict, look: _Lookups, rank_id: int) -> tuple | None:
    """One NVTX range or mark as the job reads it; None for other records."""
    kind = rec.get("eventType")
    if rec.get("table") != "NVTX_EVENTS" or (kind != MARK and kind not in RANGE_TYPES):
        return None
    start, end = rec.get("start"), rec.get("end")
    if not isinstance(start, int):
        return None
    # Event times count from the session start: UTC when the export says when that was.
    clock = EPOCH if look.utc_start_ns is not None else SESSION
    base = look.utc_start_ns if clock == EPOCH else (look.start_ns or 0)
    gtid = rec.get("globalTid")
    if isinstance(gtid, int) and not -(2**63) <= gtid < 2**63:
        gtid &= _LOW_48_BITS  # all the job decodes (pid, tid) is in these bits
    return (look.text(rec), rank_id, look.domain(rec), kind, int(start), end if isinstance(end, int) else None,
            gtid if isinstance(gtid, int) else None, base, clock)


def _write(sink: TableSink, rows: list[tuple]) -> None:
    if rows:
        cols = [pa.array(c, t) for c, t in zip(zip(*rows), EVENTS_SCHEMA.types)]
        sink.write("ranges", pa.RecordBatch.from_arrays(cols, schema=EVENTS_SCHEMA))
        rows.clear()
