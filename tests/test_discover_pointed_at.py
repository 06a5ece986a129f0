"""A user may point rlwh at the run, a role, a rank dir or its ASCEND_PROFILER_OUTPUT (the
folder the profiler names): each loads the capture's files with the same role, rank and
capture (issue 41 item 1). Expectations come from the layout the test builds and from the
capture's own profiler_info_<rank>.json."""

from __future__ import annotations

import duckdb
import pytest
from conftest import copy_fixture

from rlwh.ingest.check import check
from rlwh.ingest.runner import ingest

RANK_DIR = "real/ascend/msinsight-alexnet-level1/text/rank1_ascend_pt"


@pytest.fixture
def run(tmp_path):
    role = tmp_path / "grpo" / "actor_update"
    role.mkdir(parents=True)
    copy_fixture(RANK_DIR, role)
    return tmp_path / "grpo"


def _rank(capture) -> int:
    (info,) = capture.glob("profiler_info_*.json")
    return int(info.stem.rsplit("_", 1)[1])


@pytest.mark.parametrize("where", ["run", "role", "rank dir", "ASCEND_PROFILER_OUTPUT"])
def test_every_folder_a_user_points_at_loads_the_same(run, config, tmp_path, where):
    capture = run / "actor_update" / "rank1_ascend_pt"
    target = {"run": run, "role": run / "actor_update", "rank dir": capture,
              "ASCEND_PROFILER_OUTPUT": capture / "ASCEND_PROFILER_OUTPUT"}[where]
    output_files = sorted(p.name for p in (capture / "ASCEND_PROFILER_OUTPUT").iterdir())
    assert {"operator_memory.csv", "memory_record.csv", "step_trace_time.csv"} <= set(output_files)
    summary = ingest(target, config, run="night")
    assert summary.failed == 0
    with duckdb.connect(str(config.db_path), read_only=True) as con:  # one open for both reads (~25 ms each)
        keys = set(con.execute("select kind, role, rank_id, capture from sources where status <> 'ignored'")
                   .fetchall())
        peaks = con.execute("select count(*) from memory_peak").fetchone()[0]
    roles = {role for _, role, _, _ in keys}
    ranks = {rank for _, _, rank, _ in keys}
    captures = {c for _, _, _, c in keys}
    # From the run or the role folder, the role folder names the role; from inside the
    # capture, the nearest folder above it that is no rank or capture folder does.
    assert roles == {"actor_update"} and ranks == {_rank(capture)}
    assert captures == ({"actor_update/rank1_ascend_pt"} if where == "run" else {"rank1_ascend_pt"})
    loaded = {k for k, *_ in keys}
    assert {"ascend_memory_csv", "ascend_memory_record_csv", "ascend_step_trace_csv", "ascend_trace"} <= loaded
    assert peaks > 0
    if where == "ASCEND_PROFILER_OUTPUT":
        assert any("part of that capture" in w for w in summary.warnings)
    report = check(target)
    assert {f.role for f in report.files if not f.ignored} == {"actor_update"}
    assert {f.rank_id for f in report.files if not f.ignored} == {_rank(capture)}
