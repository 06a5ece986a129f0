"""memory_peak: the peak of live bytes and the allocator's reported peak, per capture and
device, against a replay of the rows in Python."""

from __future__ import annotations

from collections import defaultdict

import pytest
from memory_input import KEY, ascend_rows, blocks, insert_ascend, peaks


def _allocator_peaks(rows) -> dict:
    """The framework allocator's (PTA's: not GE's cann::* rows) highest reported totals and the
    first time it reported the allocated one."""
    reports = defaultdict(list)
    for b in blocks(rows):
        if b["name"].startswith("cann::"):
            continue
        key = (b["capture"], b["device"])
        reports[key].append((b["alloc_ns"], b["alloc_total_allocated_bytes"], b["alloc_total_reserved_bytes"]))
        if b["release_ns"] is not None:
            reports[key].append((b["release_ns"], b["release_total_allocated_bytes"],
                                 b["release_total_reserved_bytes"]))
    result = {}
    for key, found in reports.items():
        allocated = max(r[1] for r in found)
        result[key] = (allocated, min(r[0] for r in found if r[1] == allocated), max(r[2] for r in found))
    return result


@pytest.mark.parametrize("seed", [6, 7])
def test_peaks_match_a_replay(attached_db, seed):
    rows = ascend_rows(seed)
    insert_ascend(attached_db, rows)
    live, allocator = peaks(rows), _allocator_peaks(rows)
    expected = sorted(
        (KEY["run"], KEY["role"], KEY["rank_id"], capture, device, peak, at, *allocator[(capture, device)],
         round(peak / 1048576, 3), round(allocator[(capture, device)][0] / 1048576, 3), "epoch")
        for (capture, device), (peak, at) in live.items())
    got = attached_db.execute("""
        select run, role, rank_id, capture, device, peak_live_bytes, peak_at_ns, allocator_peak_bytes,
               allocator_peak_at_ns, allocator_reserved_peak_bytes, peak_live_mb, allocator_peak_mb, clock
        from memory_peak order by all""").fetchall()
    assert len(expected) == 4
    assert [(*r[:10], float(r[10]), float(r[11]), r[12]) for r in got] == expected


def test_ge_totals_alone_give_no_allocator_peak(attached_db):
    rows = [r for r in ascend_rows(8) if r["name"].startswith("cann::")]
    insert_ascend(attached_db, rows)
    got = attached_db.execute("select capture, device, peak_live_bytes, peak_at_ns, allocator_peak_bytes, "
                              "allocator_peak_at_ns from memory_peak order by all").fetchall()
    assert got == sorted((c, d, p, at, None, None) for (c, d), (p, at) in peaks(rows).items())
