"""collective_bandwidth on the real Ascend captures that record their collectives' sizes: the
alexnet text export (trace_view.json's HCCL op rows carry count and data_type; communication.json
gives each op's elapsed time) and its db export (COMMUNICATION_OP). Bytes, duration and GB/s
per (collective instance, rank) are computed here from the raw files with json and sqlite3.

No real Kineto trace here has NCCL kernels that record their message size (the HTA
ns-resolution trace records In msg nelems only on record_param_comms CPU ops, of a
one-rank group with no NCCL kernel; the other NCCL traces record none), so on Kineto the
view is checked on traces written by the test (tests/test_kineto_collective_bandwidth.py).
"""

from __future__ import annotations

import json
import sqlite3
from decimal import ROUND_HALF_UP, Decimal

import duckdb
import pytest

OUTPUT = "ASCEND_PROFILER_OUTPUT"
TYPE_BYTES = {"FP32": 4, "FP16": 2, "BFP16": 2, "INT32": 4, "INT8": 1, "FP64": 8, "INT64": 8}


def _ns(value: Decimal, factor: int) -> int:
    return int((value * factor).to_integral_value(ROUND_HALF_UP))


@pytest.fixture(scope="module")
def alexnet(alexnet_warehouse):
    """(profile dir, read-only connection to its warehouse): both exports of both ranks, the
    test run's one ingest of them (conftest)."""
    profile, db = alexnet_warehouse
    con = duckdb.connect(str(db), read_only=True)
    yield profile, con
    con.close()


def _view(con, role: str) -> dict[tuple, tuple]:
    rows = con.execute("""select rank_id, name, step, bytes, duration_ns, algbw_gbps from collective_bandwidth
                          where role = ?""", [role]).fetchall()
    return {(rank, name): (step, size, duration, gbps) for rank, name, step, size, duration, gbps in rows}


def _text_truth(rank_dir) -> dict[str, tuple]:
    """name -> (step, bytes, duration_ns): the HCCL op rows of trace_view.json (count x type
    size), their elapsed time from communication.json (checked against the trace's dur)."""
    with open(rank_dir / OUTPUT / "trace_view.json", encoding="utf-8") as handle:
        events = json.load(handle, parse_float=Decimal)
    hccl = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
            and e["args"]["name"] == "HCCL"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    ops = {e["name"]: e for e in events if e.get("ph") == "X" and e["pid"] in hccl
           and threads.get((e["pid"], e["tid"]), "").endswith("Communication")}
    with open(rank_dir / OUTPUT / "communication.json", encoding="utf-8") as handle:
        steps = json.load(handle, parse_float=Decimal)
    truth = {}
    for step_key, sections in steps.items():
        for key, op in sections["collective"].items():
            name = key.rpartition("@")[0] or key
            if name == "Total Op Info":
                continue
            duration = _ns(op["Communication Time Info"]["Elapse Time(ms)"], 10**6)
            event = ops[name]
            assert _ns(event["dur"], 1000) == duration  # the trace and communication.json agree
            size = event["args"]["count"] * TYPE_BYTES[event["args"]["data_type"]]
            truth[name] = (int(step_key.removeprefix("step")), size, duration)
    return truth


@pytest.mark.slow
def test_the_text_export_s_bytes_duration_and_rate_per_collective_and_rank(alexnet):
    profile, con = alexnet
    got = _view(con, "text")
    want = {}
    for rank in (0, 1):
        for name, (step, size, duration) in _text_truth(profile / "text" / f"rank{rank}_ascend_pt").items():
            want[(rank, name)] = (step, size, duration)
    assert len(want) == 8
    assert {k: v[:3] for k, v in got.items()} == want
    for key, (_step, size, duration) in want.items():
        assert got[key][3] == pytest.approx(size / duration, rel=1e-12)
    # The 151 MB all-reduce ran at about 63 GB/s on both ranks; the first one sat waiting for 79 ms.
    assert 62 < got[(0, "hcom_allReduce__586_2_1")][3] < 64


def test_the_db_export_s_bytes_duration_and_rate_per_collective_and_rank(alexnet):
    profile, con = alexnet
    got = _view(con, "db")
    want = {}
    for rank in (0, 1):
        path = profile / "db" / f"rank{rank}_ascend_pt" / OUTPUT / f"ascend_pytorch_profiler_{rank}.db"
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        rows = db.execute("""select s.value, o.startNs, o.endNs, o.count, t.name from COMMUNICATION_OP o
                             join STRING_IDS s on s.id = o.opName
                             join ENUM_HCCL_DATA_TYPE t on t.id = o.dataType""").fetchall()
        db.close()
        for name, start, end, count, data_type in rows:
            want[(rank, name)] = (int(count) * TYPE_BYTES[data_type], end - start)
    assert len(want) == 8
    assert {k: (v[1], v[2]) for k, v in got.items()} == want
    for key, (size, duration) in want.items():
        assert got[key][3] == pytest.approx(size / duration, rel=1e-12)


def _main_link(transports: dict[str, tuple[int, float]]) -> tuple[str, float]:
    """The transport that moved the most bytes (a link before the SDMA and LOCAL sums): (name, GB/s)."""
    name = max(transports, key=lambda t: (t.upper() not in ("SDMA", "LOCAL"), transports[t][0]))
    return name, transports[name][1]


def _links(con, role: str) -> dict[tuple, tuple]:
    return {(rank, name): (transport, gbps) for rank, name, transport, gbps in con.execute(
        "select rank_id, name, link_transport, link_gbps from collective_bandwidth where role = ?", [role]).fetchall()}


def test_the_link_speed_is_communication_json_s_per_link_bandwidth(alexnet):
    """The op's own rate (algbw) of the first allreduce is 0.2 GB/s: it waited 79 ms for rank 1.
    Its HCCS link moved 28.6 MB at 15.77 GB/s while it transferred, as communication.json says."""
    profile, con = alexnet
    want = {}
    for rank in (0, 1):
        path = profile / "text" / f"rank{rank}_ascend_pt" / OUTPUT / "communication.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        for sections in data.values():
            for key, op in sections["collective"].items():
                if key != "Total Op Info":
                    info = op["Communication Bandwidth Info"]
                    want[(rank, key.rpartition("@")[0])] = _main_link(
                        {t: (f["Transit Size(MB)"], f["Bandwidth(GB/s)"]) for t, f in info.items()})
    assert len(want) == 8 and _links(con, "text") == want
    assert want[(0, "hcom_allReduce__586_0_1")] == ("HCCS", 15.7676)
    assert _view(con, "text")[(0, "hcom_allReduce__586_0_1")][3] < 0.25


def test_the_db_export_s_link_speed_is_comm_analyzer_bandwidth(alexnet):
    profile, con = alexnet
    want = {}
    for rank in (0, 1):
        path = profile / "db" / f"rank{rank}_ascend_pt" / OUTPUT / "analysis.db"
        db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        rows = db.execute("select hccl_op_name, transport_type, transit_size, bandwidth from CommAnalyzerBandwidth"
                          ).fetchall()
        db.close()
        ops: dict[str, dict] = {}
        for name, transport, size, gbps in rows:
            ops.setdefault(name, {})[transport] = (size, gbps)
        want.update({(rank, name): _main_link(transports) for name, transports in ops.items()})
    assert len(want) == 8 and _links(con, "db") == want
