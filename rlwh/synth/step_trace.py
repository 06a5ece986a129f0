"""step_trace_time.csv for a synthetic Ascend rank dir, from its trace_view.json.

torch_npu writes one row per profiler step: the step's time split into computing,
communication not overlapped with it, overlapped, free, and the whole stage, in µs. A
step's stage here is the span of its device ops (kernels and HCCL ops starting between its
MSTX begin mark and the next step's), and its figures add up the rank's Overlap Analysis
ranges starting in that span, so the two files of one rank agree as real ones do and
Stage = Computing + Communication(Not Overlapped) + Free. (The Free range of the pause
between two steps lies outside both spans.)
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

HEADER = ("Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
          "Communication(Not Overlapped and Exclude Receive),Preparing")
_MARK = re.compile(r"step_(\d+)_(begin|end)")


def write_step_trace_time(rank_dir: Path, first_step: int = 1) -> Path:
    """Write ASCEND_PROFILER_OUTPUT/step_trace_time.csv beside the rank's trace_view.json."""
    out = Path(rank_dir) / "ASCEND_PROFILER_OUTPUT"
    events = json.loads((out / "trace_view.json").read_text(encoding="utf-8"), parse_float=Decimal)
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    begins: dict[int, Decimal] = {}
    for e in events:
        if e.get("cat") == "mstx" and (m := _MARK.fullmatch(str(e.get("name")))) and m.group(2) == "begin":
            begins[int(m.group(1))] = Decimal(str(e["ts"]))
    device = [(Decimal(str(e["ts"])), Decimal(str(e["ts"])) + Decimal(str(e["dur"]))) for e in events
              if e.get("ph") == "X" and (e.get("cat") == "Kernel" or processes.get(e.get("pid")) == "HCCL")]
    overlap = [(e["name"], Decimal(str(e["ts"])), Decimal(str(e["dur"]))) for e in events
               if e.get("ph") == "X" and processes.get(e.get("pid")) == "Overlap Analysis"]
    lines = [HEADER]
    steps = sorted(begins)
    for i, step in enumerate(steps):
        begin = begins[step]
        until = begins[steps[i + 1]] if i + 1 < len(steps) else None
        ops = [(ts, end) for ts, end in device if ts >= begin and (until is None or ts < until)]
        if not ops:
            continue
        first, last = min(ts for ts, _ in ops), max(end for _, end in ops)
        total: defaultdict[str, Decimal] = defaultdict(Decimal)
        for name, ts, dur in overlap:
            if first <= ts < last:
                total[name] += dur
        not_overlapped = total["Communication(Not Overlapped)"]
        overlapped = total["Communication"] - not_overlapped
        cells = [total["Computing"], not_overlapped, overlapped, total["Communication"], total["Free"],
                 last - first, Decimal(0), not_overlapped, Decimal(0)]
        lines.append(",".join([str(first_step + step)] + [f"{c:.3f}" for c in cells]))
    path = out / "step_trace_time.csv"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("ascii"))
    return path
