"""Scale-out: five ways to ingest the same 64-rank profile, on this machine.

  .venv/bin/python bench/ray_bench.py [--sizes small,big] [--modes abcde] [--keep DIR] [--json OUT] [--no-ray]

Profiles (64 Ascend ranks each): `small`, 32 ranks of two roles with 1,500 ops and
allocations each (~80 MB); `big`, 64 ranks of one role with ~4 MB traces and 20,000
allocations each (~515 MB). Each is ingested in five configurations:

  a  local pool (2 workers), normal warehouse: workers parse, the loader loads and derives
  b  local pool, normal warehouse, derive_in_workers: workers build captures, loader appends
  c  local pool, dataset mode: workers build and stage, the driver publishes + thin file
  d  Ray, normal warehouse (workers build captures, the loader appends)
  e  Ray, dataset mode

Ray is a local cluster of a head and 2 worker nodes on loopback, 1 CPU each
(tests/ray_cluster.py, the tests' cluster: root is needed for its namespaces; --no-ray,
or a machine that cannot run it, skips d and e). Every warehouse is checked equal to a's
in every table, derived ones included (tests/warehouse_compare.every_table_differences;
a thin file's views compare the same way).

Per configuration: wall seconds, MB/s of input, CPU seconds of every process involved
(the driver's tree; for Ray every process of the cluster, sampled while it lives) and
core utilisation (CPU s / wall / cores); the driver's peak RSS and own CPU seconds; where
the wall went seen from outside: `setup` until the executor was first asked for results,
`parallel` until the last task result arrived, `tail` after it; serial share = (setup +
tail) / ingest wall. And the driver's own serial work, timed by wrapping (in the driver
process only, rlwh is not changed) rlwh.ingest.to_warehouse's load_file and land_capture, rlwh.warehouse.derive
.refresh, rlwh.parquet.dataset.publish and build_thin_db: `land_s` (loading or appending),
`derive_s`, `publish_s`, `thin_s`, and `driver_serial_s` their sum, in wall seconds and
in the process CPU seconds of the same calls (DuckDB's threads included; on 2 cores the
wall includes waiting for the workers, the CPU does not). Worker side: every task is
wrapped to time itself where it runs (wall and process CPU), summed over tasks
(`task_s`, `task_cpu_s`) and per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import ray_cluster  # noqa: E402
from warehouse_compare import every_table_differences, row_count  # noqa: E402

from rlwh import synth  # noqa: E402

# A module the driver wraps each task's function with, so a task times itself where it
# runs: importable by the local pool's spawned workers (on PYTHONPATH) and sent to Ray's
# by value (cloudpickle), so no node needs it installed.
TIMING = r'''
import time


def timed(function, *args):
    wall, cpu = time.perf_counter(), time.process_time()
    result = function(*args)
    return {"bench_timed": True, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
            "result": result}
'''

# Runs the ingest in its own process and reports, as one JSON line, the times seen from
# outside rlwh's code: run_tasks, the driver's landing, deriving and publishing functions
# and ray_executor.connect are wrapped, nothing is changed.
DRIVER = r"""
import functools, json, resource, sys, time
t0 = time.perf_counter()
def rss_mb(field="VmRSS:"):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
profile, db, executor, address, options = sys.argv[1:6]
options = json.loads(options)
marks = {"rss_start_mb": rss_mb(), "land_s": 0.0, "derive_s": 0.0, "publish_s": 0.0, "thin_s": 0.0,
         "task_s": 0.0, "task_cpu_s": 0.0, "tasks": 0}
import rlwh_bench_timing
if executor == "ray":
    s = time.perf_counter(); import ray
    marks.update(import_ray_s=time.perf_counter() - s, import_ray_mb=rss_mb() - marks["rss_start_mb"])
    ray.cloudpickle.register_pickle_by_value(rlwh_bench_timing)
    import rlwh.executors.ray_pool as rx
    connect = rx.connect
    def timed_connect(*args, **kwargs):
        s, m = time.perf_counter(), rss_mb()
        try:
            return connect(*args, **kwargs)
        finally:
            marks.setdefault("ray_init_s", []).append(time.perf_counter() - s)
            marks.setdefault("ray_init_mb", []).append(rss_mb() - m)
    rx.connect = timed_connect
import dataclasses
import rlwh.ingest.runner as runner
import rlwh.ingest.to_warehouse as ing
import rlwh.warehouse.derive, rlwh.parquet.dataset, rlwh.ingest.to_dataset
from rlwh.config import Config
def summed(module, name, key):
    original = getattr(module, name)
    marks[key + "_cpu"] = 0.0
    def wrapper(*args, **kwargs):
        s, c = time.perf_counter(), time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            marks[key] += time.perf_counter() - s
            marks[key + "_cpu"] += time.process_time() - c
            marks.setdefault(key + "_calls", []).append(time.process_time() - c)
    setattr(module, name, wrapper)
