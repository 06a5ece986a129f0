"""`rlwh check`: what ingest would do, from the files' first bytes, writing nothing."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, copy_fixture, read_db

from rlwh.cli import cli
from rlwh.ingest.check import check, format_report
from rlwh.ingest.runner import ingest

REAL = FIXTURES / "real"
ALEXNET = REAL / "ascend" / "msinsight-alexnet-level1" / "text"
KINETO = REAL / "kineto" / "hta"


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under root with its size and mtime: what 'nothing written' compares."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _broken_profile(root: Path) -> dict[str, str]:
    """A profile with one file per problem check can see; returns rel path -> what to expect."""
    expect = {}
    # An Ascend capture with no profiler_info and no rank anywhere in its path.
    nameless = root / "critic" / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    shutil.copytree(ALEXNET / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT", nameless)
    expect["critic/x_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"] = "rank is unknown"
    # operator_memory.csv with the wrong header.
    bad_csv = root / "actor" / "rank0_ascend_pt"
    shutil.copytree(ALEXNET / "rank0_ascend_pt", bad_csv)
    csv_path = bad_csv / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv"
    lines = csv_path.read_bytes().split(b"\n")
    csv_path.write_bytes(b"\n".join([lines[0].replace(b"Size(KB)", b"Bytes")] + lines[1:]))
    expect["actor/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/operator_memory.csv"] = "missing column(s) Size(KB)"
    # A file named like a PyTorch trace that is not one, and an empty one.
    (root / "rollout").mkdir()
    with gzip.open(root / "rollout" / "prof_rank-0.json.gz", "wb") as f:
        f.write(b"<html>not a trace</html>")
    expect["rollout/prof_rank-0.json.gz"] = "does not start like a PyTorch trace"
    (root / "rollout" / "prof_rank-1.pt.trace.json").write_bytes(b"")
    expect["rollout/prof_rank-1.pt.trace.json"] = "empty file"
    # A legacy nsys JSON export.
    (root / "nsys").mkdir()
    (root / "nsys" / "report1.jsonl").write_text('{"Type":59,"NvtxEvent":{"Timestamp":"1","Text":"a"}}\n')
    expect["nsys/report1.jsonl"] = "nsys export --type jsonlines"
    # A GMM dump outside every layout (no rank folder).
    dump = root / "gmm" / "step_1" / "actor" / "dump_tensor_data"
    dump.mkdir(parents=True)
    shutil.copy(next((FIXTURES / "gmm_dump").rglob("*group_list.pt")),
                dump / "NPU.npu_grouped_matmul.0.forward.kwargs.group_list.pt")
    expect["gmm/step_1/actor/dump_tensor_data/NPU.npu_grouped_matmul.0.forward.kwargs.group_list.pt"] = "no rank<k>"
    # And one good trace, so the profile is not empty.
    shutil.copy(KINETO / "timeline_analysis" / "sampled_rank-0.json.gz", root / "rollout" / "trace.json.gz")
    return expect


@pytest.mark.slow
def test_real_fixtures_check_clean_and_write_nothing(tmp_path):
    root = copy_fixture("real", tmp_path)
    before = _tree(tmp_path)
    report = check(root)
    assert _tree(tmp_path) == before
    assert report.failing == 0
    notes = {p.path: p.message for p in report.problems}
    # The single-process traces and the loose trace_view.json are read as rank 0, and check says so.
    for rel in ("kineto/hta/distributed_info_unavailable/distributed_info_not_found.json.gz",
                "kineto/kineto-tb-samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
                "kineto/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                "ascend/msprof-analyze-timeline/trace_view.json"):
        assert "rank 0" in notes[rel]
    assert report.kinds()["torch_trace"] == 11
    roles = {row["role"]: row for row in report.roles()}
    assert roles["text"]["ranks"] == {0, 1} and len(roles["text"]["captures"]) == 2
    # distributedInfo.rank read from the head where the path names none.
    assert roles["control"]["ranks"] == {3}
    text = format_report(report)
    assert "kernel_details.csv" in text or "per-kernel" in text
    assert "nothing was written" in text


@pytest.mark.slow
def test_every_problem_is_named_and_ingest_agrees(tmp_path, config):
    root = tmp_path / "profile"
    expect = _broken_profile(root)
    report = check(root)
    # The nameless capture fails every file of it that ingest would read, for the same reason.
    for f in report.loadable:
        if f.capture == "critic/x_ascend_pt":
            expect[f.rel_path] = "rank is unknown"
    assert len(expect) > 7
    failing = {p.path: p.message for p in report.problems if p.fails}
    assert set(failing) == set(expect)
    for rel, why in expect.items():
        assert why in failing[rel], (rel, failing[rel])
    assert report.failing == len(expect)
    # What check says would fail is exactly what ingest marks failed.
    ingest(root, config)
    con = read_db(config)
    failed = {r[0] for r in con.execute("select path from sources where status = 'failed'").fetchall()}
    assert failed == set(expect)


def test_cli_check_exit_status_and_nothing_written(tmp_path):
    root = tmp_path / "profile"
    _broken_profile(root)
    before = _tree(tmp_path)
    env = {"RLWH_DB": str(tmp_path / "wh.duckdb")}
    result = CliRunner().invoke(cli, ["check", str(root)], env=env)
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.output and "rollout/prof_rank-0.json.gz" in result.output
    assert _tree(tmp_path) == before  # no warehouse, no parts, nothing

    good = tmp_path / "good"
    good.mkdir()
    shutil.copy(KINETO / "trace_filter" / "sampled_rank-1.json.gz", good / "sampled_rank-1.json.gz")
    result = CliRunner().invoke(cli, ["check", str(good)], env=env)
    assert result.exit_code == 0, result.output
    assert "1 roles x 1 ranks x 1 captures x 0 steps" in result.output

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no profiles here")
    result = CliRunner().invoke(cli, ["check", str(empty)], env=env)
    assert result.exit_code == 6, result.output
    assert "notes.txt" in result.output


def test_missing_profiler_info_is_a_note_and_the_rank_comes_from_the_path(tmp_path):
    capture = tmp_path / "run" / "actor" / "rank_5" / "host_1_20250109150000123_ascend_ms"
    shutil.copytree(ALEXNET / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT", capture / "ASCEND_PROFILER_OUTPUT")
    report = check(tmp_path / "run")
    assert report.failing == 0
    [note] = [p for p in report.problems if "profiler_info" in p.message]
    assert note.path == "actor/rank_5/host_1_20250109150000123_ascend_ms" and not note.fails
    [row] = report.roles()
    assert (row["role"], row["ranks"]) == ("actor", {5})


def test_a_trace_whose_header_outgrows_the_head_is_still_a_trace(tmp_path):
    """A 64-GPU host's deviceProperties can fill the first 64 KiB before traceEvents."""
    root = tmp_path / "run"
    root.mkdir()
    devices = [{"id": i, "name": "GPU " + "x" * 2000} for i in range(64)]
    trace = {"schemaVersion": 1, "deviceProperties": devices, "distributedInfo": {"rank": 9, "world_size": 64},
             "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.0,
                              "dur": 2.0}]}
    (root / "anything.json").write_text(json.dumps(trace))
    report = check(root)
    assert report.kinds() == {"torch_trace": 1} and report.failing == 0
    assert os.path.getsize(root / "anything.json") > 65536
