"""pyarrow's first array from a Python list, made without importing pandas.

Why: the first time pyarrow builds an array from a Python list, it imports pandas (where
it is installed) only to ask whether the list is a pandas object: 0.3-0.7 s of every
process that reads a file, for a library rlwh's reading never uses. pyarrow remembers the
answer of that first probe; where pandas is then wanted (to_pandas, DuckDB's .df()), it
imports it at that moment as usual.
"""

from __future__ import annotations

import sys


class _NoPandas:
    """An import finder that says pandas is not installed, for the length of one probe."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError(f"{name}: not imported for pyarrow's probe")
        return None


def skip_pandas_probe() -> None:
    """Make pyarrow's first array here without pandas (a no-op where it was made already)."""
    import pyarrow as pa

    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)
