"""rank_skew on step_times: every rank of an Ascend job writes step_trace_time.csv, even the
ranks that keep nothing else, so all of them are compared."""

from __future__ import annotations

import csv
from decimal import Decimal

import duckdb
import pytest
from conftest import copy_fixture

from rlwh.config import Config
from rlwh.ingest.runner import ingest


def _stage_ns(path) -> int:
    """Sum of the Stage column (µs) of a step_trace_time.csv, as exact ns."""
    with open(path, newline="", encoding="utf-8") as handle:
        return sum(int(Decimal(row["Stage"].strip()) * 1000) for row in csv.DictReader(handle))


@pytest.mark.slow
def test_ranks_with_only_step_times_are_compared(tmp_path):
    root = copy_fixture("real/ascend/msinsight-alexnet-level1/text", tmp_path)
    # Rank 1 kept only its step times (and profiler_info), as ranks 1 and 3 of a real run did.
    for name in ("trace_view.json", "operator_memory.csv", "memory_record.csv"):
        (root / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / name).unlink()
    db = tmp_path / "w.duckdb"
    ingest(root, Config(db_path=db, workers=1))
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("select rank_id, span_source, span_clock, span_ns from rank_skew order by rank_id").fetchall()
    expected = [_stage_ns(root / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
                for r in (0, 1)]
    assert rows == [(0, "step_times", None, expected[0]), (1, "step_times", None, expected[1])]
    straggler = con.execute("select rank_id from rank_skew where is_straggler").fetchall()
    slower = max((0, 1), key=lambda r: expected[r])
    assert straggler == ([(slower,)] if max(expected) > 1.1 * min(expected) else [])
