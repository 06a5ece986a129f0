"""`make bench`: rlwh against the straightforward approach, on generated profiles.

Writes its inputs to a temp dir, prints a Markdown table, and saves the figures as
JSON beside this file (bench/results.json) for BENCHMARKS.md.

  python bench/run.py [--scale 1.0] [--keep DIR] [--only NAME,...]

--scale shrinks every input (0.1 for a quick look); the recorded figures use 1.0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from measure import measure  # noqa: E402

from rlwh import synth  # noqa: E402

PY = sys.executable
RESULTS: list[dict] = []


def record(name: str, **figures) -> None:
    figures = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in figures.items()}
    RESULTS.append({"name": name, **figures})
    print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()), flush=True)


def make_rank_profile(root: Path, trace_mb: float, csv_rows: int, ranks: int = 1, seed: int = 0) -> Path:
    n_ops = synth.ops_for_trace_mb(trace_mb, "compact", 0.27)
    synth.write_ascend_profile(root, roles=("actor_update",), ranks=ranks, seed=seed, n_ops=n_ops,
                               n_allocs=csv_rows, n_stacks=4000, stacked_fraction=0.27, trace_format="compact")
    return root


def trace_mb(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("trace_view.json")) / 1e6


def rlwh(*args: str, db: Path) -> list[str]:
    return [PY, "-m", "rlwh.cli", *args, "--db", str(db), "--config", str(REPO / "warehouse.toml")]


def ingest(profile: Path, db: Path):
    m = measure(rlwh("ingest", str(profile), "-q", db=db))
    if m.returncode != 0:
        raise SystemExit(f"ingest failed: {m.stdout}\n{m.stderr}")
    return m


def query_seconds(db: Path, sql: str) -> float:
    m = measure(rlwh("query", sql, "--format", "csv", db=db))
    if m.returncode != 0:
        raise SystemExit(f"query failed: {sql}: {m.stderr}")
    return m.wall_s


EVERY_VIEW = ["memory_alloc_stack", "memory_blocks", "memory_timeline", "memory_peak", "memory_peak_breakdown",
              "memory_unreleased", "memory_event_rows", "role_timeline", "rank_skew"]


def bench_one_rank(tmp: Path, scale: float) -> None:
    """One rank, 1 GB trace + 1.5 M memory rows: baseline vs rlwh ingest + every view answering."""
    profile = make_rank_profile(tmp / "one_rank", 1000 * scale, int(1_500_000 * scale))
    rank_dir = next(profile.rglob("*_ascend_pt"))
    mb = trace_mb(profile)
    base = measure([PY, str(HERE / "baseline.py"), str(rank_dir)])
    record("baseline (ijson + bisect + csv.DictReader), 1 rank", trace_mb=mb, wall_s=base.wall_s,
           peak_rss_mb=base.peak_process_rss_mb)
    db = tmp / "one_rank.duckdb"
    m = ingest(profile, db)
    # One rlwh query process counts every memory view (one process start, not seven).
    views = query_seconds(db, "select " + ", ".join(f"(select count(*) from {v})" for v in EVERY_VIEW[:7]))
    record("rlwh ingest, 1 rank", trace_mb=mb, wall_s=m.wall_s, cpu_s=m.cpu_s,
           peak_tree_rss_mb=m.peak_tree_rss_mb, peak_process_rss_mb=m.peak_process_rss_mb)
    record("rlwh: count(*) of every memory view, 1 rank", wall_s=views)
    record("rlwh ingest + every memory view vs baseline", speedup=base.wall_s / (m.wall_s + views),
           total_s=m.wall_s + views)
    record("query memory_alloc_stack in full", wall_s=query_seconds(
        db, "select count(*), count(call_stack), sum(gap_ns) from memory_alloc_stack"))
    record("query memory_timeline in full", wall_s=query_seconds(
        db, "select count(*), max(live_bytes), sum(delta_bytes) from memory_timeline"))
    record("query memory_peak_breakdown", wall_s=query_seconds(db, "select * from memory_peak_breakdown"))
    again = ingest(profile, db)
    record("rlwh re-ingest of the unchanged rank", wall_s=again.wall_s)


def bench_rss_flat(tmp: Path, scale: float) -> None:
    """Peak RSS for 250 MB, 1 GB and 3 GB traces (the CSV held small)."""
    for size in (250, 1000, 3000):
        profile = make_rank_profile(tmp / f"rss_{size}", size * scale, int(100_000 * scale))
        db = tmp / f"rss_{size}.duckdb"
        m = ingest(profile, db)
        record(f"rlwh ingest, {size * scale:.0f} MB trace", trace_mb=trace_mb(profile), wall_s=m.wall_s,
               mb_per_s=trace_mb(profile) / m.wall_s, peak_tree_rss_mb=m.peak_tree_rss_mb,
               peak_process_rss_mb=m.peak_process_rss_mb)
        shutil.rmtree(profile)


def bench_four_ranks(tmp: Path, scale: float) -> None:
    """4 ranks of 250 MB traces + 375 k rows: both cores busy."""
    profile = make_rank_profile(tmp / "four_ranks", 250 * scale, int(375_000 * scale), ranks=4)
    mb = trace_mb(profile)
    m = ingest(profile, tmp / "four.duckdb")
    record("rlwh ingest, 4 ranks", trace_mb=mb, wall_s=m.wall_s, mb_per_s=mb / m.wall_s,
           cpu_utilisation=m.cpu_s / m.wall_s, peak_tree_rss_mb=m.peak_tree_rss_mb)


def bench_torch_trace(tmp: Path, scale: float) -> None:
    """A 1 GB (uncompressed) PyTorch trace, read once."""
    gen = HERE / "gen_torch_trace.py"
    folder = tmp / "torch" / "actor_update"
    folder.mkdir(parents=True)
    made = measure([PY, str(gen), str(folder / "prof_rank-0.pt.trace.json"), str(1000 * scale)])
    if made.returncode != 0:
        raise SystemExit(f"torch trace generator failed: {made.stderr}")
    mb = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
    m = ingest(tmp / "torch", tmp / "torch.duckdb")
    record("rlwh ingest, PyTorch trace", trace_mb=mb, wall_s=m.wall_s, mb_per_s=mb / m.wall_s,
           peak_tree_rss_mb=m.peak_tree_rss_mb)


def bench_reports(tmp: Path, scale: float) -> None:
    """Rendering the pages of one rank with 1 M allocations (bench/bench_report.py)."""
    from bench_report import bench_report

    for figures in bench_report(tmp / "report", allocations=int(1_000_000 * scale)):
        name = figures.pop("name", "rlwh report, 1 M allocations")
        record(name, **figures)


def bench_scale_out(tmp: Path, scale: float) -> None:
    """64 ranks in five configurations: local pool (loader derives / derive_in_workers /
    dataset mode) and a local 3-node Ray cluster (normal / dataset mode), bench/ray_bench.py.
    The 515 MB profile at scale 1.0, the 80 MB one below; Ray only as root (its namespaces)."""
    import ray_bench

    size = "big" if scale >= 1.0 else "small"
    results = ray_bench.main(["--sizes", size])
    if results["ray_skipped"]:
        record("scale-out: Ray configurations skipped", reason=results["ray_skipped"])
    figures = results["sizes"][size]
    for mode, m in figures["modes"].items():
        record(f"scale-out {figures['input_mb']:.0f} MB, 64 ranks, {mode}: {m['label']}", wall_s=m["wall_s"],
               mb_per_s=m["mb_per_s"], cpu_s=m["cpu_s"], core_utilisation=m["core_utilisation"],
               driver_peak_rss_mb=m["driver_peak_rss_mb"], serial_share=m["serial_share"],
               driver_serial_s=m["driver_serial_s"], driver_serial_cpu_s=m["driver_serial_cpu_s"],
               task_cpu_s_per_rank=m["task_cpu_s_per_rank"])


def bench_small_ingest(tmp: Path, scale: float) -> None:
    """A small real trace: rlwh's fixed cost against a bare load and a bare query (bench/small.py)."""
    from small import bench_small

    bench_small(tmp, record)


