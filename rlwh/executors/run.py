"""Where ingest's tasks run: this machine's process pool, or a Ray cluster (rlwh.executors.ray_pool).

Every executor runs rlwh.executors.task.Task's contract: each attempt in an empty folder of its
own, so a task that is retried, or run twice, still hands the loader exactly one result
and one set of files. The loader consumes results as they finish, largest task first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator

from rlwh.config import Config
from rlwh.executors.task import Task


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


def local_pool(tasks: list[Task], parts: Path, workers: int, pool_min_bytes: int = 0) -> Iterator[tuple[Task, Any]]:
    """Yield (task, result) as tasks finish, on `workers` processes of this machine, or in
    this process (in_process).

    Workers end with this process, even after kill -9, and leave Ctrl-C to it.
    """
    ordered = sorted(tasks, key=lambda t: -t.size)
    if in_process(ordered, workers, pool_min_bytes):
        for task in ordered:
            yield task, _run(task.function, task.args, str(parts / task.name))
        return
    # Imported only for a pool: a small ingest does without them.
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    from rlwh.executors.clean_main import main_left_out
    from rlwh.executors.local import die_with_parent, stop_now

    pool = ProcessPoolExecutor(max_workers=min(workers, len(ordered)), mp_context=get_context("spawn"),
                               initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        with main_left_out():  # the workers start at the first submit: none re-runs the caller's script
            futures = {pool.submit(_run, t.function, t.args, str(parts / t.name)): t for t in ordered}
        for future in as_completed(futures):
            yield futures[future], future.result()
    except BaseException:  # Ctrl-C, or loading failed: no task still running is wanted
        stop_now(pool)
        raise
    pool.shutdown(wait=True)


def run_tasks(tasks: list[Task], config: Config, parts: Path) -> Iterator[tuple[Task, Any]]:
    """Yield (task, result) as tasks finish, on the executor the config names."""
    if config.executor == "ray":
        from rlwh.executors.ray_pool import ray_pool  # imports ray only when asked for

        return ray_pool(tasks, parts, config)
    return local_pool(tasks, parts, config.workers, config.pool_min_bytes)


def fresh_parts_dir(config: Config) -> Path:
    """The empty folder tasks write under: beside the warehouse (same disk, usually
    roomier than /tmp), a killed ingest's leftovers removed (the caller holds the writer lock)."""
    parts = config.db_path.with_name(config.db_path.name + ".parts")
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    return parts
