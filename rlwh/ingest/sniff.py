"""What a file is, from its first bytes: the content half of discovery.

Real PyTorch traces carry any name (`rank-0.json.gz`, `trace.json.gz`, `worker0.<ms>.pt
.trace.json.gz`), so a name rule misses most of them; the content never lies. Only the
head is read (gunzipped when the gzip magic says so, never by name): a multi-GB trace
costs one 64 KiB read, and a tree of thousands of small raw files stays cheap because a
head that starts with neither `{`, `[` nor the gzip magic is settled from 512 bytes.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

HEAD_BYTES = 65536
_FIRST_READ = 512
# Top-level keys Kineto and the Chrome trace format write before (or instead of) traceEvents.
TRACE_HEADER_KEYS = frozenset((
    "traceEvents", "schemaVersion", "deviceProperties", "distributedInfo", "displayTimeUnit", "traceName",
    "record_shapes", "with_stack", "profile_memory", "with_flops", "with_modules", "baseTimeNanoseconds",
    "cuda_runtime_version", "cuda_driver_version", "hip_runtime_version", "trace_id", "cupti_version",
))
_FIRST_KEY = re.compile(r'\{\s*"([^"\\]{1,64})"\s*:')
_NSYS_TABLE = re.compile(r'^\{[^\n]*"table"\s*:\s*"[A-Za-z_]+"')
_NSYS_LEGACY = re.compile(r'^\{\s*"Type"\s*:\s*\d+')


def read_head(path: Path, limit: int = HEAD_BYTES) -> bytes:
    """Up to `limit` bytes of the file's content, gunzipped when it is gzip.

    A gzip stream cut or damaged within the head gives what inflated before the damage.
    """
    return read_head_and_damage(path, limit)[0]


def read_head_and_damage(path: Path, limit: int = HEAD_BYTES) -> tuple[bytes, str | None]:
    """read_head, and what cut a gzip stream short within the head, in the trace reader's
    words ("gzip data damaged (...)", "gzip stream ends early"); None where nothing did."""
    with open(path, "rb") as f:
        raw = f.read(_FIRST_READ)
        if raw[:2] != b"\x1f\x8b":
            if raw.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] not in (b"{", b"["):
                return raw, None
            return raw + f.read(limit - len(raw)), None
        inflate = zlib.decompressobj(31)
        out = b""
        while len(out) < limit and raw:
            saved = inflate.copy()
            try:
                out += inflate.decompress(raw, limit - len(out))
            except zlib.error as exc:
                from rlwh.readers.inflate import salvage

                return (out + salvage(saved, raw))[:limit], f"gzip data damaged ({exc})"
            raw = inflate.unconsumed_tail or (b"" if inflate.eof else f.read(16384))
        if len(out) < limit and not inflate.eof:
            return out, "gzip stream ends early"
        return out[:limit], None


def classify_head(head: bytes, complete: bool) -> str | None:
    """'chrome_object' (a PyTorch/Kineto trace), 'chrome_array' (a trace_view.json-like
    array of events), 'nsys_jsonl', 'nsys_legacy_json', or None.

    `complete` says the head is the whole file; a head cut at HEAD_BYTES whose first key
    is a Kineto header key counts as a trace even before traceEvents shows (a trace of
    a 64-GPU host spends more than 64 KiB on deviceProperties).
    """
    text = head.decode("utf-8", "replace").lstrip(" \t\r\n\ufeff")
    if text.startswith("{"):
        first_line = text.split("\n", 1)[0]
        if _NSYS_LEGACY.match(first_line):
            return "nsys_legacy_json"
        if _NSYS_TABLE.match(first_line) or _later_table_lines(text):
            return "nsys_jsonl"
        key = _FIRST_KEY.match(text)
        first = key.group(1) if key else None
        if first in TRACE_HEADER_KEYS:
            # A whole file that starts like a trace and breaks before traceEvents is a damaged trace.
            if first == "traceEvents" or '"traceEvents"' in text or not complete or _breaks(head):
                return "chrome_object"
        elif re.search(r'"traceEvents"\s*:\s*\[', text):  # any other first key (a newer Kineto's, Chrome's)
            return "chrome_object"
        return None
    if text.startswith("[") and re.match(r'\[\s*\{', text) and '"ph"' in text[:4096]:
        return "chrome_array"
    return None


def _breaks(head: bytes) -> bool:
    from rlwh.readers.json_outline import json_break

    return json_break(head) is not None


def _later_table_lines(text: str) -> bool:
    """An nsys export whose first record is damaged (cut, a bad byte): the next lines are
    {"table": ...} records (two of the next three), so it is read and its first line named."""
    lines = [line for line in text.split("\n")[1:5] if line.strip()][:3]
    return sum(1 for line in lines if _NSYS_TABLE.match(line)) >= 2


def json_reason(path: Path) -> str:
    """Why a .json/.jsonl file that is no format rlwh reads is ignored, saying what it is.

    An NVTX export is a file whose lines are {"table": ...} records (classify_head's
    'nsys_jsonl'); a benchmark's results, a config or a metrics log next to the profiles
    is anything else, and `rlwh check` and `rlwh ingest` both name it with these words.
    """
    from rlwh.readers.text_encoding import wide_text_said, wide_unicode

    try:
        head, damage = read_head_and_damage(path)
    except OSError as exc:
        return f"not a profile: cannot read its first bytes ({exc.strerror})"
    wide = wide_unicode(head)
    if wide is not None:
        return f"named like JSON, but it is {wide_text_said(wide)}: not read"
    text = head.decode("utf-8", "replace").lstrip(" \t\r\n\ufeff")
    if not text:
        return "an empty JSON file: not a profile"
    first_line = text.split("\n", 1)[0]
    lines = text.startswith("{") and "\n" in text.rstrip() and first_line.rstrip().endswith("}")
    keys = re.findall(r'[{,]\s*"([^"\\]{1,40})"\s*:', (first_line if lines else text)[:2000])
    shown = ", ".join(f'"{_printable(k)}"' for k in keys[:4]) + (", ..." if len(keys) > 4 else "")
    if lines:
        return (f"JSON lines whose records are not {{\"table\": ...}} (the first has keys {shown}): not an nsys "
                "NVTX export, nor any profile rlwh reads")
    if text.startswith("{"):
        return (f"a JSON object (first keys {shown}) that is no profile rlwh reads (a PyTorch trace holds "
                f"traceEvents){_damage(head, damage)}")
    if text.startswith("["):
        return f"a JSON array that is no trace (its first element is no event with \"ph\"){_damage(head, damage)}: " \
               "not a profile"
    return f"named like JSON, but it starts {shown_start(head)}: not a profile"


def _printable(text: str) -> str:
    """`text` with what does not print escaped (a reason never prints raw bytes)."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _damage(head: bytes, gzip_damage: str | None) -> str:
    """'; damaged: ...' where the head says the file is damaged (its gzip stream, or the
    JSON breaking before the head ends), with the byte and line; else ''."""
    from rlwh.readers.json_outline import json_break

    if gzip_damage is not None:
        return f"; damaged: {gzip_damage} at uncompressed byte {len(head)}"
    broke = json_break(head)
    if broke is None or (len(head) >= HEAD_BYTES and broke[0] >= len(head) - 1):
        return ""
    line = head[:broke[0]].count(b"\n") + 1
    return f"; damaged: the JSON breaks at byte {broke[0]} (line {line}: {broke[1]})"


