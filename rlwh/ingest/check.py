"""`rlwh check`: what ingest would do with a profile dir, without writing anything.

It runs discovery (the same walk and rules ingest uses) and then looks at each file's
first bytes and, for traces and pickles, its last ones: a multi-GB trace costs two
64 KiB reads (a gzipped one an inflate to its end, no parse), so a whole run is checked
in seconds before hours of ingest. It finds what is visible from there, with the
readers' own code: a rank nobody names, an Ascend capture without profiler_info, a CSV
header the reader refuses (columns, encoding) or rows within the head whose cells do not
match it, an NVTX export's bad lines within the head, a PyTorch trace's damaged, malformed
or too deep events within the head (rlwh.readers.kineto_head), a trace that does not
start like one or is cut, a pickle that is no snapshot, asks for code or is cut (a pickle
up to 4 MiB is read whole by the snapshot reader, running no code), a legacy nsys JSON
export, a GMM dump outside the layouts. A problem marked `fails` is one ingest would mark
failed, one marked `partial` one it would load in part; damage past the head (a bad CSV
row, a bad event) only ingest sees.
"""

from __future__ import annotations

import os
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rlwh.errors import RlwhError, SourceError
from rlwh.ingest.discover import (
    IGNORED,
    Discovery,
    RoleRules,
    SourceFile,
    capture_profiler,
    discover,
    nothing_found,
    profile_root,
    repeated_capture_lines,
)
from rlwh.ingest.log_check import DEFAULT_REQUIRED_KEYS, LogCheck, check_log, format_log_checks
from rlwh.ingest.sniff import HEAD_BYTES, read_head, read_tail, shown_start

