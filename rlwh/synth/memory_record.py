"""memory_record.csv for a synthetic Ascend rank dir, derived from its operator_memory.csv.

torch_npu writes the allocator's totals at every allocation and release of each component
(PTA: the PyTorch allocator, GE: the graph engine's cann::* blocks, PTA+GE: their sum) and,
every 20 ms, the process's reserved memory (APP, with empty allocated and active cells).
The rows here are those totals as operator_memory.csv reports them, so the two files of one
rank agree the way real ones do. Written with the real header, CRLF line ends and
TAB-ended time cells.
"""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

HEADER = "Component,Timestamp(us),Total Allocated(MB),Total Reserved(MB),Total Active(MB),Stream Ptr,Device Type"
APP_EVERY_US = Decimal(20_000)
APP_OVERHEAD_MB = Decimal(300)  # the process reserves more than the allocators hold


def write_memory_record(rank_dir: Path) -> Path:
    """Write ASCEND_PROFILER_OUTPUT/memory_record.csv beside the rank's operator_memory.csv."""
    out = Path(rank_dir) / "ASCEND_PROFILER_OUTPUT"
    # (time us, component, allocated MB, reserved MB, active MB, stream, device)
    events: list[tuple[Decimal, str, str, str, str, str, str]] = []
    with open(out / "operator_memory.csv", newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            component = "GE" if row["Name"].startswith("cann::") else "PTA"
            for when, prefix in (("Allocation Time(us)", "Allocation"), ("Release Time(us)", "Release")):
                if row[when].strip():
                    allocated, reserved, active = (row[f"{prefix} Total {k}(MB)"].strip()
                                                   for k in ("Allocated", "Reserved", "Active"))
                    events.append((Decimal(row[when].strip()), component, allocated, reserved, active,
                                   row["Stream Ptr"].strip(), row["Device Type"].strip()))
    events.sort(key=lambda e: (e[0], e[1]))
    latest: dict[str, tuple[str, str, str]] = {}
    lines, next_app = [HEADER], events[0][0] if events else None
    for ts, component, allocated, reserved, active, stream, device in events:
        while next_app is not None and next_app <= ts:
            total_reserved = sum((Decimal(v[1]) for v in latest.values() if v[1]), Decimal(0)) + APP_OVERHEAD_MB
            lines.append(f"APP,{_us(next_app)},,{total_reserved},,,{device}")
            next_app += APP_EVERY_US
        latest[component] = (allocated, reserved, active)
        lines.append(f"{component},{_us(ts)},{allocated},{reserved},{active},{stream},{device}")
        both = [sum((Decimal(v[i]) for v in latest.values() if v[i]), Decimal(0)) for i in range(3)]
        lines.append(f"PTA+GE,{_us(ts)},{both[0]},{both[1]},{both[2]},{stream},{device}")
    path = out / "memory_record.csv"
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode("ascii"))
    return path


def _us(value: Decimal) -> str:
    return f"{value:.3f}\t"