summed(ing, "load_file", "land_s")
summed(ing, "land_capture", "land_s")
summed(rlwh.warehouse.derive, "refresh", "derive_s")
summed(rlwh.parquet.dataset, "publish", "publish_s")
summed(rlwh.parquet.dataset, "build_thin_db", "thin_s")
run_tasks = ing.run_tasks
def timed_run_tasks(tasks, *args, **kwargs):
    marks["first_ask_s"] = time.perf_counter() - t0
    originals = {t.name: t for t in tasks}
    wrapped = [dataclasses.replace(t, function=functools.partial(rlwh_bench_timing.timed, t.function)) for t in tasks]
    for task, answer in run_tasks(wrapped, *args, **kwargs):
        marks.setdefault("results_s", []).append(time.perf_counter() - t0)
        marks["task_s"] += answer["wall_s"]
        marks["task_cpu_s"] += answer["cpu_s"]
        marks["tasks"] += 1
        yield originals[task.name], answer["result"]
ing.run_tasks = rlwh.ingest.to_dataset.run_tasks = timed_run_tasks  # each imported it by name
from pathlib import Path
config = Config(db_path=Path(db), workers=2, executor=executor, ray_address=address or None,
                derive_in_workers=options.get("derive_in_workers", False),
                dataset=Path(options["dataset"]) if options.get("dataset") else None)
summary = runner.ingest(profile, config)
own = resource.getrusage(resource.RUSAGE_SELF)
marks.update(wall_s=time.perf_counter() - t0, files=len(summary.results), failed=summary.failed,
             rss_end_mb=rss_mb(), driver_peak_rss_mb=rss_mb("VmHWM:"),  # not ru_maxrss: it keeps the forking parent's
             driver_cpu_s=own.ru_utime + own.ru_stime)
print("BENCH " + json.dumps(marks))
"""

MODES = {  # name: (label, executor, options)
    "a": ("local pool, normal warehouse (loader loads + derives)", "local", {}),
    "b": ("local pool, normal warehouse, derive_in_workers", "local", {"derive_in_workers": True}),
    "c": ("local pool, dataset mode", "local", {"dataset": True}),
    "d": ("Ray 3 nodes, normal warehouse (workers build)", "ray", {}),
    "e": ("Ray 3 nodes, dataset mode", "ray", {"dataset": True}),
}


def _cpu_of(pid: int) -> float | None:
    """utime + stime of `pid` so far, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return None


class ClusterCPU(threading.Thread):
    """CPU seconds the cluster's processes spend while it runs, sampled every 0.2 s: a job's
    Ray workers exit when its driver does, so a before/after snapshot would miss them (a
    process loses at most its last 0.2 s here)."""

    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids, self.first, self.last, self.done = pids, {}, {}, threading.Event()
        self.skip: set[int] = set()  # the driver: counted by its parent's rusage
        for pid in pids():
            self.first[pid] = self.last[pid] = _cpu_of(pid) or 0.0

    def run(self) -> None:
        while not self.done.wait(0.2):
            for pid in self.pids():
                if (cpu := _cpu_of(pid)) is not None:
                    self.last[pid] = cpu

    def seconds(self) -> float:
        self.done.set()
        self.join()
        return sum(cpu - self.first.get(pid, 0.0) for pid, cpu in self.last.items() if pid not in self.skip)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _run(command: list[str], env: dict | None, cluster_pids=None) -> tuple[dict, float, float]:
    """(the driver's marks, wall seconds, CPU seconds of the driver's tree [+ the cluster])."""
    sampler = ClusterCPU(cluster_pids) if cluster_pids else None
    if sampler:
        sampler.start()
    before_children = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tempfile.gettempdir())
    if sampler:
        sampler.skip.add(proc.pid)  # nsenter execs the driver: same pid
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    cpu = _children_cpu() - before_children  # the driver and, for local, its pool workers
    if sampler:  # the driver is in the namespace too, but gone (and counted above) by now
        cpu += sampler.seconds()
    line = next((ln for ln in stdout.splitlines() if ln.startswith("BENCH ")), None)
    if proc.returncode or line is None:
        raise SystemExit(f"ingest failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}")
    return json.loads(line[6:]), wall, cpu


