"""Time nesting wins for every frame, on every real PyTorch trace in ../shared.

A cpu_op's stack must hold every python_function that encloses the op's start in time on
its thread, and nothing else (activation checkpointing re-runs forward code under other
"Python parent id"s; the time nesting is what the thread did). The oracle here is the raw
JSON read with the standard library and an interval sweep (a heap of open frames by end),
not rlwh's stack walk. An op that carries its own "Call stack" (PyTorch 1.8) holds those
frames; a trace with no frames at all holds ops without stacks, and that is checked too.
"""

from __future__ import annotations

import gzip
import heapq
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import FIXTURES
from test_readers_torch_trace import run_reader

TRACES = sorted(p for folder in ("real/kineto", "torch_profile", "rl-insight-samples/torch_data")
                for p in (FIXTURES / folder).rglob("*.json*") if p.is_file())


def _ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


def expected_frames(path: Path) -> dict[tuple, list[Counter]]:
    """(op name, ts_ns relative to the base, tid) -> frames enclosing it in time, as multisets."""
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data, parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    frames, ops = defaultdict(list), defaultdict(list)
    out: dict[tuple, list[Counter]] = defaultdict(list)
    for ev in events:
        if ev.get("ph") != "X" or "ts" not in ev:
            continue
        if ev.get("cat") == "python_function":
            start = _ns(ev["ts"])
            frames[(ev.get("pid"), ev.get("tid"))].append((start, start + _ns(ev.get("dur") or 0), ev.get("name")))
        elif ev.get("cat") in ("cpu_op", "Operator"):
            carried = (ev.get("args") or {}).get("Call stack")
            if carried:  # PyTorch 1.8 wrote the stack into the op, frames split by ';'
                out[(ev.get("name"), _ns(ev["ts"]), ev.get("tid"))].append(Counter(f for f in carried.split(";") if f))
            else:
                ops[(ev.get("pid"), ev.get("tid"))].append((_ns(ev["ts"]), ev.get("name")))
    for thread, thread_ops in ops.items():
        pending = sorted(frames.get(thread, []))
        open_frames: list = []  # heap of (end, start, name)
        i = 0
        for ts, name in sorted(thread_ops):
            while i < len(pending) and pending[i][0] <= ts:
                heapq.heappush(open_frames, (pending[i][1], pending[i][0], pending[i][2]))
                i += 1
            while open_frames and open_frames[0][0] < ts:
                heapq.heappop(open_frames)
            out[(name, ts, thread[1])].append(Counter(f[2] for f in open_frames))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_every_enclosing_frame_is_in_the_ops_stack(path, tmp_path):
    expected = expected_frames(path)
    outcome, tables = run_reader(path, tmp_path, {"rank_id": 0})  # a trace without a rank reads as rank 0
    ops = tables.get("cpu_ops", [])
    assert len(ops) == sum(map(len, expected.values()))
    if not ops:
        return  # a trace of device work only (the raw file has no cpu_op): no stacks to check
    base = min(r["ts_ns"] for r in ops) - min(ts for _, ts, _ in expected)
    stacks = {r["stack_id"]: r["stack"] for r in tables.get("call_stacks", [])}
    got: dict[tuple, list[Counter]] = defaultdict(list)
    for r in ops:
        text = stacks.get(r["stack_id"])
        got[(r["name"], r["ts_ns"] - base, r["tid"])].append(Counter(text.split("\n")) if text else Counter())
    lost = [(key, e - g) for key in expected
            for e, g in zip(sorted(expected[key], key=sorted), sorted(got.get(key, []), key=sorted)) if e - g]
    assert not lost, f"{len(lost)} ops lose frames, e.g. {lost[:3]}"
    extra = [(key, g - e) for key in got
             for e, g in zip(sorted(expected.get(key, []), key=sorted), sorted(got[key], key=sorted)) if g - e]
    assert not extra, f"{len(extra)} ops gain frames that do not enclose them, e.g. {extra[:3]}"


def _checkpointed_thread(seed: int) -> list[dict]:
    """A thread of nested python_functions whose "Python parent id"s lie as checkpointed
    recompute makes them: some name an outer ancestor (frames between them in time), some
    a frame that ended long ago; cpu_ops start inside random frames."""
    import random

    from test_readers_torch_trace import X, py

    rng = random.Random(seed)
    events, ids, done = [], iter(range(1, 10**6)), []

    def frame(start: int, end: int, ancestors: list[int], depth: int) -> None:
        pyid = next(ids)
        parent = ancestors[-1] if ancestors else None
        roll = rng.random()
        if len(ancestors) > 1 and roll < 0.3:
            parent = rng.choice(ancestors[:-1])  # an enclosing ancestor, skipping the frames between
        elif done and roll < 0.45:
            parent = rng.choice(done)  # a frame that ended before this one began
        events.append(py(f"m{depth}.py({pyid}): f", f"{start}.000", f"{end - start}.000", pyid, parent))
        t, span = start + 1, end - start
        while t + 4 < end:
            if depth < 5 and span > 120 and rng.random() < 0.6 and t + span // 6 < end:
                length = rng.randint(span // 12, span // 6)
                frame(t, t + length, ancestors + [pyid], depth + 1)
                t += length + rng.randint(0, 3)  # 0: the next frame starts as this one ends
            else:
                events.append(X("cpu_op", f"aten::op{pyid}_{t}", f"{t}.000", "1.000"))
                t += rng.randint(2, max(3, span // 8))
        done.append(pyid)

    frame(0, 100_000, [], 0)
    return events


@pytest.mark.parametrize("seed", range(4))
def test_generated_checkpointed_threads(seed, tmp_path):
    from test_readers_torch_trace import write_trace

    path = tmp_path / "prof_rank-0.json"
    write_trace(path, _checkpointed_thread(seed))
    expected = expected_frames(path)
    assert sum(map(len, expected.values())) > 20
    outcome, tables = run_reader(path, tmp_path)
    stacks = {r["stack_id"]: r["stack"] for r in tables.get("call_stacks", [])}
    base = min(r["ts_ns"] for r in tables["cpu_ops"]) - min(ts for _, ts, _ in expected)
    got = {(r["name"], r["ts_ns"] - base, r["tid"]): [Counter(stacks[r["stack_id"]].split("\n"))]
           for r in tables["cpu_ops"]}
    assert got == dict(expected)
