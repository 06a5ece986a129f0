"""Run a command and measure wall time, CPU time and the peak RSS of its process tree.

The tree's RSS is sampled from /proc every 20 ms: ru_maxrss alone reports the largest
single process, not parse workers and the loader together.
"""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Measured:
    wall_s: float
    cpu_s: float
    peak_tree_rss_mb: float
    peak_process_rss_mb: float
    returncode: int
    stdout: str
    stderr: str


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        kids: list[int] = []
        for task in tasks:
            text = (task / "children").read_text().split()
            kids += [int(k) for k in text]
        return kids
    except OSError:
        return []


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree_rss_kb(root: int) -> tuple[int, int]:
    total, biggest, stack = 0, 0, [root]
    while stack:
        pid = stack.pop()
        rss = _rss_kb(pid)
        total += rss
        biggest = max(biggest, rss)
        stack += _children(pid)
    return total, biggest


def measure(argv: list[str], env: dict | None = None, cwd: str | None = None) -> Measured:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Output goes to files, not pipes: a full pipe would stall the command we time.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env={**os.environ, **(env or {})}, cwd=cwd)
        peak_total = peak_one = 0
        while proc.poll() is None:
            total, one = _tree_rss_kb(proc.pid)
            peak_total, peak_one = max(peak_total, total), max(peak_one, one)
            time.sleep(0.02)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of RUSAGE_CHILDREN is the largest child ever waited for, not this one's,
    # so the sampled figures are the ones reported.
    return Measured(wall, cpu, peak_total / 1024, peak_one / 1024, proc.returncode, stdout, stderr)
