"""The writer reads the files itself: the formats DuckDB reads (Ascend trace_view.json and
CSVs) go from disk straight into the warehouse, and so do the MoE expert-count dumps (small
pickles rlwh.readers.gmm decodes, staged a batch to one file), with no worker process and
no staging file per file.

A batch of changed files of one kind is one transaction, of the warehouse's own connection
or, for the kinds that add no rows every run shares and DuckDB reads (the CSVs), of a second
connection beside it (read_and_land's two lanes): the reader's `read_in_place(con, paths,
context, scratch)` reads all of them in one statement per table on DuckDB's threads into
temp tables `_rows_<table>` (each row with `_file`, its file's index in the batch), and
`land` runs the job's landing SQL once over the batch, every row under its own file's keys,
with a `sources` row per file. A run is many modest files, so per-file work (a process, a
connection, a staging file, a statement, a commit) was the cost of the pipeline this
replaces (DESIGN.md, BENCHMARKS.md 2026-12-03).

Each file still lands whole or not at all: a reader may fail one file of its batch itself (a
damaged expert-count dump: it lands no row and says why), and if anything else in a batch
fails, the batch rolls back and each file is read alone the same way; a file that fails
alone too is read by its reader's per-file `read` (which names the damage and salvages a cut
trace to its last complete event) and landed by rlwh.ingest.load, as the worker-parsed
formats are.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import time
from pathlib import Path
from typing import Callable

import duckdb

from rlwh import interrupts
from rlwh.errors import RlwhError
from rlwh.ingest.jobs import FACT_TABLES, SHARED_TABLES, jobs
from rlwh.ingest.load import (
    KEY_COLUMNS,
    KEY_TYPES,
    SourceEntry,
    TablesWithStep,
    delete_rows_of,
    load_file,
    nothing_loaded_note,
    storage_failed,
    upsert_sources,
    with_notes,
)
from rlwh.ingest.parse import parse_source
from rlwh.ingest.plan import FileResult, Planned, changed_since_planned, file_context
from rlwh.readers.base import ReadOutcome
from rlwh.safe_files import pause_for_test
from rlwh.sqltext import rows_as_lists_sql
from rlwh.warehouse import derive

# A batch holds at most BATCH_FILES files and BATCH_BYTES bytes of input: its temp tables
# (the kept events, no stack texts) spill past the connection's memory limit, and a run of
# 1,000 ranks is just more batches (a reader of tiny files may allow more: files_per_batch).
# A file of BATCH_BYTES / 2 or more is read alone.
BATCH_FILES = 32
BATCH_BYTES = 256 * 2**20


def reads_in_place(kind: str) -> bool:
    """Whether the reader of `kind` reads its files in the warehouse's connection."""
    return jobs()[kind].in_place_function() is not None


def files_per_batch(kind: str) -> int:
    """At most this many files of `kind` in a batch: BATCH_FILES, or its reader's own
    IN_PLACE_BATCH_FILES (a kind of tiny files, whose batches cost their ~10 statements)."""
    return jobs()[kind].reader_setting("IN_PLACE_BATCH_FILES", BATCH_FILES)


def batches(files: list[Planned]) -> list[list[Planned]]:
    """`files` (in their order) cut into batches of one kind by the rule above."""
    found: list[list[Planned]] = []
    open_batches: dict[str, list[Planned]] = {}
    for p in files:
        if p.size >= BATCH_BYTES // 2:
            found.append([p])
            continue
        current = open_batches.setdefault(p.source.kind, [])
        if current and (len(current) >= files_per_batch(p.source.kind)
                        or sum(f.size for f in current) + p.size > BATCH_BYTES):
            found.append(current)
            current = open_batches[p.source.kind] = []
        current.append(p)
    return found + [b for b in open_batches.values() if b]