BENCHES = {"small": bench_small_ingest, "one_rank": bench_one_rank, "rss": bench_rss_flat,
           "four_ranks": bench_four_ranks, "torch": bench_torch_trace, "report": bench_reports,
           "scale_out": bench_scale_out}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--keep", type=Path, help="write inputs here and keep them")
    parser.add_argument("--only", default=",".join(BENCHES))
    args = parser.parse_args()
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="rlwh-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    memory_gib = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    machine = f"{platform.machine()}, {os.cpu_count()} cores, {memory_gib:.0f} GiB"
    started = time.perf_counter()
    try:
        for name in args.only.split(","):
            BENCHES[name](tmp, args.scale)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nmachine: {machine}; date: {datetime.now(timezone.utc):%Y-%m-%d}; scale {args.scale}; "
          f"{time.perf_counter() - started:.0f} s\n")
    print("| benchmark | figures |\n| --- | --- |")
    for r in RESULTS:
        print(f"| {r['name']} | " + ", ".join(f"{k} {v}" for k, v in r.items() if k != "name") + " |")
    out = HERE / "results.json"
    out.write_text(json.dumps({"machine": machine, "date": f"{datetime.now(timezone.utc):%Y-%m-%d}",
                               "scale": args.scale, "results": RESULTS}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
