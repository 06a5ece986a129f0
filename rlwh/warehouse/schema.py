"""Migrations and views: bring a warehouse to the current schema.

Migrations (migrations/NNNN_*.sql) hold table DDL, each applied once and recorded in
internal.migrations; one that adds derived tables says so and they are filled once the
views are in place. Views (sql/*.sql) are created in the order their `-- depends:` lines
give, and the comments in their files become COMMENT ON VIEW/COLUMN so BI tools show
what each column means.

`migrate` does all of it in one transaction (a new warehouse's ~450 DDL statements each
committed on their own cost ~0.4 s more), and installs the views only when a migration
ran or the view files differ from those installed (their digest, VIEWS_DIGEST in
internal.settings): an unchanged re-ingest re-creates nothing.

Two schemas. `main` holds the public tables and views only, what a BI tool lists; rlwh's
own helpers (derived tables, settings, the migrations table, helper views in
sql/internal/, the source id sequence) live in the schema `internal` (PRIVATE_SCHEMA).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from rlwh.assets import asset_dir
from rlwh.errors import RlwhError
from rlwh.sqltext import has_relation, one_value, sql_ident, sql_literal

# rlwh's private objects: everything a BI user should not have to list.
PRIVATE_SCHEMA = "internal"
MIGRATIONS_TABLE = f"{PRIVATE_SCHEMA}.migrations"
SETTINGS_TABLE = f"{PRIVATE_SCHEMA}.settings"  # name -> value; created by migration 0010
SETTINGS_COLUMNS = {"name": "varchar", "value": "varchar"}
# Where a warehouse written before migration 0010 records its migrations.
LEGACY_MIGRATIONS_TABLE = "_rlwh_migrations"  # its name before 0010, in main
# The table that makes a DuckDB file a Parquet dataset's thin file (rlwh.parquet.dataset).
THIN_MARKER = f"{PRIVATE_SCHEMA}.dataset"

# A migration holding this line adds or changes derived tables: they are recomputed after it.
AFTER_REFRESH = "-- after: refresh derived tables"
MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# The internal.settings row holding the digest of the view files installed (views_digest).
VIEWS_DIGEST = "installed_views"


@dataclass
class ViewFile:
    """One sql/ file: a view, its docs and what it depends on; or a file of sql/internal/
    holding only macros (kind 'macros', named internal.<file name>), rules that views and
    derived tables share."""

    name: str  # schema-qualified for a private view: internal.stack_frames
    path: Path
    sql: str
    depends: list[str]
    comment: str
    column_comments: dict[str, str] = field(default_factory=dict)
    kind: str = "view"

    @property
    def is_public(self) -> bool:
        """A view of `main` (sql/*.sql), not a helper of `internal` (sql/internal/*.sql)."""
        return "." not in self.name


def migration_files() -> list[tuple[int, Path]]:
    files = []
    for path in sorted(asset_dir("migrations").glob("*.sql")):
        match = MIGRATION_NAME.match(path.name)
        if not match:
            raise RlwhError(f"migration file name must look like 0001_create_things.sql: {path.name}")
        files.append((int(match.group(1)), path))
    return files


def migrations_table(con: duckdb.DuckDBPyConnection) -> str | None:
    """The table that records this warehouse's migrations: internal.migrations, or in a
    warehouse not yet migrated past 0009 main's legacy one (a read-only connection cannot
    move it); None in an empty file."""
    for table in (MIGRATIONS_TABLE, LEGACY_MIGRATIONS_TABLE):
        if has_relation(con, table):
            return table
    return None


def is_thin(con: duckdb.DuckDBPyConnection) -> bool:
    """True on a dataset's thin file (rlwh.parquet.dataset): its tables are views over Parquet."""
    return has_relation(con, THIN_MARKER)


def thin_generation(con: duckdb.DuckDBPyConnection) -> tuple[str, str] | None:
    """(dataset root, generation folder name) a thin file's views stand over; None on a
    warehouse that is no thin file."""
    if not is_thin(con):
        return None
    row = con.execute(f"select root, generation from {THIN_MARKER}").fetchone()
    return (row[0], row[1]) if row else None


def thin_next_source_id(con: duckdb.DuckDBPyConnection) -> int | None:
    """The first source id no group of a thin file's dataset uses, as its manifest records
    it; None on a warehouse, or where the manifest (or a thin file built before) does not say."""
    if not is_thin(con):
        return None
    try:
        row = con.execute(f"select next_source_id from {THIN_MARKER}").fetchone()
    except duckdb.BinderException:  # a thin file built before the column
        return None
    return row[0] if row else None


def applied_migrations(con: duckdb.DuckDBPyConnection) -> list[tuple[int, str]]:
    table = migrations_table(con)
    if table is None:
        return []
    return con.execute(f"select version, name from {table} order by version").fetchall()


def pending_migrations(con: duckdb.DuckDBPyConnection) -> list[tuple[int, Path]]:
    done = {version for version, _ in applied_migrations(con)}
    return [(v, p) for v, p in migration_files() if v not in done]


def migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Apply pending migrations and, when they or the view files changed, re-install the
    views, in one transaction: a failure leaves the file as it was. Returns the applied names."""
    con.execute("begin transaction")
    try:
        applied = _apply_pending(con)
        if applied or installed_views_digest(con) != views_digest():
            install_views(con)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    return applied


def _apply_pending(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Apply every pending migration in the caller's transaction; returns their names."""
    _create_migrations_table(con)
    applied = []
    for version, path in pending_migrations(con):
        try:
            con.execute(path.read_text(encoding="utf-8"))
            con.execute(
                f"insert into {MIGRATIONS_TABLE} values (?, ?, ?)",
                [version, path.name, datetime.now(timezone.utc).replace(tzinfo=None)],
            )
        except duckdb.Error as exc:
            raise RlwhError(f"migration {path.name} failed: {exc}") from exc
        applied.append(path.name)
    return applied


def _create_migrations_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create the private schema and internal.migrations (in the caller's transaction); a
    warehouse written before 0010 has main's legacy table, whose rows move here first
    (0010 moves the other objects)."""
    if has_relation(con, MIGRATIONS_TABLE) and not has_relation(con, LEGACY_MIGRATIONS_TABLE):
        return
    try:
        con.execute(f"create schema if not exists {PRIVATE_SCHEMA}")
        con.execute(
            f"create table if not exists {MIGRATIONS_TABLE} ("
            " version integer primary key, name varchar not null, applied_at timestamp not null)"
        )
        con.execute(f"comment on table {MIGRATIONS_TABLE} is "
                    "'The migrations (migrations/*.sql) this warehouse has, and when each was applied.'")
        if has_relation(con, LEGACY_MIGRATIONS_TABLE):
            con.execute(f"insert or ignore into {MIGRATIONS_TABLE} select * from main.{LEGACY_MIGRATIONS_TABLE}")
            con.execute(f"drop table main.{LEGACY_MIGRATIONS_TABLE}")
    except duckdb.Error as exc:
        raise RlwhError(f"cannot create {MIGRATIONS_TABLE}: {exc}") from exc


def adds_derived_tables(applied: list[str]) -> bool:
    """True when one of the `applied` migrations adds or changes derived tables: they start
    empty and the writer that migrated must fill them (rlwh.warehouse.derive.catch_up)."""
    folder = asset_dir("migrations")
    return any(AFTER_REFRESH in (folder / name).read_text(encoding="utf-8") for name in applied)


def tables_with_column(con: duckdb.DuckDBPyConnection, column: str, catalog: str,
                       schemas: tuple[str, ...] = ("main", PRIVATE_SCHEMA)) -> list[str]:
    """The base tables of `catalog` (an attached database's name) that have `column`, as
    schema.table (main.x, internal.y)."""
    return [f"{schema}.{table}" for schema, table in con.execute(
        """select c.schema_name, c.table_name from duckdb_columns() as c
           join duckdb_tables() as t using (database_name, schema_name, table_name)
           where c.database_name = ? and c.column_name = ? and list_contains(?, c.schema_name)
             and not t.temporary
           order by all""", [catalog, column, list(schemas)]).fetchall()]


def is_current(con: duckdb.DuckDBPyConnection) -> bool:
    """True when no migration is pending (read-only connections cannot migrate)."""
    return not pending_migrations(con)


_CREATE_VIEW = re.compile(
    r"create\s+or\s+replace\s+view\s+((?:[a-z_][a-z0-9_]*\.)?[a-z_][a-z0-9_]*)\s*(\()?", re.IGNORECASE)
_CREATE_MACRO = re.compile(r"^create\s+or\s+replace\s+macro\s+((?:[a-z_][a-z0-9_]*\.)?[a-z_][a-z0-9_]*)",
                           re.IGNORECASE | re.MULTILINE)


def _file_label(path: Path) -> str:
    """sql/x.sql or sql/internal/x.sql, as messages name it."""
    return f"{path.parent.name}/{path.name}"


def parse_view_file(path: Path) -> ViewFile:
    """Read a view file's name, dependencies and comments. A file of sql/ defines a public
    view of that name; one of sql/internal/ a helper view of the private schema
    (sql/internal/stack_frames.sql: internal.stack_frames)."""
    sql = path.read_text(encoding="utf-8")
    label = _file_label(path)
    private = path.parent.name == PRIVATE_SCHEMA
    match = _CREATE_VIEW.search(sql)
    macros = list(_CREATE_MACRO.finditer(sql))
    if not match and private and macros:
        outside = [m.group(1) for m in macros if not m.group(1).startswith(f"{PRIVATE_SCHEMA}.")]
        if outside:
            raise RlwhError(f"{label}: macro {outside[0]} must be created in schema {PRIVATE_SCHEMA} "
                            f"({PRIVATE_SCHEMA}.{outside[0].split('.')[-1].lstrip('_')})")
        depends, comment = _head(sql[: macros[0].start()])
        return ViewFile(f"{PRIVATE_SCHEMA}.{path.stem}", path, sql, depends, comment, kind="macros")
    if not match:
        raise RlwhError(f"{label}: no CREATE OR REPLACE VIEW statement")
    name = match.group(1)
    expected = f"{PRIVATE_SCHEMA}.{path.stem}" if private else path.stem
    if name != expected:
        raise RlwhError(f"{label} defines view {name}; it must define {expected} (the file's name"
                        + (f", in schema {PRIVATE_SCHEMA})" if private else ")"))
    if not private and name.startswith("_"):
        raise RlwhError(f"{label}: a private helper view goes in sql/{PRIVATE_SCHEMA}/ (schema {PRIVATE_SCHEMA}), "
                        "so the main schema holds public objects only")
    depends, comment = _head(sql[: match.start()])
    columns: dict[str, str] = {}
    if match.group(2):
        body = sql[match.end():]
        pending: list[str] = []
        for line in body.splitlines():
            stripped = line.strip()
            if stripped.startswith(")"):
                break
            if stripped.startswith("--"):
                pending.append(stripped[2:].strip())
            elif stripped:
                column = stripped.rstrip(",").strip().strip('"')
                columns[column] = " ".join(pending)
                pending = []
    return ViewFile(name, path, sql, depends, comment, columns)


def _head(text: str) -> tuple[list[str], str]:
    """The `-- depends:` names and the comment of the lines before a file's first statement."""
    depends: list[str] = []
    comment_lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.lower().startswith("-- depends:"):
            depends += [d.strip() for d in stripped.split(":", 1)[1].split(",") if d.strip()]
        elif stripped.startswith("--"):
            comment_lines.append(stripped[2:].strip())
        elif not stripped:
            comment_lines.append("")
    return depends, " ".join(" ".join(comment_lines).split())


def view_files() -> list[ViewFile]:
    """Every sql/ and sql/internal/ file, ordered so each view comes after what it depends on."""
    folder = asset_dir("sql")
    paths = sorted(folder.glob("*.sql")) + sorted((folder / PRIVATE_SCHEMA).glob("*.sql"))
    return list(_ordered_views(tuple((p, st.st_mtime_ns, st.st_size) for p in paths for st in [p.stat()])))


@functools.lru_cache(maxsize=8)
def _ordered_views(files: tuple[tuple[Path, int, int], ...]) -> tuple[ViewFile, ...]:
    """view_files of these (path, mtime, size): parsed once per process while the files stay
    as they are (every migrate and template lookup asks; parsing them all took 8 ms)."""
    views = {v.name: v for v in (parse_view_file(p) for p, _, _ in files)}
    ordered: list[ViewFile] = []
    state: dict[str, str] = {}

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if state.get(name) == "done":
            return
        if name in chain:
            raise RlwhError(f"view dependency cycle: {' -> '.join(chain + (name,))}")
        view = views.get(name)
        if view is None:
            raise RlwhError(f"{chain[-1]} depends on {name}, which has no file in sql/ (or sql/{PRIVATE_SCHEMA}/)")
        for dep in view.depends:
            if dep in views:
                visit(dep, chain + (name,))
        state[name] = "done"
        ordered.append(view)

    for name in views:
        visit(name, ())
    return tuple(ordered)


# The key columns mean one thing in every table and view, so their comments have one home:
# whatever a migration or a view file says, these texts are what BI tools show.
KEY_COLUMN_COMMENTS = {
    "run": "Run name: the profile dir's name unless set with --run.",
    "role": ("Role (rollout, actor_update, ...): rlwh ingest --role, else warehouse.toml's [roles] mapping of "
             "folders, else profiler_metadata.json's role, else the nearest folder above the capture that is "
             "no rank, step, capture or profiler-level folder (a GMM dump: its layout's); NULL when nothing "
             "names one. An NVTX or MSTX range is a phase inside its capture's role, never a role."),
    "rank_id": ("Global rank: the file's own (profiler_info, distributedInfo.rank, RANK=), else a rank in the "
                "path, else 0 for a single-process trace; NULL when nothing names one."),
    "capture": ("The capture: its path relative to the profile dir (an Ascend rank dir, a trace or snapshot "
                "file, a GMM dump folder). Two captures never merge, whatever their names."),
    "step": ("Training step: the profiler's own where the source records one, else the step the capture's "
             "path names (step_<n>, step<n> or an all-digit folder); NULL when none."),
    "source_id": "The sources row (the file) this row came from.",
}


def comment_key_columns(con: duckdb.DuckDBPyConnection) -> None:
    """Give every public table's and view's key columns their one comment."""
    rows = con.execute(
        """select table_name, column_name from duckdb_columns()
           where database_name = current_database() and schema_name = 'main'
             and list_contains($keys, column_name)""",
        {"keys": list(KEY_COLUMN_COMMENTS)},
    ).fetchall()
    for table, column in rows:
        con.execute(f"comment on column {sql_ident(table)}.{sql_ident(column)} is "
                    f"{sql_literal(KEY_COLUMN_COMMENTS[column])}")


def views_digest(views: list[ViewFile] | None = None) -> str:
    """A digest of what install_views installs: every view file (`views`, default all of
    them) and the key columns' comments."""
    digest = hashlib.sha256()
    for view in view_files() if views is None else views:
        digest.update(f"{view.name}\0{view.sql}\0".encode())
    digest.update(repr(sorted(KEY_COLUMN_COMMENTS.items())).encode())
    return digest.hexdigest()


def installed_views_digest(con: duckdb.DuckDBPyConnection) -> str | None:
    """The digest of the views install_views last installed here; None before any (or in a
    warehouse from before the digest was kept)."""
    if not has_relation(con, SETTINGS_TABLE):
        return None
    return one_value(con.execute(f"select max(value) from {SETTINGS_TABLE} where name = ?", [VIEWS_DIGEST]))


def install_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every view and its comments, then the key columns' one comment; record
    their digest in internal.settings so an unchanged warehouse is not redone."""
    views = view_files()
    for view in views:
        try:
            con.execute(view.sql)
        except duckdb.Error as exc:
            raise RlwhError(f"{_file_label(view.path)} failed: {exc}") from exc
        if view.kind == "macros":
            continue  # rules for rlwh's own SQL: no view to comment
        if view.comment:
            con.execute(f"comment on view {view.name} is {sql_literal(view.comment)}")
        for column, text in view.column_comments.items():
            if not text:
                continue
            try:
                con.execute(f'comment on column {view.name}."{column}" is {sql_literal(text)}')
            except duckdb.Error as exc:
                # DuckDB attaches column comments to the select's own output names, not
                # to the view's column list, so the two must agree.
                raise RlwhError(
                    f"{_file_label(view.path)}: the select must itself name column {column!r} "
                    f"(alias it in the final select): {exc}"
                ) from exc
    comment_key_columns(con)
    con.execute(f"delete from {SETTINGS_TABLE} where name = ?", [VIEWS_DIGEST])
    con.execute(f"insert into {SETTINGS_TABLE} values (?, ?)", [VIEWS_DIGEST, views_digest(views)])
