"""Find every file of a profile dir, say what it is, and where it belongs.

One walk of the tree (following symlinks, never into a loop). Every regular file gets
a SourceFile: a kind an ingest job reads, or IGNORED with the reason. What a file is
comes from the RULES table, first match wins: a name in its place (the Ascend exports
in ASCEND_PROFILER_OUTPUT), else its content (a PyTorch trace is any JSON object with
traceEvents, plain or gzip, whatever its name), else a documented name rule. Content
is judged from the first bytes only (`rlwh.ingest.sniff`), so a 3 GB trace costs one small read.

Where a file belongs comes from its path (`place`): the capture is the Ascend capture
dir, the GMM dump folder, or the file itself (its path relative to the profile dir, so
two captures never merge); rank, step and role come from the folders as DESIGN.md says.
A reader may refine rank and role from inside the file (distributedInfo, RANK=).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from rlwh.ingest.sniff import TEXT_KINDS, head_kind, json_reason

ASCEND_OUTPUT = "ASCEND_PROFILER_OUTPUT"
IGNORED = "ignored"
NOT_LOADED_YET = "a known profiler export rlwh does not load yet"

_ASCEND_CAPTURE = re.compile(r".*_ascend_(pt|ms)$")
_RANK = re.compile(r"(?<![a-z0-9])rank[_-]?(\d+)(?![0-9])", re.IGNORECASE)
_RANK_FOLDER = re.compile(r"rank[_-]?\d+", re.IGNORECASE)
# step_<n>, step<n>, or VeRL's bare <step> folder: up to 6 digits, so a date folder
# (20260526) is no step; up to 9 after "step" (the column is an INTEGER).
_STEP_FOLDER = re.compile(r"step[_-]?(\d{1,9})|(\d{1,6})", re.IGNORECASE)
_PROFILER_INFO = re.compile(r"profiler_info_(\d+)\.json")
# Folders inside a capture, never a role: Ascend's own, msprof's raw data, msprobe's dump.
_INNER_FOLDER = re.compile(r"ASCEND_PROFILER_OUTPUT|FRAMEWORK|PROF_.*|dump_tensor_data|mindstudio_profiler_.*|"
                           r"logs?|profiler_output")
# Folders only the profiler writes in a capture (a run folder may hold logs/ too).
_PROFILER_FOLDER = re.compile(r"ASCEND_PROFILER_OUTPUT|FRAMEWORK|PROF_.*|mindstudio_profiler_.*")
# The profiler's level (torch_npu's profiler_level: Level_none, Level0-2) names how much was
# recorded, never who ran it.
_LEVEL_FOLDER = re.compile(r"level[_-]?(\d+|none)", re.IGNORECASE)
_WANDB_FOLDER = re.compile(r"wandb|(?:offline-)?run-\d{8}_\d{6}-\w+|latest-run|files")
_CAPTURE_TIME = re.compile(r"(?<!\d)(\d{8})_?(\d{6})")


@dataclass(frozen=True)
class Rule:
    """One line of the discovery table.

    kind: the ingest job that reads the file, or IGNORED. name: a regex the file name
    must fullmatch. place: 'output' (inside ASCEND_PROFILER_OUTPUT), 'capture' (directly
    in an Ascend capture dir) or 'any'. content: what sniff.head_kind must say, if set.
    reason: why an IGNORED file is not loaded (the sources message).
    """

    kind: str
    name: str = ".*"
    place: str = "any"
    content: str | None = None
    reason: str | None = None


JSON_NOT_A_PROFILE = "json: described by sniff.json_reason"
KERNELS_BESIDE_TRACE = ("read with trace_view.json beside it, for the kind of each task the trace's Task Type does "
                        "not name ('Other', none: older torch_npu); the kernels land in device_ops from the trace "
                        "(one row per activity)")
ANALYSIS_DB_BESIDE_MATRIX = ("no db export of this capture is loaded, and the links of its CommAnalyzerMatrix "
                             "land from communication_matrix.json beside it")
# First match wins. A reader for a new format is one line here (and its ingest job).
RULES: tuple[Rule, ...] = (
    Rule("ascend_info", r"profiler_info_\d+\.json", "capture"),
    Rule(IGNORED, r"profiler_metadata\.json", "capture",
         reason="read together with profiler_info_<rank>.json (role, parallel groups)"),
    Rule("ascend_memory_csv", r"operator_memory\.csv", "output"),
    Rule("ascend_trace", r"trace_view\.json", "output"),
    Rule("ascend_memory_record_csv", r"memory_record\.csv", "output"),
    Rule("ascend_npu_module_mem_csv", r"npu_module_mem\.csv", "output"),
    Rule("ascend_step_trace_csv", r"step_trace_time\.csv", "output"),
    Rule("ascend_db", r"ascend_pytorch_profiler(_\d+)?\.db", "output"),
    # Loaded by its own job where no db export beside it is (see _place_analysis_db).
    Rule(IGNORED, r"analysis\.db", "output",
         reason="read with ascend_pytorch_profiler_<rank>.db beside it (StepTraceTime: step_times' stages; "
                "CommAnalyzerMatrix: communication_links; CommAnalyzerBandwidth: collective_transfers)"),
    Rule(IGNORED, r".*\.db", "output", reason=f"{NOT_LOADED_YET} (Ascend db export)"),
    # A rank dir's device activity comes from one file (see one_device_source).
    Rule("ascend_kernel_details_csv", r"kernel_details\.csv", "output"),
    Rule("ascend_communication_json", r"communication\.json", "output"),
    Rule("ascend_comm_matrix", r"communication_matrix\.json", "output"),
    Rule(IGNORED, r"(operator_details|op_statistic|api_statistic|l2_cache|op_summary|"
         r"task_time|data_preprocess|dataset)\.(csv|json)", "output",
         reason="an Ascend analysis export rlwh does not load (per-kernel and summary tables)"),
    Rule("gmm_group_list", r".*group_list\.pt"),
    Rule("torch_snapshot", r".*\.(pkl|pickle)"),  # the reader fails a pickle that is no snapshot
    Rule("torch_trace", content="chrome_object"),
    Rule("ascend_trace", r"trace_view\.json", content="chrome_array"),
    Rule("nvtx_jsonl", content="nsys_jsonl"),
    Rule("nvtx_jsonl", content="nsys_legacy_json"),  # the reader fails it, saying how to export jsonlines
    # Name rules: a damaged file named like a source is read and failed with a message.
    Rule("torch_trace", r".*\.pt\.trace\.json(\.gz)?|prof_.*\.json(\.gz)?"),
    # Any other JSON is no profile (an NVTX export is lines of {"table": ...} records, found
    # by content above); its reason says what it is (sniff.json_reason).
    Rule(IGNORED, r".*\.(jsonl|ndjson|json)(\.gz)?", reason=JSON_NOT_A_PROFILE),
    # A console log holding VeRL step records, whatever its name says (wandb: files/output.log).
    Rule("verl_log", r".*\.(log|out|err|txt)(\.\d+)?|[^.]+", content="verl_log"),
    Rule(IGNORED, r".*\.(log|out|err)", reason="a log file"),
    Rule(IGNORED, r".*\.(py|sh|yaml|yml|toml|cfg|ini|md|txt)", reason="a script, config or text file"),
)
UNKNOWN_REASON = "unknown file: not a format rlwh reads"
# The loose-file kinds whose rank falls back to 0 (a single-process trace).
SINGLE_PROCESS_KINDS = ("torch_trace", "ascend_trace", "torch_snapshot", "nvtx_jsonl")


@dataclass
class SourceFile:
    """One file under the profile dir, with what its path and first bytes say about it."""

    kind: str
    path: Path
    rel_path: str
    role: str | None
    rank_id: int | None
    capture: str | None
    capture_started_ns: int | None = None
    problem: str | None = None  # set when the file cannot be read as its kind (it will fail)
    step: int | None = None
    reason: str | None = None  # why an ignored file is not loaded
    note: str | None = None  # a guess ingest made and the sources message should say
    single_process_rank0: bool = False  # no rank anywhere: the reader takes rank 0 unless the file names one
    # Files its reader reads beside it (kernel_details.csv's communication.json, trace_view.json's
    # kernel_details.csv); a change to one changes the file's fingerprint, so re-ingest reads it again.
    companions: tuple[Path, ...] = ()
    content: str | None = None  # what the first bytes looked like (sniff.head_kind)
    role_set: bool = False  # the role is the user's (--role, [roles]), not the path's

    @property
    def ignored(self) -> bool:
        return self.kind == IGNORED


@dataclass
class Discovery:
    files: list[SourceFile]
    warnings: list[str]

    @property
    def loadable(self) -> list[SourceFile]:
        return [f for f in self.files if not f.ignored]


def capture_profiler(kind: str) -> str:
    """The profiler a file's capture is of, as internal.rank_captures names it: 'ascend' for
    every Ascend export (text or db), else the file's kind (torch_trace, nvtx_jsonl, ...)."""
    return "ascend" if kind.startswith("ascend") else kind


