"""Worker processes that die with the process that started them, however it dies.

A pool worker blocks reading its task queue, and every worker holds that queue's write
end too, so after a `kill -9` of its parent nothing tells it to stop: it lives on holding
its last task's memory. `end_with_parent` asks Linux to send the worker SIGKILL when its
parent exits (prctl PR_SET_PDEATHSIG), and, where that is not available or the parent was
already gone, a daemon thread checks the parent pid once a second. Ctrl-C reaches every
process of the terminal's group: workers ignore it and leave the decision to the parent.

A leaf module: both the parse pool (rlwh.executors.local) and the Kineto decoding pool
(rlwh.readers.kineto_decoding) start their workers with it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

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


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """Within this block SIGINT waits (blocked, not lost), and processes started here start
    with it blocked: a Ctrl-C while a worker imports would print its traceback."""
    blocked = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if blocked else None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def end_with_parent(parent_pid: int, thread_name: str = "rlwh-parent-watch") -> None:
    """Pool initializer: end this worker when process `parent_pid` ends; leave Ctrl-C to it
    (ignored, then unblocked: one that came while it started is dropped)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _set_parent_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    # The fallback runs on Linux too: it costs one getppid a second and covers a kernel
    # or sandbox that refuses prctl.
    threading.Thread(target=_watch_parent, args=(parent_pid,), name=thread_name, daemon=True).start()
