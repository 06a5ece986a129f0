"""A warehouse that grows (issue 39): the same small ingest into an empty warehouse and into
grown ones, paired, with the extra disk each took. PAIRS pairs, the order inside a pair
alternating (empty then grown, grown then empty, ...): a command that always ran second
would always meet the writeback and page cache of the first. The ratio reported is the
median pair's, with the worst pair beside it.

A grown warehouse is generated: one real ingest of the small run, then its rows copied
under new run names (every table with a run column, source ids shifted) until the file
holds the size asked for, so building 5 GB takes a minute, not hours of ingests. Then
WARM_NIGHTS real ingests of the small run go in, untimed, as the nights before would
have: of the first 8 appends after the bulk copies, 3-5 took 0.41-0.67 s to commit, where
later ones take 0.25-0.28 s and those into a warehouse grown by 39 real ingests 0.22-0.34
(one 0.48): without them the pairs measured that generated state, which no nightly store
reaches, more than its size (BENCHMARKS.md, session 20).

Dataset mode grows by files, not bytes (a generation lists every file it
holds), so its grown dataset is made by real ingests: 8 runs of 256 small ranks (2 roles
x 128, ~0.2 MB each), the issue's "256 ranks of 8 runs". The same small run then goes into
an empty dataset and into the grown one, paired, and into an empty normal warehouse (the
fixed cost dataset mode adds).

  python bench/run.py --only growth [--growth-gb 1,5] [--dataset-growth-runs 8]
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from statistics import median_high

import duckdb
from measure import Measured, measure

from rlwh import synth

SMALL_RANKS = 8
# Five: with three, one slow ingest of the same small run (its time moves by 0.5 s between
# runs on a 2-core machine) decided whether a median crossed 1.2x.
PAIRS = 5
# Real ingests into a generated warehouse before its pairs (the module's docstring says why).
WARM_NIGHTS = 10


def _in_turn(pairs: int, **steps) -> dict[str, list[tuple[float, int]]]:
    """Run each step (i -> (seconds, extra disk)) once a pair, their order reversed in every
    other pair; each step's figures by its name."""
    figures: dict[str, list[tuple[float, int]]] = {name: [] for name in steps}
    for i in range(pairs):
        for name in (list(steps) if i % 2 == 0 else list(steps)[::-1]):
            figures[name].append(steps[name](i))
    return figures


def _disk_used(folder: Path) -> int:
    """Bytes in use on the file system that holds `folder`: one statvfs, where walking a
    dataset's 50,000 files every 20 ms took a core from the ingest it measured (and failed
    when a publish pruned a folder mid-walk). Other writers to the same file system count
    too: measure on a quiet machine."""
    st = os.statvfs(folder)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class DiskPeak:
    """The most the file system of a folder held above its use at start, sampled every 20 ms."""

    def __init__(self, folder: Path):
        self.folder, self.start, self.peak = folder, _disk_used(folder), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _disk_used(self.folder) - self.start)
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def grow(db: Path, target_bytes: int) -> None:
    """Double the warehouse's runs (copies under new names) until the file holds target_bytes."""
    con = duckdb.connect(str(db))
    try:
        tables = [f"{s}.{t}" for s, t in con.execute(
            "select distinct schema_name, table_name from duckdb_columns() where column_name = 'run' "
            "and schema_name in ('main', 'internal') and table_name in (select table_name from duckdb_tables())"
        ).fetchall()]
        round_ = 0
        while db.stat().st_size < target_bytes:
            round_ += 1
            shift = con.execute("select max(source_id) from sources").fetchone()[0]
            con.execute("begin transaction")
            for table in tables:
                columns = {c for (c,) in con.execute(
                    "select column_name from duckdb_columns() where schema_name || '.' || table_name = ?",
                    [table]).fetchall()}
                moved = f"run || '~{round_}' as run" + (f", source_id + {shift} as source_id"
                                                         if "source_id" in columns else "")
                con.execute(f"insert into {table} select * replace ({moved}) from {table}")
            con.execute("commit")
            con.execute("checkpoint")
    finally:
        con.close()


def _ingest(rlwh, profile: Path, db: Path, run: str, dataset: Path | None = None) -> tuple[Measured, int]:
    extra = ("--dataset", str(dataset)) if dataset else ()
    os.sync()  # the previous command's writeback (its files written or deleted) must not land in this one
    with DiskPeak(db.parent) as disk:
        m = measure(rlwh("ingest", str(profile), "-q", "--run", run, *extra, db=db))
    if m.returncode != 0:
        raise SystemExit(f"ingest failed: {m.stdout}\n{m.stderr}")
    return m, disk.peak


def _timed(ingested: tuple[Measured, int]) -> tuple[float, int]:
    """An _ingest's wall seconds and extra disk."""
    measured, disk = ingested
    return measured.wall_s, disk


def _into_new(folder: Path, rlwh, profile: Path, db_name: str, dataset: bool = False) -> tuple[float, int]:
    """The small run into a new warehouse (or dataset) in `folder`, removed afterwards."""
    folder.mkdir()
    figures = _timed(_ingest(rlwh, profile, folder / db_name, "night", folder / "data" if dataset else None))
    shutil.rmtree(folder)
    return figures


