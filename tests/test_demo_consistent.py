"""The demo tells one story: the synthetic Ascend trace's Overlap Analysis rows and its
step_trace_time.csv are what its own kernels and collectives add up to, device_time says
the same, and every rank of the demo has as many NVTX captures as the others.

The truth is computed here from the raw files with the standard library only."""

from __future__ import annotations

import csv
import json
import re
import statistics
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from rlwh import synth
from rlwh.synth.step_trace import write_step_trace_time


def _ns(value) -> int:
    """The trace's microseconds (a string with three decimals, or a number) -> exact ns."""
    return int(Decimal(str(value)) * 1000)


def _union(intervals) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def _minus(stretches, holes) -> list[tuple[int, int]]:
    """Parts of `stretches` (disjoint) that no interval of `holes` (disjoint, sorted) covers."""
    out = []
    for start, end in stretches:
        at = start
        for h_start, h_end in holes:
            if h_end <= at or h_start >= end:
                continue
            if h_start > at:
                out.append((at, h_start))
            at = max(at, h_end)
        if at < end:
            out.append((at, end))
    return out


def _length(intervals) -> int:
    return sum(e - s for s, e in intervals)


def _device_activity(path: Path):
    """Kernels, HCCL collectives and Overlap Analysis rows (by name) of a trace_view.json."""
    events = json.loads(path.read_text())
    process = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    kernels, collectives, overlap = [], [], defaultdict(list)
    for e in events:
        if e.get("ph") != "X":
            continue
        span = (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
        if e.get("cat") == "Kernel":
            kernels.append(span)
        elif process.get(e["pid"]) == "HCCL":
            collectives.append(span)
        elif process.get(e["pid"]) == "Overlap Analysis":
            overlap[e["name"]].append(span)
    begins = sorted(_ns(e["ts"]) for e in events
                    if e.get("cat") == "mstx" and re.fullmatch(r"step_\d+_begin", e["name"]))
    return kernels, collectives, overlap, begins


def _truth(kernels, collectives):
    """What the profiler derives from these tasks: the four kinds of Overlap row."""
    compute, comm = _union(kernels), _union(collectives)
    busy = _union(kernels + collectives)
    return {"Computing": compute, "Communication": comm,
            "Communication(Not Overlapped)": _minus(comm, compute),
            "Free": [(a[1], b[0]) for a, b in zip(busy, busy[1:])]}


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory) -> Path:
    rank = synth.write_ascend_rank(tmp_path_factory.mktemp("overlap") / "job" / "actor_update", rank_id=1,
                                   n_ops=45_000, n_allocs=300, with_collectives=True, seed=11)
    write_step_trace_time(rank)
    return rank


def test_overlap_rows_are_the_unions_of_the_device_ops(rank_dir):
    kernels, collectives, overlap, begins = _device_activity(rank_dir / "ASCEND_PROFILER_OUTPUT/trace_view.json")
    assert len(begins) == 3 and len(kernels) > 1000 and len(collectives) == 6
    truth = _truth(kernels, collectives)
    for name, stretches in truth.items():
        assert sorted(overlap[name]) == stretches, name  # row for row, to the ns
    assert set(overlap) == set(truth)
    # Some communication overlaps compute and some does not: the figures are not trivial.
    assert 0 < _length(truth["Communication(Not Overlapped)"]) < _length(truth["Communication"])
    # Computing + Communication(Not Overlapped) + Free tile the device's span exactly.
    span = max(e for _, e in kernels + collectives) - min(s for s, _ in kernels + collectives)
    assert _length(truth["Computing"]) + _length(truth["Communication(Not Overlapped)"]) \
        + _length(truth["Free"]) == span


def test_overlap_rows_without_collectives_have_no_communication(tmp_path):
    rank = synth.write_ascend_rank(tmp_path, n_ops=3000, n_allocs=100, seed=3)
    kernels, collectives, overlap, _ = _device_activity(rank / "ASCEND_PROFILER_OUTPUT/trace_view.json")
    assert collectives == [] and set(overlap) == {"Computing", "Free"}
    assert sorted(overlap["Computing"]) == _union(kernels)
    assert sorted(overlap["Free"]) == _truth(kernels, [])["Free"]


