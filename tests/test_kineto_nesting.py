"""The set-based nesting of Kineto events (rlwh.readers.kineto_nesting) gives the rows the
former per-event sweep gave (tests/kineto_sweep.py, the former code kept as reference): on
every real trace in tests/data, on traces built to be all ties, and, for a few ties, the
stacks and ops worked out here by hand."""

from __future__ import annotations

import gzip
import json
import random
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kineto_sweep import sweep_tables

from rlwh.readers import torch_trace
from rlwh.readers.base import TableSink
from rlwh.readers.kineto_nesting import nearest_open

DATA = Path(__file__).resolve().parent / "data"
NESTED_TABLES = ("cpu_ops", "call_stacks", "torch_memory_events")
BASE = 1790857026000000000


def _is_kineto_trace(path: Path) -> bool:
    """Whether the file's (uncompressed) bytes hold both keys anywhere: read a chunk at a
    time, and only until both are seen (every worker asks this of every trace at collection;
    a whole gzip's decompress cost each ~0.3 s)."""
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    wanted, tail = {b'"traceEvents"', b'"ph"'}, b""
    with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as stream:
        while wanted and (chunk := stream.read(1 << 20)):
            seen = tail + chunk
            wanted = {key for key in wanted if key not in seen}
            tail = seen[-16:]  # a key cut between two chunks
    return not wanted


REAL_TRACES = sorted(p for p in DATA.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
                     and "bad" not in p.parts and _is_kineto_trace(p))


def reader_tables(path: Path, tmp_path: Path) -> dict[str, list[dict]]:
    out = tmp_path / f"out-{path.name}"
    shutil.rmtree(out, ignore_errors=True)
    sink = TableSink(out)
    torch_trace.read(path, sink, {"rank_id": 0})
    sink.close()
    return {name: pq.read_table(parts).to_pylist() for name, parts in sink.tables().items()}


def as_multiset(rows: list[dict]) -> list[tuple]:
    return sorted((tuple(sorted(r.items())) for r in rows), key=repr)


def assert_same_as_sweep(path: Path, tmp_path: Path) -> dict[str, list[dict]]:
    new = reader_tables(path, tmp_path)
    old = sweep_tables(path)
    for table in NESTED_TABLES:
        assert as_multiset(new.get(table, [])) == as_multiset(old[table]), table
    return new


def test_real_traces_are_found():
    names = {p.name for p in REAL_TRACES}
    assert "prof_rank-0.pt.trace.json.gz" in names and "backward_thread.json" in names
    assert len(REAL_TRACES) >= 15


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=pytest.mark.slow) if p.stat().st_size > 1_000_000 else p for p in REAL_TRACES
], ids=lambda p: str(p.relative_to(DATA)))  # over 1 MB (five traces) takes seconds each: make test's, not check's
def test_real_trace_rows_equal_the_sweeps(path, tmp_path, monkeypatch):
    monkeypatch.setattr(torch_trace, "NEST_ROWS", 4096)  # nested in batches: what one leaves open, the next sees
    assert_same_as_sweep(path, tmp_path)


# --- traces built of ties ------------------------------------------------------------

def us(ns: int) -> str:
    """ns as Kineto's µs text (3 decimals), for exact times at any magnitude."""
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def write_trace(path: Path, events: list) -> Path:
    # ts and dur written as bare decimal numbers, as Kineto does (given as text here)
    body = re.sub(r'"(ts|dur)": "(-?[0-9.]+)"', r'"\1": \2', ",\n".join(json.dumps(e) for e in events))
    text = '{"schemaVersion": 1, "baseTimeNanoseconds": %d, "traceEvents": [\n%s\n]}' % (BASE, body)
    path.write_text(text)
    return path


def event(cat: str, name: str, ts_ns: int, dur_ns: int | None, pid, tid, args: dict | None = None) -> dict:
    ev: dict = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": us(ts_ns)}
    if dur_ns is not None:
        ev["dur"] = us(dur_ns)
    if args:
        ev["args"] = args
    return ev


