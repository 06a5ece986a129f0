"""step_metrics: a VeRL log's step figures beside what the profile measured for that step.

The expected rows are computed here in Python from the input rows, not with the view's SQL.
"""

from __future__ import annotations

from datetime import datetime

from conftest import insert_rows

S = 1_000_000_000
T0 = 1_780_000_000 * S
NOW = datetime(2026, 12, 1)


def _source(con, source_id, kind, path, capture, step=None, rank_id=None, mtime=NOW, role=None):
    insert_rows(con, "sources", ["source_id", "kind", "path", "capture", "step", "rank_id", "mtime", "role", "rows"],
                [(source_id, kind, path, capture, step, rank_id, mtime, role, 1)], run="r", status="ok",
                ingested_at=NOW)


def _log(con, source_id, capture, mtime, records):
    """records: (line, step, {metric: value})."""
    _source(con, source_id, "verl_log", capture, capture, mtime=mtime)
    rows = [(line, step, metric, value) for line, step, figures in records for metric, value in figures.items()]
    insert_rows(con, "train_metrics", ["line", "step", "metric", "value"], rows, run="r", role=None, rank_id=None,
                capture=capture, source_id=source_id)


def _scenario(con):
    # A first log ran steps 1..3 and was resumed from step 2 by a second log, written later.
    _log(con, 1, "wandb/run-a/files/output.log", datetime(2026, 11, 1),
         [(10, 1, {"timing_s/step": 50.0, "timing_s/gen": 20.0, "perf/throughput": 100.0}),
          (11, 2, {"timing_s/step": 51.0, "timing_s/gen": 21.0}),
          (12, 3, {"timing_s/step": 52.0})])
    _log(con, 2, "wandb/run-b/files/output.log", datetime(2026, 11, 2),
         [(5, 2, {"timing_s/step": 60.0, "timing_s/gen": 30.0, "timing_s/update_actor": 12.0,
                  "perf/max_memory_allocated_gb": 40.5, "response_length/mean": 512.0}),
          (6, 3, {"timing_s/step": 70.0, "timing_s/update_actor": 11.0}),
          (7, 3, {"timing_s/update_actor": 13.0, "val/score": 0.5})])  # step 3 printed twice
    # Step 3 was profiled: NVTX role spans on two ranks, a Kineto trace with ProfilerStep marks,
    # an Ascend capture's step_trace_time rows; step 9 is profiled but no log printed it.
    for sid, rank in ((10, 0), (11, 1)):
        cap = f"3/nvtx/worker_{rank}.jsonl"
        _source(con, sid, "nvtx_jsonl", cap, cap, step=3, rank_id=rank)
        insert_rows(con, "ranges", ["rank_id", "capture", "source_id", "name", "start_ns", "end_ns"],
                    [(rank, cap, sid, "generate_sequences", T0 + (10 + rank) * S, T0 + (40 + 2 * rank) * S),
                     (rank, cap, sid, "update_actor", T0 + (50 + rank) * S, T0 + (62 + rank) * S)],
                    run="r", role="x", source="nvtx", domain="default", clock="epoch", step=3)
    _source(con, 12, "torch_trace", "3/actor/prof_rank-0.json", "3/actor/prof_rank-0.json", step=3, rank_id=0)
    insert_rows(con, "ranges", ["name", "start_ns", "end_ns"],
                [("ProfilerStep#0", T0 + 5 * S, T0 + 7 * S), ("ProfilerStep#1", T0 + 7 * S, T0 + 10 * S)],
                run="r", role="actor", rank_id=0, capture="3/actor/prof_rank-0.json", source_id=12,
                source="torch_annotation", domain="default", clock="epoch", step=3)
    _source(con, 13, "ascend_step_trace_csv", "3/rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv",
            "3/rank1_ascend_pt", step=3, rank_id=1)
    insert_rows(con, "step_times", ["source_row", "step", "computing_ns", "communication_not_overlapped_ns", "free_ns"],
                [(1, 7, 4 * S, 1 * S, S // 2), (2, 8, 3 * S, 0, None)],
                run="r", role="rollout", rank_id=1, capture="3/rank1_ascend_pt", source_id=13)
    _source(con, 14, "torch_trace", "9/critic/t.json", "9/critic/t.json", step=9, rank_id=0)


def test_log_and_profile_side_by_side(attached_db):
    _scenario(attached_db)
    got = {r[1]: r for r in attached_db.execute("select * from step_metrics order by step").fetchall()}
    cols = [d[0] for d in attached_db.execute("select * from step_metrics limit 0").description]
    rows = {step: dict(zip(cols, row)) for step, row in got.items()}
    assert sorted(rows) == [1, 2, 3, 9]
    # Step 1: only the first log printed it.
    assert (rows[1]["log_capture"], rows[1]["logs"], rows[1]["timing_step_s"], rows[1]["throughput"]) == \
        ("wandb/run-a/files/output.log", 1, 50.0, 100.0)
    assert rows[1]["is_profiled"] is False and rows[1]["profile_window_s"] is None
    # Step 2: both logs; the one written later (run-b) wins.
    r2 = rows[2]
    assert (r2["log_capture"], r2["log_line"], r2["logs"]) == ("wandb/run-b/files/output.log", 5, 2)
    assert (r2["timing_step_s"], r2["timing_gen_s"], r2["timing_update_actor_s"], r2["max_memory_allocated_gb"],
            r2["response_length_mean"]) == (60.0, 30.0, 12.0, 40.5, 512.0)
    # Step 3: the later log's two records merge, the last print of a metric wins; the profile beside it.
    r3 = rows[3]
    assert (r3["log_line"], r3["timing_step_s"], r3["timing_update_actor_s"]) == (6, 70.0, 13.0)
    assert (r3["is_profiled"], r3["profile_captures"], r3["profile_ranks"]) == (True, 4, 2)
    spans = [(10, 40), (50, 62), (11, 42), (51, 63), (5, 10)]  # role_timeline: NVTX spans and the trace's window
    window = max(e for _, e in spans) - min(s for s, _ in spans)
    assert r3["profile_window_s"] == window
    assert r3["profile_gen_s"] == 42 - 10 and r3["profile_update_actor_s"] == 63 - 50
    assert r3["profiler_steps_s"] == (7 - 5) + (10 - 7)
    assert r3["step_trace_s"] == (4 + 1 + 0.5) + 3
    assert r3["window_over_log"] == window / 70.0
    # Step 9: profiled, printed by no log.
    r9 = rows[9]
    assert (r9["log_capture"], r9["timing_step_s"], r9["is_profiled"], r9["profile_captures"]) == (None, None, True, 1)


def test_steps_without_a_folder_step_never_match(attached_db):
    _log(attached_db, 1, "train.log", NOW, [(1, 1, {"timing_s/step": 5.0})])
    _source(attached_db, 2, "torch_trace", "actor/t.json", "actor/t.json", step=None, rank_id=0)
    insert_rows(attached_db, "ranges", ["name", "start_ns", "end_ns"], [("ProfilerStep#1", T0, T0 + S)],
                run="r", role="actor", rank_id=0, capture="actor/t.json", source_id=2, source="torch_annotation",
                domain="default", clock="epoch", step=None)
    rows = attached_db.execute("select step, is_profiled, profiler_steps_s, profile_window_s from step_metrics"
                               ).fetchall()
    assert rows == [(1, False, None, None)]
