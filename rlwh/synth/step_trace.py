"""step_trace_time.csv for a synthetic Ascend rank dir, from its trace_view.json.

torch_npu writes one row per profiler step: the step's time split into computing,
communication not overlapped with it, overlapped, free, and the whole stage, in µs. The
rows here add up the rank's Overlap Analysis ranges between each step's MSTX begin and end
marks (the synthetic trace's steps), so the two files of one rank agree as real ones do.
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
    bounds: dict[int, dict[str, Decimal]] = defaultdict(dict)
    for e in events:
        if e.get("cat") == "mstx" and (m := _MARK.fullmatch(str(e.get("name")))):
            bounds[int(m.group(1))][m.group(2)] = Decimal(str(e["ts"]))
    ranges = [(e["name"], Decimal(str(e["ts"])), Decimal(str(e["dur"]))) for e in events
              if e.get("ph") == "X" and e.get("cat") is None and "dur" in e]
    lines = [HEADER]
    for step, b in sorted(bounds.items()):
        begin, end = b.get("begin"), b.get("end")
        if begin is None or end is None:
            continue
        total: defaultdict[str, Decimal] = defaultdict(Decimal)
        for name, ts, dur in ranges:
            if begin <= ts < end:
                total[name] += dur
        not_overlapped = total["Communication(Not Overlapped)"]
        overlapped = total["Communication"] - not_overlapped
        cells = [total["Computing"], not_overlapped, overlapped, total["Communication"], total["Free"],
                 end - begin, Decimal(0), not_overlapped, Decimal(0)]
        lines.append(",".join([str(first_step + step)] + [f"{c:.3f}" for c in cells]))
    path = out / "step_trace_time.csv"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("ascii"))
    return path
