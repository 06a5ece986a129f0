"""The ingest plan: every discovered file with its fingerprint, what the warehouse already
holds of the run, and the one rule for "this file is loaded as it is".

The runner makes the plan once, under the writer lock, from one read of the published
warehouse; both targets (rlwh.ingest.to_warehouse, rlwh.ingest.to_dataset) take it as
it is, so the two warehouse modes cannot disagree about what changed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, TypedDict

import duckdb

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.ingest.discover import SourceFile
from rlwh.ingest.fingerprint import fingerprint
from rlwh.sqltext import one_value
from rlwh.warehouse.schema import thin_next_source_id

# progress(files_done, files_total, bytes_done, bytes_total, current file or step)
Progress = Callable[[int, int, int, int, str], None]
# What sources holds of one file: (source_id, fingerprint, status).
Known = tuple[int, str, str]


@dataclass
class FileResult:
    """What happened to one source file."""

    kind: str
    rel_path: str
    status: str  # ok | partial | failed | ignored | skipped | unchanged
    rows: int = 0
    message: str | None = None
    seconds: float = 0.0
    bytes: int = 0


@dataclass
class Planned:
    """One discovered file and its fingerprint; source_id once a target assigns it."""

    source: SourceFile
    fingerprint: str
    size: int
    mtime: float
    source_id: int | None = None
    loaded_before: bool = False  # the warehouse holds rows of an earlier version of the file


class FileContext(TypedDict):
    """What a reader knows about its file beyond the bytes (picklable: it travels to workers)."""

    rel_path: str
    role: str | None
    rank_id: int | None
    capture: str | None
    step: int | None
    capture_started_ns: int | None
    single_process_rank0: bool
    memory_limit: str
    workers: int  # processes one reader may decode its file on (rlwh.readers.kineto_decoding)


@dataclass
class IngestSummary:
    run: str
    profile_dir: str
    results: list[FileResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Files rlwh does not load (status ignored in sources, with the reason), apart from
    # `results` so counts and exit statuses are about the files that were read.
    ignored: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0
    # The run's repeated captures (repeated_captures), when the writer asked in its own
    # transaction; None: the runner asks the published warehouse.
    repeated: list[tuple[tuple, list[str]]] | None = None

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.results if r.status in ("ok", "partial"))

    @property
    def failed(self) -> int:
        return self.count("failed")


@dataclass
class Plan:
    """What one ingest of one run works from."""

    run: str
    profile_dir: Path
    files: list[Planned]
    known: dict[str, Known]  # the run's files in the published warehouse, by path
    next_source_id: int = 1  # the first id no source of the warehouse uses
    first_ingested_at: datetime | None = None
    schema_behind: bool = False  # the warehouse needs migrating: it is written even if no file changed
    recorded_dir: Path | None = None  # the folder the run was ingested from before

    def gone_lines(self) -> list[str]:
        """Files the run holds that are no longer under its folder (the same folder as
        before: from another one a path tells nothing). Their rows stay: deleting rows
        because a file went is no step to take for the user unasked, so it is said."""
        if self.recorded_dir is None or self.recorded_dir.resolve() != Path(self.profile_dir).resolve():
            return []
        here = {p.source.rel_path for p in self.files}
        gone = sorted(path for path in self.known if path not in here)
        if not gone:
            return []
        more = f" and {len(gone) - 1} more" if len(gone) > 1 else ""
        return [f"{len(gone)} file{'s' if len(gone) > 1 else ''} of run {self.run!r} "
                f"{'are' if len(gone) > 1 else 'is'} no longer under {self.profile_dir} ({gone[0]}{more}): "
                f"the rows loaded from {'them' if len(gone) > 1 else 'it'} stay in the warehouse; "
                f"`rlwh forget {self.run}` and ingest again to drop them"]

    def is_unchanged(self, p: Planned) -> bool:
        return is_unchanged(self.known.get(p.source.rel_path), p)

    @property
    def nothing_changed(self) -> bool:
        return not self.schema_behind and all(self.is_unchanged(p) for p in self.files)

    @property
    def total_bytes(self) -> int:
        return sum(p.size for p in self.files)

    def unchanged_result(self, p: Planned) -> FileResult:
        return FileResult(p.source.kind, p.source.rel_path, "unchanged", bytes=p.size)


def is_unchanged(known: Known | None, p: Planned) -> bool:
    """The one rule: same fingerprint as last time, and not failed then (a failure is
    always retried)."""
    return known is not None and known[1] == p.fingerprint and known[2] != "failed"


def changed_since_planned(p: Planned) -> str | None:
    """Why `p` is no longer the file that was planned, and so read: its size or mtime
    changed since it was fingerprinted (a profiler still writing it, a copy in progress);
    None when it is as it was. Its rows are then of the file as it was read, and the next
    ingest, whose fingerprint differs, reads it again."""
    try:
        now = os.stat(p.source.path)
    except OSError as exc:
        return f"{p.source.rel_path}: the file went while it was read ({exc.strerror}); its rows are as read"
    if (now.st_size, now.st_mtime) == (p.size, p.mtime):
        return None
    return (f"{p.source.rel_path}: the file changed while it was read ({p.size:,} bytes when it was planned, "
            f"{now.st_size:,} now): its rows are of the file as it was read; ingest again to load it as it is")


def utc(seconds: float | None = None) -> datetime:
    """A naive UTC datetime: warehouse times are TIMESTAMP in UTC (no pytz needed to read them)."""
    moment = datetime.now(timezone.utc) if seconds is None else datetime.fromtimestamp(seconds, timezone.utc)
    return moment.replace(tzinfo=None)


def fingerprint_files(files: list[SourceFile]) -> list[Planned]:
    """Fingerprint every file; one that cannot be read is planned as a failure."""
    planned = []
    for source in files:
        try:
            fp, size, mtime = fingerprint(source.path)
            for companion in source.companions:  # a file read beside it: its change is this file's
                fp += "+" + fingerprint(companion)[0]
            if source.role_set:  # the user's role (--role, [roles]): another role re-reads the file
                fp += f"+role={source.role}"
        except OSError as exc:
            # A failed file, not just a warning: `rlwh sources`, the summary and the exit status show it.
            source.problem = f"cannot read {source.path}: {exc.strerror}"
            planned.append(Planned(source, f"unreadable:{exc.errno}", 0, 0.0))
            continue
        planned.append(Planned(source, fp, size, mtime))
    return planned


def known_sources(con: duckdb.DuckDBPyConnection, run: str) -> dict[str, Known]:
    """The run's files in the warehouse: path -> (source_id, fingerprint, status)."""
    rows = con.execute("select path, source_id, fingerprint, status from sources where run = ?", [run]).fetchall()
    return {path: (source_id, fp, status) for path, source_id, fp, status in rows}


