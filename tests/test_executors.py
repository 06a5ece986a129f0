"""Where parse tasks run: in the ingest's own process for a small ingest, else a worker pool."""

from __future__ import annotations

import concurrent.futures
import os

from conftest import copy_fixture

from rlwh.executors.run import in_process, local_pool
from rlwh.executors.task import Task
from rlwh.ingest.runner import ingest


def _pid(out_dir: str) -> int:
    return os.getpid()


def _tasks(*sizes: int) -> list[Task]:
    return [Task(f"t{i}", _pid, (), size) for i, size in enumerate(sizes)]


def test_the_rule():
    mb = 1024 * 1024
    assert in_process(_tasks(100 * mb, 100 * mb), workers=1, pool_min_bytes=16 * mb)  # one worker
    assert in_process(_tasks(100 * mb), workers=2, pool_min_bytes=16 * mb)  # one task
    assert in_process(_tasks(8 * mb, 7 * mb), workers=2, pool_min_bytes=16 * mb)  # small together
    assert not in_process(_tasks(8 * mb, 8 * mb), workers=2, pool_min_bytes=16 * mb)
    assert not in_process(_tasks(1, 1), workers=2, pool_min_bytes=0)


def test_small_tasks_run_here_and_large_ones_in_the_pool(tmp_path):
    here = dict((t.name, pid) for t, pid in local_pool(_tasks(10, 20, 30), tmp_path, workers=2, pool_min_bytes=100))
    assert set(here.values()) == {os.getpid()}
    pooled = dict((t.name, pid) for t, pid in local_pool(_tasks(10, 20, 30), tmp_path, workers=2, pool_min_bytes=60))
    assert set(pooled) == {"t0", "t1", "t2"} and os.getpid() not in pooled.values()


def test_a_small_profile_with_two_workers_starts_no_process(config, tmp_path, monkeypatch):
    """Four small real trace files, two workers: each parsed in this process (a pool could
    not even take the test's wrapper, which does not pickle)."""
    import dataclasses

    from rlwh.ingest import landing

    parsed_in = []
    real = landing.parse_source

    def parse_here(*args):
        parsed_in.append(os.getpid())
        return real(*args)

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker pool was started for a small ingest")

    monkeypatch.setattr(landing, "parse_source", parse_here)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_pool)
    profile = copy_fixture("torch_profile", tmp_path / "p")
    summary = ingest(profile, dataclasses.replace(config, workers=2))
    assert len(summary.results) == 4 and summary.failed == 0
    assert sum(r.rows for r in summary.results) > 0
    assert parsed_in == [os.getpid()] * 4
