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
import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rlwh.readers import kineto_events
from rlwh.readers.kineto_rows import decode_rows

_pool: ProcessPoolExecutor | None = None
_pool_size = 0
GZIP_RATIO = 8  # a gzipped trace's size times this: about its uncompressed size


def starter(workers: int, path: Path) -> Callable[[bytes], Callable[[], tuple]]:
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


def _here(body: bytes) -> Callable[[], tuple]:
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
                                    initializer=_end_with, initargs=(os.getpid(),))
        _pool_size = workers
    return _pool


def _end_with(parent_pid: int) -> None:
    """Pool initializer: this decoding process ends when the reader's process does, however
    that ends (else a worker blocked on its task queue outlives a kill -9), and leaves
    Ctrl-C to it. The rule of rlwh.executors.local, which readers cannot import."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:  # PR_SET_PDEATHSIG (1): the kernel sends SIGKILL as the parent exits
            ctypes.CDLL(ctypes.util.find_library("c") or None).prctl(1, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch, args=(parent_pid,), name="rlwh-decode-watch", daemon=True).start()


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)  # reparented: the reader's process is gone


def forget_pool() -> None:
    """Drop the pool (one of its processes died): the next trace makes a new one."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
    _pool = None


atexit.register(forget_pool)
