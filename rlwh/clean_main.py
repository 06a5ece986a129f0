"""Start worker processes without re-running the script that called rlwh.

A spawned worker (a parse worker, rlwh.executors; a Kineto decoding process,
rlwh.readers.kineto_decoding) imports the parent's `__main__` again (as `__mp_main__`)
so that it can unpickle functions defined there. rlwh's tasks are rlwh functions, so that
import buys nothing, and it costs everything when the caller is a plain script without an
`if __name__ == "__main__":` guard: each worker runs the script, which starts an ingest,
and the pool breaks. While a pool launches its workers, `__main__` is swapped for an
empty module, so the workers' preparation names no main module to import. A leaf module,
below the readers and the executors that both start pools.
"""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def main_left_out() -> Iterator[None]:
    """Within this block, processes started by spawn do not import the caller's `__main__`."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