def frame(name, ts, dur, pyid, parent, tid=1, pid=1) -> dict:
    args = {"Python id": pyid} if parent is None else {"Python id": pyid, "Python parent id": parent}
    return event("python_function", name, ts, dur, pid, tid, args)


def op(name, ts, dur, tid=1, pid=1, call_stack=None) -> dict:
    return event("cpu_op", name, ts, dur, pid, tid, {"Call stack": call_stack} if call_stack else None)


def memory(ts, tid=1, pid=1, size=64) -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": pid, "tid": tid,
            "ts": us(ts),
            "args": {"Bytes": size, "Addr": 4096, "Total Allocated": size, "Total Reserved": 0,
                     "Device Type": 1, "Device Id": 0}}


def tied_thread(rng: random.Random, pid, tid, ids: list[int], origin: int) -> list[dict]:
    """A thread of a few frames, ops and memory events on a handful of instants: most of
    them start, end or both at the same instant as another, some are zero long, some name
    a parent that encloses them, some one that does not, one of another thread or none."""
    instants = [origin + 1000 * k for k in range(6)]
    events, mine = [], []
    for _ in range(rng.randint(1, 9)):
        ts = rng.choice(instants)
        dur = rng.choice([0, 0, 1000, 1000, 2000, 3000, 5000, 500, -1000])
        ids.append(len(ids) + 1)
        parent = rng.choice([None, 10 ** 9, rng.choice(mine) if mine else None, rng.choice(ids),
                             rng.choice(mine) if mine else None])
        mine.append(ids[-1])
        name = rng.choice(["f.py(1): a", "f.py(2): b", "g.py(3): c ;", "  ", "h.py(4): d\nh.py(5): e"])
        events.append(frame(name, ts, dur, ids[-1], parent, tid, pid))
    for _ in range(rng.randint(0, 5)):
        stack = rng.choice([None, None, None, "x.py(1): x;y.py(2): y"])
        events.append(op(rng.choice(["aten::add", "aten::mm"]), rng.choice(instants),
                         rng.choice([0, 1000, 2000, None, -500]), tid, pid, stack))
    for _ in range(rng.randint(0, 4)):
        events.append(memory(rng.choice(instants) + rng.choice([0, 0, 500]), tid, pid))
    rng.shuffle(events)
    return events


@pytest.mark.parametrize(("seed", "batch_rows"),
                         [(0, None), (1, None), pytest.param(2, 13, marks=pytest.mark.slow), (3, 64)])
def test_tied_traces_rows_equal_the_sweeps(seed, batch_rows, tmp_path, monkeypatch):
    if batch_rows:  # a batch ends inside threads, their stacks open
        monkeypatch.setattr(torch_trace, "NEST_ROWS", batch_rows)
    rng = random.Random(seed)
    ids: list[int] = []
    events = []
    for k in range(300):
        # several pids, ids of threads as numbers and as text Kineto cannot read as one (null)
        pid = rng.choice([1, 2, "host"])
        tid = rng.choice([k, k, k, "Spans"])
        origin = rng.choice([0, 7_000, 1_790_857_026_123_456_789 - BASE])  # ns after the base
        events += tied_thread(rng, pid, tid, ids, origin)
    path = write_trace(tmp_path / "ties.json", events)
    rows = assert_same_as_sweep(path, tmp_path)
    assert sum(r["stack_id"] is not None for r in rows["cpu_ops"]) > 100
    assert sum(r["op_name"] is not None for r in rows["torch_memory_events"]) > 50


# --- ties worked out by hand ---------------------------------------------------------

def stacks_of_ops(rows: dict) -> dict:
    """op name -> its stack's frames, innermost first (None: no stack)."""
    texts = {r["stack_id"]: r["stack"] for r in rows.get("call_stacks", [])}
    return {r["name"]: texts.get(r["stack_id"]) for r in rows["cpu_ops"]}


