"""PyTorch memory snapshots: the two real torch_npu pickles against a reading written here
(pickletools proves they hold no global, so the standard loader is safe for the test), and
pickles that ask for code, are cut short or are no snapshot (each fails), and an old
list-format snapshot (loaded)."""

from __future__ import annotations

import os
import pickle
import pickletools
import re
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, copy_fixture, read_db

from rlwh.errors import SourceError
from rlwh.readers import torch_snapshot
from rlwh.readers.base import TableSink

SNAPSHOTS = FIXTURES / "real/ascend/memory-snapshots"
SINGLE = SNAPSHOTS / "snapshot_1768383987920985470.pkl"
MULTI = SNAPSHOTS / "snapshot_with_multi_devices.pkl"
GLOBAL_OPCODES = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "BUILD", "EXT1", "EXT2",
                  "EXT4", "PERSID", "BINPERSID"}


def plain_load(path: Path):
    data = path.read_bytes()
    assert not {op.name for op, _, _ in pickletools.genops(data)} & GLOBAL_OPCODES
    return pickle.loads(data)


def read(path: Path, tmp_path: Path, status: str = "ok") -> dict[str, list[dict]]:
    sink = TableSink(tmp_path / "parts")
    outcome = torch_snapshot.read(path, sink, {})
    sink.close()
    assert outcome.status == status, outcome.message
    return {table: pq.read_table(parts).to_pylist() for table, parts in sink.tables().items()}


def frame_text(frames) -> str | None:
    return "\n".join(f"{f['filename']}({f['line']}): {f['name']}" for f in frames) or None


@pytest.mark.parametrize("path", [SINGLE, MULTI], ids=["single", "multi"])
def test_segments_and_blocks_as_pickled(path, tmp_path):
    snapshot = plain_load(path)
    rows = read(path, tmp_path)
    stacks = {r["stack_id"]: r["stack"] for r in rows["call_stacks"]}
    assert [(r["device"], r["address"], r["total_size_bytes"], r["allocated_bytes"], r["active_bytes"],
             r["segment_type"], r["stream"], r["blocks"]) for r in rows["snapshot_segments"]] == [
        (f"NPU:{s['device']}", s["address"], s["total_size"], s["allocated_size"], s["active_size"],
         s["segment_type"], s["stream"], len(s["blocks"])) for s in snapshot["segments"]]
    expected_blocks = [(f"NPU:{s['device']}", b["address"], b["size"], b["requested_size"], b["state"],
                        frame_text(b["frames"])) for s in snapshot["segments"] for b in s["blocks"]]
    assert [(r["device"], r["address"], r["size_bytes"], r["requested_bytes"], r["state"],
             stacks.get(r["stack_id"])) for r in rows["snapshot_blocks"]] == expected_blocks
    # Each segment's blocks tile it exactly.
    for seg in rows["snapshot_segments"]:
        blocks = [b for b in rows["snapshot_blocks"] if b["segment_index"] == seg["segment_index"]]
        assert sum(b["size_bytes"] for b in blocks) == seg["total_size_bytes"]


def independent_pairs(trace: list[dict]) -> list[tuple]:
    """(alloc position, release position or None, size, frames) from each address's own events."""
    by_addr = defaultdict(list)
    for i, e in enumerate(trace):
        if e["action"] in ("alloc", "free_completed"):
            by_addr[e["addr"]].append((i, e))
    pairs = []
    for events in by_addr.values():
        for k, (i, e) in enumerate(events):
            if e["action"] != "alloc":
                continue
            following = events[k + 1] if k + 1 < len(events) else None
            pairs.append((i, following[0] if following else None, e["size"], frame_text(e["frames"])))
    return sorted(pairs)