# Captures that never repeat one another (sql/internal/rank_captures.sql says the same): a
# memory snapshot is the allocator's state at one moment, and a rank's snapshots are a series.
SERIES_PROFILERS = ("torch_snapshot",)


def repeated_capture_lines(groups) -> list[str]:
    """The warning `rlwh check` and `rlwh ingest` print for each (role, rank, step) that one
    profiler captured several times: the views count only the latest of them
    (sql/internal/rank_captures.sql holds the rule). `groups`: ((role, rank_id, step,
    profiler), captures) pairs; those with one capture, no rank or a series profiler are skipped."""
    lines = []
    for (role, rank, step, profiler), captures in sorted(groups, key=lambda g: tuple(map(str, g[0]))):
        if len(set(captures)) < 2 or rank is None or profiler in SERIES_PROFILERS:
            continue
        where = (f"role {role} rank {rank}" if role else f"rank {rank}") + (f" step {step}" if step is not None else "")
        lines.append(f"{where} holds {len(set(captures))} {profiler} captures: {', '.join(sorted(set(captures)))}; "
                     "rank_skew, summary and compare count only the latest (rank_skew.left_out_captures "
                     "names the others), not their sum")
    return lines


@dataclass
class _Capture:
    """What an Ascend capture dir (<...>_ascend_pt / _ascend_ms) says about its files."""

    dir: Path
    rel: str
    role: str | None
    rank_id: int | None
    step: int | None
    started_ns: int | None
    problem: str | None
    rank_files: list[str] = field(default_factory=list)