def _small_run(tmp: Path, scale: float) -> tuple[Path, float]:
    """The small run both benches ingest (made once), and its MB."""
    profile = tmp / "growth_small"
    if not profile.exists():
        synth.write_ascend_profile(profile, roles=("actor_update",), ranks=SMALL_RANKS, seed=7,
                                   n_ops=synth.ops_for_trace_mb(8 * scale, "compact", 0.27),
                                   n_allocs=max(1, int(12_000 * scale)), n_stacks=1300, stacked_fraction=0.27,
                                   trace_format="compact")
    return profile, sum(p.stat().st_size for p in profile.rglob("*") if p.is_file()) / 1e6


def bench_dataset_growth(tmp: Path, scale: float, runs: int, rlwh, record, pairs: int = PAIRS) -> None:
    """The small run into an empty dataset and into one holding `runs` runs of 256 small
    ranks, paired; and into an empty normal warehouse (dataset mode's fixed cost)."""
    profile, mb = _small_run(tmp, scale)
    big = tmp / "growth_256_ranks"
    synth.write_ascend_profile(big, roles=("actor_update", "rollout"), ranks=128, seed=9, n_ops=2000,
                               n_allocs=500, n_stacks=200, stacked_fraction=0.27, trace_format="compact")
    grown = tmp / "growth_dataset"
    grown.mkdir()
    for i in range(runs):
        _ingest(rlwh, big, grown / "thin.duckdb", f"big-{i}", grown / "data")
    files = sum(1 for p in (grown / "data").rglob("*.parquet"))
    os.sync()
    figures = _in_turn(
        pairs,
        empty=lambda i: _into_new(tmp / f"dataset_empty_{i}", rlwh, profile, "thin.duckdb", dataset=True),
        grown=lambda i: _timed(_ingest(rlwh, profile, grown / "thin.duckdb", f"night-{i}", grown / "data")),
        normal=lambda i: _into_new(tmp / f"normal_empty_{i}", rlwh, profile, "warehouse.duckdb"))
    empty_s, grown_s, normal_s = ([t for t, _ in figures[k]] for k in ("empty", "grown", "normal"))
    ratios = sorted(g / e for g, e in zip(grown_s, empty_s))
    fixed = sorted(e / n for e, n in zip(empty_s, normal_s))
    record(f"growth, dataset mode: a small ingest ({SMALL_RANKS} ranks, {mb:.0f} MB) into a dataset of 256 ranks x "
           f"{runs} runs ({files} files) against an empty one, and an empty dataset against an empty warehouse",
           empty_s=median_high(empty_s), grown_s=median_high(grown_s), grown_vs_empty=median_high(ratios),
           worst_pair=ratios[-1], normal_warehouse_s=median_high(normal_s), dataset_vs_warehouse=median_high(fixed),
           extra_disk_grown_mb=max(d for _, d in figures["grown"]) / 1e6, load=os.getloadavg()[0])
    shutil.rmtree(grown)
    shutil.rmtree(big)


def bench_growth(tmp: Path, scale: float, sizes_gb: tuple[float, ...], rlwh, record, pairs: int = PAIRS) -> None:
    """For each size: `pairs` pairs of (the small run into an empty warehouse, into one
    grown to the size), in turn; wall time, the ratio and the extra disk of each."""
    profile, mb = _small_run(tmp, scale)
    seed = tmp / "growth_seed" / "warehouse.duckdb"
    seed.parent.mkdir()
    _ingest(rlwh, profile, seed, "seed")
    for gb in sizes_gb:
        grown = tmp / f"growth_{gb}gb" / "warehouse.duckdb"
        grown.parent.mkdir()
        shutil.copy(seed, grown)
        grow(grown, int(gb * 1e9))
        for night in range(WARM_NIGHTS):
            _ingest(rlwh, profile, grown, f"before-{night}")
        size_gb = grown.stat().st_size / 1e9
        os.sync()
        _growth_pairs(tmp / f"growth_empty_{gb}", grown, profile, rlwh, record, pairs,
                      f"growth: a small ingest ({SMALL_RANKS} ranks, {mb:.0f} MB) into a {size_gb:.1f} GB "
                      "warehouse against an empty one")
        shutil.rmtree(grown.parent)


def _growth_pairs(empty_base: Path, grown: Path, profile: Path, rlwh, record, pairs: int, what: str) -> None:
    """The small run into a new empty warehouse and into `grown`, `pairs` times, in turn."""
    figures = _in_turn(
        pairs,
        empty=lambda i: _into_new(Path(f"{empty_base}_{i}"), rlwh, profile, "warehouse.duckdb"),
        grown=lambda i: _timed(_ingest(rlwh, profile, grown, f"night-{i}")))
    empty_s, grown_s = ([t for t, _ in figures[k]] for k in ("empty", "grown"))
    ratios = sorted(g / e for g, e in zip(grown_s, empty_s))
    record(what, empty_s=median_high(empty_s), grown_s=median_high(grown_s), grown_vs_empty=median_high(ratios),
           worst_pair=ratios[-1], extra_disk_empty_mb=max(d for _, d in figures["empty"]) / 1e6,
           extra_disk_grown_mb=max(d for _, d in figures["grown"]) / 1e6, load=os.getloadavg()[0])