def head_kind(path: Path) -> str | None:
    """classify_head of the file's first bytes; None when it cannot be read. A head cut
    short by gzip damage is not the whole file: a trace damaged there is still a trace."""
    try:
        head, damage = read_head_and_damage(path)
    except OSError:
        return None
    return classify_head(head, len(head) < HEAD_BYTES and damage is None)


def is_verl_log(path: Path) -> bool:
    """A VeRL training log: a `step:N - key:value` record within its first lines (read
    line by line up to rlwh.readers.verl_log.SNIFF_BYTES, never the whole file)."""
    from rlwh.readers.verl_log import first_record_line

    return first_record_line(path) is not None


# Content kinds judged by a scan of their own, not by classify_head: kind -> test.
TEXT_KINDS = {"verl_log": is_verl_log}


TAIL_BYTES = 65536


def read_tail(path: Path, limit: int = TAIL_BYTES) -> tuple[bytes, str | None]:
    """The last `limit` bytes of the file's content and what cut it short, if anything.

    A plain file costs one seek. A gzip file has no index, so its stream is inflated to
    its end (zlib only, the output thrown away but for the tail: a tenth or less of what
    parsing it costs); the damage is named in the words the trace reader uses.
    """
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            f.seek(max(0, path.stat().st_size - limit))
            return f.read(), None
        f.seek(0)
        inflate = zlib.decompressobj(31)
        tail, pending = b"", b""
        while True:
            if inflate.eof:  # another gzip member may follow
                if not pending.strip(b"\0"):
                    return tail, None
                inflate = zlib.decompressobj(31)
            src = pending or f.read(1 << 20)
            if not src:
                return tail, "gzip stream ends early"
            try:
                out = inflate.decompress(src, 1 << 22)
            except zlib.error as exc:
                return tail, f"gzip data damaged ({exc})"
            tail = (tail + out)[-limit:]
            pending = inflate.unused_data if inflate.eof else inflate.unconsumed_tail


def shown_start(data: bytes, width: int = 24) -> str:
    """How a file's first bytes are named in a message: the text when they are text, else
    their hex (a reason never prints undecoded bytes)."""
    try:
        text = data[:width * 4].decode("utf-8")[:width]
    except UnicodeDecodeError as exc:
        text = data[:exc.start].decode("utf-8")[:width] if exc.start >= 8 else ""
        if not text:
            return "with the bytes " + data[:12].hex(" ")
    if any(not c.isprintable() and c not in " \t\r\n" for c in text):
        return "with the bytes " + data[:12].hex(" ")
    return repr(text)
