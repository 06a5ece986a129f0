"""rlwh.synth writes rank dirs in the real profiler's byte-level format, deterministically."""

from __future__ import annotations

import bisect
import csv
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import SAMPLES

from rlwh import synth

SAMPLE = (SAMPLES / "memory_data"
          / "20260526_085155_ascend_pt/ASCEND_PROFILER_OUTPUT/operator_memory.csv")
TIME_CELL = re.compile(r'^"\d+\.\d{3}\t"$')  # quoted, three decimals, a TAB before the quote


def _ns(cell: str) -> int:
    """Profiler microseconds text -> exact ns (what a float would lose)."""
    whole, frac = cell.strip().split(".")
    return int(whole) * 1000 + int(frac)


@pytest.fixture(scope="module")
def rank(tmp_path_factory) -> Path:
    return synth.write_ascend_rank(tmp_path_factory.mktemp("synth"), role="actor_update", rank_id=3,
                                   capture_time="20260526_085155", n_ops=3000, n_allocs=2500,
                                   n_stacks=200, trace_format="pretty", seed=7)


@pytest.fixture(scope="module")
def trace(rank) -> list[dict]:
    with open(rank / "ASCEND_PROFILER_OUTPUT/trace_view.json") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def rows(rank) -> list[dict]:
    with open(rank / "ASCEND_PROFILER_OUTPUT/operator_memory.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_rank_dir_layout_and_info(rank):
    assert rank.name == "20260526_085155_ascend_pt"
    info = json.loads((rank / "profiler_info_3.json").read_text())
    assert info["rank_id"] == "3"  # a string, like the real sample
    assert {"config", "start_info", "end_info", "torch_npu_version", "cann_version"} <= info.keys()
    meta = json.loads((rank / "profiler_metadata.json").read_text())
    assert "parallel_group_info" in meta and "role" not in meta


def test_role_in_metadata_only_when_asked(tmp_path):
    rank = synth.write_ascend_rank(tmp_path, role="rollout", n_ops=50, n_allocs=20, with_role_in_metadata=True)
    assert json.loads((rank / "profiler_metadata.json").read_text())["role"] == "rollout"


def test_csv_header_is_the_real_one(rank):
    header = (rank / "ASCEND_PROFILER_OUTPUT/operator_memory.csv").read_bytes().split(b"\n", 1)[0]
    if SAMPLE.exists():
        assert header == SAMPLE.read_bytes().split(b"\n", 1)[0]
    assert header.decode() + "\n" == synth.CSV_HEADER


def test_csv_byte_conventions(rank, rows):
    raw = (rank / "ASCEND_PROFILER_OUTPUT/operator_memory.csv").read_text().splitlines()[1:]
    assert len(raw) == len(rows) == 2500
    for line in raw:
        cells = line.split(",")
        assert len(cells) == 15
        assert TIME_CELL.match(cells[2]) and len(cells[2]) == 23, line  # 16 digits of epoch us
        assert all(TIME_CELL.match(c) for c in cells[3:7]) or cells[3:7] == ["", "", "", ""], line
        assert cells[1].endswith(".5")  # sizes round up to 512 B multiples
    never = [r for r in rows if not r["Release Time(us)"]]
    assert never and all(r["Duration(us)"] == r["Release Total Allocated(MB)"] == "" for r in never)


def test_csv_times_and_totals_are_consistent(rows):
    alloc = [_ns(r["Allocation Time(us)"]) for r in rows]
    assert alloc == sorted(alloc)
    assert len(set(alloc)) < len(alloc)  # exact time ties exist
    events = []
    for i, r in enumerate(rows):
        size = round(float(r["Size(KB)"]) * 1024)
        events.append((alloc[i], 1, i, size))
        if r["Release Time(us)"]:
            rel, act = _ns(r["Release Time(us)"]), _ns(r["Active Release Time(us)"])
            assert alloc[i] < act <= rel
            assert _ns(r["Duration(us)"]) == rel - alloc[i]
            assert _ns(r["Active Duration(us)"]) == act - alloc[i]
            events.append((rel, 0, i, size))
    events.sort()
    shared = Counter((t, k) for t, k, _, _ in events)
    live = round(float(rows[0]["Allocation Total Allocated(MB)"]) * 2**20) - events[0][3]
    peak_at, peak = 0, 0
    for t, is_alloc, i, size in events:
        live += size if is_alloc else -size
        column = "Allocation" if is_alloc else "Release"
        reported = float(rows[i][f"{column} Total Allocated(MB)"]) * 2**20
        if shared[(t, is_alloc)] == 1:  # at a shared instant the order is the profiler's
            assert abs(reported - live) < 16  # some totals are rounded to 5 decimals
        assert float(rows[i][f"{column} Total Reserved(MB)"]) * 2**20 >= reported
        if live > peak:
            peak_at, peak = t, live
    first = float(rows[0]["Allocation Total Allocated(MB)"]) * 2**20
    assert peak - first > 2**30 and peak - live > 2**30  # rises, peaks, falls
    assert alloc[0] < peak_at < alloc[-1]


def test_trace_events(trace):
    ops = [e for e in trace if e.get("cat") == "cpu_op"]
    assert len(ops) == 3000 and len(ops) < len(trace)
    assert {"Kernel", "HostToDevice"} <= {e.get("cat") for e in trace}
    assert {"process_name", "thread_name"} <= {e["name"] for e in trace if e["ph"] == "M"}
    for e in ops:
        assert e["ph"] == "X" and re.fullmatch(r"\d{16}\.\d{3}", e["ts"]) and isinstance(e["dur"], float)
    stacks = [e["args"]["Call stack"] for e in ops if "Call stack" in e["args"]]
    assert 0.22 < len(stacks) / len(ops) < 0.32
    assert 50 < len(set(stacks)) <= 200
    depths = [s.count(";\r\n") + 1 for s in stacks]
    assert min(depths) >= 5 and max(depths) <= 40


def test_mstx_and_overlap_analysis(trace):
    mstx = [e for e in trace if e.get("cat") == "mstx"]
    assert {"X", "i"} == {e["ph"] for e in mstx}
    assert all("domain" in e["args"] for e in mstx)
    assert "actor_update" in {e["name"] for e in mstx if e["ph"] == "X"}  # a range named after the role
    overlap = next(e["pid"] for e in trace if e["ph"] == "M" and e["args"].get("name") == "Overlap Analysis")
    assert overlap > 2**31
    threads = {e["args"]["name"] for e in trace if e["pid"] == overlap and e["name"] == "thread_name"}
    assert threads == {"Computing", "Communication", "Communication(Not Overlapped)", "Free"}
    # Rows from the device ops: without collectives (this trace) only Computing and Free.
    assert {e["name"] for e in trace if e["pid"] == overlap and e["ph"] == "X"} == {"Computing", "Free"}


def test_allocations_follow_same_name_ops(trace, rows):
    by_name: dict[str, list[int]] = {}
    for e in trace:
        if e.get("cat") == "cpu_op":
            by_name.setdefault(e["name"], []).append(_ns(e["ts"]))
    for ts in by_name.values():
        ts.sort()
    first_op = min(t[0] for t in by_name.values())
    matched = at_op_start = 0
    for r in rows:
        ts = by_name.get(r["Name"], [])
        alloc = _ns(r["Allocation Time(us)"])
        i = bisect.bisect_right(ts, alloc)
        matched += i > 0
        at_op_start += i > 0 and ts[i - 1] == alloc
    assert matched > 0.9 * len(rows)
    assert at_op_start > 0  # ts == allocation time: the ASOF edge
    assert any(_ns(r["Allocation Time(us)"]) < first_op for r in rows)
    assert any(r["Name"] not in by_name for r in rows)


def test_compact_is_one_event_per_line(tmp_path):
    rank = synth.write_ascend_rank(tmp_path, n_ops=800, n_allocs=100, trace_format="compact")
    lines = (rank / "ASCEND_PROFILER_OUTPUT/trace_view.json").read_text().split("\n")
    assert lines[0] == "[" and lines[-1] == "]"
    events = [json.loads(line.rstrip(",")) for line in lines[1:-1]]
    assert all(line.endswith(",") for line in lines[1:-2]) and not lines[-2].endswith(",")
    assert sum(e.get("cat") == "cpu_op" for e in events) == 800


def test_deterministic_for_a_seed(tmp_path):
    def files(seed, where):
        rank = synth.write_ascend_rank(tmp_path / where, n_ops=1000, n_allocs=900, seed=seed)
        return [p.read_bytes() for p in sorted(rank.rglob("*.*"))]

    assert files(5, "a") == files(5, "b")
    assert files(5, "a") != files(6, "c")


def test_trace_size_calibration(tmp_path):
    n_ops = synth.ops_for_trace_mb(20)
    rank = synth.write_ascend_rank(tmp_path, n_ops=n_ops, n_allocs=1000, n_stacks=4000, trace_format="compact")
    size = (rank / "ASCEND_PROFILER_OUTPUT/trace_view.json").stat().st_size
    assert abs(size - 20e6) < 0.15 * 20e6


def test_profile_layouts(tmp_path):
    root = synth.write_ascend_profile(tmp_path / "p")
    dirs = sorted(p.relative_to(root).as_posix() for p in root.glob("*/*_ascend_pt"))
    assert dirs == ["actor_update/20260526_085155_ascend_pt", "actor_update/20260526_085156_ascend_pt",
                    "rollout/20260526_090155_ascend_pt", "rollout/20260526_090156_ascend_pt"]
    assert sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) < 2e6
    flat = synth.write_ascend_profile(tmp_path / "f", layout="flat", n_ops=100, n_allocs=50)
    roles = [json.loads((d / "profiler_metadata.json").read_text())["role"] for d in sorted(flat.glob("*_ascend_pt"))]
    assert roles == ["actor_update", "actor_update", "rollout", "rollout"]


