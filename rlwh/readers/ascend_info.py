"""profiler_info_<rank>.json and profiler_metadata.json -> one ranks row."""

from __future__ import annotations

import json
from pathlib import Path

from rlwh.errors import SourceError
from rlwh.readers.base import ReadOutcome, TableSink
from rlwh.readers.text_encoding import NotUtf8, utf8_text, wide_text_said

_VERSION_KEYS = ("torch_npu_version", "cann_version", "torch_version", "driver_version")


def load_json(path: Path) -> dict:
    """The file's JSON object; SourceError naming the file and the position otherwise
    (`rlwh check` asks the same question before any ingest). A UTF-8 BOM is skipped, as
    the CSV and trace readers skip one; UTF-16 text is named as such."""
    raw = path.read_bytes()
    try:
        text, skip = utf8_text(raw)
    except NotUtf8 as exc:
        if exc.wide:
            raise SourceError(f"{path}: {wide_text_said(exc.wide)}") from None
        raise SourceError(f"{path}: not UTF-8 text (byte {exc.byte})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        byte = skip + len(text[:exc.pos].encode("utf-8"))
        raise SourceError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno} (byte {byte})") from exc
    except RecursionError as exc:
        raise SourceError(f"{path}: JSON nested too deeply to read") from exc
    if not isinstance(data, dict):
        raise SourceError(f"{path}: expected a JSON object at the top level")
    return data


def _device_from_config(info: dict) -> str | None:
    """The NPU, when profiler_info names it. Never guessed from the rank (rank 9 of a job
    may run on NPU:1); otherwise the ingest takes it from operator_memory.csv's Device Type."""
    device_id = info.get("device_id")
    if isinstance(device_id, int) or (isinstance(device_id, str) and device_id.isdigit()):
        return f"NPU:{int(device_id)}"
    return None


def rank_id_of(info: dict, path: Path, fallback=None) -> int | None:
    """The capture's rank_id (or `fallback`, discovery's), SourceError when it is no integer."""
    rank = info.get("rank_id", fallback)
    try:
        return int(rank) if rank is not None else None
    except (TypeError, ValueError):
        raise SourceError(f"{path}: rank_id {rank!r} is not an integer") from None


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    info = load_json(path)
    metadata_path = path.parent / "profiler_metadata.json"
    metadata = load_json(metadata_path) if metadata_path.is_file() else {}
    rank_id = rank_id_of(info, path, context.get("rank_id"))
    groups = metadata.get("parallel_group_info")
    world = None
    if isinstance(groups, dict):
        sizes = [len(g.get("global_ranks", [])) for g in groups.values() if isinstance(g, dict)]
        world = max(sizes) if sizes else None
    other = {k: v for k, v in metadata.items() if k not in ("parallel_group_info", "role")}
    other.update({k: info[k] for k in ("start_info", "end_info") if k in info})
    rank_row = {
        "rank_id": rank_id,
        "device": _device_from_config(info),
        "world_size": world,
        "versions": {k: info[k] for k in _VERSION_KEYS if k in info},
        "profiler_config": info.get("config"),
        "parallel_groups": groups,
        "metadata": other,
    }
    end_ns = info.get("end_info", {}).get("collectionTimeEnd")
    if context.get("capture_started_ns") is None and isinstance(end_ns, (int, str)) and str(end_ns).isdigit():
        rank_row["capture_started_ns"] = int(end_ns)
    return ReadOutcome(rank=rank_row)