def read_plan(con: duckdb.DuckDBPyConnection | None, run: str, profile_dir: Path, files: list[Planned],
              schema_behind: bool = False) -> Plan:
    """The plan of `run` from a read of the published warehouse (None: there is none yet).

    `sources` and `runs` have had these columns since the first migration, so a warehouse
    that still needs migrating is read the same way."""
    if con is None:
        return Plan(run, profile_dir, files, {})
    next_id = _next_source_id(con)
    first = con.execute("select first_ingested_at, profile_dir from runs where run = ?", [run]).fetchall()
    known = known_sources(con, run)
    if first and first[0][1]:
        _refuse_another_folders_files(run, Path(first[0][1]), profile_dir, files, known)
    return Plan(run, profile_dir, files, known, next_id, first[0][0] if first else None, schema_behind,
                Path(first[0][1]) if first and first[0][1] else None)


def _next_source_id(con: duckdb.DuckDBPyConnection) -> int:
    """The first id no source of the warehouse uses. A dataset's thin file has it from the
    manifest: its sources are thousands of Parquet files, counted in 0.3 s."""
    recorded = thin_next_source_id(con)
    if recorded is not None:
        return recorded
    return one_value(con.execute("select coalesce(max(source_id), 0) + 1 from sources"))


def _refuse_another_folders_files(run: str, recorded: Path, profile_dir: Path, files: list[Planned],
                                  known: dict[str, Known]) -> None:
    """A file is told apart by its path under the folder ingested. Ingested from another
    folder than the run's, a different file under a path the run holds would replace that
    file's rows without a word (two role folders that both hold prof_rank-0.pt.trace.json,
    ingested under one --run): refused before anything is written. A folder moved with the
    same files in it re-ingests as before."""
    if recorded.resolve() == Path(profile_dir).resolve():
        return
    clashes = [p.source.rel_path for p in files if not p.source.ignored and p.source.rel_path in known
               and known[p.source.rel_path][1] != p.fingerprint]
    if clashes:
        more = f" (and {len(clashes) - 1} more)" if len(clashes) > 1 else ""
        raise RlwhError(
            f"run {run!r} was ingested from {recorded}; {profile_dir} holds a different file under the same "
            f"path, {clashes[0]}{more}, which would replace the run's. Files are told apart by their path under the "
            "folder ingested: ingest the folder that holds both as the run (with --role or [roles] for the "
            f"roles), give this folder its own --run, or `rlwh forget {run}` first to replace the run")


def file_context(p: Planned, config: Config) -> FileContext:
    s = p.source
    return {
        "rel_path": s.rel_path,
        "role": s.role,
        "rank_id": s.rank_id,
        "capture": s.capture,
        "step": s.step,
        "capture_started_ns": s.capture_started_ns,
        "single_process_rank0": s.single_process_rank0,
        "memory_limit": config.worker_memory_limit,
        # A reader may decode one big file on this many processes (never inside a Ray task).
        "workers": config.workers if config.executor == "local" else 1,
    }


# The run's captures that repeat one another, as the views see them (ranks read from the files).
REPEATED_CAPTURES = """
select role, rank_id, step, profiler, list(capture order by capture)
from internal.rank_captures
where run = ? and repeats > 1
group by all
"""


def repeated_captures(rows: list[tuple]) -> list[tuple[tuple, list[str]]]:
    """((role, rank_id, step, profiler), captures) of each group of REPEATED_CAPTURES' `rows`."""
    return [((role, rank, step, profiler), captures) for role, rank, step, profiler, captures in rows]
