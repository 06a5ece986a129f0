"""Two captures of the same (role, rank) are never added together (issue 41 item 2).

The real AlexNet job was profiled twice on the same two NPUs: once exported as text, once,
about half an hour later, as a db export. A folder holding both sessions under one role
holds two captures of each rank. The views that sum or compare a rank's figures count only
its latest capture and name the other; the per-capture views keep both; `rlwh check` and
`rlwh ingest` warn; `rlwh compare` of the same data finds no regression. Every expected
figure is read here from the raw files (the CSV, the SQLite exports, profiler_info)."""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from cli_runs import rlwh
from conftest import copy_fixture

from rlwh.config import Config
from rlwh.ingest.runner import ingest
from rlwh.report.summary import summarize

ALEXNET = "real/ascend/msinsight-alexnet-level1"
RANKS = (0, 1)


def _text_stage_ns(capture: Path) -> int:
    """The Stage column (µs) of a text export's step_trace_time.csv, summed, as exact ns."""
    with open(capture / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="", encoding="utf-8") as handle:
        return sum(int(Decimal(row["Stage"].strip()) * 1000) for row in csv.DictReader(handle))


def _sqlite(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _db_stage_ns(capture: Path) -> int:
    """The stage (µs) of a db export's analysis.db StepTraceTime, summed, as exact ns."""
    con = _sqlite(capture / "ASCEND_PROFILER_OUTPUT" / "analysis.db")
    try:
        return sum(int(Decimal(str(stage)) * 1000) for (stage,) in con.execute("select stage from StepTraceTime"))
    finally:
        con.close()


def _db_kernels(capture: Path, rank: int) -> int:
    """The db export's compute tasks: TASK rows with a COMPUTE_TASK_INFO."""
    con = _sqlite(capture / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db")
    try:
        return con.execute("select count(*) from TASK join COMPUTE_TASK_INFO using (globalTaskId)").fetchone()[0]
    finally:
        con.close()


def _started(capture: Path, rank: int) -> int:
    """The profiler's own start on the host's monotonic clock (profiler_info start_info)."""
    info = json.loads((capture / f"profiler_info_{rank}.json").read_text(encoding="utf-8"))
    return int(info["start_info"]["start_monotonic"])


def _two_sessions(tmp_path: Path, name: str, kinds=("text", "db")) -> Path:
    """<name>/actor/rank<r>_<kind>_ascend_pt: each exported session of each rank, one role."""
    source = copy_fixture(ALEXNET, tmp_path / f"{name}-source")
    root = tmp_path / name
    for kind in kinds:
        for rank in RANKS:
            shutil.copytree(source / kind / f"rank{rank}_ascend_pt", root / "actor" / f"rank{rank}_{kind}_ascend_pt")
    return root


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """(profile, warehouse connection) of the text and db sessions ingested as one run."""
    tmp = tmp_path_factory.mktemp("repeated")
    root = _two_sessions(tmp, "mixed")
    db = tmp / "w.duckdb"
    ingest(root, Config(db_path=db, workers=1))
    con = duckdb.connect(str(db), read_only=True)
    yield root, con, Config(db_path=db, workers=1)
    con.close()


def _capture(root: Path, rank: int, kind: str) -> Path:
    return root / "actor" / f"rank{rank}_{kind}_ascend_pt"


def test_the_db_session_is_the_later_one(mixed):
    """What the expectations below rest on, from the files alone: on the same host, the db
    export's session started after the text export's."""
    root, _, _ = mixed
    for rank in RANKS:
        assert _started(_capture(root, rank, "db"), rank) > _started(_capture(root, rank, "text"), rank)


@pytest.mark.parametrize("rank", RANKS)
def test_rank_skew_counts_the_latest_capture_only(mixed, rank):
    root, con, _ = mixed
    span, left_out = con.execute("select span_ns, left_out_captures from rank_skew where rank_id = ?",
                                 [rank]).fetchone()
    db_stage, text_stage = _db_stage_ns(_capture(root, rank, "db")), _text_stage_ns(_capture(root, rank, "text"))
    assert span == db_stage and span != db_stage + text_stage
    assert left_out == f"actor/rank{rank}_text_ascend_pt"


def test_per_capture_rows_keep_both_sessions(mixed):
    """The base tables and the per-capture views keep every capture apart."""
    root, con, _ = mixed
    steps = con.execute("select rank_id, capture, stage_ns from step_times order by all").fetchall()
    assert steps == sorted(
        [(r, f"actor/rank{r}_db_ascend_pt", _db_stage_ns(_capture(root, r, "db"))) for r in RANKS]
        + [(r, f"actor/rank{r}_text_ascend_pt", _text_stage_ns(_capture(root, r, "text"))) for r in RANKS])
    captures = con.execute("select distinct rank_id, capture from device_time order by all").fetchall()
    assert captures == sorted((r, f"actor/rank{r}_{k}_ascend_pt") for r in RANKS for k in ("db", "text"))


@pytest.mark.parametrize("rank", RANKS)
def test_kernel_stats_and_collectives_read_one_session(mixed, rank):
    root, con, _ = mixed
    kernels, = con.execute("select sum(count) from kernel_stats where rank_id = ? and kind = 'compute'",
                           [rank]).fetchone()
    assert kernels == _db_kernels(_capture(root, rank, "db"), rank)
    # Each of the rank's collectives of the counted session is one instance of its group, matched
    # with the other rank's; none is matched with the other session's.
    path = _capture(root, rank, "db") / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"
    sqlite = _sqlite(path)
    try:
        ops, = sqlite.execute("select count(*) from COMMUNICATION_OP").fetchone()
    finally:
        sqlite.close()
    instances, mismatched = con.execute(
        "select count(*), count(*) filter (where mismatched) from collectives where rank_id = ?", [rank]).fetchone()
    assert (instances, mismatched) == (ops, 0)
    collectives, = con.execute("select collectives from stragglers").fetchone()
    assert collectives == ops


def test_summary_says_which_capture_it_counts(mixed):
    root, _, config = mixed
    summary = summarize(config, "mixed")
    for rank in RANKS:
        assert (f"role actor rank {rank}: actor/rank{rank}_text_ascend_pt is left out, a repeat of "
                f"actor/rank{rank}_db_ascend_pt") in summary.header
    per_rank = next(s.result for s in summary.sections if s.title.startswith("Per role and rank"))
    times = {row[1]: row[per_rank.columns.index("time_in_role_ms")] for row in per_rank.rows}
    assert times == {r: round(_db_stage_ns(_capture(root, r, "db")) / 1e6, 3) for r in RANKS}
    device = next(s.result for s in summary.sections if s.title.startswith("Where the device time went"))
    windows = {row[1]: row[device.columns.index("steps")] for row in device.rows}
    assert windows == {0: 1, 1: 1}  # one step of one session, not the same step of two


def _warning(rank: int) -> str:
    return (f"role actor rank {rank} holds 2 ascend captures: actor/rank{rank}_db_ascend_pt, "
            f"actor/rank{rank}_text_ascend_pt")


@pytest.mark.slow
def test_check_ingest_and_compare_on_two_sessions(tmp_path):
    root = _two_sessions(tmp_path, "mixed")
    checked = rlwh(["check", str(root)], tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for rank in RANKS:
        assert f"warning: {_warning(rank)}" in checked.stdout
    db = str(tmp_path / "w.duckdb")
    done = rlwh(["ingest", str(root), "--db", db, "-q"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in RANKS:
        assert f"warning: {_warning(rank)}" in done.stderr
    # The same folder again, under another run name: the same data, no regression.
    again = rlwh(["ingest", str(root), "--db", db, "--run", "mixed-again", "-q"], tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    same = rlwh(["compare", "mixed", "mixed-again", "--db", db], tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "0 regression(s)" in same.stdout
    # The db session alone against the folder holding both: like with like, the same figures.
    alone = _two_sessions(tmp_path, "db-alone", kinds=("db",))
    loaded = rlwh(["ingest", str(alone), "--db", db, "-q"], tmp_path)
    assert loaded.returncode == 0 and "warning" not in loaded.stderr, loaded.stdout + loaded.stderr
    compared = rlwh(["compare", "db-alone", "mixed", "--db", db, "--format", "csv"], tmp_path)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    rows = list(csv.DictReader(compared.stdout.splitlines()))
    assert [(r["rank_id"], r["time_change_pct"], r["peak_change_pct"], r["regression"]) for r in rows] \
        == [("0", "0.0", "0.0", ""), ("1", "0.0", "0.0", "")]
    for rank in RANKS:
        assert (f"note: run mixed role actor rank {rank}: compared on its latest capture, leaving out "
                f"actor/rank{rank}_text_ascend_pt") in compared.stderr


@pytest.mark.slow
def test_captures_of_two_steps_are_parts_of_the_run(tmp_path):
    """VeRL's step folders: the same rank captured at steps 1 and 2 is two parts of one run,
    both counted (no warning, nothing left out)."""
    source = copy_fixture(ALEXNET, tmp_path / "source")
    root = tmp_path / "steps"
    for step in (1, 2):
        for rank in RANKS:
            shutil.copytree(source / "text" / f"rank{rank}_ascend_pt", root / f"step_{step}" / "actor"
                            / f"rank{rank}_ascend_pt")
    checked = rlwh(["check", str(root)], tmp_path)
    assert "warning" not in checked.stdout, checked.stdout
    db = tmp_path / "w.duckdb"
    ingest(root, Config(db_path=db, workers=1))
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("select rank_id, span_ns, left_out_captures from rank_skew order by rank_id").fetchall()
    finally:
        con.close()
    assert rows == [(r, 2 * _text_stage_ns(source / "text" / f"rank{r}_ascend_pt"), None) for r in RANKS]


def test_one_capture_with_text_and_db_exports_counts_once(tmp_path):
    """torch_npu with export_type [text, db] writes both exports of one session into one
    capture folder: one capture, its steps counted once (the text export's)."""
    source = copy_fixture(ALEXNET, tmp_path / "source")
    root = tmp_path / "both" / "actor"
    for rank in RANKS:
        capture = root / f"rank{rank}_ascend_pt"
        shutil.copytree(source / "text" / f"rank{rank}_ascend_pt", capture)
        for db_file in (source / "db" / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT").iterdir():
            shutil.copy(db_file, capture / "ASCEND_PROFILER_OUTPUT" / db_file.name)
    db = tmp_path / "w.duckdb"
    summary = ingest(root.parent, Config(db_path=db, workers=1))
    assert not [w for w in summary.warnings if "captures" in w]
    con = duckdb.connect(str(db), read_only=True)
    try:
        skew = con.execute("select rank_id, span_ns, left_out_captures from rank_skew order by rank_id").fetchall()
        steps = con.execute("select rank_id, count(*) from step_times group by rank_id order by rank_id").fetchall()
    finally:
        con.close()
    assert skew == [(r, _text_stage_ns(source / "text" / f"rank{r}_ascend_pt"), None) for r in RANKS]
    assert steps == [(r, 1) for r in RANKS]


def test_memory_snapshots_of_one_rank_are_a_series(tmp_path):
    """Two memory snapshots of one rank (a training and an inference step) are not one
    session captured twice: both count, nothing is left out and nobody warns."""
    root = copy_fixture("real/snapshots-cuda/cs336-medium", tmp_path)
    names = sorted(p.name for p in root.glob("*.pickle"))
    db = tmp_path / "w.duckdb"
    summary = ingest(root, Config(db_path=db, workers=1))
    assert not [w for w in summary.warnings if "captures" in w]
    con = duckdb.connect(str(db), read_only=True)
    try:
        peaks = con.execute("select distinct capture from memory_peak order by 1").fetchall()
        left_out = con.execute("select left_out_captures from rank_skew").fetchall()
    finally:
        con.close()
    assert [c for (c,) in peaks] == names and left_out == [(None,)]