@pytest.mark.parametrize("path", [SINGLE, MULTI], ids=["single", "multi"])
def test_trace_blocks_pair_alloc_with_free_completed(path, tmp_path):
    snapshot = plain_load(path)
    rows = read(path, tmp_path)
    stacks = {r["stack_id"]: r["stack"] for r in rows["call_stacks"]}
    for device, trace in enumerate(snapshot["device_traces"]):
        mine = sorted((r for r in rows.get("snapshot_trace_blocks", []) if r["device"] == f"NPU:{device}"),
                      key=lambda r: r["alloc_seq"])
        assert [(r["alloc_seq"], r["release_seq"], r["size_bytes"], stacks.get(r["stack_id"])) for r in mine] == \
            independent_pairs(trace)
        frees = sum(1 for e in trace if e["action"] == "free_completed")
        # A freed block always has its release; the torch_npu traces carry no time.
        assert sum(1 for r in mine if r["release_seq"] is not None) == frees
        assert all(r["release_action"] == "free_completed" for r in mine if r["release_seq"] is not None)
        assert all(r["clock"] == "sequence" and r["alloc_ns"] is None and r["release_ns"] is None for r in mine)


def test_several_devices_stay_apart(tmp_path):
    rows = read(MULTI, tmp_path)
    assert {r["device"] for r in rows["snapshot_segments"]} == {"NPU:0", "NPU:1"}
    trace = defaultdict(list)
    for r in rows["snapshot_trace_blocks"]:
        trace[r["device"]].append(r)
    assert {d: len(v) for d, v in trace.items()} == {"NPU:0": 2899, "NPU:1": 3216}
    # What device 0's trace leaves live is allocated in device 0's segments at snapshot time.
    live = {r["addr"] for r in trace["NPU:0"] if r["release_seq"] is None}
    allocated = {b["address"] for b in rows["snapshot_blocks"]
                 if b["device"] == "NPU:0" and b["state"] == "active_allocated"}
    assert len(live) == 325 and live <= allocated
    assert not [r for r in trace["NPU:1"] if r["release_seq"] is None]


def test_stacks_innermost_first(tmp_path):
    snapshot = plain_load(SINGLE)
    rows = read(SINGLE, tmp_path)
    first_alloc = next(e for e in snapshot["device_traces"][0] if e["action"] == "alloc")
    first_block = min(rows["snapshot_trace_blocks"], key=lambda r: r["alloc_seq"])
    stack = next(s for s in rows["call_stacks"] if s["stack_id"] == first_block["stack_id"])
    inner = first_alloc["frames"][0]
    assert stack["top_frame"] == f"{inner['filename']}({inner['line']}): {inner['name']}"
    assert stack["stack"].splitlines()[-1].endswith("<module>")


def write_pickle(path: Path, obj) -> Path:
    path.write_bytes(pickle.dumps(obj, protocol=4))
    return path


def test_time_us_becomes_epoch_ns_and_realloc_ends_a_block(tmp_path):
    frames = [{"filename": "train.py", "line": 3, "name": "step"}]
    trace = [
        {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "frames": frames, "time_us": 1700000000000001},
        {"action": "free_requested", "addr": 4096, "size": 512, "stream": 0, "frames": [], "time_us": 1700000000000005},
        {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "frames": [], "time_us": 1700000000000009},
        {"action": "alloc", "addr": 8192, "size": 64, "stream": 0, "frames": frames, "time_us": 1700000000000010},
        {"action": "alloc", "addr": 8192, "size": 32, "stream": 0, "frames": frames, "time_us": 1700000000000020},
        {"action": "free_completed", "addr": 99, "size": 16, "stream": 0, "frames": [], "time_us": 1700000000000030},
    ]
    # No segment holds the block the trace leaves allocated, and 8192 is allocated twice:
    # the rows all land, and the file is partial.
    rows = read(write_pickle(tmp_path / "s.pickle", {"segments": [], "device_traces": [[], trace]}), tmp_path,
                status="partial")
    blocks = sorted(rows["snapshot_trace_blocks"], key=lambda r: (r["alloc_seq"] is None, r["alloc_seq"]))
    assert {r["clock"] for r in blocks} == {"epoch"} and {r["device"] for r in blocks} == {"cuda:1"}
    assert [(r["alloc_ns"], r["release_ns"], r["free_requested_ns"], r["release_action"], r["size_bytes"])
            for r in blocks] == [
        (1700000000000001000, 1700000000000009000, 1700000000000005000, "free_completed", 512),
        (1700000000000010000, 1700000000000020000, None, "alloc", 64),
        (1700000000000020000, None, None, None, 32),
        (None, 1700000000000030000, None, "free_completed", 16),  # allocated before the trace began
    ]
    assert rows["call_stacks"][0]["stack"] == "train.py(3): step"
    outcome = torch_snapshot.read(tmp_path / "s.pickle", TableSink(tmp_path / "again"), {})
    assert outcome.rank["capture_started_ns"] == 1700000000000001000 and outcome.rank["device"] == "cuda:1"
    assert "cuda:1: 1 allocs at an address the trace still held (first at entry 4)" in outcome.message
    assert "1 blocks the trace leaves allocated that the segments do not hold (e.g. address 0x2000)" in outcome.message


