"""rlwh: a DuckDB warehouse for distributed RL training profiles.

The Python API (rlwh.api): `rlwh.ingest(profile_dir, db=..., run=...)` loads a profile
dir and returns the summary; `rlwh.connect(db)` opens the warehouse read-only, with
every view; `rlwh.check(profile_dir)` says what ingest would do. They are imported on
first use, so `import rlwh` stays cheap (no duckdb, no pyarrow).
"""

__version__ = "0.1.0"

_API = ("ingest", "connect", "check")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name == "ingest":  # the package rlwh.ingest, which calls rlwh.api.ingest (see its docstring)
        import rlwh.ingest

        return rlwh.ingest
    if name in _API:
        from rlwh import api

        return getattr(api, name)
    raise AttributeError(f"module 'rlwh' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
