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
    return [PY, "-m", "rlwh", *args, "--db", str(db), "--config", str(REPO / "warehouse.toml")]


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


# The floor of one rank: what DuckDB alone takes to read its two files, one statement each
# (the JSON array counted, the CSV read typed into memory), in a fresh process.
FLOOR = """
import sys, duckdb
con = duckdb.connect()
con.execute("select count(*) from read_json(?, format = 'array')", [sys.argv[1]]).fetchall()
con.execute("create table m as select * from read_csv(?, header = true, delim = ',', quote = '\\"', "
            "columns = {'Name': 'VARCHAR', 'Size(KB)': 'DOUBLE', 'Allocation Time(us)': 'DECIMAL(20,3)', "
            "'Release Time(us)': 'DECIMAL(20,3)', 'Active Release Time(us)': 'DECIMAL(20,3)', "
            "'Duration(us)': 'DECIMAL(20,3)', 'Active Duration(us)': 'DECIMAL(20,3)', "
            "'Allocation Total Allocated(MB)': 'DOUBLE', 'Allocation Total Reserved(MB)': 'DOUBLE', "
            "'Allocation Total Active(MB)': 'DOUBLE', 'Release Total Allocated(MB)': 'DOUBLE', "
            "'Release Total Reserved(MB)': 'DOUBLE', 'Release Total Active(MB)': 'DOUBLE', "
            "'Stream Ptr': 'VARCHAR', 'Device Type': 'VARCHAR'})", [sys.argv[2]])
"""


# One Ascend rank's trace size in MB (--rank-mb) and its memory rows per MB of trace.
ONE_RANK_MB = (300, 1000)
ROWS_PER_RANK_MB = 1500


def bench_one_rank(tmp: Path, scale: float) -> None:
    """One rank at 300 MB + 450 k memory rows and at 1 GB + 1.5 M rows: the seed's
    algorithm (bench/baseline.py), rlwh ingest + every memory view answering, and the
    floor (DuckDB reading the two files), in the same run."""
    for size_mb, rows in ((mb, ROWS_PER_RANK_MB * mb) for mb in ONE_RANK_MB):
        label = f"{size_mb * scale:.0f} MB"
        profile = make_rank_profile(tmp / f"one_rank_{size_mb}", size_mb * scale, int(rows * scale))
        os.sync()  # the inputs' writeback must not land in a measured command
        rank_dir = next(profile.rglob("*_ascend_pt"))
        out = rank_dir / "ASCEND_PROFILER_OUTPUT"
        mb = trace_mb(profile)
        base = measure([PY, str(HERE / "baseline.py"), str(rank_dir)])
        record(f"baseline (ijson + bisect + csv.DictReader), 1 rank, {label}", trace_mb=mb, wall_s=base.wall_s,
               peak_rss_mb=base.peak_process_rss_mb)
        floor = measure([PY, "-c", FLOOR, str(out / "trace_view.json"), str(out / "operator_memory.csv")])
        if floor.returncode != 0:
            raise SystemExit(f"floor failed: {floor.stderr}")
        record(f"floor (DuckDB read_json count + typed read_csv), 1 rank, {label}", wall_s=floor.wall_s,
               cpu_s=floor.cpu_s)
        db = tmp / f"one_rank_{size_mb}.duckdb"
        m = ingest(profile, db)
        # One rlwh query process counts every memory view (one process start, not seven).
        views = query_seconds(db, "select " + ", ".join(f"(select count(*) from {v})" for v in EVERY_VIEW[:7]))
        record(f"rlwh ingest, 1 rank, {label}", trace_mb=mb, wall_s=m.wall_s, cpu_s=m.cpu_s,
               peak_tree_rss_mb=m.peak_tree_rss_mb, peak_process_rss_mb=m.peak_process_rss_mb)
        record(f"rlwh: count(*) of every memory view, 1 rank, {label}", wall_s=views)
        record(f"rlwh ingest + every memory view vs baseline, {label}", speedup=base.wall_s / (m.wall_s + views),
               total_s=m.wall_s + views, vs_floor=(m.wall_s + views) / floor.wall_s)
        if size_mb == 1000:
            record("query memory_alloc_stack in full", wall_s=query_seconds(
                db, "select count(*), count(call_stack), sum(gap_ns) from memory_alloc_stack"))
            record("query memory_timeline in full", wall_s=query_seconds(
                db, "select count(*), max(live_bytes), sum(delta_bytes) from memory_timeline"))
            record("query memory_peak_breakdown", wall_s=query_seconds(db, "select * from memory_peak_breakdown"))
            again = ingest(profile, db)
            record("rlwh re-ingest of the unchanged rank", wall_s=again.wall_s)
        shutil.rmtree(profile)
        db.unlink()


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


