"""Where ingest's tasks run: this machine's process pool, or a Ray cluster (rlwh.ray_executor).

A task is `function(*args, out_dir)`: a pure function of the files it reads, writing
what it produces only under `out_dir`, a folder of its own that the executor makes empty
before each attempt, and returning a small picklable result naming those files. So a task
that is retried, or run twice, still hands the loader exactly one result and one set of
files. The loader consumes results as they finish, largest task first.
"""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class Task:
    """One unit of ingest work."""

    name: str  # unique within an ingest: names the task's folder under the parts dir
    function: Callable[..., Any]
    args: tuple
    size: int  # bytes it reads: larger tasks start first
    paths: tuple[str, ...] = ()  # the files it reads (where they are decides where it runs)


def run_here(task: Task, parts: Path) -> Any:
    """Run one task in this process, in a fresh folder of its own."""
    out = parts / task.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return task.function(*task.args, str(out))


def _run_in_worker(function: Callable, args: tuple, out: str) -> Any:
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
            yield task, run_here(task, parts)
        return
    from rlwh.workers import die_with_parent, stop_now

    pool = ProcessPoolExecutor(max_workers=min(workers, len(ordered)), mp_context=get_context("spawn"),
                               initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(_run_in_worker, t.function, t.args, str(parts / t.name)): t for t in ordered}
        for future in as_completed(futures):
            yield futures[future], future.result()
    except BaseException:  # Ctrl-C, or loading failed: no task still running is wanted
        stop_now(pool)
        raise
    pool.shutdown(wait=True)