def _figures(mode: str, marks: dict, wall: float, cpu: float, input_bytes: int, ranks: int) -> dict:
    last = marks["results_s"][-1]
    setup, tail = marks["first_ask_s"], marks["wall_s"] - last
    serial = marks["land_s"] + marks["derive_s"] + marks["publish_s"] + marks["thin_s"]
    figures = {"mode": mode, "label": MODES[mode][0], "wall_s": wall, "ingest_s": marks["wall_s"],
               "mb_per_s": input_bytes / 1e6 / wall, "cpu_s": cpu, "core_utilisation": cpu / wall / os.cpu_count(),
               "driver_cpu_s": marks["driver_cpu_s"], "driver_busy": marks["driver_cpu_s"] / marks["wall_s"],
               "driver_peak_rss_mb": marks["driver_peak_rss_mb"],
               "setup_s": setup, "parallel_s": last - setup, "tail_s": tail,
               "serial_share": (setup + tail) / marks["wall_s"],
               "land_s": marks["land_s"], "derive_s": marks["derive_s"], "publish_s": marks["publish_s"],
               "thin_s": marks["thin_s"], "driver_serial_s": serial,
               "driver_serial_cpu_s": sum(marks[k + "_s_cpu"] for k in ("land", "derive", "publish", "thin")),
               **{f"{k}_cpu_s": marks[f"{k}_s_cpu"] for k in ("land", "derive", "publish", "thin")},
               "driver_serial_share": serial / marks["wall_s"],
               "tasks": marks["tasks"], "task_s": marks["task_s"], "task_cpu_s": marks["task_cpu_s"],
               "task_s_per_rank": marks["task_s"] / ranks, "task_cpu_s_per_rank": marks["task_cpu_s"] / ranks,
               "files": marks["files"], "failed": marks["failed"]}
    calls = marks.get("land_s_calls", [])
    if len(calls) >= 8:  # does landing slow down as the warehouse grows? CPU s of the first and last quarter's calls
        quarter = len(calls) // 4
        figures["land_cpu_first_last_quarter_s"] = [sum(calls[:quarter]), sum(calls[-quarter:])]
        figures["land_cpu_calls_s"] = [round(c, 4) for c in calls]  # in the JSON only
    for key in ("import_ray_s", "import_ray_mb", "ray_init_s", "ray_init_mb"):
        if key in marks:
            figures[key] = marks[key]
    return figures


def _print(figures: dict) -> None:
    shown = {k: (round(v, 3) if isinstance(v, float) else [round(x, 3) for x in v] if isinstance(v, list) else v)
             for k, v in figures.items() if k not in ("label", "land_cpu_calls_s")}
    print(f"  {figures['label']}: " + ", ".join(f"{k}={v}" for k, v in shown.items() if k != "mode"), flush=True)


def make_profile(root: Path, size: str) -> Path:
    if size == "small":  # the first version of this bench: 32 ranks x 2 roles, small files
        return synth.write_ascend_profile(root, ranks=32, n_ops=1500, n_allocs=1500, n_stacks=64)
    return synth.write_ascend_profile(root, roles=("actor_update",), ranks=64, seed=0,
                                      n_ops=synth.ops_for_trace_mb(4, "compact", 0.27), n_allocs=20000,
                                      n_stacks=400, stacked_fraction=0.27, trace_format="compact")


def _ingest(work: Path, profile: Path, mode: str, size: int, cluster=None) -> tuple[dict, Path]:
    label, executor, options = MODES[mode]
    folder = work / mode
    folder.mkdir(parents=True)
    db = folder / "w.duckdb"
    opts = dict(options)
    if opts.get("dataset"):
        opts["dataset"] = str(folder / "dataset")
    env = {**(cluster.env() if cluster else os.environ), "PYTHONPATH": str(work.parent / "timing")}
    driver = [sys.executable, "-c", DRIVER, str(profile), str(db), executor,
              cluster.address if cluster else "", json.dumps(opts)]
    if cluster:
        netns = cluster._netns()
        marks, wall, cpu = _run(cluster.driver_command(driver), env, cluster_pids=lambda: cluster.processes(netns))
    else:
        marks, wall, cpu = _run(driver, env)
    figures = _figures(mode, marks, wall, cpu, size, 64)
    if opts.get("dataset"):
        figures["dataset_mb"] = _bytes(folder / "dataset") / 1e6
    else:
        figures["warehouse_mb"] = db.stat().st_size / 1e6
    _print(figures)
    return figures, db


