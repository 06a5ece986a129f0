"""kernel_stats: count, total, mean, max and share per (rank, name, kind), against a
tally written here, on made-up rows and on a real NCCL rank's raw trace."""

from __future__ import annotations

import random

import duckdb
import pytest
from conftest import insert_rows
from device_real import kineto_device_events, ns, warehouse

COLUMNS = ["rank_id", "name", "kind", "start_ns", "end_ns"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)


def _tally(rows):
    """rows: (rank, name, kind, dur) -> {(rank, name, kind): (count, total, mean, max, share)}."""
    groups: dict[tuple, list[int]] = {}
    for rank, name, kind, dur in rows:
        groups.setdefault((rank, name, kind), []).append(dur)
    work: dict[int, int] = {}
    for (rank, _name, kind), durs in groups.items():
        if kind != "other":
            work[rank] = work.get(rank, 0) + sum(durs)
    return {key: (len(d), sum(d), sum(d) // len(d), max(d),
                  None if key[2] == "other" else sum(d) / work[key[0]]) for key, d in groups.items()}


def test_random_rows_match_a_tally(attached_db):
    rng = random.Random(5)
    rows = []
    for _ in range(400):
        start = rng.randrange(0, 10**9)
        rows.append((rng.randrange(3), rng.choice(["gemm", "softmax", "nccl"]),
                     rng.choice(["compute", "communication", "other"]), start, start + rng.randrange(1, 10**6)))
    insert_rows(attached_db, "device_ops", COLUMNS, rows, **KEY)
    got = {(r, n, k): (c, t, m, x, s) for r, n, k, c, t, m, x, s in attached_db.execute(
        "select rank_id, name, kind, count, total_ns, mean_ns, max_ns, share from kernel_stats").fetchall()}
    want = _tally([(r, n, k, e - s) for r, n, k, s, e in rows])
    assert got.keys() == want.keys()
    for key, (c, t, m, x, s) in want.items():
        assert got[key][:3] == (c, t, m)
        assert got[key][3] == x
        assert (got[key][4] is None and s is None) or got[key][4] == pytest.approx(s, rel=1e-12)


@pytest.mark.slow
def test_real_nccl_rank(tmp_path_factory):
    con = duckdb.connect(str(warehouse(tmp_path_factory)), read_only=True)
    got = {(n, k): (c, t, x) for n, k, c, t, x in con.execute(
        "select name, kind, count, total_ns, max_ns from kernel_stats where run = 'hta_pair' and rank_id = 0"
    ).fetchall()}
    con.close()
    kinds = {"gpu_memcpy": "memcpy", "gpu_memset": "memset"}
    want = {(k[1], k[2]): v[:2] + v[3:4] for k, v in _tally(
        [(0, e["name"], kinds.get(e["cat"], "communication" if e["name"].startswith("nccl") else "compute"),
          ns(e["ts"]) + ns(e["dur"]) - ns(e["ts"])) for e in kineto_device_events(0)]).items()}
    assert got == want
