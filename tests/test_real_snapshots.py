"""Real CUDA memory snapshots (tests/data/real/snapshots-cuda) against plain Python.

Every expected figure is computed here from the raw pickle with the standard library (an
unpickler that resolves no global), never with rlwh code:
- what the allocator held: the held blocks of the segments at snapshot time, replayed
  backwards through the trace (alloc +size, free_completed -size), its peak and when;
- the traced blocks' own peak (alloc paired with the free_completed of its address);
- the innermost Python frame of the blocks live at the allocator's peak (C++ frames skipped),
  and the blocks allocated before recording began.
Events are ordered as the warehouse documents it: time, releases before allocations, then
the entry's position in the trace.
"""

from __future__ import annotations

import pickle
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES

from rlwh.config import Config
from rlwh.ingest.runner import ingest

SNAPSHOTS = FIXTURES / "real" / "snapshots-cuda" / "cs336-medium"
HELD = ("active_allocated", "active_pending_free")


class _PlainData(pickle.Unpickler):
    def find_class(self, module, name):
        raise AssertionError(f"the fixture asks for {module}.{name}")


def _load(path: Path) -> dict:
    with open(path, "rb") as handle:
        return _PlainData(handle).load()


def _python_top(frames: list[dict]) -> str | None:
    """The innermost frame whose file is Python code, as rlwh writes frames."""
    return next((f"{f['filename']}({f['line']}): {f['name']}" for f in frames if f["filename"].endswith(".py")), None)


def _user(frames: list[dict]) -> str | None:
    return next((f"{f['filename']}({f['line']}): {f['name']}" for f in frames
                 if f["filename"].endswith(".py") and "/site-packages/" not in f["filename"]), None)


def expected(path: Path) -> dict[int, dict]:
    """Per device index: allocator peak and its time, traced peak, and who holds the allocator's peak."""
    snapshot = _load(path)
    held: dict[int, dict[int, dict]] = defaultdict(dict)
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] in HELD:
                held[segment["device"]][block["address"]] = block
    out = {}
    for device, trace in enumerate(snapshot["device_traces"]):
        if not trace:
            continue
        # Blocks: (alloc position or None, release position or None, size, frames).
        blocks, live = [], {}
        for i, entry in enumerate(trace):
            if entry["action"] == "alloc":
                assert entry["addr"] not in live  # none in these files
                live[entry["addr"]] = len(blocks)
                blocks.append([i, None, entry["size"], entry["frames"]])
            elif entry["action"] == "free_completed":
                if entry["addr"] in live:
                    blocks[live.pop(entry["addr"])][1] = i
                else:  # allocated before recording began
                    blocks.append([None, i, entry["size"], []])
        for address, block in held[device].items():
            if address not in live:  # held at snapshot time, never allocated in the trace
                blocks.append([None, None, block["size"], block.get("frames") or []])

        def key(position, release, trace=trace):
            return (trace[position]["time_us"], 0 if release else 1, position)

        events = sorted([(key(a, False), b[2], a is not None) for b in blocks if (a := b[0]) is not None]
                        + [(key(r, True), -b[2], b[0] is not None) for b in blocks if (r := b[1]) is not None])
        total = sum(delta for _, delta, _ in events)
        allocator = sum(b["size"] for b in held[device].values()) - total
        traced = peak_traced = 0
        peak = None
        for event_key, delta, is_traced in events:
            allocator += delta
            traced += delta if is_traced else 0
            peak_traced = max(peak_traced, traced)
            if peak is None or allocator > peak[0]:
                peak = (allocator, event_key)
        at = peak[1]
        live_at_peak = [b for b in blocks
                        if (b[0] is None or key(b[0], False) <= at) and (b[1] is None or key(b[1], True) > at)]
        tops, before, users = Counter(), Counter(), Counter()
        for alloc, _release, size, frames in live_at_peak:
            (tops if alloc is not None else before)[_python_top(frames)] += size
            if alloc is not None:
                users[_user(frames)] += size
        out[device] = {"allocator_peak": peak[0], "allocator_peak_at_ns": at[0] * 1000, "traced_peak": peak_traced,
                       "tops": tops, "before": before, "users": users}
    return out


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    """The two snapshots laid out as users keep them: one role, a rank folder each."""
    tmp = tmp_path_factory.mktemp("snapshots")
    root = tmp / "run"
    for rank, kind in enumerate(("training", "inference")):
        name = f"medium_128_{kind}_memory_snapshot.pickle"
        (root / "actor" / f"rank{rank}").mkdir(parents=True)
        shutil.copy(SNAPSHOTS / name, root / "actor" / f"rank{rank}" / name)
    ingest(root, Config(db_path=tmp / "w.duckdb", workers=1))
    con = duckdb.connect(str(tmp / "w.duckdb"), read_only=True)
    yield con, root
    con.close()