def test_step_trace_time_is_each_steps_device_ops(rank_dir):
    kernels, collectives, _, begins = _device_activity(rank_dir / "ASCEND_PROFILER_OUTPUT/trace_view.json")
    with open(rank_dir / "ASCEND_PROFILER_OUTPUT/step_trace_time.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["Step"] for r in rows] == ["1", "2", "3"]
    for row, begin, until in zip(rows, begins, begins[1:] + [2**63]):
        k = [i for i in kernels if begin <= i[0] < until]
        c = [i for i in collectives if begin <= i[0] < until]
        truth = _truth(k, c)
        expected = {"Computing": _length(truth["Computing"]), "Communication": _length(truth["Communication"]),
                    "Communication(Not Overlapped)": _length(truth["Communication(Not Overlapped)"]),
                    "Free": _length(truth["Free"]),
                    "Stage": max(e for _, e in k + c) - min(s for s, _ in k + c)}
        expected["Overlapped"] = expected["Communication"] - expected["Communication(Not Overlapped)"]
        assert {name: _ns(row[name]) for name in expected} == expected, row["Step"]


# ---- the demo


def _demo_traces(demo_profile: Path) -> dict[tuple[str, int], Path]:
    """(role, rank) -> trace_view.json, the rank from profiler_info_<rank>.json."""
    traces = {}
    for info in demo_profile.glob("ascend/*/*_ascend_pt/profiler_info_*.json"):
        rank_id = int(json.loads(info.read_text())["rank_id"])
        traces[(info.parent.parent.name, rank_id)] = info.parent / "ASCEND_PROFILER_OUTPUT/trace_view.json"
    return traces


def test_demo_device_time_is_the_unions_of_its_kernels(demo_profile, demo_warehouse):
    con = duckdb.connect(str(demo_warehouse), read_only=True)
    rows = con.execute("select role, rank_id, compute_ns, communication_ns, exposed_communication_ns, idle_ns,"
                       " window_ns from device_time where method = 'overlap_analysis'").fetchall()
    got = {(role, rank): rest for role, rank, *rest in rows}
    idle_rows = con.execute("select role, rank_id, idle_ns from device_idle").fetchall()
    idle = {(role, rank): gaps for role, rank, gaps in idle_rows}
    assert len(got) == len(rows) and len(idle) == len(idle_rows)  # one row per rank: none dropped by the dicts
    traces = _demo_traces(demo_profile)
    assert len(traces) == 4 and set(got) == set(traces)
    for key, path in traces.items():
        kernels, collectives, _, _ = _device_activity(path)
        truth = _truth(kernels, collectives)
        span = max(e for _, e in kernels + collectives) - min(s for s, _ in kernels + collectives)
        assert got[key] == [_length(truth["Computing"]), _length(truth["Communication"]),
                            _length(truth["Communication(Not Overlapped)"]), _length(truth["Free"]), span], key
        assert idle[key] == _length(truth["Free"]), key  # device_idle's gaps are device_time's idle


def _nvtx_windows(demo_profile: Path) -> dict[int, list[tuple[str, int, int]]]:
    """rank -> (range name, start, end) of every NVTX range of each of its exports, by export."""
    out: dict[int, list[list[tuple[str, int, int]]]] = defaultdict(list)
    for path in sorted(demo_profile.rglob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        names = {r["id"]: r["value"] for r in rows if r.get("table") == "StringIds"}
        rank = next(int(re.search(r'RANK="(\d+)"', r["value"]).group(1)) for r in rows
                    if r.get("table") == "META_DATA_CAPTURE")
        out[rank].append([(names[r["textId"]], r["start"], r["end"]) for r in rows if r.get("table") == "NVTX_EVENTS"])
    return out


def test_no_demo_rank_is_a_straggler_for_having_more_captures(demo_profile, demo_warehouse):
    """The NVTX ranges are phases of the colocated worker's role (its folder): the role's
    span on a rank is what each of its exports' ranges cover, summed over its exports."""
    exports = _nvtx_windows(demo_profile)
    assert {name for captures in exports.values() for ranges in captures for name, _, _ in ranges} == {
        "generate_sequences", "compute_log_prob", "update_actor"}
    assert {len(captures) for captures in exports.values()} == {2}  # every rank: the first capture and step 2's
    spans = {rank: sum(max(e for _, _, e in ranges) - min(s for _, s, _ in ranges) for ranges in captures)
             for rank, captures in exports.items()}
    con = duckdb.connect(str(demo_warehouse), read_only=True)
    skew = {rank: (span, flagged) for rank, span, flagged in con.execute(
        "select rank_id, span_ns, is_straggler from rank_skew "
        "where role = 'actor_rollout_ref' and span_source = 'window:nvtx'").fetchall()}
    assert {rank: span for rank, (span, _) in skew.items()} == spans
    # No range name is a role anywhere.
    names = {"generate_sequences", "compute_log_prob", "update_actor"}
    for view in ("rank_skew", "role_timeline", "phase_device_time", "memory_peak"):
        assert not names & {r for (r,) in con.execute(f"select distinct role from {view}").fetchall()}, view
    # Flagged: a rank whose time in the role is over 1.1 x the role's median (the lower middle value).
    low_median = statistics.median_low(spans.values())
    slow = {rank for rank, total in spans.items() if total > 1.1 * low_median}
    assert {rank for rank, (_, flagged) in skew.items() if flagged} == slow