def measure_size(work: Path, size_name: str, ray: bool, modes: str = "abcde") -> dict:
    profile = make_profile(work / "profile" / "bench-run", size_name)
    size = _bytes(profile)
    files = sum(1 for _ in profile.rglob("*.*"))
    print(f"profile {size_name}: 64 ranks, {size / 1e6:.1f} MB in {files} files", flush=True)
    results = {"profile": size_name, "ranks": 64, "input_mb": size / 1e6, "input_files": files,
               "cores": os.cpu_count(), "loadavg_before": os.getloadavg(), "modes": {}}
    dbs = {}
    for mode in "abc":
        if mode in modes:
            results["modes"][mode], dbs[mode] = _ingest(work / size_name, profile, mode, size)
    if ray and set(modes) & set("de"):
        started = time.perf_counter()
        cluster = ray_cluster.LocalCluster(work / size_name / "cluster", [ray_cluster.Node("127.0.0.2"),
                                                                          ray_cluster.Node("127.0.0.3")]).start()
        results["cluster_start_s"] = time.perf_counter() - started
        try:
            for mode in "de":
                if mode in modes:
                    results["modes"][mode], dbs[mode] = _ingest(work / size_name, profile, mode, size, cluster)
        finally:
            cluster.stop()
        print(f"  cluster start (head + 2 workers): {results['cluster_start_s']:.1f} s")
    results["loadavg_after"] = os.getloadavg()
    first = next(iter(dbs))  # a, unless --modes left it out
    rows = row_count(dbs[first])
    if rows == 0:
        raise SystemExit(f"the first warehouse ({first}) is empty")
    for mode, db in dbs.items():
        if mode != first and (diff := every_table_differences(db, dbs[first])):
            raise SystemExit(f"{size_name}: {MODES[mode][0]} differs from {first}: {diff}")
    results["rows"] = rows
    others = ", ".join(m for m in dbs if m != first) or "none"
    print(f"  every table equal to {first}'s in {others}: {rows:,} public rows", flush=True)
    shutil.rmtree(work / size_name, ignore_errors=True)
    shutil.rmtree(work / "profile", ignore_errors=True)
    return results


ROWS = [("wall s", "wall_s", 1), ("input MB/s", "mb_per_s", 1), ("CPU s, all processes", "cpu_s", 1),
        ("core utilisation", "core_utilisation", 2), ("driver peak RSS MB", "driver_peak_rss_mb", 0),
        ("driver CPU s", "driver_cpu_s", 1), ("setup / parallel / tail s", None, 1),
        ("serial share (setup + tail) / wall", "serial_share", 2),
        ("driver: land s", "land_s", 1), ("driver: derive s", "derive_s", 1),
        ("driver: publish + thin file s", None, 1), ("driver serial s (sum)", "driver_serial_s", 1),
        ("driver serial CPU s (the same calls' process time)", "driver_serial_cpu_s", 1),
        ("driver serial share", "driver_serial_share", 2), ("worker task s / rank", "task_s_per_rank", 2),
        ("worker task CPU s / rank", "task_cpu_s_per_rank", 2)]


def table(results: dict) -> str:
    modes = list(results["modes"].values())
    lines = [f"| {results['profile']}: 64 ranks, {results['input_mb']:.0f} MB | "
             + " | ".join(f"{m['mode']}: {m['label']}" for m in modes) + " |",
             "| --- |" + " --- |" * len(modes)]
    for title, key, digits in ROWS:
        cells = []
        for m in modes:
            if title.startswith("setup"):
                cells.append(f"{m['setup_s']:.1f} / {m['parallel_s']:.1f} / {m['tail_s']:.1f}")
            elif title.startswith("driver: publish"):
                cells.append(f"{m['publish_s']:.2f} + {m['thin_s']:.2f}" if "dataset_mb" in m else "")
            else:
                cells.append(f"{m[key]:,.{digits}f}")
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="small,big", help="profiles to measure: small, big or both")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir, removed)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray configurations (d, e)")
    parser.add_argument("--modes", default="abcde", help="configurations to run (default abcde)")
    args = parser.parse_args(argv)
    reason = "--no-ray" if args.no_ray else ray_cluster.available()
    if reason:
        print(f"Ray configurations skipped: {reason}")
    work = args.keep or Path(tempfile.mkdtemp(prefix="rlwh-ray-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "timing").mkdir(exist_ok=True)
    (work / "timing" / "rlwh_bench_timing.py").write_text(TIMING)
    try:
        results = {"ray_skipped": reason, "sizes": {}}
        for size_name in args.sizes.split(","):
            results["sizes"][size_name] = measure_size(work, size_name, ray=not reason, modes=args.modes)
            print("\n" + table(results["sizes"][size_name]) + "\n", flush=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=2))
        return results
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
