"""Where the SQL, ingest jobs and report templates live.

In a checkout they sit beside the package; in an installed wheel they are copied into
rlwh/_assets/. Both layouts are found the same way.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
ASSET_DIRS = ("sql", "migrations", "ingest", "reports")


def asset_dir(name: str) -> Path:
    """The folder `name` (sql, migrations, ingest, reports) of this installation."""
    if name not in ASSET_DIRS:
        raise ValueError(f"unknown asset folder {name!r}")
    for candidate in (_PACKAGE / "_assets" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"rlwh is installed without its {name}/ folder")