def _entry(action: str, addr: int, size: int = 512) -> dict:
    return {"action": action, "addr": addr, "size": size, "stream": 0, "frames": []}


@pytest.mark.parametrize("trace, held, phrase", [
    ([_entry("alloc", 1), _entry("free_completed", 1)], set(), None),
    ([_entry("free_completed", 1), _entry("alloc", 1)], {1}, None),  # allocated before recording, then again
    ([_entry("free_completed", 1), _entry("free_completed", 1)], set(), "1 frees of a block neither"),
    ([_entry("alloc", 1)], set(), "1 blocks the trace leaves allocated that the segments do not hold"),
    ([_entry("free_completed", 1)], {1}, "1 blocks the segments hold that the trace freed last"),
    ([_entry("alloc", 1), _entry("alloc", 1)], {1}, "1 allocs at an address the trace still held"),
])
def test_segments_and_trace_that_disagree_are_named(trace, held, phrase):
    found = torch_snapshot.disagreements(trace, held)
    assert (found == []) if phrase is None else (len(found) == 1 and found[0].startswith(phrase))


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch ran-pickle-code",))


@pytest.mark.parametrize("obj, asked", [
    ({"segments": [], "device_traces": [], "x": _RunsCode()}, "system"),
    ({"segments": [], "device_traces": [], "x": Path("/tmp")}, "pathlib"),
    ({"segments": [], "device_traces": [], "x": {1, 2}}, None),  # a set is an opcode, not a global
])
def test_a_pickle_asking_for_code_is_refused_and_runs_nothing(obj, asked, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_pickle(tmp_path / "evil.pkl", obj)
    if asked is None:
        read(path, tmp_path)
        return
    with pytest.raises(SourceError, match=rf"evil\.pkl: refused: the pickle asks for \S*{asked}") as info:
        read(path, tmp_path)
    assert re.search(r"\(opcode (STACK_GLOBAL|GLOBAL) at byte \d+\)", str(info.value))
    assert not (tmp_path / "ran-pickle-code").exists()


def test_cut_pickle_fails_naming_the_file_and_size(tmp_path):
    data = SINGLE.read_bytes()
    cut = tmp_path / "cut.pkl"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match=rf"cut\.pkl: cut short.*{len(data) // 2}"):
        read(cut, tmp_path)


@pytest.mark.parametrize("obj, found", [
    ([1, 2], "found a list of 2 items, the first a int"),
    ({"lr": 0.1, "betas": [0.9]}, "found a dict with keys 'betas', 'lr'"),
    ({"device_traces": [[]]}, "found a dict with keys 'device_traces'"),
    ([], "found an empty list"),
    ([{"device": 0, "address": 0}], "found a list of 1 items, the first a dict with keys 'address', 'device'"),
    ({"k\x07\n": 1}, "found a dict with keys 'k\\x07\\n'"),
    (3.5, "found a float"),
])
def test_a_pickle_that_is_no_snapshot_fails_saying_what_it_holds(obj, found, tmp_path):
    path = write_pickle(tmp_path / "other.pkl", obj)
    with pytest.raises(SourceError) as info:
        read(path, tmp_path)
    message = str(info.value)
    assert message.startswith(f"{path}: not a memory snapshot") and message.endswith(found), message
    assert message.isprintable()


