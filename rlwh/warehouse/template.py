"""A new warehouse's schema, made once and copied.

Creating the schema (every migration, the views and their ~430 comments) costs DuckDB
~0.5 s of DDL, most of a small ingest's time. So the first writer to create a warehouse
builds the schema once into a template file in the user's cache folder, named by a digest
of what it holds (the migration and view files, the DuckDB version, the storage version),
and every new warehouse after it starts as a copy of that file. A copy is exactly what
`migrate` makes of an empty file (tests/test_schema.py holds the two equal, object by
object); only the migrations' applied_at is set when the copy is made.

The template is written to a temporary name and renamed, so a reader never sees half of
one; where the cache folder cannot be written, or a template cannot be read, the writer
migrates its empty file in place as before. RLWH_CACHE_DIR names another cache folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import duckdb

from rlwh.errors import RlwhError
from rlwh.warehouse.schema import MIGRATIONS_TABLE, migrate, migration_files, views_digest
from rlwh.warehouse.storage import STORAGE_VERSION, connect_writable

KEEP_TEMPLATES = 4  # older ones (other rlwh versions) are removed when a new one is built


def cache_dir() -> Path:
    """RLWH_CACHE_DIR, else $XDG_CACHE_HOME/rlwh, else ~/.cache/rlwh."""
    named = os.environ.get("RLWH_CACHE_DIR")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "rlwh"


def schema_digest() -> str:
    """What the template holds: the migration files, the view files, DuckDB and the storage version."""
    digest = hashlib.sha256(f"{duckdb.__version__}\0{STORAGE_VERSION}\0{views_digest()}\0".encode())
    for _, path in migration_files():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def template_path() -> Path:
    return cache_dir() / f"schema-{schema_digest()}.duckdb"


def build_once(path: Path, write: Callable[[duckdb.DuckDBPyConnection], object] = migrate) -> Path:
    """`path` (in the cache folder), made by `write` on an empty file when it is missing:
    under a temporary name, then renamed, so a reader never sees half of one. Files of its
    kind (its name up to the first '-') beyond the newest KEEP_TEMPLATES are removed (other
    rlwh versions')."""
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        con = connect_writable(tmp)
        try:
            write(con)
            con.execute("checkpoint")
        finally:
            con.close()
        os.replace(tmp, path)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    kind = path.name.split("-", 1)[0]
    old = sorted(path.parent.glob(f"{kind}-*.duckdb"), key=lambda p: p.stat().st_mtime, reverse=True)
    for stale in old[KEEP_TEMPLATES:]:
        with contextlib.suppress(OSError):
            stale.unlink()
    return path


def copy_schema(work: Path) -> bool:
    """Start the new file `work` as a copy of the template (built first if missing); False
    when there is none to copy (the cache folder cannot be written), `work` left absent."""
    try:
        shutil.copyfile(build_once(template_path()), work)
        return True
    except (OSError, duckdb.Error, RlwhError):
        with contextlib.suppress(FileNotFoundError):
            work.unlink()
        return False


def schema_into_memory(con: duckdb.DuckDBPyConnection) -> None:
    """Give the empty in-memory database of `con` the schema: the template's copy, else
    migrated where there is no template to copy."""
    if not copy_into_memory(con):
        migrate(con)


def copy_into_memory(con: duckdb.DuckDBPyConnection) -> bool:
    """Give the empty in-memory database of `con` (its catalog `memory`) the schema, copied
    from the template (0.05 s where migrate takes 0.5 s); False when there is no template
    to copy, the database left empty (the caller migrates it)."""
    try:
        path = build_once(template_path())
        con.execute(f"attach '{path}' as _rlwh_template (read_only)")
    except (OSError, duckdb.Error, RlwhError):
        return False
    try:
        con.execute("copy from database _rlwh_template to memory")
    finally:
        con.execute("detach _rlwh_template")
    return True


def stamp_copy(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Date the copy's migrations now (applied to this warehouse now); returns their names."""
    con.execute(f"update {MIGRATIONS_TABLE} set applied_at = ?", [datetime.now(timezone.utc).replace(tzinfo=None)])
    return [name for (name,) in con.execute(f"select name from {MIGRATIONS_TABLE} order by version").fetchall()]
