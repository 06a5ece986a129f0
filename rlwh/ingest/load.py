"""Landing one parsed file in a warehouse connection: its rows under their keys, its
sources row, in one transaction that either lands all of it or records the failure.

The same code loads into an ingest's database (rlwh.ingest.landing) and into the scratch
DuckDB where a rank is built in a parse worker (rlwh.ingest.build), so both give the same rows.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import NamedTuple

import duckdb

from rlwh.errors import RlwhError
from rlwh.ingest.jobs import FACT_TABLES, RANK_OPTIONAL_TABLES, SHARED_TABLES, jobs
from rlwh.ingest.parse import ParseResult, failed_result
from rlwh.ingest.plan import FileResult, Planned, changed_since_planned, utc
from rlwh.sqltext import has_relation, rows_as_lists_sql, sql_literal
from rlwh.stacks import RECORD_STACKS, no_stacks_note
from rlwh.warehouse import derive

KEY_COLUMNS = ("run", "role", "rank_id", "capture", "source_id", "step")
KEY_TYPES = {"run": "varchar", "role": "varchar", "rank_id": "integer", "capture": "varchar", "source_id": "bigint",
             "step": "integer"}
# Tables whose captures start at their earliest event: (table, time column).
_EVENT_TIMES = (("cpu_ops", "ts_ns"), ("memory_records", "alloc_ns"), ("ranges", "start_ns"),
                ("memory_usage", "ts_ns"), ("npu_module_memory", "ts_ns"))


def ignored_result(reason: str | None) -> ParseResult:
    """What an ignored file 'parses' to: no rows, the reason as its message."""
    return {**failed_result(reason), "status": "ignored"}


class TablesWithStep:
    """Which tables of the connection's database have a step column (a table added by a
    later migration may not): each looked up as loading meets it (0.25 ms), then kept.
    Listing duckdb_columns() binds every view first: 13-17 ms, paid per landed batch."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self._known: dict[str, bool] = {}

    def __contains__(self, table: str) -> bool:
        if table not in self._known:
            self._known[table] = "step" in self._con.table(f"main.{table}").columns
        return self._known[table]


def _staged_select(table: str, parts: list[str], columns: list[str], has_step: bool = True) -> str:
    """SELECT over a reader's Parquet parts, adding the key columns it does not carry
    from the one-row _rlwh_keys table (values bound as parameters, never pasted)."""
    paths = "[" + ", ".join(sql_literal(p) for p in parts) + "]"
    if table in SHARED_TABLES:
        return f"select * from read_parquet({paths})"
    wanted = [k for k in KEY_COLUMNS if k != "step" or has_step or k in columns]
    keys = [f"coalesce(f.{k}, k.{k}) as {k}" if k in columns else f"k.{k}" for k in wanted]
    rest = [f'f."{c}"' for c in columns if c not in KEY_COLUMNS]
    return f"select {', '.join(keys + rest)} from read_parquet({paths}) as f cross join _rlwh_keys as k"


# The sources columns upsert_sources writes, with their types.
SOURCE_COLUMNS = {
    "source_id": "BIGINT", "run": "VARCHAR", "role": "VARCHAR", "rank_id": "INTEGER", "capture": "VARCHAR",
    "step": "INTEGER", "kind": "VARCHAR", "path": "VARCHAR", "bytes": "BIGINT", "mtime": "TIMESTAMP",
    "fingerprint": "VARCHAR", "status": "VARCHAR", "rows": "BIGINT", "message": "VARCHAR", "seconds": "DOUBLE",
    "ingested_at": "TIMESTAMP",
}


class SourceEntry(NamedTuple):
    """What a file's sources row says of it; `rank`: the facts its reader found (role, rank_id)."""
    file: Planned
    status: str
    rows: int
    message: str | None
    seconds: float
    rank: dict


