"""`rlwh ingest`: discover a profile dir's files, plan once, hand the changed files to the
warehouse's target.

The plan (rlwh.ingest.plan) is made under the writer lock from one read of the published
warehouse: what the run already holds, and so which files changed. A target writes only
those: the DuckDB file (rlwh.ingest.to_warehouse) or, in dataset mode, the Parquet dataset
and its thin file (rlwh.ingest.to_dataset). When nothing changed, nothing is written.
Where parsing runs is the executors' business (rlwh.executors).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import duckdb

from rlwh.arrow_start import skip_pandas_probe
from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.ingest.discover import RoleRules, discover, nothing_found, profile_root, repeated_capture_lines
from rlwh.ingest.early import start_decoding
from rlwh.ingest.plan import (
    REPEATED_CAPTURES,
    IngestSummary,
    Plan,
    Planned,
    Progress,
    fingerprint_files,
    read_plan,
    repeated_captures,
)
from rlwh.warehouse.schema import is_current
from rlwh.warehouse.session import connect_read, remove_leftovers, writer_lock

# An ingest reading fewer bytes of changed files than this runs its DuckDB on one thread
# (at most [warehouse] threads): a second thread's scheduling costs a small ingest more than
# it parallelizes (BENCHMARKS.md, session 23: a tiny rank 213 against 262 ms, the demo 1.61
# against 1.91 s, 47 MB of one rank 1.06 against 1.18 s; at 133 MB two threads won, 2.01
# against 2.27 s, where a trace is cut into pieces that DuckDB reads at once).
SMALL_INGEST_BYTES = 64 * 2**20

# Re-exported: callers of `ingest` read its summary.
__all__ = ["IngestSummary", "Progress", "ingest"]


def _read_plan(config: Config, run: str, root: Path, files: list[Planned]) -> Plan:
    """The plan from the published warehouse, read once; a file that is missing or that
    cannot be opened plans as empty (the target's own open then says what is wrong)."""
    con = _plan_connection(config)
    if con is None:
        return read_plan(None, run, root, files)
    try:
        return read_plan(con, run, root, files, schema_behind=not is_current(con))
    finally:
        con.close()


def _open_published(config: Config) -> duckdb.DuckDBPyConnection | None:
    """A read-only connection to the published warehouse (or thin file); None where there is
    none, or it cannot be opened."""
    try:
        return connect_read(config, require_current=False) if config.db_path.exists() else None
    except RlwhError:
        return None


def _plan_connection(config: Config) -> duckdb.DuckDBPyConnection | None:
    """The published warehouse, read-only. In dataset mode, a thin file over the dataset's
    current generation, whose sources hold every source id the dataset uses (the views
    join on them): built where it is missing or stands over another generation (the
    dataset made anew, another thin file's ingests); None where the dataset holds no
    generation yet (the plan starts empty). The file opened once: opening a thin file over
    20,000 Parquet files takes 0.1 s."""
    con = _open_published(config)
    if config.dataset is None:
        return con
    from rlwh.parquet import dataset

    if con is not None and dataset.stands_over_current(con, config.dataset):
        return con
    if con is not None:
        con.close()
    if dataset.current_generation(config.dataset) is None:
        return None
    dataset.build_thin_db(config.dataset, config.db_path, config.view_settings(), checked=True)
    return _open_published(config)


@contextlib.contextmanager
def _dataset_lock(config: Config) -> Iterator[None]:
    """In dataset mode, the dataset's own ingest lock beside the thin file's writer lock;
    a thin file that must not be replaced (a normal warehouse) is refused before anything
    is written."""
    if config.dataset is None:
        yield
        return
    from rlwh.parquet import dataset

    dataset.check_thin_target(config.db_path)
    with dataset.ingest_lock(config.dataset, config.lock_timeout):
        yield


def _target(config: Config) -> ModuleType:
    """The writer of this config's target, imported only when something is to be written:
    an unchanged re-ingest never loads the parse and load modules (pyarrow and the readers)."""
    if config.dataset is not None:
        from rlwh.ingest import to_dataset

        return to_dataset
    from rlwh.ingest import to_warehouse

    return to_warehouse


def ingest(
    profile_dir: str | os.PathLike,
    config: Config,
    run: str | None = None,
    progress: Progress | None = None,
    role: str | None = None,
) -> IngestSummary:
    """Load every source file of `profile_dir` into the warehouse as run `run`; `role`
    (--role) is the role of every file, else [roles] and the folders say."""
    started = time.perf_counter()
    root = Path(profile_dir)
    if root.is_file():
        raise RlwhError(f"{root} is a file: point at the folder that holds the profiler's files (or its run)")
    if not root.is_dir():
        raise RlwhError(f"profile dir not found: {root}")
    root, note = profile_root(root)
    run = run if run is not None else root.name
    if not run.strip():
        raise RlwhError("--run must not be empty")
    if role is not None and not role.strip():
        raise RlwhError("--role must not be empty: give the role every file of this ingest gets")
    found = discover(root, RoleRules(role, config.roles))
    summary = IngestSummary(run, str(root), warnings=[note] if note else [])
    summary.warnings += found.warnings
    files = fingerprint_files(found.files)
    if all(p.source.ignored for p in files):
        summary.warnings.append(f"{nothing_found(root)}; nothing was written")
    else:
        with writer_lock(config), _dataset_lock(config):
            remove_leftovers(config)
            plan = _read_plan(config, run, root, files)
            summary.warnings += plan.gone_lines()
            if plan.nothing_changed:
                summary.results = [plan.unchanged_result(p) for p in files if not p.source.ignored]
            else:
                config = _threads_for(plan, config)
                start_decoding(plan, config)
                skip_pandas_probe()
                _target(config).write(summary, plan, config, progress)
        repeated = summary.repeated if summary.repeated is not None else _repeated_captures(config, run)
        summary.warnings += repeated_capture_lines(repeated)
    summary.results.sort(key=lambda r: r.rel_path)
    summary.seconds = time.perf_counter() - started
    return summary


def _threads_for(plan: Plan, config: Config) -> Config:
    """`config` with one DuckDB thread when the plan reads under SMALL_INGEST_BYTES."""
    changed = sum(p.size for p in plan.files if plan.schema_behind or not plan.is_unchanged(p))
    return dataclasses.replace(config, threads=1) if changed < SMALL_INGEST_BYTES else config


def _repeated_captures(config: Config, run: str) -> list[tuple[tuple, list[str]]]:
    """The repeated captures of `run`, asked of the published warehouse (or thin file)."""
    from rlwh.warehouse.catalog import query

    return repeated_captures(query(config, REPEATED_CAPTURES, [run]).rows)
