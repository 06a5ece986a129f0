"""The Ray executor against the local pool, on one generated run of 64 small ranks.

  .venv/bin/python bench/ray_bench.py [--ranks 64] [--ops 1500] [--keep DIR] [--json OUT]

Ingests the same profile twice: (1) `executor = local`, 2 workers; (2) `executor = ray`
on a local cluster of a head and 2 worker nodes on loopback, 1 CPU each
(tests/ray_cluster.py, the tests' cluster, so root is needed for its namespaces). Checks
both warehouses hold the same rows, then prints per executor: wall seconds, MB/s of
input, core utilisation (CPU seconds of every process involved / wall / cores: the
ingest's own process tree, and for Ray every process of the cluster too), and where the
wall went, measured from outside the ingest: `setup` until the executor was first
asked for results, `parallel` until the last task result arrived, `tail` after it (the
loads left, capture starts, the derived tables); serial share = (setup + tail) / wall.
For Ray also: `import ray` and ray.init seconds and the MB they add to the driver, and
driver_busy, the CPU seconds of the `rlwh ingest` process (the loader) per wall second.
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
from warehouse_compare import differences, row_count  # noqa: E402

from rlwh import synth  # noqa: E402

# Runs the ingest in its own process and reports, as one JSON line, the times seen from
# outside rlwh's code: run_tasks and ray_executor.connect are wrapped, nothing is changed.
DRIVER = r"""
import json, sys, time
t0 = time.perf_counter()
def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
profile, db, executor, address = sys.argv[1:5]
marks = {"rss_start_mb": rss_mb()}
if executor == "ray":
    s = time.perf_counter(); import ray
    marks.update(import_ray_s=time.perf_counter() - s, import_ray_mb=rss_mb() - marks["rss_start_mb"])
    import rlwh.ray_executor as rx
    connect = rx.connect
    def timed_connect(*args, **kwargs):
        s, m = time.perf_counter(), rss_mb()
        try:
            return connect(*args, **kwargs)
        finally:
            marks.setdefault("ray_init_s", []).append(time.perf_counter() - s)
            marks.setdefault("ray_init_mb", []).append(rss_mb() - m)
    rx.connect = timed_connect
import rlwh.ingest as ing
from rlwh.config import Config
run_tasks = ing.run_tasks
def timed_run_tasks(*args, **kwargs):
    marks["first_ask_s"] = time.perf_counter() - t0
    for pair in run_tasks(*args, **kwargs):
        marks.setdefault("results_s", []).append(time.perf_counter() - t0)
        yield pair
ing.run_tasks = timed_run_tasks
from pathlib import Path
config = Config(db_path=Path(db), workers=2, executor=executor, ray_address=address or None)
summary = ing.ingest(profile, config)
marks.update(wall_s=time.perf_counter() - t0, files=len(summary.results), failed=summary.failed,
             rss_end_mb=rss_mb())
print("BENCH " + json.dumps(marks))
"""


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
    driver_cpu = cpu
    if sampler:  # the driver is in the namespace too, but gone (and counted above) by now
        cpu += sampler.seconds()
    line = next((ln for ln in stdout.splitlines() if ln.startswith("BENCH ")), None)
    if proc.returncode or line is None:
        raise SystemExit(f"ingest failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}")
    marks = json.loads(line[6:])
    if sampler:  # the loader's own share: with Ray it is the only work left in this process
        marks["driver_busy"] = driver_cpu / marks["wall_s"]
    return marks, wall, cpu


def _figures(name: str, marks: dict, wall: float, cpu: float, input_bytes: int) -> dict:
    last = marks["results_s"][-1]
    setup, tail = marks["first_ask_s"], marks["wall_s"] - last
    figures = {"executor": name, "wall_s": wall, "ingest_s": marks["wall_s"], "mb_per_s": input_bytes / 1e6 / wall,
               "core_utilisation": cpu / wall / os.cpu_count(), "cpu_s": cpu, "setup_s": setup,
               "parallel_s": last - setup, "tail_s": tail, "serial_share": (setup + tail) / marks["wall_s"],
               "files": marks["files"]}
    for key in ("driver_busy", "import_ray_s", "import_ray_mb", "ray_init_s", "ray_init_mb"):
        if key in marks:
            figures[key] = marks[key]
    return figures


def _print(figures: dict) -> None:
    shown = {k: (round(v, 3) if isinstance(v, float) else [round(x, 3) for x in v] if isinstance(v, list) else v)
             for k, v in figures.items()}
    print(", ".join(f"{k}={v}" for k, v in shown.items()), flush=True)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64, help="ranks in all (two roles)")
    parser.add_argument("--ops", type=int, default=1500, help="cpu_ops per rank's trace")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir, removed)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    reason = ray_cluster.available()
    if reason:
        raise SystemExit(f"cannot start the local Ray cluster: {reason}")
    work = args.keep or Path(tempfile.mkdtemp(prefix="rlwh-ray-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        profile = synth.write_ascend_profile(work / "profile" / "bench-run", ranks=args.ranks // 2, n_ops=args.ops,
                                             n_allocs=args.ops, n_stacks=64)
        size = _bytes(profile)
        print(f"profile: {args.ranks} ranks, {size / 1e6:.1f} MB in {sum(1 for _ in profile.rglob('*.*'))} files")
        driver = [sys.executable, "-c", DRIVER, str(profile)]
        results = {"ranks": args.ranks, "input_mb": size / 1e6, "cores": os.cpu_count()}
        local_db = work / "local" / "w.duckdb"
        local_db.parent.mkdir(parents=True)
        marks, wall, cpu = _run(driver + [str(local_db), "local", ""], None)
        results["local"] = _figures("local (2 workers)", marks, wall, cpu, size)
        _print(results["local"])

        started = time.perf_counter()
        cluster = ray_cluster.LocalCluster(work / "cluster", [ray_cluster.Node("127.0.0.2"),
                                                               ray_cluster.Node("127.0.0.3")]).start()
        results["cluster_start_s"] = time.perf_counter() - started
        try:
            netns = cluster._netns()
            ray_db = work / "ray" / "w.duckdb"
            ray_db.parent.mkdir(parents=True)
            marks, wall, cpu = _run(cluster.driver_command(driver + [str(ray_db), "ray", cluster.address]),
                                    cluster.env(), cluster_pids=lambda: cluster.processes(netns))
            results["ray"] = _figures("ray (head + 2 workers, 1 CPU each)", marks, wall, cpu, size)
            _print(results["ray"])
        finally:
            cluster.stop()
        print(f"cluster start (head + 2 workers): {results['cluster_start_s']:.1f} s")
        diff = differences(ray_db, local_db)
        if diff or row_count(local_db) == 0:
            raise SystemExit(f"the Ray warehouse differs from the local one: {diff}")
        print(f"warehouses equal: {row_count(local_db):,} rows in both")
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return results
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