TORCH_SOURCE = REPO / "tests" / "data" / "torch_profile" / "actor_update" / "prof_rank-0.pt.trace.json.gz"
TORCH_SIZES_MB = (300, 1000, 3000)
JSON_LOAD = "import json, sys; json.load(open(sys.argv[1], 'rb'))"
# The typed decoder alone on the same bytes, one process: the floor of the reader's decoding.
TYPED_FLOOR = """
import sys
from rlwh.readers import kineto_events as k
with open(sys.argv[1], "rb") as f:
    chunks = iter(lambda: f.read(4 << 20), b"")
    n = 0
    for body in k.bytes_bodies(chunks):
        data = body.data
        if body.__class__ is k._Rest:
            data = data[:data.rindex(b"]")]
        n += len(k._FAST_PIECE.decode(b"[" + data + b"]"))
print(n)
"""


def _available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def bench_torch_trace(tmp: Path, scale: float) -> None:
    """A real Kineto trace (torch_profile/actor_update rank 0: python stacks, [memory] events)
    tiled to 0.3, 1 and 3 GB, times shifted in integer ns (bench/tile_torch_trace.py); in the
    same run: json.load of the file, rlwh ingest + every view answering, and the typed decoder
    alone (the floor). json.load is skipped where it would need more than half the free memory
    (about 5x the file)."""
    from tile_torch_trace import tile

    for size in TORCH_SIZES_MB:
        folder = tmp / f"torch_{size}" / "actor_update"
        folder.mkdir(parents=True)
        trace = folder / "prof_rank-0.pt.trace.json"
        tile(TORCH_SOURCE, trace, int(size * scale * 1e6))
        os.sync()  # the inputs' writeback must not land in a measured command
        mb = trace.stat().st_size / 1e6
        load = os.getloadavg()[0]
        if mb * 5 < _available_mb() / 2:
            base = measure([PY, "-c", JSON_LOAD, str(trace)])
            record(f"json.load, PyTorch trace {mb:.0f} MB", trace_mb=mb, wall_s=base.wall_s,
                   peak_rss_mb=base.peak_process_rss_mb, load=load)
        else:
            base = None
            record(f"json.load, PyTorch trace {mb:.0f} MB: skipped", needs_mb=mb * 5, available_mb=_available_mb())
        floor = measure([PY, "-c", TYPED_FLOOR, str(trace)])
        if floor.returncode != 0:
            raise SystemExit(f"the typed decoder alone failed: {floor.stderr[-2000:]}")
        record(f"typed decoder alone (one process), {mb:.0f} MB", wall_s=floor.wall_s,
               peak_rss_mb=floor.peak_process_rss_mb)
        db = tmp / f"torch_{size}.duckdb"
        m = ingest(tmp / f"torch_{size}", db)
        views = query_seconds(db, "select " + ", ".join(f"(select count(*) from {v})" for v in EVERY_VIEW))
        total = m.wall_s + views
        figures = dict(trace_mb=mb, wall_s=m.wall_s, views_s=views, cpu_s=m.cpu_s, mb_per_s=mb / total,
                       peak_tree_rss_mb=m.peak_tree_rss_mb, vs_floor=total / floor.wall_s,
                       load=os.getloadavg()[0])
        if base is not None:
            figures["vs_json_load"] = base.wall_s / total
        record(f"rlwh ingest + every view, PyTorch trace {mb:.0f} MB", **figures)
        shutil.rmtree(tmp / f"torch_{size}")
        db.unlink(missing_ok=True)


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


# Many modest ranks, as a real RL run leaves them (issue 31): 2 roles, an 8 MB trace and
# 12,000 memory rows per rank at scale 1.0 (64 ranks: ~656 MB).
MANY_RANKS = (8, 64, 256)
RANK_TRACE_MB, RANK_ROWS = 8.0, 12_000