def test_a_malformed_snapshot_fails_naming_the_field(tmp_path):
    with pytest.raises(SourceError, match=r"segments\[0\]\.address: expected an integer"):
        read(write_pickle(tmp_path / "bad.pkl", {"segments": [{"device": 0, "address": "x", "total_size": 1}],
                                                 "device_traces": []}), tmp_path)


def test_an_empty_file_fails(tmp_path):
    (tmp_path / "empty.pickle").write_bytes(b"")
    with pytest.raises(SourceError, match=r"empty\.pickle: empty file \(0 bytes\)"):
        read(tmp_path / "empty.pickle", tmp_path)


def test_an_old_list_format_snapshot_loads_its_segments(tmp_path):
    """torch.cuda.memory_snapshot() returns the segments alone, as a list."""
    segments = plain_load(SINGLE)["segments"]
    path = write_pickle(tmp_path / "old.pickle", segments)
    sink = TableSink(tmp_path / "parts")
    outcome = torch_snapshot.read(path, sink, {})
    sink.close()
    assert outcome.status == "ok" and "old list-format snapshot" in outcome.message
    rows = {table: pq.read_table(parts).to_pylist() for table, parts in sink.tables().items()}
    assert [(r["address"], r["total_size_bytes"], r["blocks"]) for r in rows["snapshot_segments"]] == [
        (s["address"], s["total_size"], len(s["blocks"])) for s in segments]
    assert len(rows["snapshot_blocks"]) == sum(len(s["blocks"]) for s in segments)
    assert "snapshot_trace_blocks" not in rows or rows["snapshot_trace_blocks"] == []
    assert outcome.rank["metadata"]["snapshot_clock"] == "sequence"


@pytest.mark.slow
def test_ingest_lands_snapshots_and_fails_the_hostile_one_and_the_one_that_is_none(tmp_path, config, monkeypatch):
    from rlwh.ingest.runner import ingest

    monkeypatch.chdir(tmp_path)
    profile = copy_fixture("real/ascend/memory-snapshots", tmp_path / "profiles")
    write_pickle(profile / "evil.pickle", {"segments": [], "device_traces": [], "x": _RunsCode()})
    (profile / "rank3").mkdir()
    write_pickle(profile / "rank3" / "notes.pkl", {"a": 1})  # plain data, but no snapshot
    summary = ingest(profile, config)
    assert summary.failed == 2 and not (tmp_path / "ran-pickle-code").exists()
    con = read_db(config)
    try:
        sources = {p: (k, s, m) for p, k, s, m in con.execute(
            "select path, kind, status, message from sources").fetchall()}
        counts = dict(con.execute("""select capture, count(*) from snapshot_trace_blocks group by 1""").fetchall())
        ranks = con.execute("select distinct rank_id from snapshot_segments").fetchall()
        rank_rows = con.execute("""select capture, rank_id, device, capture_started_ns,
                                   metadata->>'snapshot_clock' from ranks order by 1""").fetchall()
        stacked = con.execute("""select count(t.stack_id), count(s.stack_id) from snapshot_trace_blocks t
                                 left join call_stacks s using (stack_id)""").fetchone()
    finally:
        con.close()
    assert sources["evil.pickle"][:2] == ("torch_snapshot", "failed") and "asks for" in sources["evil.pickle"][2]
    assert sources["rank3/notes.pkl"][1] == "failed" and "not a memory snapshot" in sources["rank3/notes.pkl"][2]
    assert sources[SINGLE.name][1] == "ok" and "read as rank 0" in sources[SINGLE.name][2]
    assert counts == {SINGLE.name: 3216, MULTI.name: 6115} and ranks == [(0,)]
    assert rank_rows == [(SINGLE.name, 0, "NPU:0", None, "sequence"), (MULTI.name, 0, None, None, "sequence")]
    with_frames = sum(1 for p in (SINGLE, MULTI) for t in plain_load(p)["device_traces"] for e in t
                      if e["action"] == "alloc" and e["frames"])
    assert stacked == (with_frames, with_frames)  # every alloc with frames has its stack, found in call_stacks
    again = {r.rel_path: r.status for r in ingest(profile, config).results}
    assert again[SINGLE.name] == again[MULTI.name] == "unchanged" and again["evil.pickle"] == "failed"
