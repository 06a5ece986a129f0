"""Processes that decode a Kineto trace's pieces in parallel, for rlwh.readers.torch_trace.

Why: decoding and building rows is nearly all a trace costs, and one trace is often all a
rank has: its pieces (rlwh.readers.kineto_events.pieces) are decoded and built by up to
`workers` processes at once, each returning a piece's rows as Arrow tables; the reader
takes them in file order, so the rows are exactly those of one process.

The pool is made on first use, or earlier by `prestart` (ingest calls it once the plan
says the trace is to be read here, so the processes start while the writer opens the
warehouse), and ended by the reader once the trace is decoded: idle, its processes held
their memory through the landing, which is where an ingest's process tree peaks. A reader that runs in a parse
worker (several files at once) decodes in its own process: the other workers already use
the other cores. A trace smaller than two pieces is decoded here too.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rlwh.arrow_start import skip_pandas_probe
from rlwh.child_process import end_with_parent, sigint_blocked
from rlwh.clean_main import main_left_out
from rlwh.readers import kineto_events

_pool: ProcessPoolExecutor | None = None
_pool_size = 0
GZIP_RATIO = 8  # a gzipped trace's size times this: about its uncompressed size


def uses_pool(workers: int, path: Path) -> bool:
    """Whether a trace read in this process is decoded by the pool: more than one worker
    and core, at least two pieces, and this process no worker of another pool."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            size *= GZIP_RATIO
    return (min(workers, os.cpu_count() or 1) > 1 and size >= 2 * kineto_events.PIECE_BYTES
            and multiprocessing.parent_process() is None)


def starter(workers: int, path: Path) -> Callable[[kineto_events.Body], Callable[[], tuple]]:
    """decode(body) for kineto_events.pieces: starts decoding a piece and returns what
    waits for its result; in this process when one worker is enough."""
    if not uses_pool(workers, path):
        return _here
    from rlwh.readers.kineto_rows import decode_rows

    pool = _get_pool(min(workers, os.cpu_count() or 1))
    return lambda body: pool.submit(decode_rows, body).result


def prestart(workers: int, path: Path) -> None:
    """Start the pool that will decode `path` now, so that starting its processes (Python,
    the imports) overlaps what this process does before reading the trace."""
    if uses_pool(workers, path):
        _get_pool(min(workers, os.cpu_count() or 1))


def _ready() -> None:
    """A worker's first task: what decoding imports, loaded before the first piece comes."""
    import rlwh.readers.kineto_rows  # noqa: F401


def _here(body: kineto_events.Body) -> Callable[[], tuple]:
    """Decode now; what it raises is raised when its result is asked for, as from a pool
    (a piece that starts inside an event fails, and is never asked for)."""
    from rlwh.readers.kineto_rows import decode_rows

    try:
        result = decode_rows(body)
    except kineto_events.NotTyped as exc:
        failed = exc

        def fail() -> tuple:
            raise failed
        return fail
    return lambda: result


def _start_worker(parent_pid: int) -> None:
    """Pool initializer: end with the parent (rlwh.child_process); pyarrow's first array
    made without pandas (rlwh.arrow_start)."""
    end_with_parent(parent_pid, "rlwh-decode-watch")
    skip_pandas_probe()


def _get_pool(workers: int) -> ProcessPoolExecutor:
    global _pool, _pool_size
    if _pool is None or _pool_size != workers:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
        _pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                    initializer=_start_worker, initargs=(os.getpid(),))
        _pool_size = workers
        # Every process starts now, each on its first task: none imports the caller's
        # script (rlwh.clean_main), each starts with Ctrl-C blocked.
        with main_left_out(), sigint_blocked():
            for _ in range(workers):
                _pool.submit(_ready)
    return _pool


def forget_pool() -> None:
    """End the pool (a trace is decoded, or one of its processes died): the next trace
    makes a new one."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
    _pool = None


atexit.register(forget_pool)
