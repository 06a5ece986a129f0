"""memory_unreleased: blocks never released, grouped by where they were allocated."""

from __future__ import annotations

from collections import defaultdict

import pytest
from memory_input import KEY, ascend_rows, blocks, insert_ascend


@pytest.mark.parametrize("seed", [3, 4])
def test_unreleased_groups_match_the_rows(attached_db, seed):
    rows = ascend_rows(seed)
    insert_ascend(attached_db, rows)
    groups = defaultdict(list)
    for b in blocks(rows):
        if b["release_ns"] is None:
            groups[(b["capture"], b["device"], b["name"])].append(b)
    expected = sorted(
        (KEY["run"], KEY["role"], KEY["rank_id"], capture, device, "ascend", name, len(found),
         sum(b["size_bytes"] for b in found), round(sum(b["size_bytes"] for b in found) / 1048576, 3),
         min(b["alloc_ns"] for b in found), max(b["alloc_ns"] for b in found))
        for (capture, device, name), found in groups.items())
    got = attached_db.execute("""
        select run, role, rank_id, capture, device, source, name, blocks, unreleased_bytes, unreleased_mb,
               first_alloc_ns, last_alloc_ns
        from memory_unreleased where call_stack_top is null and user_frame is null and stack_id is null
        order by all""").fetchall()
    assert len(expected) > 4
    assert [tuple(float(v) if i == 9 else v for i, v in enumerate(r)) for r in got] == expected
    assert attached_db.execute("select count(*) from memory_unreleased").fetchone()[0] == len(expected)


def test_released_blocks_and_release_rows_are_not_suspects(attached_db):
    rows = [r for r in ascend_rows(5) if r["release_ns"] is not None or r["size_bytes"] < 0]
    insert_ascend(attached_db, rows)
    assert attached_db.execute("select count(*) from memory_unreleased").fetchone()[0] == 0
