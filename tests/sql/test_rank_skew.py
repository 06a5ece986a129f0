"""rank_skew: each rank's span and peak against its role's median rank, against the rule
replayed in Python (kind of span most of a role's ranks have, lower median, 10% margins)."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime

from conftest import insert_rows

RUN = "r"
# actor: Ascend ranks with only step_trace_time.csv rows (rank 2 has no Stage column).
STEPS = [  # (rank_id, step, stage_ns, computing_ns, communication_not_overlapped_ns, free_ns)
    (0, 1, 1_000, 600, 300, 100), (0, 2, 1_100, 600, 300, 100),
    (1, 1, 1_400, 900, 300, 100), (1, 2, 1_200, 900, 300, 100),
    (2, 1, None, 700, 200, 50), (2, 2, None, 700, 200, 50),
]
# rollout: three ranks with NVTX ranges, one with only a trace window (so not compared).
NVTX = [(10, 0, 1_000), (10, 2_000, 2_500), (11, 0, 1_400), (12, 0, 2_000)]  # (rank_id, start_ns, end_ns)
WINDOW_OPS = [(13, 0, 9_999)]  # (rank_id, ts_ns, dur_ns), in capture trace13.json (a PyTorch trace)
# Peaks: blocks never released at ALLOC_NS (peak = their sum), by (role, rank_id, capture). A capture
# with memory rows and no role range is a window too (of one instant here).
ALLOC_NS = 5
MEMORY = {("actor", 0, "c"): [1000, 24], ("rollout", 10, "nsys/rank10"): [100],
          ("rollout", 11, "nsys/rank11"): [105], ("rollout", 12, "nsys/rank12"): [200],
          ("rollout", 13, "trace13.json"): [95], ("ref", 20, "ref20"): [7]}
PRIORITY = ["nvtx", "mstx", "step_times", "window:ascend", "window:torch"]


def _insert(con):
    insert_rows(con, "step_times", ["rank_id", "step", "stage_ns", "computing_ns", "communication_not_overlapped_ns",
                                    "free_ns"], STEPS, run=RUN, role="actor", capture="c", source_id=1, source_row=1)
    insert_rows(con, "ranges", ["rank_id", "capture", "start_ns", "end_ns"],
                [(rank, f"nsys/rank{rank}", start, end) for rank, start, end in NVTX], run=RUN, role="rollout",
                source_id=2, source="nvtx", domain="default", name="rollout", clock="epoch")
    insert_rows(con, "cpu_ops", ["rank_id", "ts_ns", "dur_ns"], WINDOW_OPS, run=RUN, role="rollout",
                capture="trace13.json", source_id=3, name="aten::mm")
    con.execute("insert into sources (source_id, run, role, rank_id, capture, kind, path, status, rows, ingested_at)"
                " values (3, ?, 'rollout', 13, 'trace13.json', 'torch_trace', 'trace13.json', 'ok', 1, ?)",
                [RUN, datetime(2026, 1, 1)])
    rows = [(role, rank, capture, i + 1, size) for (role, rank, capture), sizes in MEMORY.items()
            for i, size in enumerate(sizes)]
    insert_rows(con, "memory_records", ["role", "rank_id", "capture", "source_row", "size_bytes"], rows, run=RUN,
                source_id=4, name="aten::empty", alloc_ns=ALLOC_NS, device="NPU:0")


def _lower_median(values):
    present = sorted(v for v in values if v is not None)
    return present[(len(present) - 1) // 2] if present else None


def _expected() -> list[tuple]:
    spans = defaultdict(dict)  # (role, rank) -> {(kind, clock): ns}
    for rank, _step, stage, computing, communication, free in STEPS:
        key = ("step_times", None)
        spans[("actor", rank)][key] = spans[("actor", rank)].get(key, 0) + (
            stage if stage is not None else computing + communication + free)
    for rank, start, end in NVTX:
        spans[("rollout", rank)][("nvtx", "epoch")] = spans[("rollout", rank)].get(("nvtx", "epoch"), 0) + end - start
    events = defaultdict(list)  # (role, rank, capture) -> [(start, end)]: each capture's window
    for rank, ts, dur in WINDOW_OPS:
        events[("rollout", rank, "trace13.json")].append((ts, ts + dur))
    for key in MEMORY:
        events[key].append((ALLOC_NS, ALLOC_NS))
    ranged = {("rollout", rank, f"nsys/rank{rank}") for rank, _, _ in NVTX}
    for (role, rank, capture), found in events.items():
        if (role, rank, capture) not in ranged:
            kind = ("window:torch" if capture == "trace13.json" else "window:other", "epoch")
            window = max(e for _, e in found) - min(s for s, _ in found)
            spans[(role, rank)][kind] = spans[(role, rank)].get(kind, 0) + window
    peaks = {(role, rank): sum(sizes) for (role, rank, _), sizes in MEMORY.items()}
    result = []
    for role in sorted({role for role, _ in [*spans, *peaks]}):
        ranks = sorted({rank for r, rank in [*spans, *peaks] if r == role})
        kinds = Counter(kind for (r, _), found in spans.items() if r == role for kind in found)
        chosen = min(kinds, key=lambda k: (-kinds[k], PRIORITY.index(k[0]) if k[0] in PRIORITY else 9,
                                           k[1] or "")) if kinds else (None, None)
        span_of = {rank: spans.get((role, rank), {}).get(chosen) for rank in ranks}
        peak_of = {rank: peaks.get((role, rank)) for rank in ranks}
        span_median, peak_median = _lower_median(span_of.values()), _lower_median(peak_of.values())
        for rank in ranks:
            span, peak = span_of[rank], peak_of[rank]
            span_ratio = span / span_median if span is not None and span_median else None
            peak_ratio = peak / peak_median if peak is not None and peak_median else None
            result.append((RUN, role, rank, len(ranks), span, span_median, span_ratio,
                           span_ratio is not None and span_ratio > 1.1, peak, peak_median, peak_ratio,
                           peak_ratio is not None and abs(peak_ratio - 1) > 0.1, *chosen))
    return result


def test_ranks_against_their_roles_median(attached_db):
    _insert(attached_db)
    got = attached_db.execute("""select run, role, rank_id, role_ranks, span_ns, median_span_ns, span_vs_median,
                                     is_straggler, peak_live_bytes, median_peak_live_bytes, peak_vs_median,
                                     is_memory_outlier, span_source, span_clock
                              from rank_skew order by role, rank_id""").fetchall()
    expected = _expected()
    assert any(r[7] for r in expected) and any(r[11] for r in expected)  # both flags are exercised
    assert len(got) == len(expected)
    for row, want in zip(got, expected):
        assert row[:6] == want[:6] and row[7:10] == want[7:10] and row[11:] == want[11:], (row, want)
        for value, wanted in ((row[6], want[6]), (row[10], want[10])):
            assert (value is None) == (wanted is None) and (wanted is None or abs(value - wanted) < 1e-12)