def _captures(con) -> dict[str, Path]:
    return {c: SNAPSHOTS / Path(c).name for (c,) in con.execute("select distinct capture from ranks").fetchall()}


@pytest.mark.slow
def test_allocator_peaks_count_the_blocks_allocated_before_recording(snapshots):
    con, _ = snapshots
    captures = _captures(con)
    assert len(captures) == 2
    for capture, path in captures.items():
        want = expected(path)
        got = con.execute("""select cast(split_part(device, ':', 2) as integer), allocator_peak_bytes,
                               allocator_peak_at_ns, peak_live_bytes from memory_peak where capture = ?""",
                          [capture]).fetchall()
        assert {d: (a, at, p) for d, a, at, p in got} == {
            d: (w["allocator_peak"], w["allocator_peak_at_ns"], w["traced_peak"]) for d, w in want.items()}, capture
        status = con.execute("select status from sources where path like ?", [f"%{path.name}"]).fetchone()[0]
        assert status == "ok"  # segments and trace agree in these files


@pytest.mark.slow
def test_the_peak_is_held_by_python_lines_and_by_blocks_from_before_recording(snapshots):
    con, _ = snapshots
    for capture, path in _captures(con).items():
        for device, want in expected(path).items():
            rows = con.execute("""select call_stack_top, user_frame, live_bytes, allocated_before_recording
                                  from memory_peak_breakdown where capture = ? and device = ?""",
                               [capture, f"cuda:{device}"]).fetchall()
            tops, before, users = Counter(), Counter(), Counter()
            for top, user, live, early in rows:
                (before if early else tops)[top] += live
                if not early:
                    users[user] += live
            assert tops == +want["tops"] and before == +want["before"] and users == +want["users"], capture
            assert not any(top and top.startswith("??") for top in tops)  # a native frame never stands for a stack
            # Most of an inference step's peak is the weights, allocated before recording.
            if "inference" in capture:
                assert sum(before.values()) > 0.9 * want["allocator_peak"]


@pytest.mark.slow
def test_rank_skew_compares_what_the_allocators_held(snapshots):
    """Rank 0 holds a training step, rank 1 an inference step: compared on the traced blocks
    alone they differ ~146x; on what the allocators held, ~4x."""
    con, _ = snapshots
    peaks = {rank: expected(SNAPSHOTS / f"medium_128_{kind}_memory_snapshot.pickle")[0]["allocator_peak"]
             for rank, kind in enumerate(("training", "inference"))}
    rows = con.execute("select rank_id, peak_live_bytes, median_peak_live_bytes, peak_vs_median, is_memory_outlier "
                       "from rank_skew where role = 'actor' order by rank_id").fetchall()
    assert [(r[0], r[1]) for r in rows] == sorted(peaks.items())
    assert rows[0][3] == pytest.approx(peaks[0] / peaks[1]) and rows[0][4]
    assert rows[1][2] == peaks[1]  # the lower middle value is the reference


HELD_OR_FREED_ACTIONS = ("alloc", "free_completed")


def _segment_figures(snapshot) -> dict[int, dict]:
    """Per device index of a snapshot whose trace allocates nothing (a dict, or the old list
    of segments): what its segments hold and reserve, the bytes its trace frees (blocks
    allocated before recording), and so what the allocator held when recording began."""
    segments = snapshot if isinstance(snapshot, list) else snapshot["segments"]
    traces = [] if isinstance(snapshot, list) else snapshot.get("device_traces") or []
    out: dict[int, dict] = {}
    for segment in segments:
        figures = out.setdefault(segment["device"], {"held": 0, "reserved": 0, "freed": 0})
        figures["reserved"] += segment["total_size"]
        figures["held"] += sum(b["size"] for b in segment["blocks"] if b["state"] in HELD)
    for device, trace in enumerate(traces):
        assert not [e for e in trace if e["action"] == "alloc"]  # the case at hand: no allocation
        freed = sum(e["size"] for e in trace if e["action"] == "free_completed")
        out.setdefault(device, {"held": 0, "reserved": 0, "freed": 0})["freed"] += freed
    return out


