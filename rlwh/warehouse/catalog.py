"""Read-only questions about the warehouse: what runs and files it holds, ad-hoc SQL."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import duckdb

from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.warehouse.session import connect_read, missing_warehouse


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple]
    statement: str = ""  # the SQL text that produced it (several-statement scripts show it)


def _fetch(cursor, statement: str = "") -> QueryResult:
    description = cursor.description if cursor is not None else None
    columns = [d[0] for d in description] if description else []
    return QueryResult(columns, cursor.fetchall() if columns else [], statement)


class Reader:
    """Questions asked on one read-only connection: a command that asks many (summary, a
    question a section) opens the file once, not once a question (an open costs 20-40 ms),
    and every answer comes from the same published warehouse."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self._con = con

    def query(self, sql: str, params: list | dict | None = None) -> QueryResult:
        """Run one SQL statement (parameters: ? with a list, $name with a dict)."""
        if not sql.strip():
            raise RlwhError("no SQL given")
        try:
            return _fetch(self._con.execute(sql, params or []), sql)
        except duckdb.Error as exc:
            raise RlwhError(f"query failed: {exc}") from exc


@contextlib.contextmanager
def reading(config: Config) -> Iterator[Reader]:
    """A Reader on the published warehouse, closed when the block ends."""
    con = connect_read(config)
    try:
        yield Reader(con)
    finally:
        con.close()


def query(config: Config, sql: str, params: list | dict | None = None) -> QueryResult:
    """Run one SQL statement (parameters: ? with a list, $name with a dict) on a read-only
    connection to the published warehouse."""
    if not sql.strip():
        raise RlwhError("no SQL given")
    with reading(config) as reader:
        return reader.query(sql, params)


def query_script(config: Config, sql: str, origin: str = "the SQL") -> list[QueryResult]:
    """Run every statement of `sql` in order on one read-only connection; one result each.

    DuckDB's execute() runs a whole script but returns only the last result, so the
    script is split with DuckDB's own parser (comments and quoted ';' handled) first.
    `origin` names where the SQL came from (an argument, a file, stdin) in errors.
    """
    con = connect_read(config)
    try:
        try:
            statements = con.extract_statements(sql)
        except duckdb.Error as exc:
            raise RlwhError(f"cannot parse {origin}: {exc}") from exc
        if not statements:
            raise RlwhError(f"no SQL statement in {origin} (only blanks or comments)")
        results = []
        for number, statement in enumerate(statements, 1):
            where = f"statement {number} of {len(statements)} in {origin}" if len(statements) > 1 else origin
            try:
                results.append(_fetch(con.execute(statement.query), statement.query.strip()))
            except duckdb.Error as exc:
                raise RlwhError(f"query failed ({where}): {exc}") from exc
        return results
    finally:
        con.close()


def runs(config: Config) -> QueryResult:
    """Every run with its roles, ranks, files and rows, newest ingest first. The counts mean
    what `rlwh ingest` and `rlwh summary` mean by them, counted over the same rows: roles
    and ranks are the distinct roles ('(none)' for a file that names none, a driver's log)
    and rank ids of the files rlwh read (ignored ones apart), files those files, rows the
    rows read from them."""
    return query(
        config,
        """select r.run, r.profile_dir, r.last_ingested_at,
             count(distinct coalesce(s.role, '(none)')) filter (where s.status <> 'ignored') as roles,
             count(distinct s.rank_id) filter (where s.status <> 'ignored') as ranks,
             count(s.source_id) filter (where s.status <> 'ignored') as files,
             count(s.source_id) filter (where s.status = 'failed') as failed,
             count(s.source_id) filter (where s.status = 'partial') as partial,
             count(s.source_id) filter (where s.status = 'ignored') as ignored,
             coalesce(sum(s.rows), 0) as rows
           from runs r left join sources s using (run)
           group by all
           order by r.last_ingested_at desc, r.run""",
    )


def sources(config: Config, run: str | None = None, status: str | None = None) -> QueryResult:
    """The ingest log, optionally for one run and one status. An unknown run is an error,
    as in every other command (an empty table read as "no file failed")."""
    found = query(
        config,
        """select run, kind, status, rows, role, rank_id, path, round(seconds, 3) as seconds, message
           from sources
           where (? is null or run = ?) and (? is null or status = ?)
           order by run, path""",
        [run, run, status, status],
    )
    if run is not None and not found.rows and not query(config, "select 1 from runs where run = ?", [run]).rows:
        raise RlwhError(f"no run named {run!r} in {config.db_path}: see `rlwh runs`")
    return found


def duckdb_shell_path() -> Path:
    """The duckdb CLI installed beside this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "duckdb"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("duckdb")
    if not found:
        raise RlwhError("the duckdb shell is not installed: run `make install` (it installs duckdb-cli)")
    return Path(found)


def shell_command(config: Config, write: bool = False) -> list[str]:
    """The argv that opens the duckdb shell on the warehouse (read-only unless `write`)."""
    if not config.db_path.exists():
        raise missing_warehouse(config.db_path)
    argv = [str(duckdb_shell_path())]
    if not write:
        argv.append("-readonly")
    return argv + [str(config.db_path)]
