"""Captures built in parse workers (rlwh.ingest.build) give the warehouse the loader would.

With [ingest] derive_in_workers (always with Ray), each worker parses a whole capture,
loads it into a scratch DuckDB and derives its memory tables there; the loader appends
the result. Otherwise the loader loads and derives itself. Both must give the same
rows in every table, on the real corpus and on the demo, fresh and on re-ingest.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import duckdb
import pytest

from rlwh.ingest import to_warehouse as ingest_module
from rlwh.ingest.runner import ingest
from tests.conftest import FIXTURES
from tests.warehouse_compare import every_table_differences


@pytest.fixture
def counted_builds(monkeypatch) -> list[int]:
    """How many captures the loader appended from workers' builds, in this test."""
    built = []
    land = ingest_module.land_capture

    def counting(con, files, result):
        built.append(len(files))
        return land(con, files, result)

    monkeypatch.setattr(ingest_module, "land_capture", counting)
    return built


def _ingest(profile: Path, config, db: Path, built: bool, run: str = "r", workers: int = 2):
    """Ingest with two workers that build whole captures (built) or that only parse."""
    config = dataclasses.replace(config, db_path=db, workers=workers, derive_in_workers=built)
    summary = ingest(profile, config, run=run)
    assert summary.failed == 0, [r.message for r in summary.results if r.status == "failed"]
    return summary


def test_real_corpus_built_in_workers_equals_the_loaders(tmp_path, config, counted_builds):
    profile = tmp_path / "real"
    shutil.copytree(FIXTURES / "real", profile)
    _ingest(profile, config, tmp_path / "loader.duckdb", built=False)
    assert counted_builds == []
    _ingest(profile, config, tmp_path / "built.duckdb", built=True)
    assert len(counted_builds) >= 10  # every real capture but none is left to the loader
    assert every_table_differences(tmp_path / "built.duckdb", tmp_path / "loader.duckdb") == {}


@pytest.fixture
def demo(demo_profile) -> Path:
    return demo_profile


def test_demo_built_in_workers_equals_the_loaders(tmp_path, config, demo, counted_builds):
    _ingest(demo, config, tmp_path / "loader.duckdb", built=False)
    assert counted_builds == []  # two local workers that only parse: the default
    _ingest(demo, config, tmp_path / "built.duckdb", built=True)
    assert sum(counted_builds) > 0
    assert every_table_differences(tmp_path / "built.duckdb", tmp_path / "loader.duckdb") == {}
    con = duckdb.connect(str(tmp_path / "built.duckdb"), read_only=True)
    timeline = con.execute("select count(*) from internal.memory_timeline_rows").fetchone()[0]
    assert timeline > 0  # the derived rows came from the workers, not from nowhere


def _rewrite_rank(demo_copy: Path) -> list[Path]:
    """Change every file of one Ascend capture (its rows, so its sizes, change)."""
    rank_dir = sorted(demo_copy.rglob("*_ascend_pt"))[0]
    changed = []
    for csv in sorted(rank_dir.rglob("operator_memory.csv")):
        lines = csv.read_text().splitlines(keepends=True)
        csv.write_text("".join(lines[:-3]))  # drop the last three allocations
        changed.append(csv)
    return changed


def test_reingest_of_a_changed_capture(tmp_path, config, demo, counted_builds):
    """Re-ingest after a change gives what a fresh ingest of the changed files gives, whether
    the capture is rebuilt in a worker or, with files of it unchanged, in the loader."""
    profile = tmp_path / "demo"
    shutil.copytree(demo, profile)
    db = tmp_path / "again.duckdb"
    _ingest(profile, config, db, built=True, run="demo")
    assert _rewrite_rank(profile)
    counted_builds.clear()
    again = _ingest(profile, config, db, built=True, run="demo")
    # Only the changed file is reloaded; its capture keeps unchanged files, so the loader derives it.
    assert [r.status for r in again.results].count("unchanged") == len(again.results) - 1
    assert counted_builds == []
    _ingest(profile, config, tmp_path / "fresh.duckdb", built=False, run="demo")
    assert every_table_differences(db, tmp_path / "fresh.duckdb") == {}


def test_reingest_of_a_whole_capture_rebuilt_in_a_worker(tmp_path, config, demo, counted_builds):
    profile = tmp_path / "demo"
    shutil.copytree(demo, profile)
    db = tmp_path / "again.duckdb"
    _ingest(profile, config, db, built=True, run="demo")
    reloaded = []
    for rank_dir in sorted(profile.rglob("*_ascend_pt"))[:2]:
        for path in rank_dir.rglob("*"):
            if path.is_file():
                path.write_bytes(path.read_bytes() + (b"\n" if path.suffix in (".csv", ".json") else b""))
                reloaded.append(path)
    counted_builds.clear()
    second = _ingest(profile, config, db, built=True, run="demo")
    assert len(second.results) - second.count("unchanged") >= 2
    _ingest(profile, config, tmp_path / "fresh.duckdb", built=False, run="demo")
    assert every_table_differences(db, tmp_path / "fresh.duckdb") == {}
    assert reloaded and len(counted_builds) == 2, "the rewritten captures were not rebuilt in workers"