@pytest.fixture(scope="module")
def untraced(tmp_path_factory):
    """Snapshots whose device traces hold no allocation, made from the real pickles: an empty
    trace, no device_traces key, the old list format, and a trace of frees only (of blocks
    allocated before recording, at addresses no segment holds, with times), beside the real
    training snapshot; one role, a rank each."""
    tmp = tmp_path_factory.mktemp("untraced")
    training = _load(SNAPSHOTS / "medium_128_training_memory_snapshot.pickle")
    inference = _load(SNAPSHOTS / "medium_128_inference_memory_snapshot.pickle")
    top = max(s["address"] + s["total_size"] for s in training["segments"])
    frees = []
    for k, size in enumerate((1 << 20, 3 << 20, 512)):
        addr = top + (k + 1) * (8 << 20)
        frees += [{"action": "free_requested", "addr": addr, "size": size, "stream": 0, "frames": [],
                   "time_us": 1_700_000_000_000_000 + 10 * k},
                  {"action": "free_completed", "addr": addr, "size": size, "stream": 0, "frames": [],
                   "time_us": 1_700_000_000_000_000 + 10 * k + 5}]
    frees.append({"action": "segment_free", "addr": top, "size": 2 << 20, "stream": 0, "frames": [],
                  "time_us": 1_700_000_000_000_100})
    snapshots = {
        "empty_trace.pickle": {"segments": inference["segments"], "device_traces": [[]]},
        "no_traces.pickle": {"segments": training["segments"]},
        "old_list.pickle": inference["segments"],
        "frees_only.pickle": {"segments": training["segments"], "device_traces": [frees]},
        "training.pickle": training,
    }
    root = tmp / "run"
    for rank, (name, snapshot) in enumerate(snapshots.items()):
        (root / "critic" / f"rank{rank}").mkdir(parents=True)
        (root / "critic" / f"rank{rank}" / name).write_bytes(pickle.dumps(snapshot, protocol=4))
    ingest(root, Config(db_path=tmp / "w.duckdb", workers=1))
    con = duckdb.connect(str(tmp / "w.duckdb"), read_only=True)
    yield con, snapshots
    con.close()


@pytest.mark.slow
def test_a_snapshot_whose_trace_allocates_nothing_has_its_peak_from_its_segments(untraced):
    con, snapshots = untraced
    statuses = dict(con.execute("select split_part(path, '/', -1), status from sources").fetchall())
    assert statuses == dict.fromkeys(snapshots, "ok")
    rows = con.execute("""select split_part(capture, '/', -1), device, peak_live_bytes, peak_at_ns,
                            allocator_peak_bytes, allocator_peak_at_ns, allocator_reserved_peak_bytes, clock
                          from memory_peak where role = 'critic' and capture not like '%training.pickle'""").fetchall()
    want = {(name, f"cuda:{device}", 0, None, f["held"] + f["freed"], None, f["reserved"],
             "epoch" if name == "frees_only.pickle" else "sequence")
            for name, snapshot in snapshots.items() if name != "training.pickle"
            for device, f in _segment_figures(snapshot).items()}
    assert set(rows) == want and len(rows) == len(want)
    frees_only = _segment_figures(snapshots["frees_only.pickle"])[0]
    assert frees_only["freed"] == (1 << 20) + (3 << 20) + 512  # the segment_free is no block's


@pytest.mark.slow
def test_rank_skew_compares_snapshots_with_and_without_traced_allocations(untraced):
    con, snapshots = untraced
    peaks = {}
    for rank, (name, snapshot) in enumerate(snapshots.items()):
        if name == "training.pickle":
            peaks[rank] = expected(SNAPSHOTS / "medium_128_training_memory_snapshot.pickle")[0]["allocator_peak"]
        else:
            peaks[rank] = max(f["held"] + f["freed"] for f in _segment_figures(snapshot).values())
    median = sorted(peaks.values())[(len(peaks) - 1) // 2]
    rows = con.execute("""select rank_id, peak_live_bytes, median_peak_live_bytes, peak_vs_median, is_memory_outlier
                          from rank_skew where role = 'critic' order by rank_id""").fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [(rank, peak, median) for rank, peak in sorted(peaks.items())]
    for rank, _peak, _median, vs_median, outlier in rows:
        assert vs_median == pytest.approx(peaks[rank] / median)
        assert outlier == (abs(peaks[rank] / median - 1) > 0.1)
    assert any(r[4] for r in rows) and not all(r[4] for r in rows)  # inference and training differ ~4x
    # The training snapshot's reserved bytes are its segments' at snapshot time, like the others'.
    reserved = con.execute("""select allocator_reserved_peak_bytes from memory_peak
                              where capture like '%training.pickle'""").fetchone()[0]
    assert reserved == sum(s["total_size"] for s in snapshots["training.pickle"]["segments"])
