"""A Parquet dataset as the warehouse of big runs: generations of hive-partitioned files,
published atomically, and a thin DuckDB file of views over the current one.

Layout of a dataset ROOT:

    ROOT/_rlwh_dataset.json                        marker: this folder is an rlwh dataset
    ROOT/current -> gen-000007                     symlink to the newest complete generation
    ROOT/gen-000007/_manifest.json                 written last: every file of the generation
                                                   (paths relative to ROOT), its table, group, rows;
                                                   the first source id no group uses
    ROOT/gen-000007/<table>/run=<run>/role=<role>/rank_id=<rank>/<group>.<token>_0.parquet
    ROOT/gen-000007/runs/run=<run>/<group>.<token>_0.parquet    (the token of the staging that wrote it)
    ROOT/gen-000007/call_stacks/<group>.<token>_0.parquet       tables without run: not partitioned
    ROOT/gen-000007/internal.memory_timeline_rows/run=...        a private table: its qualified name

A generation's folder holds the files it wrote, in the folders of `rlwh export parquet`
(rlwh.parquet.export: partitioned by those of run, role and rank_id a table has, partition
columns in the folder names only, NULL is `__HIVE_DEFAULT_PARTITION__`); the files of the
groups it carried over stay in the generation that wrote them, and its manifest lists them
there. A generation is its manifest, not its folder (manifest format 2; a format-1 manifest,
written before, lists paths inside its own generation, which then held a link to every file).
Every base table of the warehouse is there, the private ones of the schema internal too,
under their qualified names (`internal.memory_timeline_rows/`, `internal.stack_user_frames/`,
...): the views of sql/ read them. The manifest's `tables` gives each table's columns and
types, also for a table with no file.

Groups. The unit of replacement is a group: the caller's id (letters, digits, `_` and `-`,
e.g. `g-<16 hex>`) for, say, one (run, role, rank_id, capture). `publish(root, {gid:
folder})` takes, per group, a folder of `<table>.parquet` files holding that group's
full rows of each table (every column, run/role/rank_id included; a table it has no rows
of may be left out). The new generation gets the given groups' rows partitioned afresh;
every other group of the previous generation is carried over by its manifest entries
alone (no file is linked, copied or rewritten), so re-ingesting one rank writes only that
rank's files, and a publish costs what changed, not what the dataset holds.
`drop` removes groups; `groups_of(root, run)` says which groups hold a run. A group holds
rows of at most one run. Tables without rank_id (runs, call_stacks, internal.stack_user_frames)
may hold the same key in several groups (each rank's group carries the stacks it uses):
the thin file's views keep one row per primary key, so rows sharing a key must be equal
(a stack id is never reused; give a run's `runs` row to one group of the run).

Publication. A generation is written under its final name, made durable at once (one
syncfs of its file system, not an fsync per file) and is complete when its
`_manifest.json` is there; then `current` is replaced atomically (a new symlink under a
temp name, renamed over it). A publish killed at any point leaves `current` on the old
generation, and the next publish deletes the half one. Generations beyond the newest
`keep` are retired after each publish (never the one `current` names): the files they list
or hold that no kept manifest lists are deleted, then the manifest, then emptied folders; a
folder whose files newer generations still list stays, without a manifest. A reader still
on a retired generation (a thin file not reopened for `keep` publishes) then fails loudly
on a deleted file, it never sees mixed rows. A lock file (ROOT/.lock) serialises publishers.

Reading it directly (Spark, Trino, DuckDB): read `ROOT/current/_manifest.json` once and
read the files it lists for the table (`files`, each `path` relative to ROOT). A file's
name carries a token of the staging that wrote it and is never rewritten, so a list read
before a publish stays valid until its generation is retired. DuckDB:

    set variable files = (select list('ROOT/' || f.path)
                          from (select unnest(files) as f from read_json('ROOT/current/_manifest.json'))
                          where f."table" = 'cpu_ops');
    select * from read_parquet(getvariable('files'), hive_partitioning = true,
                               hive_types_autocast = false, hive_types = {'rank_id': 'INTEGER'})

(hive_types_autocast = false keeps a run named 0412 a string; a table with no file has no
rows). Spark: `spark.read.option("basePath", ...)` does not apply across generations: read
the listed paths and take run, role and rank_id from each path's `key=value` folders
(`spark.sql.sources.partitionColumnTypeInference.enabled=false`), then cast rank_id to int.
A ROOT path with `key=value` folder names above it would add columns for such readers
(publish refuses one).

The thin DuckDB file. `build_thin_db(root, db_path)` writes the file rlwh's commands,
the duckdb shell and BI tools open in dataset mode: every base table of the warehouse is
a view with exactly the table's columns, order and types over the explicit file list of
the current generation's manifest (absolute paths, so the file is a snapshot of one
generation; the private macro `internal.files_of_<table>` names them, so a new generation
replaces macros, not the views and their comments), in its schema (main, or internal for a
private one), `internal.migrations`
and `internal.settings` are small real tables, and the sql/ views are installed over them
as in a normal warehouse. Like a warehouse's, the thin file's main holds the public tables
and views only. It is written beside
db_path and renamed over it: a reader of the old file keeps its snapshot.

Safety: group ids are checked before they become file names; run and role values come
from data and DuckDB percent-encodes them in folder names; every path written is checked
to lie inside the generation before it is published, and every manifest path to lie in a
generation of ROOT; a ROOT that is neither empty nor a dataset is refused. A run or role
spelled `null` or `__HIVE_DEFAULT_PARTITION__` would read back as NULL from a hive path,
so publish refuses it rather than change it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import tempfile
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb

from rlwh import __version__, interrupts
from rlwh.errors import RlwhError
from rlwh.parquet.export import partition_keys
from rlwh.safe_files import check_contained, fsync_path, pause_for_test, sync_file_system
from rlwh.sqltext import one_value, rows_as_lists_sql, sql_ident, sql_literal, sql_table
from rlwh.warehouse.schema import PRIVATE_SCHEMA, SETTINGS_COLUMNS, THIN_MARKER, is_thin, thin_generation
from rlwh.warehouse.storage import connect_writable

MARKER = "_rlwh_dataset.json"
MANIFEST = "_manifest.json"
CURRENT = "current"
LOCK = ".lock"
# Manifest paths relative to ROOT, a generation its manifest only (1: paths inside the
# generation, which held a hard link to every file it carried).
FORMAT = 2
GROUP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
_GEN = re.compile(r"^gen-(\d{6,})$")
# Kept as real tables in the thin file, never in the dataset: its own bookkeeping, and the
# writer's cache of stack texts (a dataset's ingest starts from an empty scratch database).
THIN_TABLES = ("internal.migrations", "internal.settings", "internal.stack_texts")
# Values a hive path cannot carry: every engine reads these folder names back as NULL.
_HIVE_NULLS = ("null", "__hive_default_partition__")
_HIVE_TYPES = {"run": "VARCHAR", "role": "VARCHAR", "rank_id": "INTEGER"}


# --- the schema ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _schema() -> dict[str, dict]:
    """Every base table of a freshly migrated warehouse, public (main) and private (its
    qualified name, internal.x): columns, types, keys, comments, DDL."""
    from rlwh.warehouse.template import schema_into_memory

    con = duckdb.connect()
    try:
        schema_into_memory(con)
        private = {"private": PRIVATE_SCHEMA}
        # Three catalog reads in all (one per table each: 0.14 s of a small ingest's publish).
        columns: dict[tuple, list] = {}
        for schema, table, column, data_type, comment in con.execute(
            """select schema_name, table_name, column_name, data_type, comment from duckdb_columns()
               where schema_name in ('main', $private) order by schema_name, table_name, column_index""",
            private,
        ).fetchall():
            columns.setdefault((schema, table), []).append((column, data_type, comment))
        primary_keys = {(schema, table): list(names) for schema, table, names in con.execute(
            """select schema_name, table_name, constraint_column_names from duckdb_constraints()
               where schema_name in ('main', $private) and constraint_type = 'PRIMARY KEY'""",
            private,
        ).fetchall()}
        tables: dict[str, dict] = {}
        for schema, table, comment, ddl in con.execute(
            """select schema_name, table_name, comment, sql from duckdb_tables()
               where schema_name in ('main', $private) and not temporary order by schema_name, table_name""",
            private,
        ).fetchall():
            name = table if schema == "main" else f"{schema}.{table}"
            cols = columns[(schema, table)]
            tables[name] = {
                "columns": [(c[0], c[1]) for c in cols],
                "column_comments": {c[0]: c[2] for c in cols if c[2]},
                "comment": comment,
                "keys": partition_keys([c[0] for c in cols]),
                "primary_key": primary_keys.get((schema, table), []),
                "ddl": ddl,
                "rows": con.execute(f"select * from {sql_table(name)}").fetchall() if name in THIN_TABLES else [],
            }
        return tables
    finally:
        con.close()


def dataset_tables() -> dict[str, list[tuple[str, str]]]:
    """The tables a group may hold (every base table but the thin file's own), with their
    columns and types in order: what `<group>/<table>.parquet` must have."""
    return {t: list(s["columns"]) for t, s in _schema().items() if t not in THIN_TABLES}


def _shared(spec: dict) -> bool:
    """A table without rank_id: several groups may hold the same rows of it."""
    return "rank_id" not in spec["keys"]



# --- the root, its generations and the lock -----------------------------------------------


def _gen_number(path: Path) -> int | None:
    match = _GEN.match(path.name)
    return int(match.group(1)) if match else None


def _generations(root: Path) -> list[tuple[int, Path]]:
    found = []
    for path in root.iterdir():
        number = _gen_number(path)
        if number is not None and path.is_dir() and not path.is_symlink():
            found.append((number, path))
    return sorted(found)


def current_generation(root: Path) -> Path | None:
    """The generation `ROOT/current` names (ROOT/gen-N), or None before the first publish."""
    link = Path(root).absolute() / CURRENT
    if not link.is_symlink():
        return None
    target = os.readlink(link)
    gen = link.parent / target
    if "/" in target or _gen_number(gen) is None or not (gen / MANIFEST).is_file():
        raise RlwhError(f"{link} points to {target!r}, which is not a complete generation of this dataset")
    return gen


def manifest(gen: Path) -> dict:
    """A generation's manifest (what _manifest.json holds)."""
    path = Path(gen) / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RlwhError(f"{gen} is not a complete generation (no {MANIFEST})") from None
    except (OSError, ValueError) as exc:
        raise RlwhError(f"cannot read {path}: {exc}") from exc


def manifest_files(gen: Path, listed: dict | None = None) -> list[dict]:
    """The files of a generation's manifest (`listed`, if read already), each `path`
    relative to ROOT whatever the manifest's format."""
    gen = Path(gen)
    listed = manifest(gen) if listed is None else listed
    found = listed.get("format", 1)
    if found == FORMAT:
        return listed["files"]
    if found == 1:
        return [{**entry, "path": f"{gen.name}/{entry['path']}"} for entry in listed["files"]]
    raise RlwhError(f"{gen / MANIFEST} has format {found!r}, which this rlwh cannot read: a newer rlwh wrote it")


def file_path(root: Path, rel: str) -> str:
    """ROOT/rel for a manifest path, refused unless it lies in a generation of ROOT. Text,
    not Path: a thin file joins one for each of the dataset's files (0.6 s at 20,000 as Path)."""
    first, _, rest = rel.partition("/")
    if not rest or not _GEN.match(first):
        raise RlwhError(f"dataset refused: {rel!r} is not a file of a generation of {root}")
    _check_relative(root, rel)
    return f"{os.path.abspath(root)}/{rel}"


def groups_of(root: Path, run: str) -> set[str]:
    """The groups of the current generation that hold rows of `run`."""
    gen = current_generation(root)
    if gen is None:
        return set()
    return {g for g, info in manifest(gen)["groups"].items() if info["run"] == run}


def _open_root(root: Path) -> None:
    """Make ROOT a dataset, or check that it is one; anything else is never touched."""
    if any("=" in part for part in root.parts):
        raise RlwhError(f"dataset root {root}: a folder named key=value above the data would read as a "
                        "partition column; pick a path without '='")
    if root.is_symlink() and not root.is_dir():
        raise RlwhError(f"dataset root {root} is a dangling link")
    if (root / MARKER).is_file():
        return
    if root.exists():
        if not root.is_dir():
            raise RlwhError(f"dataset root {root} is not a folder")
        if any(root.iterdir()):
            raise RlwhError(f"{root} exists and is not an rlwh dataset (no {MARKER}): give a new or empty folder")
    try:
        root.mkdir(parents=True, exist_ok=True)
        _write_json(root / MARKER, {"format": FORMAT, "created_by": f"rlwh {__version__}"})
    except OSError as exc:
        raise RlwhError(f"cannot create the dataset {root}: {exc}") from exc


INGEST_LOCK = ".ingest.lock"


@contextlib.contextmanager
def ingest_lock(root: Path, timeout: float) -> Iterator[None]:
    """Held by a dataset-mode ingest from its plan to its publish (ROOT made a dataset
    first): an ingest through another thin file over the same dataset waits, as one through
    the same thin file does. Both would plan the same new source ids, which the views join on."""
    from rlwh.warehouse.session import hold_lock

    root = Path(root).absolute()
    _open_root(root)
    with hold_lock(root / INGEST_LOCK, root, timeout):
        yield


def stands_over_current(con, root: Path) -> bool:
    """Whether the thin file open on `con` was built over ROOT's current generation. A thin
    file is a snapshot: after the dataset was deleted, or another thin file over it
    published and the old generation was pruned, its views name files that are gone."""
    gen = current_generation(root)
    return gen is not None and thin_generation(con) == (str(Path(root).absolute()), gen.name)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with open(root / LOCK, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_json(path: Path, data: dict, indent: int | None = 1, durable: bool = True) -> None:
    """Write path atomically (a temp file, fsynced unless not `durable`, renamed). indent=None
    for a long list: json's indented output is pure Python (0.26 s for a manifest of 20,000
    files). A stage's own files need no fsync: publish makes its generation durable at once."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(data, indent=indent, sort_keys=True) + "\n")
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def _clean(root: Path, current: Path | None) -> None:
    """Delete what a killed publish left: generations newer than `current` (written, never
    published) and temp symlinks. An older folder without a manifest is a retired generation
    holding files that newer manifests list: _prune deletes them once none does."""
    current_number = _gen_number(current) if current is not None else -1
    assert current_number is not None  # current_generation checked its name
    for number, path in _generations(root):
        if number > current_number:
            shutil.rmtree(path, ignore_errors=True)
    for path in root.glob(f".{CURRENT}-*"):
        with contextlib.suppress(OSError):
            path.unlink()


def _held(gen: Path) -> set[str]:
    """The files under a generation's folder but its manifest, relative to ROOT (text: a
    generation may hold thousands)."""
    held: set[str] = set()
    for folder, _, names in os.walk(gen):
        rel = gen.name + folder[len(str(gen)):]
        held.update(f"{rel}/{name}" for name in names)
    held.discard(f"{gen.name}/{MANIFEST}")
    return held


def _delete(root: Path, rel: str) -> None:
    """Delete ROOT/rel (a file of a generation) and the folders that leaves empty, up to its
    generation's."""
    path = Path(file_path(root, rel))
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    folder = path.parent
    while folder != root:
        try:
            folder.rmdir()
        except OSError:  # not empty (or gone)
            return
        folder = folder.parent


def _prune(root: Path, current: Path, keep: int, listed: dict[str, list[dict]]) -> list[Path]:
    """Retire the complete generations beyond the newest `keep`, oldest first (never
    `current`): delete every file one lists or holds that no kept manifest lists, then its
    manifest; a prune killed before that is redone by the next publish. A retired folder
    whose files newer generations list stays until the last of them is retired. `listed`:
    the files (manifest_files) of generations the caller has read already, by name."""
    complete = [p for _, p in _generations(root) if (p / MANIFEST).is_file()]
    retire = [p for p in complete[:-keep] if p.name != current.name]
    if not retire:
        return []

    def files_of(gen: Path) -> list[dict]:
        return listed[gen.name] if gen.name in listed else manifest_files(gen)

    live = {e["path"] for gen in complete[-keep:] for e in files_of(gen)}
    for gen in retire:
        for rel in sorted(({e["path"] for e in files_of(gen)} | _held(gen)) - live):
            _delete(root, rel)
        pause_for_test("dataset-prune")
        (gen / MANIFEST).unlink()
        with contextlib.suppress(OSError):
            gen.rmdir()  # where nothing else is left
    return retire


# --- publish --------------------------------------------------------------------------------


def _check_relative(base: Path, rel: str) -> None:
    """Refuse a path that would leave `base`: no '..', no absolute part. Links are the other
    way out; check_contained refuses any in a folder before it is published (a generation,
    a stage), so the paths of a manifest are checked as text, not resolved one by one
    (seconds per publish on a dataset of 50,000 files)."""
    if rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
        raise RlwhError(f"dataset refused: {rel!r} would lie outside {base}")


def _inside(gen: Path, rel: str) -> Path:
    """gen/rel, refused unless it stays inside gen (_check_relative)."""
    _check_relative(gen, rel)
    return gen / rel


def _check_group_folder(gid: str, folder: Path, tables: dict[str, dict]) -> dict[str, Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise RlwhError(f"group {gid}: {folder} is not a folder")
    files = {}
    for path in sorted(folder.iterdir()):
        table = path.name.removesuffix(".parquet")
        if not path.name.endswith(".parquet") or table not in tables:
            raise RlwhError(f"group {gid}: {path.name} in {folder} is not <table>.parquet of a warehouse table")
        files[table] = path
    return files


def _select(spec: dict, source: str, distinct: str = "", table: str | None = None) -> str:
    """The table's columns, in order and cast to its types, from `source` (distinct: a
    `distinct ` or `distinct on (...) ` clause; table: check its hive keys, _typed_columns)."""
    return f"select {distinct}{_typed_columns(spec, table=table)} from {source}"


def _typed_columns(spec: dict, prefix: str = "", table: str | None = None) -> str:
    """The table's columns, in order, each `prefix` + its name cast to its type. Given the
    `table`'s name, a run or role key that a hive path would read back as NULL raises,
    naming it: the check rides along the scan that writes the rows."""
    def value(column: str) -> str:
        read = prefix + sql_ident(column)
        if table is None or column not in ("run", "role") or column not in spec["keys"]:
            return read
        message = (sql_literal(f"{table} has {column} '") + f" || {read} || "
                   + sql_literal("', which a hive path reads back as NULL; rename it"))
        return f"case when lower({read}) in {tuple(_HIVE_NULLS)} then error({message}) else {read} end"

    return ", ".join(f"cast({value(c)} as {t}) as {sql_ident(c)}" for c, t in spec["columns"])


def _no_rows(spec: dict) -> str:
    """A select of the table's columns, typed, and no row."""
    columns = ", ".join(f"cast(null as {t}) as {sql_ident(c)}" for c, t in spec["columns"])
    return f"select {columns} where false"


STAGED = "_staged.json"


def _write_group(con, gid: str, files: dict[str, Path], tables: dict[str, dict], stage: Path,
                 pattern: str) -> tuple[list[dict], str | None]:
    """Partition one group's files under stage; return its manifest entries (paths relative
    to stage, as they will be in a generation) and its run."""
    entries: list[dict] = []
    runs: set[str] = set()
    for table, path in files.items():
        spec = tables[table]
        want = [c for c, _ in spec["columns"]]
        try:
            have = [r[0] for r in con.execute(f"describe select * from read_parquet({sql_literal(path)})").fetchall()]
        except duckdb.Error as exc:
            raise RlwhError(f"group {gid}: cannot read {path}: {str(exc).strip().splitlines()[0]}") from exc
        if have != want:
            raise RlwhError(f"group {gid}: {path.name} has columns {have}, the warehouse's {table} has {want}")
        source = f"read_parquet({sql_literal(path)})"
        select = _select(spec, source, table=table)
        if "run" in want:
            values = con.execute(f"select distinct run from ({_select(spec, source)})").fetchall()
            runs |= {v[0] for v in values}
        target = stage / table
        try:
            if spec["keys"]:
                options = f"format parquet, partition_by ({', '.join(spec['keys'])}), " \
                          f"filename_pattern {sql_literal(pattern)}, return_stats true"
                stats = con.execute(f"copy ({select}) to {sql_literal(target)} ({options})").fetchall()
                written = {os.path.realpath(s[0]): int(s[1]) for s in stats}
            else:
                target.mkdir()
                one = target / (pattern.replace("{i}", "0") + ".parquet")
                count = one_value(con.execute(f"copy ({select}) to {sql_literal(one)} (format parquet)"))
                written = {os.path.realpath(one): int(count)} if count else {}
                if not count:
                    one.unlink()
        except duckdb.Error as exc:
            first = str(exc).strip().splitlines()[0]
            if "too long" in first.lower():
                first += " (a run or role value too long for a folder name)"
            raise RlwhError(f"group {gid}: writing {table} failed: {first}") from exc
        if target.exists():
            check_contained(target, "dataset")
            for folder, _, filenames in os.walk(target):
                for name in filenames:
                    src = Path(folder) / name
                    rows = written.get(os.path.realpath(src))
                    if rows is None:
                        raise RlwhError(f"group {gid}: DuckDB wrote {src}, which it did not report")
                    if rows == 0:
                        src.unlink()
                        continue
                    entries.append({"path": str(src.relative_to(stage)), "table": table, "group": gid, "rows": rows})
    if len(runs) > 1:
        raise RlwhError(f"group {gid} holds rows of {len(runs)} runs ({', '.join(sorted(runs)[:3])}...): "
                        "a group belongs to one run")
    return entries, next(iter(runs), None)


def stage_group(gid: str, folder: Path, stage: Path) -> Path:
    """Partition a group's `<table>.parquet` files into `stage` (a new folder), in the
    layout of a generation, and describe them in stage/_staged.json; publish() then moves
    them into place. Runs where the group was built (a parse worker), so publishing a
    thousand ranks is a thousand renames, not a thousand COPYs in one process. File
    names carry a token of this staging, so a path listed from an older generation never
    opens a newer file."""
    if not GROUP_ID.match(gid):
        raise RlwhError(f"group id {gid!r}: use letters, digits, '_' and '-' (at most 100, not leading '_' or '-')")
    tables = {t: s for t, s in _schema().items() if t not in THIN_TABLES}
    files = _check_group_folder(gid, folder, tables)
    stage = Path(stage)
    stage.mkdir(parents=True)
    con = duckdb.connect()
    try:
        con.execute("set enable_progress_bar = false; set preserve_insertion_order = false; set threads = 1")
        entries, run = _write_group(con, gid, files, tables, stage, f"{gid}.{uuid.uuid4().hex[:12]}_{{i}}")
    finally:
        con.close()
    _write_json(stage / STAGED, {"group": gid, "run": run, "files": entries}, durable=False)
    return stage


def stage_rows_of(con, group_of: dict[int, str], stage: Path) -> dict[str, Path]:
    """Partition the rows `con`'s warehouse tables hold into one staged folder per group
    (`group_of`: source_id -> group id; every row is its source's), as stage_group does
    for one group's files, with one COPY per table that holds rows, two at a time on DuckDB's
    threads: the dataset target lands a plan's changed captures in a scratch database
    (rlwh.ingest.landing) and stages them all at once, a thousand groups in some twenty
    statements. A group with no rows in a table has no file of it; call_stacks and
    internal.stack_user_frames go to every group whose rows use the stack. Returns group id
    -> staged folder, for publish()."""
    tables = {t: s for t, s in _schema().items() if t not in THIN_TABLES}
    gids = sorted(set(group_of.values()))
    bad = [g for g in gids if not GROUP_ID.match(g)]
    if bad:
        raise RlwhError(f"group id {bad[0]!r}: use letters, digits, '_' and '-' (at most 100, not leading '_' or '-')")
    stage = Path(stage)
    raw = stage / ".raw"
    raw.mkdir(parents=True)
    groups_table = ("create or replace temp table _stage_groups as select unnest($ids)::bigint as source_id, "
                    "unnest($gids)::varchar as _group", {"ids": list(group_of), "gids": list(group_of.values())})
    con.execute(*groups_table)
    token = uuid.uuid4().hex[:12]
    copies = _staging_copies(con, tables, raw, token)
    entries: dict[str, list[dict]] = {g: [] for g in gids}
    for gid in gids:
        (stage / gid).mkdir()
    raw_real = raw.resolve()
    for table, stats in _run_two_at_a_time(con, copies, groups_table):
        # DuckDB wrote raw/<table>/_group=<gid>/<keys' folders>/<file>: each group's folder
        # of the table becomes <gid>/<table> whole (one rename, where a mkdir per folder and
        # a rename per file took 0.07-0.1 s of the small run's staging), and its files get
        # the group's id in their names, which keeps two groups' files apart in a generation.
        moved: set[str] = set()
        for written, count in ((Path(os.path.realpath(s[0])), int(s[1])) for s in stats):
            path_table, folder, *keys, name = written.relative_to(raw_real).parts
            gid = folder.removeprefix("_group=")
            if gid not in entries or not folder.startswith("_group=") or path_table != table:
                raise RlwhError(f"staging {table}: DuckDB wrote {written}, no group's file")
            if gid not in moved:
                os.rename(raw / table / folder, stage / gid / table)
                moved.add(gid)
            placed = stage.joinpath(gid, table, *keys, name)
            if count == 0:
                placed.unlink()
                continue
            dest = placed.with_name(f"{gid}.{name}")
            os.rename(placed, dest)
            entries[gid].append({"path": str(dest.relative_to(stage / gid)), "table": table, "group": gid,
                                 "rows": count})
    shutil.rmtree(raw)
    run_of = dict(con.execute("select g._group, min(s.run) from sources as s join _stage_groups as g "
                              "on s.source_id = g.source_id group by all").fetchall())
    con.execute("drop table _stage_groups")
    staged = {}
    for gid in gids:
        check_contained(stage / gid, "dataset")
        _write_json(stage / gid / STAGED, {"group": gid, "run": run_of.get(gid), "files": entries[gid]},
                    durable=False)
        staged[gid] = stage / gid
    return staged


def _staging_copies(con, tables: dict[str, dict], raw: Path, token: str) -> list[tuple[str, int, str]]:
    """(table, rows, COPY statement) for each table with rows, partitioning them by the
    table's keys and the group (_stage_groups) into raw/<table>. A run or role that a hive
    path would read back as NULL stops the COPY with a message that names it (the check
    rides along the scan that writes the rows)."""
    stack_users = sorted(t for t, s in tables.items() if {"source_id", "stack_id"} <= {c for c, _ in s["columns"]})
    counted = " union all ".join(f"select {sql_literal(t)}, count(*) from {sql_table(t)}" for t in tables)
    rows_of = dict(con.execute(counted).fetchall())
    copies = []
    for table, spec in tables.items():
        if not rows_of[table]:
            continue
        names = {c for c, _ in spec["columns"]}
        if "source_id" in names:
            rows = f"{sql_table(table)} as t join _stage_groups as g on t.source_id = g.source_id"
        elif "stack_id" in names:
            used = " union ".join(
                f"select g._group, x.stack_id from {sql_table(u)} as x join _stage_groups as g "
                "on x.source_id = g.source_id" for u in stack_users)
            rows = f"{sql_table(table)} as t join ({used}) as g on t.stack_id = g.stack_id"
        else:
            raise RlwhError(f"{table} holds rows that belong to no group: stage them with stage_group")
        columns = _typed_columns(spec, "t.", table)
        options = (f"format parquet, partition_by ({', '.join(['_group', *spec['keys']])}), "
                   f"filename_pattern {sql_literal(token + '_{i}')}, return_stats true")
        copies.append((table, rows_of[table],
                       f"copy (select {columns}, g._group from {rows}) to {sql_literal(str(raw / table))} ({options})"))
    return copies


def _run_two_at_a_time(con, copies: list[tuple[str, int, str]], groups_table) -> list[tuple[str, list]]:
    """Run the COPYs on two connections at once, `con` and a cursor of it given its own
    `groups_table` (the small tables' COPYs are one thread each and mostly fixed cost: two
    at a time use both cores); the larger tables go first, each to the less loaded side.
    Returns (table, DuckDB's stats) in the order of `copies`; the first failure raises."""
    sides: list[list[tuple[str, int, str]]] = [[], []]
    load = [0, 0]
    for copy in sorted(copies, key=lambda c: -c[1]):
        side = load.index(min(load))
        sides[side].append(copy)
        load[side] += copy[1] + 10_000  # a COPY's fixed cost, in rows
    results: dict[str, list] = {}
    failures: list[tuple[str, duckdb.Error]] = []  # in the order they happened: the first is the cause
    stop = threading.Event()

    def run(connection, todo) -> None:
        for table, _, statement in todo:
            if failures or stop.is_set():
                return
            try:
                results[table] = connection.execute(statement).fetchall()
            except duckdb.Error as exc:
                failures.append((table, exc))
                return

    helper = interrupts.StatementThread(con.cursor(), lambda cursor: run(cursor, sides[1]), name="rlwh-stage")
    try:
        helper.cursor.execute(*groups_table)
        helper.start()
        pause_for_test("dataset-stage")
        run(con, sides[0])
        if failures:
            stop.set()
    except BaseException:  # Ctrl-C: the other side stops too, before its files' folder goes
        stop.set()
        raise
    finally:
        if stop.is_set():  # its COPY interrupted, no other started
            helper.stop()
        helper.finish()
        helper.close()
    if failures:
        interrupts.reraise_if_seen()  # DuckDB's "query interrupted" is Ctrl-C, no fact about a table
        table, exc = failures[0]
        first = str(exc).strip().splitlines()[0]
        if "too long" in first.lower():
            first += " (a run or role value too long for a folder name)"
        raise RlwhError(f"staging {table} failed: {first}") from exc
    return [(table, results[table]) for table, _, _ in copies]


def _adopt(gid: str, stage: Path, gen: Path) -> tuple[list[dict], str | None]:
    """Move a staged group's files into gen (a rename; a copy across file systems); their
    manifest entries, paths relative to ROOT."""
    staged = json.loads((stage / STAGED).read_text(encoding="utf-8"))
    if staged.get("group") != gid:
        raise RlwhError(f"{stage / STAGED} stages group {staged.get('group')!r}, not {gid!r}")
    check_contained(stage, "dataset")
    for entry in staged["files"]:
        src, dest = _inside(stage, entry["path"]), _inside(gen, entry["path"])
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(src, dest)
        except OSError:  # another file system (a worker's node-local folder)
            shutil.copy2(src, dest)
    return [{**entry, "path": f"{gen.name}/{entry['path']}"} for entry in staged["files"]], staged["run"]


def publish(root: Path, groups: dict[str, Path], drop: set[str] | frozenset[str] = frozenset(),
            keep: int = 3, next_source_id: int | None = None) -> Path:
    """Publish a new generation: the previous one's groups, with `groups` (id -> folder of
    `<table>.parquet`) written afresh (replacing a group of the same id) and `drop`'s
    removed. Returns the new generation's folder, which `current` then names.
    next_source_id: an id above every source id of the groups after this publish (an
    ingest's plan read them all); the manifest keeps the larger of it and the previous one's."""
    root = Path(root).absolute()
    if keep < 1:
        raise RlwhError("keep must be at least 1: the current generation is always kept")
    bad = sorted(g for g in set(groups) | set(drop) if not GROUP_ID.match(g))
    if bad:
        raise RlwhError(f"group id {bad[0]!r}: use letters, digits, '_' and '-' (at most 100, not leading '_' or '-')")
    both = sorted(set(groups) & set(drop))
    if both:
        raise RlwhError(f"group {both[0]} is both given and dropped")
    tables = {t: s for t, s in _schema().items() if t not in THIN_TABLES}
    for gid, folder in groups.items():
        if not (Path(folder) / STAGED).is_file():
            _check_group_folder(gid, folder, tables)
    _open_root(root)
    with _locked(root):
        prev = current_generation(root)
        numbers = [n for n, _ in _generations(root)]
        _clean(root, prev)
        number = max(numbers, default=0) + 1
        gen = root / f"gen-{number:06d}"
        try:
            gen.mkdir()
            old = manifest(prev) if prev is not None else {"files": [], "groups": {}}
            files: list[dict] = []
            group_info: dict[str, dict] = {}
            prev_files = manifest_files(prev, old) if prev is not None else []
            old_files: dict[str, list[dict]] = {}
            for entry in prev_files:
                old_files.setdefault(entry["group"], []).append(entry)
            for gid, info in old["groups"].items():  # carried: listed again, where they are
                if gid in groups or gid in drop:
                    continue
                files += old_files.get(gid, [])
                group_info[gid] = info
            for gid in sorted(groups):
                stage = Path(groups[gid])
                if not (stage / STAGED).is_file():
                    stage = stage_group(gid, stage, gen / ".stage" / gid)
                entries, run = _adopt(gid, stage, gen)
                files += entries
                group_info[gid] = {"run": run, "rows": sum(e["rows"] for e in entries), "generation": number}
            rows = dict.fromkeys(tables, 0)
            for entry in files:  # a table this rlwh does not have: build_thin_db refuses it, naming it
                if entry["table"] in rows:
                    rows[entry["table"]] += entry["rows"]
            shutil.rmtree(gen / ".stage", ignore_errors=True)
            check_contained(gen, "dataset")
            sync_file_system(gen)  # its files and folders durable before a manifest names them
            pause_for_test("dataset-manifest")
            _write_json(gen / MANIFEST, {
                "format": FORMAT,
                "rlwh_version": __version__,
                "generation": number,
                "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "previous": prev.name if prev is not None else None,
                "tables": {t: {"rows": rows[t], "partition_by": tables[t]["keys"],
                               "columns": [list(c) for c in tables[t]["columns"]]} for t in tables},
                "groups": group_info,
                "next_source_id": _recorded_next_source_id(old.get("next_source_id"), next_source_id, bool(groups)),
                "files": sorted(files, key=lambda e: e["path"]),
            }, indent=None)
            fsync_path(gen)
            pause_for_test("dataset-swap")
            link = root / f".{CURRENT}-{os.getpid()}"
            with contextlib.suppress(FileNotFoundError):
                link.unlink()
            os.symlink(gen.name, link)
            os.replace(link, root / CURRENT)
            fsync_path(root)
        except BaseException:
            if current_generation(root) != gen:
                shutil.rmtree(gen, ignore_errors=True)
            raise
        listed = {gen.name: files} if prev is None else {gen.name: files, prev.name: prev_files}
        _prune(root, gen, keep, listed)
    return gen


def _recorded_next_source_id(before: int | None, given: int | None, adds_groups: bool) -> int | None:
    """The manifest's next_source_id: the larger of the previous generation's and the
    caller's. None (unknown: readers count the sources) where groups come without one
    (their ids are not known here), or where neither is known (a manifest written before
    rlwh recorded it)."""
    if adds_groups and given is None:
        return None
    known = [n for n in (before, given) if n is not None]
    return max(known) if known else None


# --- the thin DuckDB file --------------------------------------------------------------------


_PATH_SEPARATOR = "\n"


def _path_list_sql(paths: list[str]) -> str:
    """The paths as a list expression for read_parquet: one string split by DuckDB where no
    path holds the separator. DuckDB binds a list literal element by element, and binds a
    view again for every query through it: 2,056 paths took 69 ms a view, one split string
    35 ms (the rest is read_parquet's own binding)."""
    if not paths or any(_PATH_SEPARATOR in p for p in paths):  # string_split('') would give ['']
        return "[" + ", ".join(sql_literal(p) for p in paths) + "]"
    return f"string_split({sql_literal(_PATH_SEPARATOR.join(paths))}, chr({ord(_PATH_SEPARATOR)}))"


def _files_macro(table: str) -> str:
    """The private macro that names a table's files in a thin file; the table's view reads
    what it names."""
    return f"{PRIVATE_SCHEMA}.{sql_ident('files_of_' + table.replace('.', '_'))}"


def _files_macro_sql(table: str, paths: list[str]) -> str:
    """The statement that makes the table's files macro name `paths`."""
    return f"create or replace macro {_files_macro(table)}() as {_path_list_sql(paths)}"


def _view_sql(table: str, spec: dict, listing: str | None) -> str:
    """The table's view over the files `listing` (a list expression) names; of no rows where
    it is None."""
    if listing is None:
        return f"create or replace view {sql_table(table)} as {_no_rows(spec)}"
    if spec["keys"]:
        types = ", ".join(f"{sql_literal(k)}: {sql_literal(_HIVE_TYPES[k])}" for k in spec["keys"])
        source = (f"read_parquet({listing}, hive_partitioning = true, hive_types_autocast = false, "
                  f"hive_types = {{{types}}})")
    else:
        source = f"read_parquet({listing}, hive_partitioning = false)"
    distinct = ""
    if _shared(spec):  # several groups hold the same rows: one per primary key
        key = spec["primary_key"]
        distinct = f"distinct on ({', '.join(map(sql_ident, key))}) " if key else "distinct "
    return f"create or replace view {sql_table(table)} as {_select(spec, source, distinct)}"


def _placeholder(con, folder: Path, table: str, spec: dict) -> str:
    """An empty Parquet file of the table's columns in its hive folders, for the template's
    view to be bound over (DuckDB binds a view when it is made)."""
    path = folder.joinpath(table, *(f"{k}=0" for k in spec["keys"]), "empty.parquet")
    path.parent.mkdir(parents=True)
    columns = ", ".join(f"cast(null as {t}) as {sql_ident(c)}" for c, t in spec["columns"] if c not in spec["keys"])
    con.execute(f"copy (select {columns} where false) to {sql_literal(str(path))} (format parquet)")
    return str(path)


def check_thin_target(db_path: Path) -> None:
    """db_path may be replaced when absent or a thin file: never a normal warehouse."""
    if not db_path.exists():
        return
    try:
        con = duckdb.connect(str(db_path), read_only=True)
    except duckdb.Error as exc:
        raise RlwhError(f"{db_path} exists and cannot be opened ({str(exc).strip().splitlines()[0]}): "
                        "not replaced with a thin file") from exc
    try:
        if not is_thin(con):
            raise RlwhError(f"{db_path} is a warehouse with its own tables, not a thin file of a dataset: "
                            "not replaced; move it aside or pick another path")
    finally:
        con.close()


def _comment_table(con, table: str, spec: dict) -> None:
    if spec["comment"]:
        con.execute(f"comment on view {sql_table(table)} is {sql_literal(spec['comment'])}")
    for column, text in spec["column_comments"].items():
        con.execute(f"comment on column {sql_table(table)}.{sql_ident(column)} is {sql_literal(text)}")


def _write_thin_schema(con, schema: dict[str, dict]) -> None:
    """What every thin file holds whatever its generation: the private schema with its own
    tables, each dataset table as a typed view of no rows, and the sql/ views over those."""
    from rlwh.warehouse.schema import install_views

    con.execute(f"create schema {PRIVATE_SCHEMA}")
    for table in THIN_TABLES:
        con.execute(schema[table]["ddl"])
    con.executemany("insert into internal.migrations values (?, ?, ?)", schema["internal.migrations"]["rows"])
    con.execute(f"create table {THIN_MARKER} (root varchar not null, generation varchar not null, "
                "built_at timestamp not null, next_source_id bigint)")
    with tempfile.TemporaryDirectory(prefix="rlwh-thin-") as empty:
        for table, spec in schema.items():
            if table not in THIN_TABLES:
                placeholder = _placeholder(con, Path(empty), table, spec)
                con.execute(_files_macro_sql(table, [placeholder]))
                con.execute(_view_sql(table, spec, f"{_files_macro(table)}()"))
                _comment_table(con, table, spec)
        install_views(con)  # bound over the placeholders, which every thin file replaces


THIN_TEMPLATE_FORMAT = 3  # bump when _write_thin_schema changes


def _thin_template(schema: dict[str, dict]) -> Path:
    """_write_thin_schema's file, made once per schema in the cache folder (as a new
    warehouse's template is: rlwh.warehouse.template) and copied by every publish. The
    sql/ views are made over views of no rows there; a thin file then only replaces the
    tables' views with the generation's files. Made in each thin file, the sql/ views
    bound every table's file list again and again: 3 s of a publish at 50,000 files."""
    from rlwh.warehouse.template import build_once, cache_dir, schema_digest

    path = cache_dir() / f"thin-{THIN_TEMPLATE_FORMAT}.{schema_digest()}.duckdb"
    return build_once(path, lambda con: _write_thin_schema(con, schema))


def _start_thin_file(tmp: Path, schema: dict[str, dict]):
    """A connection to `tmp`, a copy of the thin template (or, where the cache folder cannot
    be written, the same schema made in place)."""
    try:
        shutil.copyfile(_thin_template(schema), tmp)
    except (OSError, duckdb.Error, RlwhError):
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        con = connect_writable(tmp)
        _write_thin_schema(con, schema)
        return con
    return connect_writable(tmp)


def build_thin_db(root: Path, db_path: Path, settings: dict[str, str] | None = None, checked: bool = False) -> Path:
    """Write db_path: views over the current generation, the sql/ views over them, and
    `settings` (default: those of the default Config) in internal.settings. Atomic.
    checked: the caller found db_path no normal warehouse (check_thin_target) under the
    writer lock it still holds (an ingest): not opened again to see."""
    from rlwh.config import Config

    root = Path(root).absolute()
    db_path = Path(db_path).absolute()
    if not (root / MARKER).is_file():
        raise RlwhError(f"{root} is not an rlwh dataset (no {MARKER})")
    gen = current_generation(root)
    if gen is None:
        raise RlwhError(f"{root} has no published generation yet")
    listed = manifest(gen)
    files = manifest_files(gen, listed)
    settings = settings if settings is not None else Config().view_settings()
    if not checked:
        check_thin_target(db_path)
    schema = _schema()
    unknown = sorted({e["table"] for e in files} - set(schema))
    if unknown:  # its rows would vanish from the views: never answer without them
        raise RlwhError(f"{gen} holds tables this rlwh does not have ({', '.join(unknown[:3])}): it was written by "
                        "an older rlwh (before migration 0010 the private tables were named _<name>); ingest into "
                        "a new dataset folder")
    db_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = db_path.with_name(f".{db_path.name}.thin-{os.getpid()}")
    for path in (tmp, tmp.with_name(tmp.name + ".wal")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    try:
        con = _start_thin_file(tmp, schema)
        try:
            names = sorted(settings)
            con.execute(f"insert or replace into internal.settings select {rows_as_lists_sql(SETTINGS_COLUMNS)}",
                        [names, [settings[n] for n in names]])  # executemany: ~6 ms a row
            con.execute(f"insert into {THIN_MARKER} values (?, ?, ?, ?)",
                        [str(root), gen.name, datetime.now(timezone.utc).replace(tzinfo=None),
                         listed.get("next_source_id")])
            paths: dict[str, list[str]] = {}
            for entry in files:
                paths.setdefault(entry["table"], []).append(file_path(root, entry["path"]))
            con.execute("begin transaction")  # one commit, not one per statement: 0.3 s at 20,000 files
            for table, spec in schema.items():
                if table in THIN_TABLES:
                    continue
                if table in paths:  # the view stays, with its comments: only its file list changes
                    con.execute(_files_macro_sql(table, paths[table]))
                else:
                    con.execute(_view_sql(table, spec, None))
                    _comment_table(con, table, spec)  # a replaced view keeps no comment
                    con.execute(f"drop macro {_files_macro(table)}")
            con.execute("commit")
            con.execute("checkpoint")
        finally:
            con.close()
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, db_path)
        fsync_path(db_path.parent)
    except duckdb.Error as exc:
        raise RlwhError(f"cannot write the thin warehouse {db_path}: {str(exc).strip().splitlines()[0]}") from exc
    finally:
        for path in (tmp, tmp.with_name(tmp.name + ".wal")):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return gen
