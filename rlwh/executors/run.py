"""Where ingest's tasks run: this machine's process pool, or a Ray cluster (rlwh.executors.ray_pool).

Every executor runs rlwh.executors.task.Task's contract: each attempt in an empty folder of its
own, so a task that is retried, or run twice, still hands the loader exactly one result
and one set of files. The loader consumes results as they finish, largest task first.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Iterator

from rlwh.config import Config
from rlwh.executors.task import Task


def _run(function: Callable, args: tuple, out: str) -> Any:
    """Run one task (here or in a pool process) in a fresh folder of its own."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    return function(*args, out)


def local_pool(tasks: list[Task], parts: Path, workers: int) -> Iterator[tuple[Task, Any]]:
    """Yield (task, result) as tasks finish, on `workers` processes of this machine.

    Workers end with this process, even after kill -9, and leave Ctrl-C to it.
    """
    ordered = sorted(tasks, key=lambda t: -t.size)
    if workers <= 1 or len(ordered) <= 1:
        for task in ordered:
            yield task, _run(task.function, task.args, str(parts / task.name))
        return
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
    return local_pool(tasks, parts, config.workers)


def fresh_parts_dir(config: Config) -> Path:
    """The empty folder tasks write under: beside the warehouse (same disk, usually
    roomier than /tmp), a killed ingest's leftovers removed (the caller holds the writer lock)."""
    parts = config.db_path.with_name(config.db_path.name + ".parts")
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    return parts