BARE_SCAN = """
import sys, time, duckdb
traces, csvs = sys.argv[1].split("\\n"), sys.argv[2].split("\\n")
con = duckdb.connect()
con.execute("set threads = 2")
t = time.perf_counter()
con.execute("select count(*), count(args.\\"Call stack\\") from read_json(?, format = 'array', filename = true, "
            "columns = {cat: 'VARCHAR', name: 'VARCHAR', ts: 'VARCHAR', args: 'STRUCT(\\"Call stack\\" VARCHAR)'})"
            " where cat = 'cpu_op'", [traces]).fetchall()
con.execute("select count(*), sum(\\"Size(KB)\\") from read_csv(?, header = true, filename = true)", [csvs]).fetchall()
print(time.perf_counter() - t)
"""


def bench_many_ranks(tmp: Path, scale: float) -> None:
    """8, 64 and 256 Ascend ranks (--ranks): the seed's algorithm over every rank, pooled
    over the cores (RL-Insight's mapper) and in one process rank after rank, rlwh into a
    normal warehouse and in dataset mode, and DuckDB's bare scan of the same files (one
    read_json + one read_csv: the floor), all in this one run; MB/s of input per size, so
    the cost per MB can be seen flat or not."""
    for ranks in MANY_RANKS:
        root = tmp / f"ranks_{ranks}"
        n_ops = synth.ops_for_trace_mb(RANK_TRACE_MB * scale, "compact", 0.27)
        synth.write_ascend_profile(root, roles=("actor_update", "rollout"), ranks=ranks // 2, seed=ranks,
                                   n_ops=n_ops, n_allocs=max(1, int(RANK_ROWS * scale)), n_stacks=1300,
                                   stacked_fraction=0.27, trace_format="compact")
        rank_dirs = sorted(str(d) for d in root.rglob("*_ascend_pt"))
        traces = sorted(str(p) for p in root.rglob("trace_view.json"))
        csvs = sorted(str(p) for p in root.rglob("operator_memory.csv"))
        mb = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6
        os.sync()  # the inputs' writeback must not land in a measured command
        load = os.getloadavg()[0]
        seed = measure([PY, str(HERE / "baseline.py"), *rank_dirs])
        pooled = measure([PY, str(HERE / "baseline.py"), "--pool", *rank_dirs])
        if seed.returncode != 0 or pooled.returncode != 0:
            raise SystemExit(f"baseline failed: {seed.stderr}{pooled.stderr}")
        bare = measure([PY, "-c", BARE_SCAN, "\n".join(traces), "\n".join(csvs)])
        normal = ingest(root, tmp / f"ranks_{ranks}.duckdb")
        dataset = measure(rlwh("ingest", str(root), "-q", "--dataset", str(tmp / f"ranks_{ranks}.dataset"),
                               db=tmp / f"ranks_{ranks}_thin.duckdb"))
        if dataset.returncode != 0:
            raise SystemExit(f"dataset ingest failed: {dataset.stdout}\n{dataset.stderr}")
        again = ingest(root, tmp / f"ranks_{ranks}.duckdb")
        label = f"{ranks} ranks, {mb:.0f} MB"
        record(f"many ranks: seed's algorithm, one process, {label}", wall_s=seed.wall_s,
               mb_per_s=mb / seed.wall_s, cpu_s=seed.cpu_s, load_before=load)
        record(f"many ranks: seed's algorithm, pooled over the cores, {label}", wall_s=pooled.wall_s,
               mb_per_s=mb / pooled.wall_s, cpu_s=pooled.cpu_s)
        record(f"many ranks: DuckDB bare scan (floor), {label}", wall_s=bare.wall_s, mb_per_s=mb / bare.wall_s,
               cpu_s=bare.cpu_s)
        for mode, m in (("normal", normal), ("dataset", dataset)):
            record(f"many ranks: rlwh {mode}, {label}", wall_s=m.wall_s, mb_per_s=mb / m.wall_s, cpu_s=m.cpu_s,
                   vs_seed=seed.wall_s / m.wall_s, vs_pooled_seed=pooled.wall_s / m.wall_s,
                   vs_floor=m.wall_s / bare.wall_s,
                   peak_tree_rss_mb=m.peak_tree_rss_mb)
        record(f"many ranks: rlwh re-ingest unchanged, {label}", wall_s=again.wall_s, load_after=os.getloadavg()[0])
        shutil.rmtree(root, ignore_errors=True)


