"""A run folder whose own name ends in _ascend_pt is no capture: the rank dirs below it are
(issue 40 item 6). Built here from a real rank dir."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
from click.testing import CliRunner

from rlwh.cli import cli
from rlwh.ingest.runner import ingest

RANK = Path(__file__).resolve().parent / "data/rl-insight-samples/memory_data/20260526_085155_ascend_pt"


def test_rank_dirs_under_a_run_named_like_a_capture_load(tmp_path, config):
    run = tmp_path / "grpo_ascend_pt"
    for rank in (0, 1):
        dest = run / "actor" / f"rank{rank}_ascend_pt"
        shutil.copytree(RANK, dest)
        info = dest / "profiler_info_0.json"
        if rank:
            data = json.loads(info.read_text(encoding="utf-8"))
            info.unlink()
            (dest / f"profiler_info_{rank}.json").write_text(json.dumps(data), encoding="utf-8")
    (run / "logs").mkdir()  # a run folder may hold logs of its own
    (run / "logs" / "notes.txt").write_text("not a profile\n", encoding="utf-8")
    summary = ingest(run, config)
    assert summary.failed == 0
    con = duckdb.connect(str(config.db_path), read_only=True)
    try:
        keys = con.execute("select distinct role, rank_id, capture from memory_records order by 2").fetchall()
    finally:
        con.close()
    assert keys == [("actor", 0, "actor/rank0_ascend_pt"), ("actor", 1, "actor/rank1_ascend_pt")]
    result = CliRunner().invoke(cli, ["check", str(run)])
    assert result.exit_code == 0, result.output
    assert "rank is unknown" not in result.output
