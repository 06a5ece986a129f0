"""One clock per axis: NVTX rows carry their clock, role_timeline says it, and rank_skew
compares like with like (one kind of span, one clock) by a rule that holds with 2 ranks."""

from __future__ import annotations

import shutil

import pytest
from conftest import FIXTURES, SAMPLES, read_db

from rlwh.ingest.runner import ingest
from rlwh.warehouse import derive

REAL = FIXTURES / "real"
ALEXNET = REAL / "ascend" / "msinsight-alexnet-level1" / "text"


def test_nvtx_on_the_session_clock_says_so(tmp_path, config):
    shutil.copytree(SAMPLES / "nvtx_data", tmp_path / "run")
    assert ingest(tmp_path / "run", config).failed == 0
    con = read_db(config)
    assert con.execute("select distinct clock from ranges").fetchall() == [("nsys_session",)]
    assert con.execute("select distinct clock from role_timeline").fetchall() == [("nsys_session",)]
    # No session-clock time poses as an epoch capture start.
    assert con.execute("select count(*) from ranks where capture_started_ns is not null").fetchone()[0] == 0
    skew = con.execute("select distinct span_source, span_clock from rank_skew").fetchall()
    # Its ranges are phases of the exports' role (their folder): the role's span is what they cover.
    assert skew == [("window:nvtx", "nsys_session")]


@pytest.mark.slow
def test_an_ascend_window_is_never_added_to_a_torch_window(tmp_path, config):
    """Rank 0 of the role has an Ascend capture and a PyTorch trace; rank 1 only an Ascend one."""
    role = tmp_path / "run" / "actor"
    shutil.copytree(ALEXNET / "rank0_ascend_pt", role / "rank0_ascend_pt")
    shutil.copytree(ALEXNET / "rank1_ascend_pt", role / "rank1_ascend_pt")
    shutil.copy(REAL / "kineto" / "hta" / "timeline_analysis" / "sampled_rank-0.json.gz", role / "prof_rank-0.json.gz")
    for rank in (0, 1):  # without step times the ranks are compared on their windows
        (role / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").unlink()
    assert ingest(tmp_path / "run", config).failed == 0
    con = read_db(config)
    ascend = dict(con.execute("select rank_id, dur_ns from role_timeline where capture like '%_ascend_pt'").fetchall())
    assert con.execute("select count(*) from role_timeline where rank_id = 0").fetchone()[0] == 2
    rows = con.execute("""select rank_id, span_ns, span_source, is_straggler, straggler_rule from rank_skew
                          where role = 'actor' order by rank_id""").fetchall()
    # The ranks ran allreduces, so the straggler is the one the other waited for (issue 22):
    # rank 1 arrived late at the first one.
    assert rows == [(0, ascend[0], "window:ascend", False, "collectives"),
                    (1, ascend[1], "window:ascend", True, "collectives")]


def _range(con, rank: int, dur: int, clock: str = "epoch", role: str = "gen", start: int = 10**18) -> None:
    con.execute(
        """insert into ranges (run, role, rank_id, capture, source_id, source, domain, name, start_ns, end_ns, clock)
           values ('r', ?, ?, ?, 1, 'nvtx', 'default', ?, ?, ?, ?)""",
        [role, rank, f"w{rank}.jsonl", role, start, start + dur, clock],
    )


def _skew(con, role: str = "gen") -> list[tuple]:
    return con.execute(
        """select rank_id, span_ns, median_span_ns, is_straggler, peak_live_bytes, is_memory_outlier
           from rank_skew where role = ? order by rank_id""", [role]).fetchall()


@pytest.mark.parametrize("spans, stragglers", [
    ((100, 130), {1}),  # the slower of 2 ranks, never both
    ((130, 100), {0}),
    ((100, 105), set()),  # within 10%: nothing
    ((100,), set()),  # one rank is its own reference
    ((100, 100, 100, 150), {3}),
    ((100, 200, 200), set()),  # the median is 200: the fast rank is no straggler
])
def test_straggler_rule(empty_db, spans, stragglers):
    for rank, dur in enumerate(spans):
        _range(empty_db, rank, dur)
    rows = _skew(empty_db)
    assert {r[0] for r in rows if r[3]} == stragglers
    reference = sorted(spans)[(len(spans) - 1) // 2]  # the lower middle value
    assert {r[2] for r in rows} == {reference}


def test_memory_outlier_rule_with_two_ranks(attached_db):
    for rank, size in ((0, 1000), (1, 1300)):
        attached_db.execute(
            """insert into memory_records (run, role, rank_id, capture, source_id, source_row, name, size_bytes,
                 alloc_ns, device) values ('r', 'gen', ?, ?, 1, 1, 'aten::empty', ?, 10, 'NPU:0')""",
            [rank, f"c{rank}", size])
    derive.refresh_all(attached_db)
    rows = _skew(attached_db)
    assert [(r[0], r[4], r[5]) for r in rows] == [(0, 1000, False), (1, 1300, True)]


def test_spans_of_two_clocks_are_never_compared(empty_db):
    _range(empty_db, 0, 100, clock="nsys_session", start=6 * 10**15)
    _range(empty_db, 1, 1000)
    _range(empty_db, 2, 1100)
    rows = _skew(empty_db)
    # The epoch clock has the most ranks; rank 0's session-clock span is not compared at all.
    assert [(r[0], r[1], r[3]) for r in rows] == [(0, None, False), (1, 1000, False), (2, 1100, False)]
    clocks = empty_db.execute("select distinct span_clock from rank_skew").fetchall()
    assert clocks == [("epoch",)]
