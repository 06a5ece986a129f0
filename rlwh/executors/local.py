"""Parse workers that die with the process that started them, however it dies.

A ProcessPoolExecutor worker blocks reading its task queue, and every worker holds that
queue's write end too, so after a `kill -9` of `rlwh ingest` nothing ever tells the
workers to stop: they lived on for hours holding their last file's memory. The pool's
initializer `die_with_parent` asks Linux to send the worker SIGKILL when its parent
exits (prctl PR_SET_PDEATHSIG), and, where that is not available or the parent was
already gone, a daemon thread checks the parent pid once a second.

Ctrl-C reaches every process of the terminal's group: workers ignore it (each would
print a KeyboardInterrupt traceback) and the parent, which decides, stops them with
`stop_now` instead of waiting for the files they are parsing.

A process killed that way leaves its temp folders behind: rlwh.safe_files.remove_orphaned
clears those whose pid is gone (exports, scratch spill folders).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
import time

from rlwh.safe_files import pause_for_test

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
POLL_S = 1.0


def _set_parent_death_signal() -> bool:
    """True when the kernel will SIGKILL this process as its parent exits."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:  # reparented: the parent is gone
            os._exit(1)
        time.sleep(POLL_S)


def die_with_parent(parent_pid: int) -> None:
    """Pool initializer: end this worker when process `parent_pid` ends; leave Ctrl-C to it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    pause_for_test("worker_started")
    # The fallback runs on Linux too: it costs one getppid a second and covers a kernel
    # or sandbox that refuses prctl.
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="rlwh-parent-watch", daemon=True).start()


def stop_now(pool) -> None:
    """Cancel the pool's queued files and kill its workers now: shutdown() alone waits
    for the files being parsed (a minute for a large trace) before the process can exit.

    The workers are found as this process's multiprocessing children, which in rlwh are
    the parse pool's only.
    """
    pool.shutdown(wait=False, cancel_futures=True)
    for child in multiprocessing.active_children():
        child.kill()
    for child in multiprocessing.active_children():
        child.join(timeout=5)