def test_same_span_frames_nest_as_their_ids_say(tmp_path):
    # outer and inner span 0-10 µs; "child" names inner, "sibling" names outer (so inner,
    # which merely shares its span, was closed); op_a runs in child, op_b in sibling.
    path = write_trace(tmp_path / "t.json", [
        frame("outer", 0, 10_000, 1, None), frame("inner", 0, 10_000, 2, 1),
        frame("child", 0, 10_000, 3, 2), op("op_a", 1_000, 100),
        frame("sibling", 0, 10_000, 4, 1), op("op_b", 0, 10_000)])
    rows = assert_same_as_sweep(path, tmp_path)
    # at 0 µs the frames open in the order outer, inner, child, sibling; op_a at 1 µs sees
    # all of them open, and the innermost is sibling (the last to open), whose parent is outer.
    assert stacks_of_ops(rows) == {"op_a": "sibling\nouter", "op_b": "sibling\nouter"}


def test_zero_long_frame_at_an_end_is_the_sibling_its_id_names(tmp_path):
    path = write_trace(tmp_path / "t.json", [
        frame("root", 0, 20_000, 1, None), frame("first", 0, 5_000, 2, 1),
        frame("blip", 5_000, 0, 3, 1), op("in_blip", 5_000, 0),
        frame("later", 6_000, 0, 4, 2), op("in_later", 6_000, 0)])
    rows = assert_same_as_sweep(path, tmp_path)
    # blip touches first's end and names root: root's child. later names first, which
    # ended before it: time wins, root again.
    assert stacks_of_ops(rows) == {"in_blip": "blip\nroot", "in_later": "later\nroot"}


def test_memory_events_at_op_boundaries(tmp_path):
    path = write_trace(tmp_path / "t.json", [
        op("outer", 0, 10_000), op("first", 0, 4_000), op("second", 4_000, 0),
        memory(0), memory(4_000), memory(10_000), memory(10_001), op("other_thread", 0, 20_000, tid=2)])
    rows = assert_same_as_sweep(path, tmp_path)
    by_ts = {r["ts_ns"] - BASE: r["op_name"] for r in rows["torch_memory_events"]}
    # at 0 both outer and first are open, first opened last (shorter); at 4 µs first has
    # not ended and second (zero long) opened after it; at 10 µs outer is still open (its
    # end counts); 1 ns later none is, and the other thread's op never counts.
    assert by_ts == {0: "first", 4_000: "second", 10_000: "outer", 10_001: None}


def test_times_stay_exact_at_epoch_magnitude(tmp_path):
    far = 9_000_000_000_000_000_123 - BASE  # ns after the base, beyond a double's precision
    path = write_trace(tmp_path / "t.json", [frame("f", far, 1, 1, None), op("o", far + 1, 0), memory(far + 1)])
    rows = assert_same_as_sweep(path, tmp_path)
    assert [r["ts_ns"] for r in rows["cpu_ops"]] == [BASE + far + 1]
    assert [(r["op_name"], r["op_ts_ns"]) for r in rows["torch_memory_events"]] == [("o", BASE + far + 1)]
    assert stacks_of_ops(rows) == {"o": "f"}


# --- nearest_open itself -------------------------------------------------------------

def brute_nearest_open(starts, reach, is_candidate) -> list[int]:
    out = []
    for i in range(len(reach)):
        j, found = i - 1, -1
        first = max(k for k in range(i + 1) if starts[k] or k == 0)
        while j >= first:
            if is_candidate[j] and reach[j] >= reach[i]:
                found = j
                break
            j -= 1
        out.append(found)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_nearest_open_is_the_nearest_earlier_candidate_that_reaches(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 200)
    starts = [i == 0 or rng.random() < 0.05 for i in range(n)]
    reach = [rng.randint(-3, 12) for _ in range(n)]
    is_candidate = [rng.random() < 0.7 for _ in range(n)]
    got = nearest_open(pa.array(starts), pa.array(reach, pa.int64()), pa.array(is_candidate)).to_pylist()
    assert got == brute_nearest_open(starts, reach, is_candidate)
