"""The DuckDB storage version of every file rlwh writes.

The engine is DuckDB 2 (the Python package), but the `duckdb` shell that `make install`
puts beside it is duckdb-cli 1.5.6 (PyPI has no 2.x shell), and BI tools' DuckDB lags
behind too. A file written in DuckDB 2's own format is refused by 1.5.6; written with
storage_compatibility_version v1.4.0 it opens there, views and comments included, and
1.5.6 can append to it. A file keeps the version it was created with, so the setting
matters when a file is created; every writable connect passes it, so no path forgets it.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

# The oldest storage version the duckdb-cli of `make install` (1.5.6) reads and writes.
STORAGE_VERSION = "v1.4.0"


def connect_writable(path: Path | str) -> duckdb.DuckDBPyConnection:
    """A read-write connection to a DuckDB file, created (if new) in STORAGE_VERSION."""
    return duckdb.connect(str(path), config={"storage_compatibility_version": STORAGE_VERSION})