def rank_in_name(name: str) -> int | None:
    """`prof_rank-3.json.gz`, `bs_32_rank0.json.gz`, `rank_2` -> the rank; else None."""
    match = _RANK.search(name)
    return int(match.group(1)) if match else None


def _is_step_folder(name: str) -> bool:
    return _STEP_FOLDER.fullmatch(name) is not None


def _is_rank_folder(name: str) -> bool:
    return _RANK_FOLDER.fullmatch(name) is not None


def _is_capture_folder(name: str) -> bool:
    return _ASCEND_CAPTURE.fullmatch(name) is not None or _INNER_FOLDER.fullmatch(name) is not None


def _is_role_folder(name: str) -> bool:
    """A folder that can name a role: no rank, step, capture or profiler-level folder."""
    return not (_is_rank_folder(name) or _is_step_folder(name) or _is_capture_folder(name)
                or _LEVEL_FOLDER.fullmatch(name) is not None)


@dataclass(frozen=True)
class RoleRules:
    """What the user says roles are, winning over what discovery finds.

    role: `rlwh ingest --role NAME`: every file of the ingest gets it. folders: warehouse.toml's
    [roles], (folder name or glob, role) in the order written: a file's role is the role of the
    nearest folder above it (the profile dir and the folders above it included) that one of
    them matches, the first pattern that matches winning.
    """

    role: str | None = None
    folders: tuple[tuple[str, str], ...] = ()

    def role_of(self, folders: tuple[str, ...]) -> str | None:
        """The role these rules give a file below `folders` (outermost first); None: none."""
        if self.role is not None:
            return self.role
        for name in reversed(folders):
            for pattern, role in self.folders:
                if fnmatch.fnmatchcase(name, pattern):
                    return role
        return None


