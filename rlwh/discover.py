"""Find the source files of a profile dir and say what each one is.

Walks the dir once (following symlinks, but never into a loop) and classifies files by
the conventions of each profiler. Role and rank come from the path here; a reader may
refine them from inside the file (a PyTorch trace's distributedInfo, an NVTX export's
RANK= capture). Unknown files are ignored; unreadable entries become warnings.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ASCEND_OUTPUT = "ASCEND_PROFILER_OUTPUT"
RANK_DIR_SUFFIX = "_ascend_pt"
_CAPTURE_TIME = re.compile(r"(\d{8})_?(\d{6})")
_RANK_SEGMENT = re.compile(r"^rank[_-]?(\d+)$", re.IGNORECASE)
_PROFILER_INFO = re.compile(r"^profiler_info_(\d+)\.json$")
_TORCH_TRACE = re.compile(r"(\.pt\.trace\.json(\.gz)?$)|(^prof_.*\.json(\.gz)?$)")
_NVTX_EXPORT = re.compile(r"\.jsonl$")
_GMM_DUMP = re.compile(r"group_list\.pt$")


@dataclass
class SourceFile:
    """One file to ingest, with what its path says about it."""

    kind: str
    path: Path
    rel_path: str
    role: str | None
    rank_id: int | None
    capture: str
    capture_started_ns: int | None = None
    problem: str | None = None  # set when the path breaks its format's convention


@dataclass
class Discovery:
    files: list[SourceFile]
    warnings: list[str]


def _capture_started_ns(name: str) -> int | None:
    """`20260526_085155_ascend_pt` -> ns since the epoch (the name's time, read as UTC)."""
    match = _CAPTURE_TIME.search(name)
    if not match:
        return None
    try:
        moment = datetime.strptime(match.group(1) + match.group(2), "%Y%m%d%H%M%S")
    except ValueError:
        return None
    return int(moment.replace(tzinfo=timezone.utc).timestamp()) * 1_000_000_000


def _rank_from_segments(rel_parts: tuple[str, ...]) -> int | None:
    for part in reversed(rel_parts):
        match = _RANK_SEGMENT.match(part)
        if match:
            return int(match.group(1))
    return None


def _read_json_quietly(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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


def _ascend_rank_files(rank_dir: Path, root: Path, warnings: list[str]) -> list[SourceFile]:
    """The files of one Ascend rank dir (<date>_<time>_ascend_pt)."""
    rel = rank_dir.relative_to(root)
    metadata = _read_json_quietly(rank_dir / "profiler_metadata.json")
    role = metadata.get("role") if isinstance(metadata.get("role"), str) and metadata.get("role") else None
    if role is None:
        role = rank_dir.parent.name or root.name
    try:
        entries = sorted(p.name for p in rank_dir.iterdir())
    except OSError as exc:
        warnings.append(f"cannot list {rank_dir}: {exc.strerror}")
        return []
    rank_id = None
    info_name = None
    for name in entries:
        match = _PROFILER_INFO.match(name)
        if match:
            info_name, rank_id = name, int(match.group(1))
            break
    if rank_id is None:
        rank_id = _rank_from_segments(rel.parts)
    capture = rank_dir.name
    started = _capture_started_ns(capture)
    problem = None if rank_id is not None else (
        f"{rel}: no profiler_info_<rank>.json and no rank<k> folder, so the rank is unknown"
    )

    def source(kind: str, path: Path) -> SourceFile:
        return SourceFile(kind, path, str(path.relative_to(root)), role, rank_id, capture, started, problem)

    files = []
    if info_name and (rank_dir / info_name).is_file():
        files.append(source("ascend_info", rank_dir / info_name))
    elif info_name:
        warnings.append(_not_regular(rank_dir / info_name))
    output = rank_dir / ASCEND_OUTPUT
    for name, kind in (("operator_memory.csv", "ascend_memory_csv"), ("trace_view.json", "ascend_trace")):
        if (output / name).is_file():
            files.append(source(kind, output / name))
        elif (output / name).exists() or (output / name).is_symlink():
            warnings.append(_not_regular(output / name))
    return files


def _classify_loose_file(path: Path, root: Path) -> SourceFile | None:
    """Files outside Ascend rank dirs: PyTorch traces, NVTX exports, GMM dumps."""
    rel = path.relative_to(root)
    name = path.name
    folder_role = rel.parts[-2] if len(rel.parts) > 1 else None
    if _GMM_DUMP.search(name):
        return SourceFile("gmm_group_list", path, str(rel), None, _rank_from_segments(rel.parts[:-1]), name)
    if _TORCH_TRACE.search(name):
        return SourceFile("torch_trace", path, str(rel), folder_role or root.name, None, name)
    if _NVTX_EXPORT.search(name):
        return SourceFile("nvtx_jsonl", path, str(rel), None, _rank_from_segments(rel.parts[:-1]), name)
    return None


def discover(root: str | os.PathLike) -> Discovery:
    """Every source file under `root`, in a stable order."""
    root = Path(root).resolve()
    warnings: list[str] = []
    files: list[SourceFile] = []
    if not root.is_dir():
        raise FileNotFoundError(f"profile dir not found: {root}")
    seen_dirs: set[tuple[int, int]] = set()

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
        if here.name.endswith(RANK_DIR_SUFFIX) or (here / ASCEND_OUTPUT).is_dir():
            files += _ascend_rank_files(here, root, warnings)
            dirnames[:] = []  # nothing else inside a rank dir is ours (PROF_*, FRAMEWORK, logs)
        for name in sorted(filenames):
            path = here / name
            if not _is_utf8(name):
                warnings.append(f"skipping {_printable(path)}: its name is not UTF-8 text")
                continue
            if not path.is_file():
                if _classify_loose_file(path, root) is not None:
                    warnings.append(_not_regular(path))
                continue
            found = _classify_loose_file(path, root)
            if found is not None:
                files.append(found)
    return Discovery(files, warnings)
