"""How many threads an ingest's DuckDB runs on: one for a small ingest (under
runner.SMALL_INGEST_BYTES of changed files), where a second thread cost more than it gave,
else [warehouse] threads. Read from DuckDB itself, on every connection the ingest writes with."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rlwh import synth
from rlwh.config import Config
from rlwh.ingest import runner
from rlwh.warehouse import session


@pytest.fixture
def threads_seen(monkeypatch) -> list[int]:
    """DuckDB's `threads` setting on each connection the ingest writes with (configured with
    the ingest's memory limit; the plan's read of the published warehouse is a query)."""
    seen: list[int] = []
    real = session.configure

    def configure(con, config, memory_limit=None):
        real(con, config, memory_limit)
        if memory_limit is not None:
            seen.append(int(con.execute("select current_setting('threads')").fetchone()[0]))

    monkeypatch.setattr(session, "configure", configure)  # session.configure_writer's, landing's too
    return seen


def test_a_small_ingest_runs_on_one_thread_a_large_one_on_the_setting(tmp_path, monkeypatch, threads_seen):
    profile = synth.write_ascend_profile(tmp_path / "run", roles=("actor",), ranks=1, n_ops=30, n_allocs=10,
                                         n_stacks=2)
    config = Config(db_path=tmp_path / "small" / "w.duckdb", workers=1, threads=3)
    assert runner.ingest(profile, config).failed == 0
    assert threads_seen and set(threads_seen) == {1}

    threads_seen.clear()
    monkeypatch.setattr(runner, "SMALL_INGEST_BYTES", 1)  # the same files now count as large
    assert runner.ingest(profile, replace(config, db_path=tmp_path / "large" / "w.duckdb")).failed == 0
    assert threads_seen and set(threads_seen) == {3}


def test_only_the_changed_files_count(tmp_path, monkeypatch, threads_seen):
    """A re-ingest that changed one small file of a large run reads that file alone."""
    profile = synth.write_ascend_profile(tmp_path / "run", roles=("actor",), ranks=2, n_ops=30, n_allocs=10,
                                         n_stacks=2)
    config = Config(db_path=tmp_path / "w.duckdb", workers=1, threads=3)
    assert runner.ingest(profile, config).failed == 0
    csv = sorted(profile.rglob("operator_memory.csv"))[0]
    size = csv.stat().st_size
    csv.write_text(csv.read_text().rstrip("\n").rsplit("\n", 1)[0] + "\n")  # one allocation fewer
    monkeypatch.setattr(runner, "SMALL_INGEST_BYTES", size)  # the whole run is large, the change is not
    threads_seen.clear()
    again = runner.ingest(profile, config)
    assert "ok" in {r.status for r in again.results}
    assert threads_seen and set(threads_seen) == {1}
