"""Ingest of generated layouts: GMM dumps in the three real layouts, ignored files, steps."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import FIXTURES, read_db

from rlwh.ingest.runner import ingest

GMM = FIXTURES / "gmm_dump" / "step_1" / "actor_update" / "rank0" / "dump_tensor_data"
DUMP = "NPU.npu_grouped_matmul.{op}.forward.kwargs.group_list.pt"


def _dumps(folder: Path, ops=(0, 1)) -> None:
    folder.mkdir(parents=True)
    for op in ops:
        shutil.copy(GMM / DUMP.format(op=op), folder / DUMP.format(op=op))


def test_gmm_dumps_load_in_all_three_layouts(tmp_path, config):
    root = tmp_path / "run"
    _dumps(root / "verl" / "step_1" / "actor_update" / "rank0" / "dump_tensor_data")  # step first
    _dumps(root / "rl_insight" / "rank3" / "step_2" / "ref" / "dump_tensor_data")  # RL-Insight: rank first
    _dumps(root / "step1" / "rank5" / "dump_tensor_data")  # msprobe: no role folder
    summary = ingest(root, config)
    assert summary.failed == 0, [r.message for r in summary.results]
    con = read_db(config)
    keys = con.execute("""select step, role, rank_id, capture, count(distinct op_index), count(*)
                          from gmm_expert_load group by all order by rank_id""").fetchall()
    experts = 16
    assert keys == [
        (1, "actor_update", 0, "verl/step_1/actor_update/rank0", 2, 2 * experts),
        (2, "ref", 3, "rl_insight/rank3/step_2/ref", 2, 2 * experts),
        (1, None, 5, "step1/rank5", 2, 2 * experts),
    ]
    # The imbalance view keeps the msprobe rows (role NULL is a role of its own, not dropped).
    assert con.execute("select count(*) from gmm_imbalance where rank_id = 5 and role is null").fetchone()[0] == 2
    assert con.execute("select count(*) from gmm_layer_load where rank_id = 5 and role is null").fetchone()[0] \
        == 2 * experts
    sources = con.execute("select distinct role, rank_id, step from sources order by rank_id").fetchall()
    assert sources == [("actor_update", 0, 1), ("ref", 3, 2), (None, 5, 1)]


def test_files_rlwh_does_not_read_are_ignored_with_a_reason(tmp_path, config):
    root = tmp_path / "run"
    _dumps(root / "step_1" / "actor" / "rank0" / "dump_tensor_data", ops=(0,))
    (root / "step_1" / "actor" / "rank0" / "dump_tensor_data" / "NPU.npu_grouped_matmul.0.forward.output.0.pt") \
        .write_bytes(b"PK\x03\x04")
    (root / "train.log").write_text("step 1 loss 0.5\n")
    (root / "odd.bin").write_bytes(b"\x00\x01")
    first = ingest(root, config)
    assert len(first.results) == 1 and len(first.ignored) == 3  # the summary counts the files read
    con = read_db(config)
    rows = {r[0]: r[1:] for r in con.execute("select path, kind, status, rows, message from sources").fetchall()}
    assert rows["train.log"] == ("ignored", "ignored", 0, "a log file")
    assert rows["odd.bin"][:3] == ("ignored", "ignored", 0) and "unknown file" in rows["odd.bin"][3]
    output = "step_1/actor/rank0/dump_tensor_data/NPU.npu_grouped_matmul.0.forward.output.0.pt"
    assert rows[output][1] == "ignored"
    # A second ingest of the same tree changes nothing and keeps every ignored row.
    again = ingest(root, config)
    assert again.count("unchanged") == 1 and again.ignored == []
    assert read_db(config).execute("select count(*) from sources").fetchone()[0] == 4


def test_a_tree_with_only_ignored_files_writes_nothing(tmp_path, config):
    root = tmp_path / "run"
    root.mkdir()
    (root / "train.log").write_text("hello\n")
    summary = ingest(root, config)
    assert summary.results == [] and "no profiler files" in summary.warnings[0]
    assert not config.db_path.exists()


def test_a_file_without_the_rows_its_format_gives_says_so(tmp_path, config):
    root = tmp_path / "run" / "actor"
    root.mkdir(parents=True)
    (root / "prof_rank-0.json").write_text('{"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": []}')
    ingest(tmp_path / "run", config)
    status, rows, message = read_db(config).execute("select status, rows, message from sources").fetchone()
    assert (status, rows) == ("ok", 1)  # its ranks row
    assert message.startswith("actor/prof_rank-0.json: holds none of the rows a torch_trace file gives (cpu_ops")