_DIST_RANK = re.compile(r'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_INFO_LIMIT = 1 << 20
# A pickle is read whole by the snapshot reader (as ingest will, running no code) up to
# this size, so check says what ingest will, in its words; a larger one is judged by its
# first MiB and its last byte. Reading one costs most of what its ingest does (a 16 MB
# snapshot: 2.0 s; 22 MB of them ingested in 4.3 s), so large snapshots are not read whole.
_PICKLE_LOAD_LIMIT = 4 << 20
_MATRIX_LOAD_LIMIT = 64 << 20


@dataclass
class Problem:
    """Something check saw in one file (or capture)."""

    path: str
    message: str
    fails: bool  # ingest would mark the file failed
    partial: bool = False  # ingest would load the file in part (it is cut)
    ignored: bool = False  # ingest would record the file as ignored, with this message


@dataclass
class CheckReport:
    profile_dir: str
    files: list[SourceFile]
    warnings: list[str]
    problems: list[Problem] = field(default_factory=list)
    # Ranks a file's head names where its path does not (distributedInfo.rank), by rel_path.
    head_ranks: dict[str, int] = field(default_factory=dict)
    # The seed's VeRL log rules, per *.log (and per file read as a VeRL log): pass or fail,
    # never a reason for ingest to fail the file.
    log_checks: list[LogCheck] = field(default_factory=list)

    @property
    def loadable(self) -> list[SourceFile]:
        return [f for f in self.files if not f.ignored]

    @property
    def ignored(self) -> list[SourceFile]:
        return [f for f in self.files if f.ignored]

    @property
    def failing(self) -> int:
        """Files ingest would mark failed."""
        return sum(1 for status, _ in self.verdicts().values() if status == "failed")

    @property
    def partial(self) -> int:
        """Files ingest would load in part (cut traces)."""
        return sum(1 for status, _ in self.verdicts().values() if status == "partial")

    def verdicts(self) -> dict[str, tuple[str, str | None]]:
        """What ingest will record in `sources` for each file, by rel_path: ('ignored', the
        reason), ('failed', what check saw), ('partial', the cut), or ('ok', None) (ok, or
        partial when the damage lies in the middle of the file). A failed or ignored file's
        message is the reader's own words (with the path relative to the profile dir)."""
        out: dict[str, tuple[str, str | None]] = {}
        for f in self.files:
            if f.ignored:
                out[f.rel_path] = ("ignored", f.reason)
                continue
            mine = [p for p in self.problems if p.path == f.rel_path]
            for status, hit in (("failed", lambda p: p.fails), ("ignored", lambda p: p.ignored),
                                ("partial", lambda p: p.partial)):
                first = next((p.message for p in mine if hit(p)), None)
                if first is not None:
                    out[f.rel_path] = (status, first)
                    break
            else:
                out[f.rel_path] = ("ok", None)
        return out

    def kinds(self) -> Counter:
        return Counter(f.kind for f in self.files)

    def rank_of(self, f: SourceFile) -> int | None:
        """The rank ingest will give the file's rows, where its path or first bytes say it."""
        if f.rel_path in self.head_ranks and (f.rank_id is None or f.kind == "nvtx_jsonl"):
            return self.head_ranks[f.rel_path]  # an NVTX export's RANK= beats its path
        if f.rank_id is not None:
            return f.rank_id
        if f.single_process_rank0 and f.kind != "nvtx_jsonl":  # NVTX: RANK= inside
            return 0
        return None

    def repeated_captures(self) -> list[str]:
        """One warning per (role, rank, step) one profiler captured several times."""
        groups: dict[tuple, set[str]] = {}
        for f in self.loadable:
            if f.capture is not None:
                key = (f.role, self.rank_of(f), f.step, capture_profiler(f.kind))
                groups.setdefault(key, set()).add(f.capture)
        return repeated_capture_lines(groups.items())

    def roles(self) -> list[dict]:
        """One row per role: its ranks, captures, steps and files (roles x ranks x captures x steps)."""
        by_role: dict[str, dict] = {}
        for f in self.loadable:
            role = f.role if f.role is not None else "(none)"
            row = by_role.setdefault(role, {"role": role, "ranks": set(), "captures": set(), "steps": set(),
                                            "files": 0})
            row["files"] += 1
            rank = self.rank_of(f)
            if rank is not None:
                row["ranks"].add(rank)
            row["captures"].add(f.capture)
            if f.step is not None:
                row["steps"].add(f.step)
        return [by_role[k] for k in sorted(by_role)]


def check(profile_dir: str | os.PathLike, required_keys: tuple[str, ...] = DEFAULT_REQUIRED_KEYS,
          roles: RoleRules = RoleRules()) -> CheckReport:
    """Discover `profile_dir` and look at every file's head; never writes anything.

    `required_keys`: what a VeRL log must hold ([verl_log] required_keys); `roles`: the
    user's roles (--role, [roles]), as ingest takes them."""
    root = Path(profile_dir)
    if not root.is_dir():
        raise RlwhError(f"profile dir not found: {root}")
    root, note = profile_root(root)
    found: Discovery = discover(root, roles)
    report = CheckReport(str(root), found.files, ([note] if note else []) + list(found.warnings))
    for f in found.files:
        if not f.ignored:
            report.problems += _file_problems(f, report.head_ranks)
    report.problems += _capture_problems(found.files)
    report.warnings += report.repeated_captures()  # after the heads: ranks read from them count
    report.log_checks = [check_log(f.path, f.rel_path, required_keys) for f in found.files
                         if f.kind == "verl_log" or f.path.name.lower().endswith(".log")]
    return report


def _file_problems(f: SourceFile, head_ranks: dict[str, int]) -> list[Problem]:
    if f.problem:
        return [Problem(f.rel_path, f.problem, True)]
    try:
        size = f.path.stat().st_size
        head = read_head(f.path) if size else b""
    except OSError as exc:
        return [Problem(f.rel_path, f"cannot read {f.path}: {exc.strerror}", True)]
    look = _LOOKS.get(f.kind)
    if size == 0 and (look is None or f.kind not in _READERS_OWN):
        return [Problem(f.rel_path, _EMPTY.get(f.kind, "{rel}: empty file").format(rel=f.rel_path, size=size), True)]
    found = look(f, head) if look else []
    named = _DIST_RANK.search(head.decode("utf-8", "replace")) if f.kind == "torch_trace" else None
    if named and f.rank_id is None:
        head_ranks[f.rel_path] = int(named.group(1))
    if f.kind == "nvtx_jsonl" and f.content == "nsys_jsonl":
        from rlwh.readers.nvtx import head_rank

        rank = head_rank(head, len(head) < HEAD_BYTES)  # RANK= wins over the path's rank, as in the reader
        if rank is not None:
            head_ranks[f.rel_path] = rank
    if f.single_process_rank0 and f.kind == "torch_trace" and not named:
        found.append(Problem(f.rel_path, f"{f.rel_path}: no rank in its path and no distributedInfo.rank in its "
                             "first 64 KiB: read as rank 0 (a single-process trace) unless the trace names one later",
                             False))
    elif f.note:
        found.append(Problem(f.rel_path, f.note, False))
    return found


def _torch_trace(f: SourceFile, head: bytes) -> list[Problem]:
    """A trace's head read by the reader's own code (rlwh.readers.kineto_head): the keys
    before traceEvents, the events that end within it; then whether its end is cut."""
    if f.content == "chrome_object":
        from rlwh.ingest.sniff import read_head_and_damage
        from rlwh.readers.kineto_head import head_problem

        head, damage = read_head_and_damage(f.path)
        said = head_problem(head, len(head) < HEAD_BYTES and damage is None, damage)
        if said is not None and said[0] == "failed":
            return [Problem(f.rel_path, f"{f.rel_path}: {said[1]}", True)]
        end = _cut(f, b"}")
        if said is not None and not any(p.fails for p in end):
            return [Problem(f.rel_path, f"{f.rel_path}: {said[1]}", False, partial=True)]
        return end
    start = shown_start(head.lstrip(b" \t\r\n\xef\xbb\xbf"))
    return [Problem(f.rel_path, f"{f.rel_path}: does not start like a PyTorch trace (a JSON object with "
                    f"traceEvents); it starts {start}", True)]


def _ascend_trace(f: SourceFile, head: bytes) -> list[Problem]:
    from rlwh.readers.text_encoding import wide_text_said, wide_unicode

    wide = wide_unicode(head)
    if wide is not None:
        return [Problem(f.rel_path, f"{f.rel_path}: {wide_text_said(wide)}", True)]
    first = head.removeprefix(b"\xef\xbb\xbf").lstrip()[:1]  # the reader's own test (a BOM skipped), in its words
    if first == b"[":
        return _cut(f, b"]")
    return [Problem(f.rel_path, f"{f.rel_path}: not a JSON array of trace events (it starts with "
                    f"{first.decode('latin-1')!r})", True)]


_TRAILER_BYTES = 16384


def _object_closes(end: bytes) -> bool:
    """A Kineto trace ends with traceEvents' `]`, then its other keys (`"distributedInfo":
    {...}`, `"traceName": "..."`) and the `}` that closes the object. Some `]` of the tail
    must be followed by exactly that: nothing, or keys that parse as an object's members,
    read as the reader reads them (TooDeep for one nested too deep, as ingest says); and
    be the end of an array of events: an event's '}' (or the '[' of an empty one) before
    it, where a cut after an args array (`"grid": [1, 1, 1]\n  }`) has a number."""
    from rlwh.readers.kineto_stream import trailing_keys

    tail = end[-_TRAILER_BYTES:]
    pos = len(tail)
    while (pos := tail.rfind(b"]", 0, pos)) >= 0:
        if tail[:pos].rstrip()[-1:] in (b"}", b"[") and \
                trailing_keys(tail[pos + 1:].decode("utf-8", "replace"), 0) is not None:
            return True
    return False


def _cut(f: SourceFile, closer: bytes) -> list[Problem]:
    """A trace cut while it was written (or its gzip stream damaged): ingest keeps the
    complete events before the cut and marks it partial."""
    try:
        tail, damage = read_tail(f.path)
    except OSError as exc:
        return [Problem(f.rel_path, f"cannot read {f.path}: {exc.strerror}", True)]
    end = tail.rstrip()
    try:
        if damage is None and end.endswith(closer) and (closer != b"}" or _object_closes(end)):
            return []
    except SourceError as exc:  # a key after traceEvents nested too deep: the reader fails the file
        return [Problem(f.rel_path, f"{f.rel_path}: {exc}", True)]
    what = damage or f"the JSON does not end with its closing {closer.decode()!r} (cut while being written)"
    return [Problem(f.rel_path, f"{f.rel_path}: {what}: ingest keeps the complete events before the cut",
                    False, partial=True)]


def _snapshot(f: SourceFile, head: bytes) -> list[Problem]:
    """A pickle up to _PICKLE_LOAD_LIMIT (and any of 64 KiB or less) is read by the snapshot
    reader itself, its rows thrown away (no code runs), so check's verdict and words are
    ingest's: one that is no snapshot, asks for code, is cut or holds a malformed segment
    fails, one whose segments and trace disagree is partial, an old list-format snapshot
    loads with a note. A larger one is judged by its head: an error in its first MiB (a
    global it asks for, bytes that are no pickle) is ingest's; else a dict naming segments
    or device_traces first, or a list whose first dict names a segment's first key, is a
    snapshot when it ends with the STOP opcode; anything else fails as no snapshot,
    ingest's words without what a whole load would have found."""
    from rlwh.readers import torch_snapshot
    from rlwh.readers.base import DiscardingSink

    size = f.path.stat().st_size
    if size <= max(_PICKLE_LOAD_LIMIT, HEAD_BYTES):
        try:
            outcome = torch_snapshot.read(f.path, DiscardingSink(), {})
        except SourceError as exc:
            return [Problem(f.rel_path, _relative(str(exc), f), True)]
        if outcome.message is None:
            return []
        return [Problem(f.rel_path, _relative(outcome.message, f), False, partial=outcome.status == "partial")]
    said = torch_snapshot.head_verdict(f.path)
    shape = None if said else _snapshot_shape(head, torch_snapshot.SNAPSHOT_KEYS)
    if shape:
        with open(f.path, "rb") as handle:
            handle.seek(size - 1)
            if handle.read(1) != b".":
                return [Problem(f.rel_path, f"{f.rel_path}: cut short: the pickle ends at byte {size} before it is "
                                "complete", True)]
        return [Problem(f.rel_path, f"{f.rel_path}: {torch_snapshot.LIST_FORMAT}", False)] if shape == "list" else []
    message = said or f"{f.path}: {torch_snapshot.NOT_A_SNAPSHOT}"
    return [Problem(f.rel_path, _relative(message, f), True)]


def _relative(message: str, f: SourceFile) -> str:
    """A reader's message with the file named by its path in the profile dir."""
    return message.replace(str(f.path), f.rel_path, 1)


# The keys a segment dict of torch's begins with (device, address, total_size, ...): how
# the head of a list-format snapshot is told from another list.
_FIRST_SEGMENT_KEYS = ("device", "address", "total_size")
_SKIPPED_OPCODES = ("PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT", "MARK")


def _snapshot_shape(head: bytes, snapshot_keys: tuple[str, ...]) -> str | None:
    """'dict' when the pickle's opcodes build a dict and then name one of snapshot_keys first,
    'list' when they build a list whose first item is a dict naming a segment key first
    (the old list format), else None. MARK is passed over: pickle writes none before a
    container's only item."""
    import io
    import pickletools

    seen = []
    try:
        for opcode, arg, _pos in pickletools.genops(io.BytesIO(head)):
            if opcode.name in _SKIPPED_OPCODES:
                continue
            seen.append((opcode.name, arg))
            if len(seen) == 3:
                break
    except (ValueError, EOFError):
        return None
    names = [name for name, _ in seen] + ["", "", ""]
    if names[0] in ("EMPTY_DICT", "DICT") and "UNICODE" in names[1] and seen[1][1] in snapshot_keys:
        return "dict"
    if names[0] in ("EMPTY_LIST", "LIST") and names[1] in ("EMPTY_DICT", "DICT") and "UNICODE" in names[2] \
            and seen[2][1] in _FIRST_SEGMENT_KEYS:
        return "list"
    return None


def _ascend_db(f: SourceFile, head: bytes) -> list[Problem]:
    """The db reader's own first checks: beside a text export of its capture it is not
    loaded (the text export is), and a file that is no SQLite db fails."""
    from rlwh.readers.ascend_db import check_header, connect_read_only, not_loaded_beside

    beside = not_loaded_beside(f.path)
    if beside:
        return [Problem(f.rel_path, _relative(beside, f), False, ignored=True)]
    try:
        cut = check_header(f.path)
    except SourceError as exc:
        return [Problem(f.rel_path, _relative(str(exc), f), True)]
    if cut is None:
        return []
    # Cut short (the header's page count against the file's size): ingest keeps what SQLite
    # can still read, or fails where it cannot open the file at all, in these words.
    try:
        con = connect_read_only(f.path)
        try:
            con.execute("select count(*) from sqlite_master").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        return [Problem(f.rel_path, f"{f.rel_path}: {cut}; SQLite cannot read it ({exc})", True)]
    return [Problem(f.rel_path, f"{f.rel_path}: {cut}: the rows SQLite can still read would load", False,
                    partial=True)]


def _nvtx(f: SourceFile, head: bytes) -> list[Problem]:
    from rlwh.readers.nvtx import LEGACY_HELP

    if f.content == "nsys_legacy_json":
        return [Problem(f.rel_path, f"{f.rel_path}: {LEGACY_HELP}", True)]
    if f.content != "nsys_jsonl":
        return [Problem(f.rel_path, f"{f.rel_path}: does not start like an nsys jsonlines export "
                        '(lines of {"table": ...} objects)', True)]
    from rlwh.readers.nvtx import first_bad_line

    bad = first_bad_line(head, len(head) < HEAD_BYTES)  # the lines within the head, read as the reader reads them
    if bad is None:
        return []
    return [Problem(f.rel_path, f"{f.rel_path}: skipped bad JSON at {bad}: ingest skips it", False, partial=True)]


def _readers_own(check_file):
    """A look that asks the reader's own first check (a header, a small JSON file): what it
    refuses, ingest would fail the same way, in the same words."""

    def look(f: SourceFile, head: bytes) -> list[Problem]:
        try:
            check_file(f.path)
        except SourceError as exc:
            return [Problem(f.rel_path, _relative(str(exc), f), True)]
        return []

    return look


def _ascend_info(path: Path) -> None:
    from rlwh.readers.ascend_info import load_json, rank_id_of

    if path.stat().st_size < _INFO_LIMIT:
        info = load_json(path)
        if isinstance(info, dict):
            rank_id_of(info, path)


def _communication_matrix(f: SourceFile, head: bytes) -> list[Problem]:
    """communication_matrix.json is read whole by its reader (a few MB at most): check reads
    it the same way, so a damaged file or link gets ingest's verdict in ingest's words."""
    from rlwh.readers.ascend_comm_matrix import load_matrix, matrix_rows, problems_outcome

    size = f.path.stat().st_size
    if size > _MATRIX_LOAD_LIMIT:
        return [Problem(f.rel_path, f"{f.rel_path}: not read by check ({size:,} bytes, over its "
                        f"{_MATRIX_LOAD_LIMIT >> 20} MiB for a matrix): ingest reads it whole", False)]
    try:
        rows, bad = matrix_rows(load_matrix(f.path))
        outcome = problems_outcome(f.path, len(rows), bad)
    except SourceError as exc:
        return [Problem(f.rel_path, _relative(str(exc), f), True)]
    if outcome.message is None:
        return []
    return [Problem(f.rel_path, _relative(outcome.message, f), False, partial=True)]


def _communication_json(path: Path) -> None:
    """communication.json is a few MB at most: loaded as ingest loads it."""
    from rlwh.readers.ascend_comm_matrix import load_matrix

    if path.stat().st_size < _MATRIX_LOAD_LIMIT:
        load_matrix(path)


def _analysis_db(path: Path) -> None:
    from rlwh.readers.ascend_db import check_header

    check_header(path)


def _gmm(path: Path) -> None:
    """A group list is a few KiB: loaded as ingest loads it (a refused pickle runs nothing)."""
    from rlwh.readers.gmm import load_counts

    if path.stat().st_size < _INFO_LIMIT:
        load_counts(path)


def _operator_memory(path: Path) -> list[str]:
    from rlwh.readers.ascend_csv import read_header

    return read_header(path)


def _usage_csv(fmt_name: str):
    def header(path: Path) -> list[str]:
        from rlwh.readers import ascend_usage

        return ascend_usage.read_header(path, getattr(ascend_usage, fmt_name))[0]

    return header


def _kernel_details(path: Path) -> list[str]:
    from rlwh.readers.ascend_kernels import KERNEL_DETAILS
    from rlwh.readers.ascend_usage import read_header

    return read_header(path, KERNEL_DETAILS)[0]


def _csv(header_of):
    """A CSV: its reader's own header read (what it refuses, ingest fails in the same
    words), then the cells of the rows within its first 64 KiB against that header, as
    the row-by-row reads count them (rlwh.readers.csv_header.rows_problem)."""
    from rlwh.readers.csv_header import rows_problem

    def look(f: SourceFile, head: bytes) -> list[Problem]:
        try:
            width = len(header_of(f.path))
            with open(f.path, "rb") as handle:
                first = handle.read(HEAD_BYTES)
        except SourceError as exc:
            return [Problem(f.rel_path, _relative(str(exc), f), True)]
        said = rows_problem(first, len(first) < HEAD_BYTES, width)
        if said is None:
            return []
        if said[0] == "failed":
            return [Problem(f.rel_path, f"{f.rel_path}: {said[1]}", True)]
        return [Problem(f.rel_path, f"{f.rel_path}: {said[1]}: ingest skips it", False, partial=True)]

    return look


# What each reader says of an empty file (the readers with a look of their own say it there).
_EMPTY = {"ascend_trace": "{rel}: empty file ({size} bytes), no trace events"}
_READERS_OWN = ("torch_snapshot", "ascend_info", "ascend_comm_matrix", "gmm_group_list", "ascend_memory_csv",
                "ascend_memory_record_csv", "ascend_npu_module_mem_csv", "ascend_step_trace_csv",
                "ascend_kernel_details_csv")

_LOOKS = {
    "torch_trace": _torch_trace,
    "torch_snapshot": _snapshot,
    "ascend_trace": _ascend_trace,
    "ascend_db": _ascend_db,
    "nvtx_jsonl": _nvtx,
    "ascend_info": _readers_own(_ascend_info),
    "gmm_group_list": _readers_own(_gmm),
    "ascend_comm_matrix": _communication_matrix,
    "ascend_analysis_db": _readers_own(_analysis_db),
    "ascend_communication_json": _readers_own(_communication_json),
    "ascend_memory_csv": _csv(_operator_memory),
    "ascend_memory_record_csv": _csv(_usage_csv("MEMORY_RECORD")),
    "ascend_npu_module_mem_csv": _csv(_usage_csv("NPU_MODULE_MEM")),
    "ascend_step_trace_csv": _csv(_usage_csv("STEP_TRACE_TIME")),
    "ascend_kernel_details_csv": _csv(_kernel_details),
}


def _capture_problems(files: list[SourceFile]) -> list[Problem]:
    """Per Ascend capture: one without profiler_info_<rank>.json gets no ranks row."""
    captures: dict[str, set[str]] = {}
    for f in files:
        if f.capture and (f.kind.startswith("ascend_") or "/ASCEND_PROFILER_OUTPUT/" in f.rel_path) \
                and f.rel_path != f.capture:
            captures.setdefault(f.capture, set()).add(f.kind)
    return [
        Problem(capture, f"{capture}: no profiler_info_<rank>.json: no ranks row (device, versions, "
                "parallel groups) and the rank only from the path", False)
        for capture, kinds in sorted(captures.items())
        if "ascend_info" not in kinds and kinds - {IGNORED}
    ]


def _ranks_text(ranks: set[int]) -> str:
    """{0, 1, 2, 3, 7} -> '0-3,7'."""
    out: list[str] = []
    run: list[int] = []
    for r in sorted(ranks):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
        run = [r]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
    return ",".join(out) or "-"


def format_report(report: CheckReport, max_listed: int = 20) -> str:
    """The report as text, for the terminal."""
    roles = report.roles()
    ranks = {r for row in roles for r in row["ranks"]}
    captures = {c for row in roles for c in row["captures"]}
    steps = {s for row in roles for s in row["steps"]}
    lines = [f"profile dir {report.profile_dir}",
             f"{len(roles)} roles x {len(ranks)} ranks x {len(captures)} captures x {len(steps)} steps",
             "", f"{'role':<32} {'ranks':<14} {'captures':>8} {'steps':<12} {'files':>6}"]
    for row in roles:
        lines.append(f"{row['role'][:32]:<32} {_ranks_text(row['ranks']):<14} {len(row['captures']):>8} "
                     f"{_ranks_text(row['steps']):<12} {row['files']:>6}")
    lines += ["", "files per kind:"]
    lines += [f"  {kind:<26} {n:>6}" for kind, n in sorted(report.kinds().items())]
    ignored = report.ignored
    if ignored:
        lines += ["", f"ignored files ({len(ignored)}):"]
        by_reason = Counter(f.reason for f in ignored)
        for reason, n in by_reason.most_common():
            lines.append(f"  {n:>6}  {reason}")
        for f in ignored[:max_listed]:
            lines.append(f"          {f.rel_path}")
        if len(ignored) > max_listed:
            lines.append(f"          ... and {len(ignored) - max_listed} more")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    if report.problems:
        lines += ["", f"problems ({len(report.problems)}, {report.failing} files would fail):"]
        for p in sorted(report.problems, key=lambda p: (not p.fails, p.path)):
            lines.append(f"  {_label(p)}  {p.message}")
    if report.log_checks:
        failed = sum(1 for c in report.log_checks if not c.passed)
        lines += ["", f"VeRL log checks ({len(report.log_checks)} logs, {failed} failed; ingest loads them "
                  "either way):", *format_log_checks(report.log_checks)]
    verdicts = report.verdicts()
    ignored_later = sum(1 for f in report.loadable if verdicts[f.rel_path][0] == "ignored")
    loads = len(report.loadable) - report.failing - ignored_later
    lines += ["", f"{loads} files would load ({report.partial} in part), {report.failing} would fail, "
              f"{len(ignored) + ignored_later} ignored; nothing was written"]
    if not report.loadable:  # ingest exits 6 (nothing found) and says why: so does check
        lines.append(f"{nothing_found(Path(report.profile_dir))}: `rlwh ingest` would write nothing")
    return "\n".join(lines)


def _label(p: Problem) -> str:
    return "FAIL" if p.fails else "PART" if p.partial else "skip" if p.ignored else "note"


def exit_status(report: CheckReport) -> int:
    """What `rlwh ingest` would exit with, or LOG_RULES when only a VeRL log check failed."""
    from rlwh import exitcodes

    code = exitcodes.for_ingest(report.failing, report.partial, len(report.loadable))
    if code == exitcodes.OK and any(not c.passed for c in report.log_checks):
        return exitcodes.LOG_RULES
    return code