def read_and_land(con, run: str, files: list[Planned], config, parts: Path,
                  landed: Callable[[list[Planned]], None]) -> list[FileResult]:
    """Read and land every file of `files` (kinds that read in place), batch by batch;
    `landed(files)` after each commit. Batches that add rows every run shares (a trace's
    call stacks) land one after another on `con`; the others (the CSVs) at the same time,
    on a second connection (_SecondLane): a trace batch's Python work on its stack texts
    and a CSV batch's scan, which keeps its records' order on one thread, then use both
    cores (64 ranks: 11.9 -> 10.0 s)."""
    todo = batches(files)
    shared, apart = lanes(todo)
    lane = _SecondLane(con, run, apart, config, _fresh(parts / "second-lane"))
    results: dict[int, list[FileResult]] = {}  # by batch (id), returned in the batches' order
    try:
        lane.start()
        for batch in shared:
            results[id(batch)] = _batch(con, run, batch, config, parts)
            pause_for_test("between_files")
            landed(batch)
            lane.report(landed)
            if lane.error is not None:
                break  # raised below, once the lane has ended
        if apart:
            pause_for_test("waiting_for_the_second_lane")
        while not lane.ended.wait(0.2):  # a timeout, for progress
            lane.report(landed)
    except BaseException:
        lane.stop()
        raise
    finally:
        lane.close()
    lane.report(landed)
    if lane.error is not None:
        raise lane.error
    if apart:  # the second connection's marks are its own (a temp table): mark its files' keys here
        derive.mark_sources(con, [p.source_id for batch in apart for p in batch if p.source_id is not None
                                  and derive.feeds_derived(jobs()[p.source.kind].fills)])
    results.update(lane.results)
    return [r for batch in todo for r in results[id(batch)]]


def lanes(todo: list[list[Planned]]) -> tuple[list[list[Planned]], list[list[Planned]]]:
    """(the batches for the warehouse's connection, those for the second lane): the batches
    that add rows every run shares stay on the first, and so do those a reader decodes in
    Python (IN_PLACE_IN_PYTHON: beside the first lane's Python work they gain nothing, the
    GIL being one); all on the first when either list is empty."""
    def first(kind: str) -> bool:
        job = jobs()[kind]
        return bool(set(job.fills) & set(SHARED_TABLES)) or job.reader_setting("IN_PLACE_IN_PYTHON", False)

    shared = [b for b in todo if first(b[0].source.kind)]
    apart = [b for b in todo if not first(b[0].source.kind)]
    return (shared, apart) if shared and apart else (todo, [])


class _SecondLane(interrupts.StatementThread):
    """Batches read and landed on a cursor of the warehouse connection (its own
    transactions, temp tables and marks), beside the caller's; `report` hands the caller
    the batches landed so far, for its progress."""

    def __init__(self, con, run: str, todo: list[list[Planned]], config, parts: Path):
        super().__init__(con.cursor(), self._land_all, name="rlwh-second-lane")
        self.todo, self.run_name, self.config, self.parts = todo, run, config, parts
        self.results: dict[int, list[FileResult]] = {}
        self.error: BaseException | None = None
        self.finished: queue.SimpleQueue[list[Planned]] = queue.SimpleQueue()
        self.stopping = False

    def _land_all(self, cursor) -> None:
        try:
            for batch in self.todo:
                if self.stopping:
                    return
                self.results[id(batch)] = _batch(cursor, self.run_name, batch, self.config, self.parts)
                self.finished.put(batch)
        except BaseException as exc:  # raised in the caller's thread, once it has ended
            self.error = exc

    def report(self, landed: Callable[[list[Planned]], None]) -> None:
        while not self.finished.empty():
            landed(self.finished.get())

    def stop(self) -> None:
        """Start no other batch, and interrupt its statement (its batch rolls back)."""
        self.stopping = True
        super().stop()


def _batch(con, run: str, files: list[Planned], config, parts: Path) -> list[FileResult]:
    """One batch in one transaction; on any failure each file alone, then by its `read`."""
    started = time.perf_counter()
    read = jobs()[files[0].source.kind].in_place_function()
    scratch = parts / "in-place"  # a reader's scratch files (the pieces of a big trace)
    con.execute("begin transaction")
    try:
        outcomes = read(con, [p.source.path for p in files], file_context(files[0], config), scratch)
        results = land(con, run, files, outcomes, (time.perf_counter() - started) / len(files))
        con.execute("commit")
        return results
    except Exception as exc:  # a damaged file, a reader bug, memory: each file alone says which
        with contextlib.suppress(duckdb.Error):
            con.execute("rollback")
        interrupts.reraise_if_seen()  # DuckDB's "query interrupted" is Ctrl-C, no fact about a file
        if isinstance(exc, duckdb.InterruptException):
            raise  # stopped by the other lane (_SecondLane.stop): no fact about a file either
        if storage_failed(exc):
            raise  # the warehouse could not be written (a full disk): no file is to blame
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if len(files) > 1:
        return [r for p in files for r in _batch(con, run, [p], config, parts)]
    p = files[0]
    return [load_file(con, run, p, parse_source(p.source.kind, str(p.source.path), file_context(p, config),
                                                  str(_fresh(parts / f"alone-{p.source_id}"))))]


