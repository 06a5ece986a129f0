"""memory_peak_breakdown: the blocks live at each peak, grouped, against a replay in Python."""

from __future__ import annotations

from collections import defaultdict

import pytest
from memory_input import KEY, ascend_rows, blocks, insert_ascend, peaks


@pytest.mark.parametrize("seed", [9, 10])
def test_live_blocks_at_the_peak(attached_db, seed):
    rows = ascend_rows(seed)
    insert_ascend(attached_db, rows)
    at_peak = peaks(rows)
    groups = defaultdict(list)
    for b in blocks(rows):
        peak, at = at_peak[(b["capture"], b["device"])]
        if b["alloc_ns"] <= at and (b["release_ns"] is None or b["release_ns"] > at):
            groups[(b["capture"], b["device"], b["name"])].append(b)
    expected = sorted(
        (KEY["run"], KEY["role"], KEY["rank_id"], capture, device, name, len(found),
         sum(b["size_bytes"] for b in found), at_peak[(capture, device)][1])
        for (capture, device, name), found in groups.items())
    got = attached_db.execute("""
        select run, role, rank_id, capture, device, name, blocks, live_bytes, peak_at_ns
        from memory_peak_breakdown order by all""").fetchall()
    assert got == expected
    # The groups add up to each peak, and their shares to 1.
    for (capture, device), (peak, _at) in at_peak.items():
        live, share, mb = attached_db.execute(
            "select sum(live_bytes), sum(share_of_peak), sum(live_mb) from memory_peak_breakdown "
            "where capture = ? and device = ?", [capture, device]).fetchone()
        assert live == peak and abs(share - 1) < 1e-9 and abs(float(mb) - peak / 1048576) < 0.001 * len(groups)