def test_autograd_links_like_torch_npu(tmp_path):
    """Backward ops carry no stack but link to their forward op by Sequence number, as in
    the real AlexNet traces; with every forward op stacked the peak is mostly attributed."""
    import duckdb

    from rlwh.config import Config
    from rlwh.ingest.runner import ingest

    rank_dir = synth.write_ascend_rank(tmp_path / "job" / "actor_update", n_ops=400, n_allocs=500,
                                       stacked_fraction=0.55)
    events = json.loads((rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    backward = [e for e in ops if e["args"]["Fwd thread id"] > 0]
    forward = {e["args"]["Sequence number"]: e for e in ops
               if e["args"]["Fwd thread id"] == 0 and e["args"]["Sequence number"] >= 0}
    assert backward and not any("Call stack" in e["args"] for e in backward)
    assert all(forward[e["args"]["Sequence number"]]["ts"] < e["ts"] for e in backward)
    db = tmp_path / "w.duckdb"
    ingest(tmp_path / "job", Config(db_path=db, workers=1))
    con = duckdb.connect(str(db), read_only=True)
    share, = con.execute("select sum(live_bytes) filter (where stack_id is not null) / sum(live_bytes)"
                         " from memory_peak_breakdown").fetchone()
    assert share > 0.85
    assert con.execute("select count(*) from memory_alloc_stack where stack_source = 'forward_op'").fetchone()[0] > 50


@pytest.mark.parametrize("with_addr", [True, False])
def test_synthetic_torch_trace_is_shaped_like_a_real_one(tmp_path, with_addr):
    """Frees on the autograd thread, file grouped by thread, forward-op links, orphan frees,
    address reuse, and the invariant; without Addr the timeline is the running sum."""
    import duckdb

    from rlwh.config import Config
    from rlwh.ingest.runner import ingest
    from rlwh.synth import timelines as synth_timelines

    root = tmp_path / f"addr-{with_addr}"
    synth_timelines.write_torch_trace(root / "critic" / "prof_rank-0.pt.trace.json.gz", rank=0, world_size=1,
                                      with_addr=with_addr)
    db = root / "w.duckdb"
    ingest(root, Config(db_path=db, workers=1))
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("select count(*) from memory_timeline where allocator_live_bytes > allocator_allocated_bytes"
                       ).fetchone()[0] == 0
    threads = con.execute("select count(distinct tid) from torch_memory_events where bytes < 0").fetchone()[0]
    assert threads == 2
    if with_addr:
        sources = dict(con.execute("select stack_source, count(*) from memory_blocks group by 1").fetchall())
        assert sources.get("forward_op", 0) > 10 and sources.get("op", 0) > 10
        assert con.execute("select sum(orphan_frees) from torch_memory_orphan_frees").fetchone()[0] == 2
    else:
        assert con.execute("select count(*) from memory_blocks").fetchone()[0] == 0
        assert con.execute("select count(*) from memory_timeline").fetchone()[0] > 0
    con.close()


def test_memory_record_and_snapshot_files_load_like_real_ones(tmp_path):
    """The demo's memory_record.csv agrees with its operator_memory.csv (PTA totals at each
    allocation), and its snapshot pickle names no global and lands on the epoch clock."""
    import pickletools

    import duckdb

    from rlwh.config import Config
    from rlwh.ingest.runner import ingest
    from rlwh.synth.memory_record import write_memory_record
    from rlwh.synth.snapshot import write_snapshot

    rank_dir = synth.write_ascend_rank(tmp_path / "job" / "actor_update", n_ops=200, n_allocs=150)
    write_memory_record(rank_dir)
    snapshot = write_snapshot(tmp_path / "job" / "critic" / "snapshot_rank1.pickle", device=1,
                              start_us=1_779_786_715_000_000)
    opcodes = {op.name for op, _, _ in pickletools.genops(snapshot.read_bytes())}
    assert not opcodes & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ"}
    db = tmp_path / "w.duckdb"
    ingest(tmp_path / "job", Config(db_path=db, workers=1))
    con = duckdb.connect(str(db), read_only=True)
    assert dict(con.execute("select kind, status from sources where kind in"
                            " ('ascend_memory_record_csv', 'torch_snapshot')").fetchall()) == {
        "ascend_memory_record_csv": "ok", "torch_snapshot": "ok"}
    unmatched = con.execute("""
        select count(*) from memory_records r
        where r.size_bytes > 0 and not exists (
          select 1 from memory_usage u
          where u.component = 'PTA' and u.ts_ns = r.alloc_ns
            and u.total_allocated_bytes = r.alloc_total_allocated_bytes)""").fetchone()[0]
    assert unmatched == 0
    assert con.execute("select count(distinct component) from memory_usage").fetchone()[0] == 3  # APP, PTA, PTA+GE
    assert con.execute("select clock, device from memory_peak where capture like '%snapshot%'").fetchall() == [
        ("epoch", "cuda:1")]


def test_step_trace_time_adds_up_like_a_real_one(tmp_path):
    """Each step's stage is its computing + not-overlapped communication + free time, and
    the file lands in step_times with the real reader."""
    import duckdb

    from rlwh.config import Config
    from rlwh.ingest.runner import ingest
    from rlwh.synth.step_trace import write_step_trace_time

    rank_dir = synth.write_ascend_rank(tmp_path / "job" / "actor_update", n_ops=45_000, n_allocs=100)
    write_step_trace_time(rank_dir)
    db = tmp_path / "w.duckdb"
    ingest(tmp_path / "job", Config(db_path=db, workers=1))
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("select step, computing_ns, communication_not_overlapped_ns, free_ns, stage_ns"
                       " from step_times order by step").fetchall()
    assert [r[0] for r in rows] == [1, 2, 3]  # 45,000 ops are three steps
    for _, computing, comm, free, stage in rows:
        assert abs(computing + comm + free - stage) <= 1_000, (computing, comm, free, stage)


def test_the_demo_profile_has_every_format(tmp_path):
    """rlwh.demo's profile (what `make demo` ingests): every kind of file discovery knows."""
    from rlwh.demo import write_demo_profile
    from rlwh.ingest.discover import discover

    kinds = {f.kind for f in discover(write_demo_profile(tmp_path / "demo")).files}
    expected = {"ascend_trace", "ascend_memory_csv", "torch_trace", "torch_snapshot", "nvtx_jsonl", "gmm_group_list"}
    assert expected <= kinds