def place(folders: tuple[str, ...]) -> tuple[int | None, int | None, str | None]:
    """(rank, step, role) from the folders above a capture, innermost last.

    Rank: the nearest folder holding rank<k>/rank_<k>/rank-<k>. Step: the nearest
    step_<n>, step<n> or all-digit folder (VeRL's <save_path>/<step>/). Role: the nearest
    folder that is none of these, no capture folder and no profiler level (level1); None
    when there is none.
    """
    rank = step = role = None
    for name in reversed(folders):
        if _is_rank_folder(name) or (_ASCEND_CAPTURE.fullmatch(name) and rank_in_name(name) is not None):
            rank = rank_in_name(name) if rank is None else rank
        elif _is_step_folder(name):
            match = _STEP_FOLDER.fullmatch(name)
            assert match is not None  # as _is_step_folder said
            step = int(match.group(1) or match.group(2)) if step is None else step
        elif role is None and _is_role_folder(name):
            role = name
    return rank, step, role


def _read_json_quietly(path: Path) -> dict:
    try:
        if not path.is_file() or path.stat().st_size > 1 << 20:  # a FIFO would block; these are a few KB
            return {}
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # a BOM skipped, as the readers skip one
    except (OSError, ValueError, RecursionError):  # the reader names what is wrong with it
        return {}
    return data if isinstance(data, dict) else {}


def profiler_start_ns(info: dict) -> int | None:
    """When the Ascend profiler started, epoch ns, from profiler_info's own clocks.

    end_info holds the end on both the epoch (collectionTimeEnd) and the monotonic clock
    (MonotonicTimeEnd); start_info holds the start on the monotonic clock. No time zone
    is involved, unlike the local time in a capture dir's name.
    """
    start, end = info.get("start_info"), info.get("end_info")
    if not isinstance(start, dict) or not isinstance(end, dict):
        return None
    values = [_as_int(end.get("collectionTimeEnd")), _as_int(end.get("MonotonicTimeEnd")),
              _as_int(start.get("start_monotonic"))]
    epoch_end, mono_end, mono_start = values
    if epoch_end is None or mono_end is None or mono_start is None:
        return None
    if not 0 <= mono_end - mono_start < 10**15:  # over 11 days: not one capture's clocks
        return None
    return epoch_end - (mono_end - mono_start)


def _as_int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def name_time_ns(name: str, utc_offset_s: int) -> int | None:
    """The local time in a capture dir's name (`..._20260526085155123_ascend_pt`), as
    epoch ns, read in the time zone `utc_offset_s` seconds east of UTC."""
    from datetime import datetime, timezone

    match = _CAPTURE_TIME.search(name)
    if not match:
        return None
    try:
        moment = datetime.strptime(match.group(1) + match.group(2), "%Y%m%d%H%M%S")
    except ValueError:
        return None
    return (int(moment.replace(tzinfo=timezone.utc).timestamp()) - utc_offset_s) * 1_000_000_000


def _zone_offset_s(captures: list[_Capture], infos: dict[str, dict]) -> int | None:
    """The profiler's time zone, learnt from a capture with both a time in its name and
    profiler_info clocks: their difference, rounded to a quarter hour."""
    for c in captures:
        start = profiler_start_ns(infos.get(c.rel, {}))
        named = name_time_ns(c.dir.name, 0)
        if start is not None and named is not None:
            offset = (named - start) / 1e9
            if abs(offset) <= 14 * 3600 + 60:
                return int(round(offset / 900) * 900)
    return None


def _printable(path: str | os.PathLike) -> str:
    """A path for a message, its non-UTF-8 bytes shown as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _is_utf8(name: str | os.PathLike) -> bool:
    try:
        str(name).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _not_regular(path: Path) -> str:
    return f"skipping {path}: named like a source file, but not a regular file (a folder, FIFO or broken link)"


def match_rule(name: str, where: str, path: Path | None) -> tuple[Rule | None, str | None]:
    """The first rule for a file named `name` found in `where` ('output', 'capture' or
    'any'); its content is sniffed (from `path`) only when a content rule is reached."""
    content: str | None = None
    sniffed = False
    for rule in RULES:
        if rule.place != "any" and rule.place != where:
            continue
        if not re.fullmatch(rule.name, name, re.IGNORECASE if rule.place == "any" else 0):
            continue
        if rule.content is not None:
            if path is None:
                continue
            if rule.content in TEXT_KINDS:
                if not TEXT_KINDS[rule.content](path):
                    continue
                return rule, rule.content
            if not sniffed:
                content, sniffed = head_kind(path), True
            if content != rule.content:
                continue
        return rule, content
    return None, content


def _named_like_source(name: str, where: str) -> bool:
    rule, _ = match_rule(name, where, None)
    return rule is not None and rule.kind != IGNORED


def _is_capture_dir(name: str, dirnames: list[str], filenames: list[str]) -> bool:
    """A folder is an Ascend capture when it holds a capture's own files: the profiler's
    output folder, or a name like one (<...>_ascend_pt) and its profiler_info_<rank>.json,
    profiler_metadata.json or inner folders. A run folder named grpo_ascend_pt, which holds
    only the roles' folders, is none: the captures below it are."""
    if ASCEND_OUTPUT in dirnames:
        return True
    if not _ASCEND_CAPTURE.fullmatch(name):
        return False
    return (any(_PROFILER_INFO.fullmatch(f) or f == "profiler_metadata.json" for f in filenames)
            or any(_PROFILER_FOLDER.fullmatch(d) for d in dirnames))


