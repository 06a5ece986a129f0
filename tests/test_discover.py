"""Discovery: what each file is, its role, rank and capture, and survival of odd trees."""

from __future__ import annotations

import os

from conftest import copy_fixture

from rlwh.discover import discover


def test_classifies_every_fixture_format(tmp_path):
    root = copy_fixture("rl-insight-samples", tmp_path)
    found = discover(root)
    kinds = {}
    for f in found.files:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    assert kinds == {"ascend_info": 5, "ascend_memory_csv": 1, "ascend_trace": 5, "torch_trace": 6,
                     "nvtx_jsonl": 6, "gmm_group_list": 3, "ignored": 9}
    assert found.warnings == []
    ignored = {f.rel_path: f.reason for f in found.files if f.ignored}
    assert ignored["verl_data/good_minimal_verl.log"] == "a log file"
    assert ignored["summary_event_data/summary_event_dataframe_sample.json"].startswith("unknown file")
    assert "profile dir" not in ignored["memory_data/20260526_085155_ascend_pt/profiler_metadata.json"]
    mstx = [f for f in found.files if f.kind == "ascend_trace" and "mstx_profile" in f.rel_path]
    assert sorted(f.role for f in mstx) == ["actor_compute_log_prob", "actor_update",
                                            "agent_loop_rollout_replica_0", "ref_compute_log_prob"]
    assert {f.rank_id for f in mstx} == {0}
    torch = [f for f in found.files if f.kind == "torch_trace"]
    assert {f.role for f in torch} == {"actor_update", "actor_compute_log_prob", "agent_loop_rollout_replica_0"}


def test_unknown_files_are_ignored_and_loops_warn(tmp_path):
    root = tmp_path / "run"
    (root / "role_a").mkdir(parents=True)
    (root / "role_a" / "notes.txt").write_text("hello")
    (root / "role_a" / "loop").symlink_to(root)
    (root / "dangling").symlink_to(tmp_path / "missing")
    found = discover(root)
    assert [(f.kind, f.rel_path) for f in found.files] == [("ignored", "role_a/notes.txt")]
    assert any("symlink loop" in w for w in found.warnings)


def test_rank_from_path_when_no_profiler_info(tmp_path):
    rank_dir = tmp_path / "run" / "actor_update" / "rank3" / "20260101_000000_ascend_pt"
    (rank_dir / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (rank_dir / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv").write_text("Name,Size(KB),Allocation Time(us)\n")
    [f] = discover(tmp_path / "run").files
    # The rank folder between the role folder and the capture is no role.
    assert (f.role, f.rank_id, f.capture, f.problem) == (
        "actor_update", 3, "actor_update/rank3/20260101_000000_ascend_pt", None)
    # Local time in the name, and no profiler_info to say which zone: not a guess.
    assert f.capture_started_ns is None


def test_missing_rank_is_a_problem_not_a_guess(tmp_path):
    rank_dir = tmp_path / "run" / "critic" / "x_ascend_pt"
    (rank_dir / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text("[]")
    [f] = discover(tmp_path / "run").files
    assert f.rank_id is None and "rank is unknown" in f.problem


def test_unreadable_folder_warns(tmp_path):
    root = tmp_path / "run"
    (root / "locked").mkdir(parents=True)
    (root / "locked" / "prof_rank-0.pt.trace.json").write_text("{}")
    os.chmod(root / "locked", 0)
    try:
        found = discover(root)
    finally:
        os.chmod(root / "locked", 0o755)
    if os.geteuid() != 0:  # root reads it anyway; then the file is simply found
        assert any("cannot read" in w for w in found.warnings)
    else:
        assert [f.kind for f in found.files] == ["torch_trace"]
