"""role_timeline: role spans from NVTX / MSTX ranges and whole capture windows, against the
documented rule replayed in Python over the inserted rows."""

from __future__ import annotations

from collections import defaultdict

from conftest import insert_rows

RUN = "r"
RANGES = [  # (role, rank_id, capture, step, source, domain, name, start_ns, end_ns, clock)
    ("actor", 0, "nsys/worker0", None, "nvtx", "default", "actor", 100, 900, "epoch"),
    ("rollout", 0, "nsys/worker0", None, "nvtx", "verl", "rollout", 950, 1_500, "epoch"),
    ("ref", 1, "nsys/worker1", None, "nvtx", "default", "ref", 5, 50, "nsys_session"),
    ("actor", 2, "mstx/rank2", 4, "mstx", "default", "actor", 2_000, 2_400, "epoch"),  # named after its role
    ("actor", 2, "mstx/rank2", 4, "mstx", "default", "forward", 2_050, 2_100, "epoch"),  # not a role span
    ("actor", 3, "other/rank3", 4, "mstx", "default", "forward", 10, 99_999, "epoch"),  # neither span nor window
    ("critic", 4, "prof/rank4", 7, "profiler", "default", "window", 3_000, 3_500, "epoch"),
    ("critic", 6, "quiet/rank6", 7, "profiler", "default", "window", 3_100, 3_300, "epoch"),  # recorded nothing
    ("critic", 4, "prof/rank4", 7, "profiler", "default", "window", 3_600, 3_800, "epoch"),
    ("critic", 5, "events/rank5", 7, "torch_annotation", "default", "ProfilerStep#1", 4_000, 4_900, "epoch"),
    ("critic", 5, "events/rank5", 7, "torch_annotation", "default", "late", 9_000, 9_999, "nsys_session"),
]
OPS = [  # (role, rank_id, capture, step, ts_ns, dur_ns)
    ("actor", 0, "nsys/worker0", None, 10, 5_000),  # a ranged capture has no window
    ("actor", 2, "mstx/rank2", 4, 1_990, 10),
    ("actor", 3, "other/rank3", 4, 500, 20),
    ("actor", 3, "other/rank3", 4, 700, None),
    ("critic", 4, "prof/rank4", 7, 2_000, 5_000),  # outside the declared window: the events win
    ("critic", 5, "events/rank5", 7, 4_100, 1_000),
]
MEMORY = [("critic", 5, "events/rank5", 7, 3_900, None), ("actor", 3, "other/rank3", 4, 600, 800)]
TORCH = [("critic", 5, "events/rank5", 7, 5_500)]


def _expected() -> list[tuple]:
    spans = [(role, rank, capture, source, name, domain, start, end, clock or "epoch", step)
             for role, rank, capture, step, source, domain, name, start, end, clock in RANGES
             if source == "nvtx" or (source == "mstx" and name == role)]
    ranged = {(rank, capture) for _, rank, capture, *_ in spans}
    profiler, recorded = defaultdict(list), defaultdict(list)
    for role, rank, capture, step, source, _d, _n, start, end, clock in RANGES:
        if clock == "epoch" and source == "profiler":
            profiler[(role, rank, capture, step)].append((start, end))
        elif clock == "epoch" and source not in ("nvtx", "mstx"):
            recorded[(role, rank, capture, step)].append((start, end))
    for role, rank, capture, step, ts, dur in OPS:
        recorded[(role, rank, capture, step)].append((ts, ts + (dur or 0)))
    for role, rank, capture, step, alloc, release in MEMORY:
        recorded[(role, rank, capture, step)].append((alloc, release if release is not None else alloc))
    for role, rank, capture, step, ts in TORCH:
        recorded[(role, rank, capture, step)].append((ts, ts))
    # The span is what the events cover; the declared window only where nothing was recorded.
    with_events = {(rank, capture) for _, rank, capture, _ in recorded}
    windows = {**{k: v for k, v in profiler.items() if (k[1], k[2]) not in with_events}, **recorded}
    for (role, rank, capture, step), found in windows.items():
        if (rank, capture) not in ranged:
            spans.append((role, rank, capture, "window", role, "default", min(s for s, _ in found),
                          max(e for _, e in found), "epoch", step))
    return sorted((RUN, role, rank, capture, source, name, domain, start, end, end - start, start / 1e6, end / 1e6,
                   (end - start) / 1e6, clock, step)
                  for role, rank, capture, source, name, domain, start, end, clock, step in spans)


def test_spans_and_windows(attached_db):
    insert_rows(attached_db, "ranges", ["role", "rank_id", "capture", "step", "source", "domain", "name", "start_ns",
                                        "end_ns", "clock"], RANGES, run=RUN, source_id=1)
    insert_rows(attached_db, "cpu_ops", ["role", "rank_id", "capture", "step", "ts_ns", "dur_ns"], OPS, run=RUN,
                source_id=2, name="aten::mm")
    insert_rows(attached_db, "memory_records", ["role", "rank_id", "capture", "step", "alloc_ns", "release_ns"],
                MEMORY, run=RUN, source_id=3, source_row=1, name="aten::empty", size_bytes=8, device="NPU:0")
    insert_rows(attached_db, "torch_memory_events", ["role", "rank_id", "capture", "step", "ts_ns"], TORCH, run=RUN,
                source_id=4, event_index=0, bytes=8, device_type=1, device_id=0)
    got = attached_db.execute("""select run, role, rank_id, capture, source, name, domain, start_ns, end_ns, dur_ns,
                                     start_time_ms, end_time_ms, duration_ms, clock, step
                              from role_timeline order by all""").fetchall()
    expected = _expected()
    assert {r[4] for r in expected} == {"nvtx", "mstx", "window"}
    assert got == expected
