"""collective_bandwidth on Kineto traces whose NCCL kernels record their message (PyTorch 2.1+
writes Collective name, In msg nelems and dtype in a kernel's args). No real trace here has
them (tests/test_real_collective_bandwidth.py says why), so two ranks' traces are written
here, the real reader ingests them, and bytes, stays and GB/s are computed from the written
JSON with the standard library."""

from __future__ import annotations

import json
from decimal import Decimal

import duckdb
import pytest

from rlwh.config import Config
from rlwh.ingest.runner import ingest

DTYPE_BYTES = {"Float": 4, "BFloat16": 2, "Half": 2, "Long": 8}
# (collective, elements, dtype) per step; each rank runs the same three in order.
COLLECTIVES = [("allreduce", 1 << 20, "Float"), ("allgather", 3 << 18, "BFloat16"), ("allreduce", 5000, "Long")]
BASE_US = 6_589_107  # µs, as Kineto writes ts (a trace clock, not the epoch)


def _trace(rank: int) -> dict:
    """One step of one rank: a gemm, then the collectives; rank 1 reaches each 300 µs later,
    and both leave together. Times carry three decimals (ns), as Kineto's do."""
    events: list[dict] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 9, "tid": 9,
                           "ts": BASE_US, "dur": 50_000}]
    t = Decimal(BASE_US) + 100
    for k, (collective, nelems, dtype) in enumerate(COLLECTIVES):
        corr = 100 + k
        start = t + (300 if rank == 1 else 0) + Decimal("0.125")
        end = t + 2_000 + Decimal("0.750")
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9,
             "ts": float(t - 50), "dur": 5, "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": f"ncclDevKernel_{collective}_RING_LL", "pid": 0, "tid": 7,
             "ts": float(start), "dur": float(end - start),
             "args": {"correlation": corr, "device": 0, "stream": 7, "Collective name": collective,
                      "Process Group Name": "0", "In msg nelems": nelems, "Out msg nelems": nelems,
                      "Group size": 2, "dtype": dtype, "Seq": k}},
        ]
        t += 5_000
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "traceEvents": events}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("kineto-bandwidth")
    for rank in (0, 1):
        path = root / "profile" / "actor_update" / f"prof_rank-{rank}.pt.trace.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_trace(rank)))  # times of 3 decimals, exact as floats of this size
    assert ingest(root / "profile", Config(db_path=root / "w.duckdb", workers=1)).failed == 0
    con = duckdb.connect(str(root / "w.duckdb"), read_only=True)
    yield root, con
    con.close()


def _truth(root) -> dict[tuple[int, int], tuple]:
    """(rank, seq) -> (collective, bytes, stay ns, transfer ns) from the written files."""
    kernels = {}
    for rank in (0, 1):
        path = root / "profile" / "actor_update" / f"prof_rank-{rank}.pt.trace.json"
        events = json.loads(path.read_text(), parse_float=Decimal)["traceEvents"]
        for e in events:
            if e.get("cat") == "kernel":
                start = int(Decimal(e["ts"]) * 1000)
                kernels[rank, e["args"]["Seq"]] = (e["args"], start, start + int(Decimal(e["dur"]) * 1000))
    truth = {}
    for (rank, seq), (args, start, end) in kernels.items():
        last_arrival = max(kernels[r, seq][1] for r in (0, 1))
        truth[rank, seq] = (args["Collective name"], args["In msg nelems"] * DTYPE_BYTES[args["dtype"]],
                            end - start, end - last_arrival)
    return truth


def test_bytes_stays_and_rates_equal_the_raw_kernels(traces):
    root, con = traces
    truth = _truth(root)
    rows = con.execute("""select rank_id, seq, collective, bytes, duration_ns, transfer_ns, algbw_gbps, transfer_gbps
                          from collective_bandwidth order by rank_id, seq""").fetchall()
    assert len(rows) == len(truth) == 6
    for rank, seq, collective, size, stay, transfer, algbw, transfer_gbps in rows:
        want = truth[rank, seq]
        assert (collective, size, stay, transfer) == want
        assert algbw == pytest.approx(want[1] / want[2], rel=1e-12)
        assert transfer_gbps == pytest.approx(want[1] / want[3], rel=1e-12)