def _ascend_capture(here: Path, root: Path, entries: list[str]) -> _Capture:
    """Role, rank and step of an Ascend capture dir, for every file under it."""
    rel = here.relative_to(root)
    rank, step, role = place(rel.parts[:-1])
    own = rank_in_name(here.name)
    rank = own if own is not None else rank
    metadata = _read_json_quietly(here / "profiler_metadata.json")
    if isinstance(metadata.get("role"), str) and metadata["role"].strip():
        role = metadata["role"]
    infos = [n for n in entries if _PROFILER_INFO.fullmatch(n)]
    if infos and (info_name := _PROFILER_INFO.fullmatch(infos[0])) is not None:  # it matched above
        rank = int(info_name.group(1))
    if role is None:
        # No role folder between the profile dir and the capture: the folder pointed at names
        # it, or, pointed at the capture itself, the nearest folder above it that is no rank,
        # step or capture folder (what pointing at that folder would give).
        role = _root_role(root) if here != root else (place(here.parent.parts)[2] or here.name)
    # Pointed at the capture itself, it is still named as from the folder above it.
    name = rel.as_posix() if here != root else here.name
    capture = _Capture(here, name, role, rank, step, None, None, infos)
    if rank is None:
        capture.problem = (f"{name}: no profiler_info_<rank>.json and no rank<k> folder, "
                           "so the rank is unknown")
    return capture


def _root_role(root: Path) -> str:
    """The role of a file with no role folder below the profile dir: the profile dir's name,
    or, where that is a rank, step, capture or level folder, the nearest folder above it
    that is none of these."""
    return place(root.parts[1:] if root.is_absolute() else root.parts)[2] or root.name


def nothing_found(root: Path) -> str:
    """What ingest and check say of a folder that holds no file rlwh reads."""
    return (f"no profiler files under {root}: expected *_ascend_pt rank dirs, PyTorch traces, "
            "NVTX .jsonl exports or group_list.pt dumps")


def profile_root(path: Path) -> tuple[Path, str | None]:
    """The folder to read when the user points at `path`: itself, or, for the profiler's
    ASCEND_PROFILER_OUTPUT, the capture that holds it (the rank and the role come from the
    capture's own files and place), with a line saying so."""
    path = path.resolve()
    capture = path.parent
    if path.name == ASCEND_OUTPUT and path.is_dir():
        entries = list(capture.iterdir())
        if _is_capture_dir(capture.name, [e.name for e in entries if e.is_dir()],
                           [e.name for e in entries if e.is_file()]):
            return capture, (f"read {capture}: {ASCEND_OUTPUT} is part of that capture, whose "
                             "profiler_info_<rank>.json gives its rank")
    return path, None


