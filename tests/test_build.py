"""Captures built in parse workers (rlwh.ingest.build) give the warehouse the loader would.

With [ingest] derive_in_workers (always with Ray), each worker parses a whole capture,
loads it into a scratch DuckDB and derives its memory tables there; the loader appends
the result. Otherwise the loader loads and derives itself. Both must give the same
rows in every table, on the real corpus and on the demo, fresh and on re-ingest.

The loader's warehouses of the real corpus and of the demo are the session's shared ones
(conftest), ingested once; the re-ingest test works on the demo's Ascend ranks, the
captures a worker builds whole.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import duckdb
import pytest

from rlwh.config import Config
from rlwh.ingest import landing as ingest_module
from rlwh.ingest.runner import ingest
from tests.warehouse_compare import every_table_differences


@pytest.fixture
def counted_builds(monkeypatch) -> list[str]:
    """The captures the loader appended from workers' builds, in this test."""
    built = []
    land = ingest_module.land_capture

    def counting(con, files, result):
        built.append(files[0].source.capture)
        return land(con, files, result)

    monkeypatch.setattr(ingest_module, "land_capture", counting)
    return built


def _ingest(profile: Path, config, db: Path, built: bool, run: str, workers: int = 2):
    """Ingest with workers that build whole captures (built) or that only parse."""
    config = dataclasses.replace(config, db_path=db, workers=workers, derive_in_workers=built)
    summary = ingest(profile, config, run=run)
    assert summary.failed == 0, [r.message for r in summary.results if r.status == "failed"]
    return summary


@pytest.mark.slow
def test_real_corpus_built_in_workers_equals_the_loaders(tmp_path, config, real_corpus, counted_builds):
    profile, loaders = real_corpus
    _ingest(profile, config, tmp_path / "built.duckdb", built=True, run="real")
    assert len(counted_builds) >= 10  # every real capture but none is left to the loader
    assert every_table_differences(tmp_path / "built.duckdb", loaders) == {}


@pytest.mark.slow
def test_demo_built_in_workers_equals_the_loaders(tmp_path, config, demo_profile, demo_warehouse, counted_builds):
    assert Config(db_path=demo_warehouse).derive_in_workers is False  # the reference: the loader derived
    _ingest(demo_profile, config, tmp_path / "built.duckdb", built=True, run="demo")
    assert counted_builds
    assert every_table_differences(tmp_path / "built.duckdb", demo_warehouse) == {}
    con = duckdb.connect(str(tmp_path / "built.duckdb"), read_only=True)
    timeline = con.execute("select count(*) from internal.memory_timeline_rows").fetchone()[0]
    assert timeline > 0  # the derived rows came from the workers, not from nowhere


def _ascend_ranks_of(demo: Path) -> list[Path]:
    return sorted(demo.rglob("*_ascend_pt"))


@pytest.mark.slow
def test_reingest_of_changed_captures(tmp_path, config, demo_profile, counted_builds):
    """Re-ingest after changes gives what a fresh ingest of the changed files gives: a capture
    with a file changed and the others unchanged is derived by the loader; captures whose
    every file changed are rebuilt in workers."""
    profile = tmp_path / "demo"
    shutil.copytree(demo_profile / "ascend", profile / "ascend")  # the captures workers build whole
    for extra in _ascend_ranks_of(profile)[3:]:  # three are enough
        shutil.rmtree(extra)
    db = tmp_path / "again.duckdb"
    first = _ingest(profile, config, db, built=True, run="demo")
    ranks = _ascend_ranks_of(profile)
    assert len(ranks) == 3 and len(counted_builds) == len(ranks)
    # One file of the first capture: its last three allocations dropped (its rows, so its size, change).
    partly = sorted(ranks[0].rglob("operator_memory.csv"))
    for csv in partly:
        lines = csv.read_text().splitlines(keepends=True)
        csv.write_text("".join(lines[:-3]))
    # Every file of the next two captures.
    wholly = []
    for rank_dir in ranks[1:3]:
        for path in sorted(rank_dir.rglob("*")):
            if path.is_file():
                path.write_bytes(path.read_bytes() + (b"\n" if path.suffix in (".csv", ".json") else b""))
                wholly.append(path)
    counted_builds.clear()
    again = _ingest(profile, config, db, built=True, run="demo")
    changed = {str(path.relative_to(profile)) for path in partly + wholly}
    reloaded = {r.rel_path for r in again.results if r.status != "unchanged"}
    assert partly and reloaded == changed & {r.rel_path for r in first.results}  # only the changed files
    assert sorted(counted_builds) == sorted(str(r.relative_to(profile)) for r in ranks[1:3])
    _ingest(profile, config, tmp_path / "fresh.duckdb", built=False, run="demo")
    assert every_table_differences(db, tmp_path / "fresh.duckdb") == {}


def test_a_small_capture_built_in_workers_equals_the_loaders(tmp_path, config, small_warehouse, counted_builds):
    """The fast loop's check of both paths: one real Ascend capture (rl-insight-samples),
    built in-process (one worker) against the session's loader-made warehouse of it."""
    profile, loaders = small_warehouse
    _ingest(profile, config, tmp_path / "built.duckdb", built=True, run="small", workers=1)
    assert len(counted_builds) == 1
    assert every_table_differences(tmp_path / "built.duckdb", loaders) == {}