def _fresh(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _set_batch_keys(con, run: str, files: list[Planned]) -> None:
    """`_batch_keys`: the keys each file's rows land under, by the file's index in the batch."""
    lists = [list(range(len(files))), [run] * len(files), [p.source.role for p in files],
             [p.source.rank_id for p in files], [p.source.capture for p in files], [p.source_id for p in files],
             [p.source.step for p in files]]
    types = {"_file": "integer", **{k: KEY_TYPES[k] for k in KEY_COLUMNS}}
    con.execute(f"create or replace temp table _batch_keys as select {rows_as_lists_sql(types)}", lists)


def _staged_view(con, table: str, has_step: bool) -> None:
    """`_staged_<table>`: the batch's rows of `table` under their files' keys, what the
    job's landing SQL reads (the same name the per-file route gives its staged rows). A
    key the rows carry themselves (a device row's step) wins over its file's."""
    if table in SHARED_TABLES:
        con.execute(f"create or replace temp view _staged_{table} as select * from _rows_{table}")
        return
    own = set(con.table(f"_rows_{table}").columns)  # duckdb_columns() would list every table's: 2-14 ms
    keys = [f"coalesce(f.{k}, k.{k}) as {k}" if k in own else f"k.{k}" for k in KEY_COLUMNS
            if k != "step" or has_step or k in own]
    rest = ", ".join(f'f."{c}"' for c in sorted(own - set(KEY_COLUMNS) - {"_file"}))
    con.execute(f"create or replace temp view _staged_{table} as "
                f"select {', '.join(keys)}, {rest} from _rows_{table} f join _batch_keys k using (_file)")


def _rows_per_file(con, tables: list[str]) -> dict[int, int]:
    """Fact rows each file of the batch gives, by its index."""
    if not tables:
        return {}
    counts = " union all ".join(f"select _file from _rows_{t}" for t in tables)
    return dict(con.execute(f"select _file, count(*) from ({counts}) group by _file").fetchall())


def land(con, run: str, files: list[Planned], outcomes: list[ReadOutcome], seconds: float) -> list[FileResult]:
    """Land the batch the reader left in `_rows_<table>`, inside the caller's transaction:
    old rows of reloaded files out, the job's landing SQL once, a sources row per file.
    Raises duckdb.Error or RlwhError when it cannot land."""
    job = jobs()[files[0].source.kind]
    for p, outcome in zip(files, outcomes):
        if outcome.rank:
            raise RlwhError(f"{p.source.rel_path}: an in-place reader gave rank facts, which only the per-file "
                            "route lands")
        if p.source.rank_id is None:
            raise RlwhError(f"{p.source.rel_path}: the rank is unknown (neither the file nor its path names it)")
        delete_rows_of(con, p)
    _set_batch_keys(con, run, files)
    with_step = TablesWithStep(con)
    for table in job.fills:
        _staged_view(con, table, table in with_step)
    con.execute(job.sql)
    if derive.feeds_derived(job.fills):
        derive.mark_sources(con, [p.source_id for p in files if p.source_id is not None])
    facts = [t for t in job.fills if t in FACT_TABLES]
    rows = _rows_per_file(con, facts)
    results: list[FileResult] = []
    sources: list[SourceEntry] = []
    for i, (p, outcome) in enumerate(zip(files, outcomes)):
        status, message = outcome.status, outcome.message
        if status != "failed":  # a file a reader refused says why, as one landed alone would
            message = with_notes(message, p.source.note)
            if not rows.get(i) and outcome.message is None:
                message = with_notes(nothing_loaded_note(p, facts, 0), message)
            if changed := changed_since_planned(p):
                status, message = "partial", with_notes(changed, message)
        sources.append(SourceEntry(p, status, rows.get(i, 0), message, seconds, {}))
        results.append(FileResult(p.source.kind, p.source.rel_path, status, rows.get(i, 0), message, seconds, p.size))
    upsert_sources(con, run, sources)
    for table in job.fills:
        con.execute(f"drop view _staged_{table}")
        con.execute(f"drop table _rows_{table}")
    return results

