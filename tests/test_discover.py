"""Discovery: what each file is, its role, rank and capture, and survival of odd trees."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from conftest import copy_fixture

from rlwh.ingest.discover import discover, place, rank_in_name
from rlwh.ingest.sniff import HEAD_BYTES, classify_head, head_kind


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
    assert ignored["summary_event_data/summary_event_dataframe_sample.json"].startswith("a JSON array that is no trace")
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


# --- generated layouts for the rules -------------------------------------------------------

TRACE = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1, "dur": 1}]}


@pytest.mark.parametrize("folders, want", [
    (("actor_update", "rank0"), (0, None, "actor_update")),
    (("actor_update", "rank_3"), (3, None, "actor_update")),
    (("actor_update", "rank-12"), (12, None, "actor_update")),
    (("save", "7", "critic"), (None, 7, "critic")),  # VeRL: <save_path>/<step>/<role>/
    (("step_2", "rollout", "Rank1"), (1, 2, "rollout")),
    (("step3", "rank0"), (0, 3, None)),
    (("ref", "rank0", "PROF_000001_20250109", "FRAMEWORK"), (0, None, "ref")),
    (("ranking", "stepper"), (None, None, "stepper")),  # words that merely start like rank/step
    (("20260526", "actor", "12"), (None, 12, "actor")),  # a date folder is no step (nor a role here)
])
def test_place_reads_rank_step_and_role_from_folders(folders, want):
    assert place(folders) == want


@pytest.mark.parametrize("name, rank", [
    ("prof_rank-0.json.gz", 0), ("bs_32_rank0.json.gz", 0), ("mtia_inference_rank_0.json.gz", 0),
    ("sampled_rank-1.json.gz", 1), ("rank-7.Apr_03_18_51_38.1102.pt.trace.json.gz", 7), ("rank12_ascend_pt", 12),
    ("worker0.1623143089861.pt.trace.json.gz", None), ("trace.json.gz", None), ("cranky3.json", None),
])
def test_rank_in_a_file_or_folder_name(name, rank):
    assert rank_in_name(name) == rank


@pytest.mark.parametrize("head, complete, kind", [
    (json.dumps(TRACE).encode(), True, "chrome_object"),
    (b'{"traceEvents": [{"ph": "X"}], "distributedInfo": {"rank": 1}}', True, "chrome_object"),  # traceEvents first
    (b'  \n{"deviceProperties": [' + b'{"id": 0}, ' * 100, False, "chrome_object"),  # cut before traceEvents
    (b'{"deviceProperties": [{"id": 0}]}', True, None),  # a whole file without traceEvents is no trace
    # Any first key, as long as traceEvents is in view: a newer Kineto may lead with a key
    # unknown today, and a real trace must never be ignored for it.
    (b'{"hostName": "node-7", "traceEvents": [{"ph": "X"}]}', True, "chrome_object"),
    (b'{"otherData": {"version": "x"}, "traceEvents": [{"ph": "X"}]}', True, "chrome_object"),  # Chrome's own keys
    (b'{"metadata": {"a": 1}' + b" " * 70000, False, None),  # a Chrome key alone, no traceEvents in view
    (b'[{"ph": "X", "name": "aten::add", "ts": "1.0"}]', True, "chrome_array"),
    (b'{"id":38,"table":"StringIds","value":"x"}\n{"table":"ANALYSIS_DETAILS"}\n', True, "nsys_jsonl"),
    (b'{"Type":59,"NvtxEvent":{"Timestamp":"1"}}\n', True, "nsys_legacy_json"),
    (b"Name,Size(KB)\n", True, None),
    (b"", True, None),
])
def test_classify_head(head, complete, kind):
    assert classify_head(head, complete) == kind


def test_head_kind_gunzips_by_magic_and_reads_only_the_head(tmp_path):
    big = dict(TRACE, deviceProperties=[{"id": i, "pad": "x" * 1000} for i in range(200)])
    path = tmp_path / "whatever.bin"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"schemaVersion": 1, "deviceProperties": big["deviceProperties"],
                            "traceEvents": TRACE["traceEvents"]}))
    assert head_kind(path) == "chrome_object"
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(path.read_bytes()[:5000])  # a gzip stream cut early still shows its head
    assert head_kind(cut) == "chrome_object"
    assert len(json.dumps(big)) > HEAD_BYTES


def test_role_skips_rank_step_and_capture_folders(tmp_path):
    root = tmp_path / "run"
    for rel in ("grpo/3/actor_update/rank0/trace.json", "grpo/3/actor_update/rank1/trace.json"):
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_text(json.dumps(TRACE))
    rows = sorted((f.role, f.rank_id, f.step, f.capture) for f in discover(root).files)
    assert rows == [("actor_update", 0, 3, "grpo/3/actor_update/rank0/trace.json"),
                    ("actor_update", 1, 3, "grpo/3/actor_update/rank1/trace.json")]


def test_a_trace_with_no_rank_anywhere_is_flagged_single_process(tmp_path):
    root = tmp_path / "run"
    (root / "eval").mkdir(parents=True)
    (root / "eval" / "eager_trace.json").write_text(json.dumps(TRACE))
    (root / "top.json").write_text(json.dumps(TRACE))
    files = {f.rel_path: f for f in discover(root).files}
    assert files["eval/eager_trace.json"].single_process_rank0 and files["eval/eager_trace.json"].rank_id is None
    # At the top of the profile dir the role is the profile dir's name.
    assert files["top.json"].role == "run"


def test_every_file_of_a_capture_is_listed_with_the_captures_keys(tmp_path):
    capture = tmp_path / "run" / "actor" / "rank2" / "host_7_20260101000000000_ascend_pt"
    (capture / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (capture / "PROF_000001" / "device_2" / "data").mkdir(parents=True)
    (capture / "ASCEND_PROFILER_OUTPUT" / "l2_cache.csv").write_text("Name\n")
    (capture / "ASCEND_PROFILER_OUTPUT" / "memory_record.csv").write_text("Component\n")
    (capture / "PROF_000001" / "device_2" / "data" / "aicore.data.2.slice_0").write_bytes(b"\x00" * 8)
    (capture / "logs").mkdir()
    (capture / "logs" / "profiler.log").write_text("ok\n")
    files = discover(tmp_path / "run").files
    assert len(files) == 4
    assert {(f.role, f.rank_id, f.capture) for f in files} == {
        ("actor", 2, "actor/rank2/host_7_20260101000000000_ascend_pt")}
    reasons = {Path(f.rel_path).name: (f.kind, f.reason) for f in files}
    assert reasons["l2_cache.csv"][0] == "ignored" and "does not load" in reasons["l2_cache.csv"][1]
    assert reasons["aicore.data.2.slice_0"] == ("ignored", "unknown file: not a format rlwh reads")
    assert reasons["profiler.log"] == ("ignored", "a log file")


def test_a_capture_takes_its_device_rows_from_one_file(tmp_path):
    """trace_view.json where there is one; else kernel_details.csv, reading communication.json
    beside it (whose change is then the CSV's change); communication.json alone is never read."""
    def capture(name: str, files: tuple[str, ...]) -> None:
        output = tmp_path / "run" / f"rank{len(list((tmp_path / 'run').glob('*')))}" / name / "ASCEND_PROFILER_OUTPUT"
        output.mkdir(parents=True)
        for f in files:
            (output / f).write_text("[]" if f.endswith(".json") else "Name\n")

    (tmp_path / "run").mkdir()
    capture("a_ascend_pt", ("trace_view.json", "kernel_details.csv", "communication.json"))
    capture("b_ascend_pt", ("kernel_details.csv", "communication.json"))
    capture("c_ascend_pt", ("communication.json",))
    found = {(f.capture.split("/")[1][0], Path(f.rel_path).name): f for f in discover(tmp_path / "run").files}
    assert found["a", "trace_view.json"].kind == "ascend_trace"
    assert found["a", "kernel_details.csv"].kind == "ignored"
    assert found["a", "kernel_details.csv"].reason.startswith("read with trace_view.json beside it, for the kind")
    assert found["a", "trace_view.json"].companions == (found["a", "kernel_details.csv"].path,)
    assert found["a", "communication.json"].kind == "ascend_communication_json"
    assert found["b", "kernel_details.csv"].kind == "ascend_kernel_details_csv"
    assert found["b", "kernel_details.csv"].companions == (found["b", "communication.json"].path,)
    assert {found[c, "communication.json"].kind for c in "bc"} == {"ascend_communication_json"}