def discover(root: str | os.PathLike, roles: RoleRules = RoleRules()) -> Discovery:
    """Every file under `root`, in a stable order, each with its kind and keys; `roles`
    (--role, [roles]) win over the role the files and folders give."""
    root = Path(root).resolve()
    warnings: list[str] = []
    files: list[SourceFile] = []
    if not root.is_dir():
        raise FileNotFoundError(f"profile dir not found: {root}")
    seen_dirs: set[tuple[int, int]] = set()
    capture_of: dict[Path, _Capture | None] = {}
    captures: list[_Capture] = []

    def on_error(exc: OSError) -> None:
        warnings.append(f"cannot read {exc.filename}: {exc.strerror}")

    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=on_error):
        here = Path(dirpath)
        if not _is_utf8(here):
            warnings.append(f"skipping {_printable(here)}: its name is not UTF-8 text")
            dirnames[:] = []
            continue
        try:
            st = here.stat()
        except OSError as exc:
            warnings.append(f"cannot read {here}: {exc.strerror}")
            dirnames[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen_dirs:
            warnings.append(f"skipping {here}: a symlink loop leads back to a folder already walked")
            dirnames[:] = []
            continue
        seen_dirs.add((st.st_dev, st.st_ino))
        dirnames.sort()
        capture = capture_of.get(here.parent) if here != root else None
        if capture is None and _is_capture_dir(here.name, dirnames, filenames):
            capture = _ascend_capture(here, root, sorted(filenames))
            captures.append(capture)
        capture_of[here] = capture
        where = _where(here, capture)
        for name in list(dirnames):
            if _named_like_source(name, where):
                warnings.append(_not_regular(here / name))
                dirnames.remove(name)
        for name in sorted(filenames):
            path = here / name
            if not _is_utf8(name):
                warnings.append(f"skipping {_printable(path)}: its name is not UTF-8 text")
                continue
            if not path.is_file():
                if _named_like_source(name, where):
                    warnings.append(_not_regular(path))
                continue
            files.append(_classify(path, root, where, capture))
    _set_capture_starts(files, captures)
    one_device_source(files)
    _apply_roles(files, root, roles)
    return Discovery(files, warnings)


def _apply_roles(files: list[SourceFile], root: Path, roles: RoleRules) -> None:
    """The user's roles (--role, [roles]) over what discovery found, for every file rlwh reads
    and every ignored file of a capture (profiler_metadata.json beside the capture's files)."""
    if roles.role is None and not roles.folders:
        return
    for f in files:
        if f.ignored and f.role is None:
            continue
        role = roles.role_of(root.parts + Path(f.rel_path).parts[:-1])
        if role is not None:
            f.role, f.role_set = role, True


def _where(here: Path, capture: _Capture | None) -> str:
    if capture is None:
        return "any"
    if here == capture.dir:
        return "capture"
    if here == capture.dir / ASCEND_OUTPUT:
        return "output"
    return "any"


def _classify(path: Path, root: Path, where: str, capture: _Capture | None) -> SourceFile:
    """One regular file: its kind by RULES, its keys by its capture or its path."""
    rel = path.relative_to(root)
    rel_text = rel.as_posix()
    rule, content = match_rule(path.name, where, path)
    kind = rule.kind if rule else IGNORED
    reason = (rule.reason if rule else None) or (UNKNOWN_REASON if kind == IGNORED else None)
    if reason == JSON_NOT_A_PROFILE:
        reason = json_reason(path)
    if capture is not None and (where != "any" or kind in (IGNORED, "ascend_trace")):
        return SourceFile(kind, path, rel_text, capture.role, capture.rank_id, capture.rel,
                          problem=None if kind == IGNORED else capture.problem, step=capture.step,
                          reason=reason, content=content)
    if kind == IGNORED:
        return SourceFile(kind, path, rel_text, None, None, None, reason=reason, content=content)
    if kind == "gmm_group_list":
        return _gmm_file(path, rel, content)
    if kind == "verl_log":
        return _verl_log_file(path, rel, content)
    rank, step, role = place(rel.parts[:-1])
    own = rank_in_name(path.name)
    rank = own if own is not None else rank
    found = SourceFile(kind, path, rel_text, role or _root_role(root), rank, rel_text, step=step, content=content)
    if rank is None and kind in SINGLE_PROCESS_KINDS:
        found.single_process_rank0 = True
        if kind == "ascend_trace":  # its reader takes the rank from discovery alone
            found.rank_id = 0
            found.note = (f"{rel_text}: no profiler_info_<rank>.json and no rank in its path: "
                          "read as rank 0 (a single-process trace)")
    return found


def _gmm_file(path: Path, rel: Path, content: str | None) -> SourceFile:
    """A group_list dump: keys by the reader's own layout rules (rlwh.readers.gmm), its
    capture the folder holding dump_tensor_data (one rank's dump of one step)."""
    from rlwh.errors import SourceError
    from rlwh.readers.gmm import parse_gmm_path

    folders = rel.parts[:-1]
    top = folders.index("dump_tensor_data") if "dump_tensor_data" in folders else len(folders)
    capture = "/".join(folders[:top]) or rel.as_posix()
    found = SourceFile("gmm_group_list", path, rel.as_posix(), None, None, capture, content=content)
    try:
        where = parse_gmm_path(rel.as_posix())
    except SourceError as exc:
        found.problem = str(exc)
        return found
    found.role, found.rank_id, found.step = where.role, where.rank_id, where.step
    return found


def _verl_log_file(path: Path, rel: Path, content: str | None) -> SourceFile:
    """A training log is its own capture; role and rank only where its folders (or its
    name, for the rank) say, else NULL: a log is the driver's, no rank's. wandb's own
    folders (wandb/run-<time>-<id>/files) are no role."""
    folders = tuple(f for f in rel.parts[:-1] if not _WANDB_FOLDER.fullmatch(f))
    rank, _step, role = place(folders)
    own = rank_in_name(path.name)
    return SourceFile("verl_log", path, rel.as_posix(), role, own if own is not None else rank, rel.as_posix(),
                      content=content)


def _set_capture_starts(files: list[SourceFile], captures: list[_Capture]) -> None:
    """Ascend captures start when profiler_info's clocks say; else at the local time in
    the dir's name, read in the zone another capture of the run reveals. Ingest replaces
    both with the capture's earliest event once its rows are loaded."""
    infos = {c.rel: _read_json_quietly(c.dir / c.rank_files[0]) for c in captures if c.rank_files}
    offset = _zone_offset_s(captures, infos)
    for c in captures:
        c.started_ns = profiler_start_ns(infos.get(c.rel, {}))
        if c.started_ns is None and offset is not None:
            c.started_ns = name_time_ns(c.dir.name, offset)
    by_rel = {c.rel: c for c in captures}
    for f in files:
        owner = by_rel.get(f.capture) if f.capture else None
        if owner is not None:
            f.capture_started_ns = owner.started_ns


def one_device_source(files: list[SourceFile]) -> None:
    """An Ascend text export describes each device activity twice: trace_view.json (with
    its stream, launch and overlap rows) and kernel_details.csv (kernels and HCCL ops) with
    communication.json (the collectives again). So a capture's device rows come from one
    of them: the trace where the capture has one (reading kernel_details.csv for the kind
    of the tasks it leaves untyped), else kernel_details.csv, which reads communication.json
    beside it for the HCCL groups. analysis.db travels with its db."""
    by_capture: dict[str, dict[str, SourceFile]] = {}
    for f in files:
        if f.capture is not None and f.path.parent.name == ASCEND_OUTPUT:
            by_capture.setdefault(f.capture, {})[f.path.name] = f
    for names in by_capture.values():
        kernels, groups = names.get("kernel_details.csv"), names.get("communication.json")
        has_trace = "trace_view.json" in names
        if kernels is not None and has_trace:
            kernels.kind, kernels.reason, kernels.problem = IGNORED, KERNELS_BESIDE_TRACE, None
            names["trace_view.json"].companions = (kernels.path,)
        if kernels is not None and not kernels.ignored and groups is not None:
            kernels.companions = (groups.path,)
        if "analysis.db" in names:
            _place_analysis_db(names["analysis.db"], names)


def _place_analysis_db(analysis: SourceFile, names: dict[str, SourceFile]) -> None:
    """analysis.db travels with the db export beside it, whose reader reads it. Where no db
    export is loaded (none beside it, or the text export beside it is loaded instead), its
    CommAnalyzerMatrix is the capture's only record of its links unless communication_matrix.json
    lies beside it: then analysis.db is loaded by its own job."""
    from rlwh.readers.ascend_db import not_loaded_beside

    db = next((f for f in names.values() if f.kind == "ascend_db"), None)
    if db is not None and not_loaded_beside(db.path) is None:
        db.companions = (analysis.path,)
        return
    matrix = names.get("communication_matrix.json")
    if matrix is not None and not matrix.ignored:
        analysis.reason = ANALYSIS_DB_BESIDE_MATRIX
        return
    analysis.kind, analysis.reason = "ascend_analysis_db", None
