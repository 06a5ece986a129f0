"""slowest_links: the matrix totals between ranks, ranked by bandwidth per step and per transport,
on made-up rows; the oracle sorts and takes medians here in Python."""

from __future__ import annotations

import statistics

from conftest import insert_rows

COLUMNS = ["rank_id", "source_row", "step", "op_kind", "name", "group", "is_total", "src_rank", "dst_rank",
           "transport_type", "size_bytes", "duration_ns", "bandwidth_gbps"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)


def _rows():
    """A tp group of global ranks 4-7, numbered 0-3 in the matrix; two steps; one RDMA link."""
    rows = []
    n = 0
    bandwidths = {(4, 1): 18.0, (4, 2): 9.5, (4, 3): 18.0, (5, 0): 17.0, (5, 2): 16.0, (5, 3): None,
                  (6, 0): 3.0, (7, 0): 17.5}
    for step in (1, 2):
        for (rank, dst), gbps in bandwidths.items():
            src = rank - 4
            transport = "RDMA" if (rank, dst) == (6, 0) else "HCCS"
            scale = 1 if step == 1 else 2
            n += 1
            rows.append((rank, n, step, "collective", "allreduce-total", "tp", True, src, dst, transport,
                         1000 * scale, 100, None if gbps is None else gbps * scale))
            n += 1  # a per-op entry (a selection of the ops): left out
            rows.append((rank, n, step, "collective", "allreduce-top1", "tp", False, src, dst, transport, 1, 1, 0.01))
        for rank in (4, 5, 6, 7):  # the copy inside the device: no link between ranks
            n += 1
            rows.append((rank, n, step, "collective", "allreduce-total", "tp", True, rank - 4, rank - 4, "LOCAL",
                         1, 1, 0.001))
    return rows


def test_links_ranked_slowest_first_per_step_and_per_transport(attached_db):
    rows = _rows()
    insert_rows(attached_db, "communication_links", COLUMNS, rows, **KEY)
    global_rank = {r[7]: r[0] for r in rows}  # the group rank each global rank sends from
    want = []
    for step in (1, 2):
        links = [r for r in rows if r[2] == step and r[6] and r[7] != r[8]]
        order = sorted(links, key=lambda r: (r[12] is None, r[12] or 0, r[0], r[8]))
        for k, r in enumerate(order, start=1):
            same = [x for x in order if x[9] == r[9]]
            values = [x[12] for x in same if x[12] is not None]
            want.append((step, k, len(order), r[0], "allreduce", r[7], r[8], global_rank[r[8]], r[9], r[12],
                         same.index(r) + 1, len(same), statistics.median(values),
                         None if r[12] is None else r[12] / statistics.median(values)))
    got = attached_db.execute("""select step, slowness_rank, links, rank_id, collective, src_rank, dst_rank,
                                     dst_rank_id, transport_type, bandwidth_gbps, transport_rank, transport_links,
                                     transport_median_gbps, of_transport_median
                              from slowest_links order by step, slowness_rank""").fetchall()
    assert got == want
    # The slowest HCCS link is rank 4 -> group rank 2 (global 6), at half its peers' median;
    # the RDMA link is slower still, and alone in its transport.
    assert got[0][3:9] == (6, "allreduce", 2, 0, 4, "RDMA") and got[0][10:12] == (1, 1)
    assert got[1][3:8] == (4, "allreduce", 0, 2, 6) and got[1][13] < 0.6
    assert got[7][9] is None and got[7][1] == 8  # no bandwidth recorded: last


def test_a_peer_whose_matrix_is_absent_has_no_global_rank(attached_db):
    insert_rows(attached_db, "communication_links", COLUMNS, [
        (0, 1, 1, "collective", "allgather-total", "dp", True, 0, 1, "HCCS", 10, 10, 1.0),
        (0, 2, 1, "collective", "allgather-total", "dp", True, 0, 0, "LOCAL", 10, 1, 10.0),
        (0, 3, 1, "p2p", "send-total", None, True, 0, 3, "RDMA", 10, 100, 0.1),
    ], **KEY)
    got = attached_db.execute("""select slowness_rank, collective, "group", op_kind, dst_rank, dst_rank_id
                                 from slowest_links order by slowness_rank""").fetchall()
    assert got == [(1, "send", None, "p2p", 3, None), (2, "allgather", "dp", "collective", 1, None)]
