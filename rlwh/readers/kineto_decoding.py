"""Processes that decode a Kineto trace's pieces in parallel, for rlwh.readers.torch_trace.

Why: decoding and building rows is nearly all a trace costs, and one trace is often all a
rank has: its pieces (rlwh.readers.kineto_events.pieces) are decoded and built by up to
`workers` processes at once, each returning a piece's rows as Arrow tables; the reader
takes them in file order, so the rows are exactly those of one process.

The pool is made on first use and kept for the next trace of this process. A reader that
runs in a parse worker (several files at once) decodes in its own process: the other
workers already use the other cores. A trace smaller than two pieces is decoded here too.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rlwh.child_process import end_with_parent
from rlwh.readers import kineto_events
from rlwh.readers.kineto_rows import decode_rows

_pool: ProcessPoolExecutor | None = None
_pool_size = 0
GZIP_RATIO = 8  # a gzipped trace's size times this: about its uncompressed size


def starter(workers: int, path: Path) -> Callable[[bytes | kineto_events.Span], Callable[[], tuple]]:
    """decode(body) for kineto_events.pieces: starts decoding a piece and returns what
    waits for its result; in this process when one worker is enough."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            size *= GZIP_RATIO
    workers = min(workers, os.cpu_count() or 1)
    if workers <= 1 or size < 2 * kineto_events.PIECE_BYTES or multiprocessing.parent_process() is not None:
        return _here
    pool = _get_pool(workers)
    return lambda body: pool.submit(decode_rows, body).result


def _here(body: bytes | kineto_events.Span) -> Callable[[], tuple]:
    """Decode now; what it raises is raised when its result is asked for, as from a pool
    (a piece that starts inside an event fails, and is never asked for)."""
    try:
        result = decode_rows(body)
    except kineto_events.NotTyped as exc:
        failed = exc

        def fail() -> tuple:
            raise failed
        return fail
    return lambda: result


def _get_pool(workers: int) -> ProcessPoolExecutor:
    global _pool, _pool_size
    if _pool is None or _pool_size != workers:
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
        _pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                    initializer=end_with_parent, initargs=(os.getpid(), "rlwh-decode-watch"))
        _pool_size = workers
    return _pool


def forget_pool() -> None:
    """Drop the pool (one of its processes died): the next trace makes a new one."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
    _pool = None


atexit.register(forget_pool)
