"""The Python API, for scripts and notebooks: `rlwh.ingest`, `rlwh.connect`, `rlwh.check`.

The same work as the CLI's commands, returning objects instead of printing: ingest's
summary, a read-only DuckDB connection with every view, check's report. Settings come
from warehouse.toml (or RLWH_CONFIG) as for the CLI, with the keyword arguments winning.
Parse workers never re-run the calling script (rlwh.clean_main), so a plain
script without an `if __name__ == "__main__":` guard, or a notebook cell, is fine.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

    from rlwh.ingest.check import CheckReport
    from rlwh.ingest.plan import IngestSummary


def ingest(profile_dir: str | os.PathLike, db: str | os.PathLike | None = None, run: str | None = None, *,
           workers: int | None = None, config: str | os.PathLike | None = None,
           role: str | None = None) -> IngestSummary:
    """Load `profile_dir` into the warehouse `db` as run `run` (default: the folder's name);
    `role` is every file's role (as --role; default: [roles], else the folders).

    Returns the summary (`.results` per file, `.rows`, `.failed`, `.count("partial")`, `.warnings`);
    a file that fails is in the summary, not an exception. Raises rlwh.errors.RlwhError for
    what stops the whole ingest (no such folder, the warehouse locked by another writer)."""
    import rlwh.ingest  # the package is callable: `rlwh.ingest(...)` is this function

    return rlwh.ingest(profile_dir, db, run, workers=workers, config=config, role=role)  # type: ignore[operator]


def connect(db: str | os.PathLike | None = None, *,
            config: str | os.PathLike | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection to the warehouse, with every table and view; it never
    blocks an ingest. `.sql(...).df()` needs pandas: `pip install 'rlwh[pandas]'`."""
    from rlwh.config import settings_for
    from rlwh.warehouse.session import connect_read

    return connect_read(settings_for(db, config))


def check(profile_dir: str | os.PathLike, *, config: str | os.PathLike | None = None,
          role: str | None = None) -> CheckReport:
    """What ingest would do with `profile_dir`, writing nothing: `.verdicts()` per file."""
    from rlwh.config import settings_for
    from rlwh.ingest.check import check as run_check
    from rlwh.ingest.discover import RoleRules

    settings = settings_for(None, config)
    return run_check(profile_dir, settings.verl_log_required_keys, RoleRules(role, settings.roles))