def upsert_sources(con, run: str, entries: list[SourceEntry]) -> None:
    """The sources rows of `entries`, in one statement: a statement per file was 2-4 ms of
    each file of a run. A message names the file (and any other of the profile dir) by its
    path in the profile dir, as `path` and `rlwh check` name it."""
    stacked = _stacked_ops(con, [e.file for e in entries
                                 if e.file.source.kind in RECORD_STACKS and e.status in ("ok", "partial")])
    values: dict[str, list] = {column: [] for column in SOURCE_COLUMNS}
    for p, status, rows, message, seconds, rank in entries:
        s = p.source
        if p.source_id in stacked:
            message = with_notes(message, _no_stacks_note(p, *stacked[p.source_id]))
        if message:
            message = message.replace(str(s.path), s.rel_path)
            root = str(s.path)[: len(str(s.path)) - len(s.rel_path)]
            if len(root) > 1 and str(s.path).endswith(s.rel_path):  # another file of the profile dir
                message = re.sub(r"(?<![\w./-])" + re.escape(root), "", message)
        row = {"source_id": p.source_id, "run": run, "role": rank.get("role", s.role),
               "rank_id": rank.get("rank_id", s.rank_id), "capture": s.capture, "step": s.step, "kind": s.kind,
               "path": s.rel_path, "bytes": p.size, "mtime": utc(p.mtime), "fingerprint": p.fingerprint,
               "status": status, "rows": rows, "message": message, "seconds": seconds, "ingested_at": utc()}
        for column, value in row.items():
            values[column].append(value)
    reloaded = [e.file.source_id for e in entries if e.file.loaded_before]
    if reloaded:
        con.execute("delete from sources where list_contains(?, source_id)", [reloaded])
    con.execute(f"insert into sources by name select {rows_as_lists_sql(SOURCE_COLUMNS)}", list(values.values()))


def _stacked_ops(con, files: list[Planned]) -> dict[int, tuple[int, int]]:
    """(cpu_ops, those with a call stack) each trace of `files` landed, by source_id."""
    ids = [p.source_id for p in files if p.source_id is not None]
    if not ids:
        return {}
    found = con.execute("select source_id, count(*), count(stack_id) from cpu_ops "
                        "where source_id between ? and ? and list_contains(?, source_id) group by source_id",
                        [min(ids), max(ids), ids]).fetchall()
    counts = {source_id: (ops, with_stack) for source_id, ops, with_stack in found}
    return {i: counts.get(i, (0, 0)) for i in ids}


def _no_stacks_note(p: Planned, ops: int, with_stack: int) -> str | None:
    """The note of a trace whose landed cpu_ops carry no call stack (recorded without
    with_stack): it names the file and how to record them."""
    note = no_stacks_note(p.source.kind, ops) if with_stack == 0 else None
    return f"{p.source.rel_path}: {note}" if note else None


def storage_failed(exc: BaseException) -> bool:
    """The warehouse could not be written (a full disk, a file size limit): no file is to
    blame. A commit that failed so says it in a TransactionException, not an IOException."""
    return isinstance(exc, (duckdb.IOException, duckdb.FatalException)) or (
        isinstance(exc, duckdb.TransactionException) and "Could not write file" in str(exc))


def nothing_loaded_note(p: Planned, facts: list[str], rows: int) -> str:
    """What a file that gave none of its kind's fact rows says of itself."""
    loaded = "only its ranks row was loaded" if rows else "nothing was loaded from it"
    return f"{p.source.rel_path}: holds none of the rows a {p.source.kind} file gives ({', '.join(facts)}); {loaded}"


def with_notes(message: str | None, *notes: str | None) -> str | None:
    """The reader's message, then the guesses discovery or the reader made, in one text."""
    parts = [m for m in (message, *notes) if m]
    return "; ".join(parts) if parts else None


def _set_keys(con, run: str, p: Planned, rank: dict) -> None:
    s = p.source
    values = {
        "run": run,
        "role": rank.get("role", s.role),
        "rank_id": rank.get("rank_id", s.rank_id),
        "capture": s.capture,
        "source_id": p.source_id,
        "step": s.step,
    }
    columns = ", ".join(f"?::{KEY_TYPES[k]} as {k}" for k in values)
    con.execute(f"create or replace temp table _rlwh_keys as select {columns}", list(values.values()))


