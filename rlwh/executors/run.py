"""Where ingest's tasks run: this machine's process pool, or a Ray cluster (rlwh.executors.ray_pool).

Every executor runs rlwh.executors.task.Task's contract: each attempt in an empty folder of its
own, so a task that is retried, or run twice, still hands the loader exactly one result
and one set of files. The loader consumes results as they finish, largest task first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from rlwh.config import Config
from rlwh.executors.task import Task
from rlwh.safe_files import REMOVING, remove_folder, remove_orphaned


def _run(function: Callable, args: tuple, out: str) -> Any:
    """Run one task (here or in a pool process) in a fresh folder of its own."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    return function(*args, out)


def in_process(tasks: list[Task], workers: int, pool_min_bytes: int) -> bool:
    """Whether the tasks run in this process, one after another: with one worker, one task,
    or tasks reading less than `pool_min_bytes` together ([ingest] pool_min_bytes, 16 MB),
    where starting worker processes (Python and the parse imports, ~0.5 s each) would cost
    more than the second core saves."""
    return workers <= 1 or len(tasks) <= 1 or sum(t.size for t in tasks) < pool_min_bytes


def local_pool(tasks: list[Task], parts: Path, workers: int,
               pool_min_bytes: int = 0) -> Iterable[tuple[Task, Any]]:
    """Yield (task, result) as tasks finish, on `workers` processes of this machine, or in
    this process (in_process). A pool starts, and every task is handed to it, when this is
    called, not when the first result is asked for: the workers parse while the caller
    does other work (the writer reading its own files, rlwh.ingest.in_place).

    Workers end with this process, even after kill -9, and leave Ctrl-C to it.
    """
    ordered = sorted(tasks, key=lambda t: -t.size)
    if in_process(ordered, workers, pool_min_bytes):
        return ((task, _run(task.function, task.args, str(parts / task.name))) for task in ordered)
    # Imported only for a pool: a small ingest does without them.
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from rlwh.child_process import sigint_blocked
    from rlwh.clean_main import main_left_out
    from rlwh.executors.local import die_with_parent, stop_now

    pool = ProcessPoolExecutor(max_workers=min(workers, len(ordered)), mp_context=get_context("spawn"),
                               initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        # The workers start at the first submit: none re-runs the caller's script, and each
        # starts with Ctrl-C blocked (a mask survives the exec of a spawned process) until its
        # initializer ignores it; the parent gets a Ctrl-C of those moments once it unblocks.
        with main_left_out(), sigint_blocked():
            futures = {pool.submit(_run, t.function, t.args, str(parts / t.name)): t for t in ordered}
    except BaseException:
        stop_now(pool)
        raise
    return _Running(pool, futures)


class _Running:
    """Tasks handed to a pool: iterating yields (task, result) as they finish; stop() ends
    the ones still running (the caller failed, or was interrupted, before asking)."""

    def __init__(self, pool, futures: dict):
        self.pool, self.futures = pool, futures

    def __iter__(self) -> Iterator[tuple[Task, Any]]:
        from concurrent.futures import as_completed

        try:
            for future in as_completed(self.futures):
                yield self.futures[future], future.result()
        except BaseException:  # Ctrl-C, or loading failed: no task still running is wanted
            self.stop()
            raise
        self.pool.shutdown(wait=True)

    def stop(self) -> None:
        from rlwh.executors.local import stop_now

        stop_now(self.pool)


def stop_tasks(finished: Iterable[tuple[Task, Any]]) -> None:
    """End what is still running of run_tasks' tasks (a local pool's workers)."""
    if isinstance(finished, _Running):
        finished.stop()


def run_tasks(tasks: list[Task], config: Config, parts: Path) -> Iterable[tuple[Task, Any]]:
    """Yield (task, result) as tasks finish, on the executor the config names."""
    if config.executor == "ray":
        from rlwh.executors.ray_pool import ray_pool  # imports ray only when asked for

        return ray_pool(tasks, parts, config)
    return local_pool(tasks, parts, config.workers, config.pool_min_bytes)


def fresh_parts_dir(config: Config) -> Path:
    """The empty folder tasks write under: beside the warehouse (same disk, usually
    roomier than /tmp), a killed ingest's leftovers removed (the caller holds the writer lock)."""
    parts = config.db_path.with_name(config.db_path.name + ".parts")
    remove_folder(parts)
    remove_orphaned(parts.parent, parts.name + REMOVING)
    parts.mkdir(parents=True)
    return parts
