"""One unit of ingest work, as every executor (rlwh.executors.run, rlwh.executors.ray_pool) takes it.

A task is `function(*args, out_dir)`: a pure function of the files it reads, writing
what it produces only under `out_dir`, a folder of its own that the executor makes empty
before each attempt, and returning a small picklable result naming those files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Task:
    """One unit of ingest work."""

    name: str  # unique within an ingest: names the task's folder under the parts dir
    function: Callable[..., Any]
    args: tuple
    size: int  # bytes it reads: larger tasks start first
    paths: tuple[str, ...] = ()  # the files it reads (where they are decides where it runs)
