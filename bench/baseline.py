"""The straightforward approach, as the reference `make bench` compares against.

What RL-Insight's memory parser does for one Ascend rank dir: stream trace_view.json
with ijson, keep the cpu_op events that carry a "Call stack", group them by name and
sort by ts; then read operator_memory.csv with csv.DictReader and, for every row,
bisect the nearest preceding same-name op (ts <= allocation time), attach its stack and
keep the row (the parser returns all rows as dicts). Times are parsed as floats, as
that parser does; rlwh keeps exact ns (rlwh.synth keeps ops >= 2 us apart so both agree).

With several rank dirs it matches them rank after rank in one process, as a user's
script over a run would (the multi-rank bench, bench/run.py many_ranks); with --pool it
hands the ranks to a process pool of one process per core, as RL-Insight's mapper runs a
run: the faster of the two references.

Usage: python bench/baseline.py [--pool] RANK_DIR [RANK_DIR ...]
"""

from __future__ import annotations

import bisect
import csv
import json
import os
import resource
import sys
import time
from pathlib import Path

import ijson


def run_baseline(rank_dir: Path) -> dict:
    """Match every allocation row to a stack; return counts, wall seconds and peak RSS."""
    start = time.perf_counter()
    rank_dir = Path(rank_dir)
    out = rank_dir / "ASCEND_PROFILER_OUTPUT"
    role = rank_dir.parent.name  # the folder convention <root>/<role>/<capture>_ascend_pt
    info = next(rank_dir.glob("profiler_info_*.json"), None)
    rank_id = int(info.stem.rsplit("_", 1)[1]) if info else -1

    by_name: dict[str, list[tuple[float, str]]] = {}
    with open(out / "trace_view.json", "rb") as f:
        for event in ijson.items(f, "item"):
            if event.get("cat") != "cpu_op":
                continue
            args = event.get("args")
            if not isinstance(args, dict) or "Call stack" not in args:
                continue
            by_name.setdefault(event["name"], []).append((float(event["ts"]), args["Call stack"]))
    index = {}
    for name, ops in by_name.items():
        ops.sort(key=lambda op: op[0])
        index[name] = ([ts for ts, _ in ops], [stack for _, stack in ops])
    stacked_ops = sum(len(ops) for ops in by_name.values())
    del by_name

    results, matched = [], 0
    with open(out / "operator_memory.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            name = row["Name"].strip()
            alloc_us = float(row["Allocation Time(us)"].strip())
            call_stack = top = ""
            found = index.get(name)
            if found is not None:
                i = bisect.bisect_right(found[0], alloc_us) - 1
                if i >= 0:
                    call_stack = found[1][i]
                    top = call_stack.split(";\r\n", 1)[0]
                    matched += 1
            duration = row["Duration(us)"].strip()
            results.append({  # the row the user gets: RL-Insight's MemoryEventRow
                "name": name, "role": role, "rank_id": rank_id,
                "call_stack": call_stack, "call_stack_top": top,
                "size_kb": float(row["Size(KB)"]), "start_time_ms": alloc_us / 1000,
                "duration_ms": float(duration) / 1000 if duration else 0.0,
                "total_allocated_mb": float(row["Allocation Total Allocated(MB)"] or 0),
                "total_reserved_mb": float(row["Allocation Total Reserved(MB)"] or 0),
                "total_active_mb": float(row["Allocation Total Active(MB)"] or 0),
                "device_type": row["Device Type"].strip(),
            })

    return {
        "rank_dir": str(rank_dir),
        "stacked_cpu_ops": stacked_ops,
        "rows": len(results),
        "matched": matched,
        "wall_s": round(time.perf_counter() - start, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str]) -> int:
    pooled = bool(argv) and argv[0] == "--pool"
    argv = argv[1:] if pooled else argv
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    if len(argv) == 1:
        print(json.dumps(run_baseline(Path(argv[0]))))
        return 0
    start = time.perf_counter()
    if pooled:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            each = list(pool.map(run_baseline, [Path(a) for a in argv]))
    else:
        each = [run_baseline(Path(a)) for a in argv]
    print(json.dumps({"ranks": len(each), "rows": sum(r["rows"] for r in each),
                      "matched": sum(r["matched"] for r in each), "wall_s": round(time.perf_counter() - start, 2),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
