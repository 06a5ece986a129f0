"""collective_bandwidth: bytes (elements x type size), each rank's stay, the time after the last
arrival and the two rates, on made-up rows computed here by hand."""

from __future__ import annotations

from conftest import insert_rows

COLUMNS = ["rank_id", "step", "name", "kind", "collective", "group", "start_ns", "end_ns", "element_count",
           "data_type"]
KEY = dict(run="r", role="actor", capture="c", source_id=1)


def test_bytes_and_rates(attached_db):
    # 1 Mi FP32 elements (4 MiB); rank 0 arrives at 0, rank 1 at 400 µs, both leave at 1 ms.
    insert_rows(attached_db, "device_ops", COLUMNS, [
        (0, 1, "ar", "communication", "allreduce", "dp", 0, 1_000_000, 1 << 20, "FP32"),
        (1, 1, "ar", "communication", "allreduce", "dp", 400_000, 1_000_000, 1 << 20, "FP32"),
        (0, 1, "ag", "communication", "allgather", "dp", 2_000_000, 2_500_000, 1000, "BFloat16"),
        (1, 1, "ag", "communication", "allgather", "dp", 2_000_000, 2_500_000, None, None),
        (0, 1, "bc", "communication", "broadcast", "dp", 3_000_000, 3_100_000, 10, "complex128"),
    ], **KEY)
    rows = attached_db.execute("""select name, rank_id, bytes, duration_ns, transfer_ns, algbw_gbps, transfer_gbps
                                  from collective_bandwidth order by name, rank_id""").fetchall()
    mib4 = 4 * (1 << 20)
    assert rows == [
        ("ag", 0, 2000, 500_000, 500_000, 2000 / 500_000, 2000 / 500_000),
        ("ag", 1, None, 500_000, 500_000, None, None),  # no count recorded
        ("ar", 0, mib4, 1_000_000, 600_000, mib4 / 1_000_000, mib4 / 600_000),
        ("ar", 1, mib4, 600_000, 600_000, mib4 / 600_000, mib4 / 600_000),
        ("bc", 0, None, 100_000, 100_000, None, None),  # a type the view does not know
    ]


def test_the_ascend_db_spellings_of_types_have_their_sizes(attached_db):
    # ENUM_HCCL_DATA_TYPE of a torch_npu db export writes bfloat16 as BFP16; INT128 is 16 bytes.
    insert_rows(attached_db, "device_ops", COLUMNS, [
        (0, 1, "hcom_allGather_", "communication", "allgather", "g", 0, 1000, 500, "BFP16"),
        (0, 1, "hcom_broadcast_", "communication", "broadcast", "g", 2000, 4000, 3, "INT128"),
    ], **KEY)
    rows = attached_db.execute("select name, element_bytes, bytes, algbw_gbps from collective_bandwidth order by name")
    assert rows.fetchall() == [("hcom_allGather_", 2, 1000, 1000 / 1000), ("hcom_broadcast_", 16, 48, 48 / 2000)]