def _insert_rank(con, run: str, p: Planned, rank: dict) -> None:
    s = p.source
    con.execute(
        """insert into ranks (run, role, rank_id, capture, step, source_id, capture_started_ns, device,
             world_size, versions, profiler_config, parallel_groups, metadata)
           values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            run, rank.get("role", s.role), rank["rank_id"], s.capture, s.step, p.source_id,
            rank.get("capture_started_ns", s.capture_started_ns), rank.get("device"), rank.get("world_size"),
            *(json.dumps(rank.get(k)) if rank.get(k) is not None else None
              for k in ("versions", "profiler_config", "parallel_groups", "metadata")),
        ],
    )


def delete_rows_of(con, p: Planned) -> None:
    """Remove the rows an earlier version of the file loaded (a scan of every fact table,
    so skipped for files seen for the first time)."""
    if p.loaded_before:
        assert p.source_id is not None  # a target assigns it before loading
        derive.mark_source(con, p.source_id)
        for table in FACT_TABLES:
            con.execute(f"delete from {table} where source_id = ?", [p.source_id])


def load_file(con, run: str, p: Planned, parsed: ParseResult, with_step: TablesWithStep | None = None) -> FileResult:
    """Land one parsed file in one transaction; on any error nothing of it lands.

    with_step: the tables that have a step column (TablesWithStep, once per landing: what
    it has looked up, thousands of GMM dumps would otherwise look up each)."""
    con.execute("begin transaction")
    try:
        result, entry = _land(con, run, p, parsed, with_step)
        upsert_sources(con, run, [entry])
        _mark_derived(con, [(p, parsed)])
        con.execute("commit")
        return result
    except (duckdb.Error, RlwhError) as exc:
        with contextlib.suppress(duckdb.Error):
            con.execute("rollback")  # a commit that failed has rolled back already
        if storage_failed(exc):
            raise  # the warehouse could not be written (a full disk): no file is to blame
        message = str(exc) if isinstance(exc, RlwhError) else f"{p.source.rel_path}: loading failed: {exc}"
        con.execute("begin transaction")
        delete_rows_of(con, p)
        upsert_sources(con, run, [SourceEntry(p, "failed", 0, message, parsed["seconds"], {})])
        con.execute("commit")
        return FileResult(p.source.kind, p.source.rel_path, "failed", 0, message, parsed["seconds"], p.size)


def load_batch(con, run: str, files: list[tuple[Planned, ParseResult]],
               with_step: TablesWithStep | None = None) -> list[FileResult]:
    """Land several parsed files in one transaction: one commit, not one per file (a
    commit per rank was most of a many-rank landing, DESIGN.md). Each file still lands
    whole with its own sources row; if any of them cannot land, the whole transaction
    rolls back and each file lands alone (load_file), so the others lose nothing."""
    if len(files) == 1:
        return [load_file(con, run, *files[0], with_step)]
    con.execute("begin transaction")
    try:
        landed = [_land(con, run, p, parsed, with_step) for p, parsed in files]
        upsert_sources(con, run, [entry for _, entry in landed])
        _mark_derived(con, files)
        con.execute("commit")
        return [result for result, _ in landed]
    except (duckdb.Error, RlwhError) as exc:
        with contextlib.suppress(duckdb.Error):
            con.execute("rollback")
        if storage_failed(exc):
            raise
        return [load_file(con, run, p, parsed, with_step) for p, parsed in files]


def _mark_derived(con, files: list[tuple[Planned, ParseResult]]) -> None:
    """Mark the keys of the landed files whose kind feeds the derived tables, in one
    statement: a mark per file was a third of landing a file of a kind that feeds none."""
    derive.mark_sources(con, [p.source_id for p, parsed in files
                              if p.source_id is not None and parsed["status"] not in ("failed", "ignored")
                              and parsed["tables"] and derive.feeds_derived(jobs()[p.source.kind].fills)])


def _land(con, run: str, p: Planned, parsed: ParseResult,
          with_step: TablesWithStep | None) -> tuple[FileResult, SourceEntry]:
    """The statements that land one parsed file, inside the caller's transaction, and what
    its sources row says (the caller writes the rows of its files at once); raises
    duckdb.Error or RlwhError when it cannot land."""
    assert p.source_id is not None  # a target assigns it before loading
    s = p.source
    rank = dict(parsed.get("rank") or {})
    rank = {k: v for k, v in rank.items() if v is not None}
    reader_note = rank.pop("note", None)
    status, message = parsed["status"], parsed["message"]
    if status in ("ok", "partial"):
        message = with_notes(message, s.note, reader_note)
    rows = sum(n for t, n in parsed["rows"].items() if t in FACT_TABLES)
    role, rank_id = rank.get("role", s.role), rank.get("rank_id", s.rank_id)
    delete_rows_of(con, p)
    if status in ("failed", "ignored"):
        rows = 0
    else:
        job = jobs()[s.kind]
        with_step = TablesWithStep(con) if with_step is None else with_step
        staged = {t: _staged_select(t, parts, parsed["columns"][t], t in with_step)
                  for t, parts in parsed["tables"].items()}
        if rank_id is None and any(
            "rank_id" not in parsed["columns"][t] for t in parsed["tables"]
            if t not in SHARED_TABLES + RANK_OPTIONAL_TABLES
        ):
            raise RlwhError(f"{s.rel_path}: the rank is unknown (neither the file nor its path names it)")
        _set_keys(con, run, p, rank)
        for table in job.fills:
            staged.setdefault(table, f"select * from {table} limit 0")
        for table, sql in staged.items():
            con.execute(f"create or replace temp view _staged_{table} as {sql}")
        # A reader that found no rows stages none; a job may name its source's fields, which
        # an empty stand-in (the table's own columns) lacks, so it has nothing to land.
        if job.has_statements and parsed["tables"]:
            con.execute(job.sql)
        # Readers may name only the role and rank a file belongs to; a ranks row
        # needs facts about the rank beyond that.
        if set(rank) - {"role", "rank_id"} and role is not None and rank_id is not None:
            _insert_rank(con, run, p, {**rank, "role": role, "rank_id": rank_id})
            rows += 1
        facts = [t for t in job.fills if t in FACT_TABLES and t != "ranks"]
        if facts and not any(parsed["rows"].get(t) for t in facts) and parsed["message"] is None:
            message = with_notes(nothing_loaded_note(p, facts, rows), message)
    if status in ("ok", "partial") and (changed := changed_since_planned(p)):
        status, message = "partial", with_notes(changed, message)
    return (FileResult(s.kind, s.rel_path, status, rows, message, parsed["seconds"], p.size),
            SourceEntry(p, status, rows, message, parsed["seconds"], rank))


def set_capture_starts(con, run: str, captures: set) -> None:
    """An Ascend capture starts at its earliest recorded event (on the epoch clock).

    Its files load in separate transactions and any order, so this runs once all of them
    have: the ranks row from profiler_info holds the profiler's own start until then.
    """
    names = sorted(c for c in captures if c)
    if not names:
        return
    present = {table for table, _ in _EVENT_TIMES if has_relation(con, table)}
    epoch_only = {"ranges": "and clock = 'epoch' "}
    firsts = " union all ".join(
        f"select capture, min({column}) as first_ns from {table} where run = $run and capture in "
        f"(select unnest($captures)) {epoch_only.get(table, '')}group by capture"
        for table, column in _EVENT_TIMES if table in present
    )
    con.execute("begin transaction")
    try:
        con.execute(
            f"""update ranks set capture_started_ns = e.first_ns
                from (select capture, min(first_ns) as first_ns from ({firsts}) group by capture) as e
                where ranks.run = $run and ranks.capture = e.capture and e.first_ns is not null""",
            {"run": run, "captures": names},
        )
        con.execute("commit")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("rollback")
        raise