def bench_check_gzip(tmp: Path, scale: float) -> None:
    """`rlwh check` on a gzip trace against `rlwh ingest` of it: check finds a cut stream by
    inflating it to its end (deflate has no index to seek by), with the output thrown away."""
    import gzip

    from tile_torch_trace import tile

    folder = tmp / "check_gzip" / "actor_update"
    folder.mkdir(parents=True)
    plain = folder / "prof_rank-0.pt.trace.json"
    tile(TORCH_SOURCE, plain, int(300 * scale * 1e6))
    packed = folder / (plain.name + ".gz")
    with open(plain, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    mb = plain.stat().st_size / 1e6
    plain.unlink()
    check = measure([PY, "-m", "rlwh", "check", str(tmp / "check_gzip")])
    db = tmp / "check_gzip.duckdb"
    m = ingest(tmp / "check_gzip", db)
    record(f"rlwh check of a gzip PyTorch trace ({mb:.0f} MB inflated, {packed.stat().st_size / 1e6:.0f} MB "
           "on disk) against ingest", check_s=check.wall_s, check_peak_rss_mb=check.peak_process_rss_mb,
           ingest_s=m.wall_s, check_vs_ingest=check.wall_s / m.wall_s, load=os.getloadavg()[0])
    shutil.rmtree(tmp / "check_gzip")
    db.unlink(missing_ok=True)


def bench_small_ingest(tmp: Path, scale: float) -> None:
    """A small real trace: rlwh's fixed cost against a bare load and a bare query (bench/small.py)."""
    from small import bench_small

    bench_small(tmp, record)


def bench_expert_dumps(tmp: Path, scale: float) -> None:
    """Many small MoE expert-count dumps against a bare load of them (bench/expert_dumps.py)."""
    from expert_dumps import bench_expert_dumps as bench

    bench(tmp, scale, record)


GROWTH_GB: tuple[float, ...] = (1, 5)
DATASET_GROWTH_RUNS = 8


def bench_warehouse_growth(tmp: Path, scale: float) -> None:
    """A small ingest into a grown warehouse (and dataset) against an empty one (bench/growth.py)."""
    from growth import bench_dataset_growth, bench_growth

    bench_growth(tmp, scale, GROWTH_GB, rlwh, record)
    if DATASET_GROWTH_RUNS:
        bench_dataset_growth(tmp, scale, DATASET_GROWTH_RUNS, rlwh, record)


BENCHES = {"small": bench_small_ingest, "one_rank": bench_one_rank, "rss": bench_rss_flat,
           "four_ranks": bench_four_ranks, "torch": bench_torch_trace, "report": bench_reports,
           "scale_out": bench_scale_out, "many_ranks": bench_many_ranks, "check_gzip": bench_check_gzip,
           "growth": bench_warehouse_growth, "expert_dumps": bench_expert_dumps}


def main() -> int:
    global MANY_RANKS, ONE_RANK_MB, TORCH_SIZES_MB, GROWTH_GB, DATASET_GROWTH_RUNS
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--keep", type=Path, help="write inputs here and keep them")
    parser.add_argument("--only", default=",".join(BENCHES))
    parser.add_argument("--ranks", default=",".join(str(n) for n in MANY_RANKS),
                        help="the run sizes of many_ranks (ranks, comma-separated)")
    parser.add_argument("--rank-mb", default=",".join(str(n) for n in ONE_RANK_MB),
                        help="the trace sizes of one_rank (MB, comma-separated)")
    parser.add_argument("--torch-mb", default=",".join(str(n) for n in TORCH_SIZES_MB),
                        help="the trace sizes of torch (MB, comma-separated)")
    parser.add_argument("--growth-gb", default=",".join(str(n) for n in GROWTH_GB),
                        help="the warehouse sizes of growth (GB, comma-separated)")
    parser.add_argument("--dataset-growth-runs", type=int, default=DATASET_GROWTH_RUNS,
                        help="runs of 256 ranks in the grown dataset of growth (0: no dataset growth)")
    args = parser.parse_args()
    DATASET_GROWTH_RUNS = args.dataset_growth_runs
    GROWTH_GB = tuple(float(n) for n in args.growth_gb.split(","))
    MANY_RANKS = tuple(int(n) for n in args.ranks.split(","))
    ONE_RANK_MB = tuple(int(n) for n in args.rank_mb.split(","))
    TORCH_SIZES_MB = tuple(int(n) for n in args.torch_mb.split(","))
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
