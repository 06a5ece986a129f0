"""`rlwh check`: what ingest would do with a profile dir, without writing anything.

It runs discovery (the same walk and rules ingest uses) and then looks at each file's
first bytes only: a multi-GB trace costs a 64 KiB read, so a whole run is checked in
seconds before hours of ingest. It finds what is visible from there: a rank nobody
names, an Ascend capture without profiler_info, a CSV header without the columns its
reader needs, a trace that does not start like one, a legacy nsys JSON export, a GMM
dump outside the layouts. A problem marked `fails` is one ingest would mark failed.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rlwh.errors import RlwhError, SourceError
from rlwh.ingest.discover import IGNORED, Discovery, SourceFile, discover
from rlwh.ingest.log_check import DEFAULT_REQUIRED_KEYS, LogCheck, check_log, format_log_checks
from rlwh.ingest.sniff import read_head

_DIST_RANK = re.compile(r'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_INFO_LIMIT = 1 << 20


@dataclass
class Problem:
    """Something check saw in one file (or capture)."""

    path: str
    message: str
    fails: bool  # ingest would mark the file failed


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
        return len({p.path for p in self.problems if p.fails})

    def verdicts(self) -> dict[str, tuple[str, str | None]]:
        """What ingest will record in `sources` for each file, by rel_path: ('ignored', the
        reason), ('failed', what check saw), or ('ok', None) (ok, or partial when the damage
        lies beyond the first bytes). Ingest words an ignored file's message the same way."""
        out: dict[str, tuple[str, str | None]] = {}
        for f in self.files:
            if f.ignored:
                out[f.rel_path] = ("ignored", f.reason)
            else:
                fails = [p.message for p in self.problems if p.path == f.rel_path and p.fails]
                out[f.rel_path] = ("failed", fails[0]) if fails else ("ok", None)
        return out

    def kinds(self) -> Counter:
        return Counter(f.kind for f in self.files)

    def roles(self) -> list[dict]:
        """One row per role: its ranks, captures, steps and files (roles x ranks x captures x steps)."""
        by_role: dict[str, dict] = {}
        for f in self.loadable:
            role = f.role if f.role is not None else ("(NVTX range names)" if f.kind == "nvtx_jsonl" else "(none)")
            row = by_role.setdefault(role, {"role": role, "ranks": set(), "captures": set(), "steps": set(),
                                            "files": 0})
            row["files"] += 1
            if f.rank_id is not None:
                row["ranks"].add(f.rank_id)
            elif f.rel_path in self.head_ranks:
                row["ranks"].add(self.head_ranks[f.rel_path])
            elif f.single_process_rank0 and f.kind != "nvtx_jsonl":  # NVTX: RANK= inside
                row["ranks"].add(0)
            row["captures"].add(f.capture)
            if f.step is not None:
                row["steps"].add(f.step)
        return [by_role[k] for k in sorted(by_role)]


def check(profile_dir: str | os.PathLike, required_keys: tuple[str, ...] = DEFAULT_REQUIRED_KEYS) -> CheckReport:
    """Discover `profile_dir` and look at every file's head; never writes anything.

    `required_keys`: what a VeRL log must hold ([verl_log] required_keys)."""
    root = Path(profile_dir)
    if not root.is_dir():
        raise RlwhError(f"profile dir not found: {root}")
    found: Discovery = discover(root)
    report = CheckReport(str(root.resolve()), found.files, list(found.warnings))
    for f in found.files:
        if not f.ignored:
            report.problems += _file_problems(f, report.head_ranks)
    report.problems += _capture_problems(found.files)
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
    if size == 0:
        return [Problem(f.rel_path, f"{f.rel_path}: empty file", True)]
    look = _LOOKS.get(f.kind)
    found = look(f, head) if look else []
    named = _DIST_RANK.search(head.decode("utf-8", "replace")) if f.kind == "torch_trace" else None
    if named and f.rank_id is None:
        head_ranks[f.rel_path] = int(named.group(1))
    if f.single_process_rank0 and f.kind == "torch_trace" and not named:
        found.append(Problem(f.rel_path, f"{f.rel_path}: no rank in its path and no distributedInfo.rank in its "
                             "first 64 KiB: read as rank 0 (a single-process trace) unless the trace names one later",
                             False))
    elif f.note:
        found.append(Problem(f.rel_path, f.note, False))
    return found


def _torch_trace(f: SourceFile, head: bytes) -> list[Problem]:
    if f.content == "chrome_object":
        return []
    start = head[:40].decode("utf-8", "replace").strip()[:24]
    return [Problem(f.rel_path, f"{f.rel_path}: does not start like a PyTorch trace (a JSON object with "
                    f"traceEvents); it starts {start!r}", True)]


def _ascend_trace(f: SourceFile, head: bytes) -> list[Problem]:
    text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if text[:1] in (b"[", b"{"):
        return []
    return [Problem(f.rel_path, f"{f.rel_path}: does not start like a trace_view.json (a JSON array of events); "
                    f"it starts {text[:24].decode('utf-8', 'replace')!r}", True)]


def _nvtx(f: SourceFile, head: bytes) -> list[Problem]:
    from rlwh.readers.nvtx import LEGACY_HELP

    if f.content == "nsys_legacy_json":
        return [Problem(f.rel_path, f"{f.rel_path}: {LEGACY_HELP}", True)]
    if f.content != "nsys_jsonl":
        return [Problem(f.rel_path, f"{f.rel_path}: does not start like an nsys jsonlines export "
                        '(lines of {"table": ...} objects)', True)]
    return []


def _readers_own(check_file):
    """A look that asks the reader's own first check (a header, a small JSON file): what it
    refuses, ingest would fail the same way, in the same words."""

    def look(f: SourceFile, head: bytes) -> list[Problem]:
        try:
            check_file(f.path)
        except SourceError as exc:
            return [Problem(f.rel_path, str(exc), True)]
        return []

    return look


def _ascend_info(path: Path) -> None:
    from rlwh.readers.ascend_info import load_json

    if path.stat().st_size < _INFO_LIMIT:
        load_json(path)


def _operator_memory(path: Path) -> None:
    from rlwh.readers.ascend_csv import read_header

    read_header(path)


def _usage_csv(fmt_name: str):
    def header(path: Path) -> None:
        from rlwh.readers import ascend_usage

        ascend_usage.read_header(path, getattr(ascend_usage, fmt_name))

    return header


_LOOKS = {
    "torch_trace": _torch_trace,
    "ascend_trace": _ascend_trace,
    "nvtx_jsonl": _nvtx,
    "ascend_info": _readers_own(_ascend_info),
    "ascend_memory_csv": _readers_own(_operator_memory),
    "ascend_memory_record_csv": _readers_own(_usage_csv("MEMORY_RECORD")),
    "ascend_npu_module_mem_csv": _readers_own(_usage_csv("NPU_MODULE_MEM")),
    "ascend_step_trace_csv": _readers_own(_usage_csv("STEP_TRACE_TIME")),
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
            lines.append(f"  {'FAIL' if p.fails else 'note'}  {p.message}")
    if report.log_checks:
        failed = sum(1 for c in report.log_checks if not c.passed)
        lines += ["", f"VeRL log checks ({len(report.log_checks)} logs, {failed} failed; ingest loads them "
                  "either way):", *format_log_checks(report.log_checks)]
    lines += ["", f"{len(report.loadable)} files would load, {report.failing} would fail, "
              f"{len(ignored)} ignored; nothing was written"]
    return "\n".join(lines)
