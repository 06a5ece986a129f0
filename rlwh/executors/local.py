"""Parse workers that die with the process that started them, however it dies.

A ProcessPoolExecutor worker blocks reading its task queue, and every worker holds that
queue's write end too, so after a `kill -9` of `rlwh ingest` nothing ever tells the
workers to stop: they lived on for hours holding their last file's memory. The pool's
initializer `die_with_parent` arms rlwh.child_process's rule: SIGKILL from the kernel as
the parent exits, and a thread that checks the parent pid once a second.

Ctrl-C reaches every process of the terminal's group: workers ignore it (each would
print a KeyboardInterrupt traceback) and the parent, which decides, stops them with
`stop_now` instead of waiting for the files they are parsing.

A process killed that way leaves its temp folders behind: rlwh.safe_files.remove_orphaned
clears those whose pid is gone (exports, scratch spill folders).
"""

from __future__ import annotations

import multiprocessing

from rlwh.arrow_start import skip_pandas_probe
from rlwh.child_process import end_with_parent
from rlwh.safe_files import pause_for_test


def die_with_parent(parent_pid: int) -> None:
    """Pool initializer: end this worker when process `parent_pid` ends (rlwh.child_process);
    leave Ctrl-C to it; pyarrow's first array made without pandas (rlwh.arrow_start)."""
    end_with_parent(parent_pid)
    skip_pandas_probe()
    pause_for_test("worker_started")


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


