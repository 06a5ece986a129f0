"""device_ops' kinds on every Ascend rank in tests/data, and on real ranks rewritten the way
an older torch_npu (2024) typed its tasks ("Other" where newer ones name the core): compute
rows are kernel_details.csv's compute rows, compute beside communication is
step_trace_time's Overlapped, and the text and db exports give each activity one kind.
Expected figures come from the raw files with the standard library (tests/device_real.py)."""

from __future__ import annotations

import collections
import json
import os
import sqlite3
from pathlib import Path
from typing import Iterator

import duckdb
import pytest
from conftest import FIXTURES, copy_fixture
from device_real import ALEXNET, kernel_details, ns, step_trace_time, union

from rlwh.config import Config
from rlwh.ingest.runner import ingest

# Six ingests of real traces over 1 MB (2.6 CPU-s): a `slow` case (pyproject.toml). The fast
# loop keeps kinds on the same export in test_kernel_details.
pytestmark = pytest.mark.slow

OUTPUT = "ASCEND_PROFILER_OUTPUT"
OLD_TRACE = "real/ascend/msprof-analyze-timeline/trace_view.json"
# How each variant rewrites the trace's Ascend Hardware rows, and whether kernel_details.csv stays.
VARIANTS = {
    "text": None,  # as the profiler wrote it
    "kernels_other": "kernels",  # every kernel typed "Other" (AI_CPU kept), the 2024 export
    "all_other": "all",  # every task but AI_CPU typed "Other", no kernel_details.csv: the names decide
    "kernels_untyped": "missing",  # kernels without a Task Type, "Stream Id" as the old format spells it
}
_CORES = ("AI_CORE", "AI_VECTOR", "MIX_", "DSA")


def _old_types(event: dict, how: str) -> None:
    args = event["args"]
    task_type = str(args.get("Task Type", ""))
    if task_type.startswith("AI_CPU") or (how != "all" and not task_type.startswith(_CORES)):
        return
    if how == "missing":
        del args["Task Type"]
        args["Stream Id"] = args.pop("Physic Stream Id")
    else:
        args["Task Type"] = "Other"


def _rewrite_trace(trace: Path, how: str) -> None:
    events = json.loads(trace.read_text())
    hardware = {e["pid"] for e in events
                if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "Ascend Hardware"}
    for event in events:
        if event.get("ph") == "X" and event.get("pid") in hardware:
            _old_types(event, how)
    trace.write_text(json.dumps(events))


def _profile(root: Path, variant: str) -> Path:
    profile = copy_fixture(f"{ALEXNET}/text", root / variant)
    for path in profile.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    how = VARIANTS[variant]
    if how is not None:
        for trace in profile.glob(f"*/{OUTPUT}/trace_view.json"):
            _rewrite_trace(trace, how)
    if how == "all":
        for csv_file in profile.glob(f"*/{OUTPUT}/kernel_details.csv"):
            csv_file.unlink()
    return profile


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Iterator[duckdb.DuckDBPyConnection]:
    """Every variant of the text export, the db export and the 2024 trace, one run each; read
    on one read-only connection for the module (opening the file per query cost ~25 ms, 36 times)."""
    root = tmp_path_factory.mktemp("kinds")
    db = root / "w.duckdb"
    config = Config(db_path=db, workers=1)
    for variant in VARIANTS:
        ingest(_profile(root, variant), config, run=variant)
    ingest(copy_fixture(f"{ALEXNET}/db", root / "db"), config, run="db")
    old = root / "old" / "rank0_ascend_pt" / OUTPUT
    old.mkdir(parents=True)
    copy_fixture(OLD_TRACE, old)
    ingest(root / "old", config, run="old")
    with duckdb.connect(str(db), read_only=True) as con:
        yield con


def _rows(warehouse: duckdb.DuckDBPyConnection, sql: str, params=()) -> list[tuple]:
    """The query's rows, on a cursor of its own."""
    with warehouse.cursor() as cursor:
        return cursor.execute(sql, list(params)).fetchall()


def _intersection(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    return union(a) + union(b) - union(a + b)


def _db_kernels(rank: int) -> list[tuple[str, int, int]]:
    """The db's kernels: TASK rows with a COMPUTE_TASK_INFO row, as the profiler's Computing counts them."""
    path = FIXTURES / ALEXNET / f"db/rank{rank}_ascend_pt/{OUTPUT}/ascend_pytorch_profiler_{rank}.db"
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return con.execute("""select s.value, t.startNs, t.endNs from TASK t
                              join COMPUTE_TASK_INFO c using (globalTaskId)
                              join STRING_IDS s on s.id = c.name""").fetchall()
    finally:
        con.close()


def _db_overlapped(rank: int) -> dict[int, int]:
    path = FIXTURES / ALEXNET / f"db/rank{rank}_ascend_pt/{OUTPUT}/analysis.db"
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return {int(step): ns(overlapped) for step, overlapped in
                con.execute("select step, cast(overlapped as text) from StepTraceTime")}
    finally:
        con.close()


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("rank", [0, 1])
def test_compute_rows_are_kernel_details_compute_rows(warehouse, variant, rank):
    listed = [r for r in kernel_details(rank) if r["Accelerator Core"] != "HCCL"]
    rows = _rows(warehouse, """select name, start_ns, end_ns from device_ops
                               where run = ? and rank_id = ? and kind = 'compute'""", [variant, rank])
    assert sorted((n, s) for n, s, _ in rows) == sorted((r["Name"], r["start_ns"]) for r in listed)
    # The trace gives durations to fractions of a ns, the CSV rounds each to the ns.
    total, expected = sum(e - s for _, s, e in rows), sum(r["end_ns"] - r["start_ns"] for r in listed)
    assert abs(total - expected) <= len(listed)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("rank", [0, 1])
def test_compute_beside_communication_is_step_trace_times_overlapped(warehouse, variant, rank):
    expected = step_trace_time("text", rank)
    rows = _rows(warehouse, "select step, kind, start_ns, end_ns from device_ops where run = ? and rank_id = ?",
                 [variant, rank])
    compute = [(s, e) for step, k, s, e in rows if step == expected["Step"] and k == "compute"]
    communication = [(s, e) for step, k, s, e in rows if step == expected["Step"] and k == "communication"]
    assert abs(_intersection(compute, communication) - expected["Overlapped"]) <= 1000
    assert expected["Overlapped"] > 1_000_000  # the allreduce runs beside backward compute


@pytest.mark.parametrize("rank", [0, 1])
def test_db_export_compute_rows_and_overlap_are_the_profilers(warehouse, rank):
    kernels = _db_kernels(rank)
    rows = _rows(warehouse, "select step, kind, start_ns, end_ns from device_ops where run = 'db' and rank_id = ?",
                 [rank])
    compute = [(s, e) for _, k, s, e in rows if k == "compute"]
    assert sorted(compute) == sorted((s, e) for _, s, e in kernels)
    for step, overlapped in _db_overlapped(rank).items():
        in_step = [(k, s, e) for st, k, s, e in rows if st == step]
        got = _intersection([(s, e) for k, s, e in in_step if k == "compute"],
                            [(s, e) for k, s, e in in_step if k == "communication"])
        assert abs(got - overlapped) <= 1000


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("rank", [0, 1])
def test_text_and_db_exports_give_each_activity_the_same_kind(warehouse, variant, rank):
    """The two exports are two captures of the same job: the same kernels, copies, events and
    collectives, named alike (a collective by what it runs: its op names carry a capture id).
    The db alone has a TASK row for the AI Core half of each MIX kernel (typed AI_CORE or
    KERNEL_AICORE, with no COMPUTE_TASK_INFO): the trace draws no row for it."""
    def kinds(run):
        return collections.Counter(_rows(warehouse, """
            select kind, if(kind = 'communication', collective, name) from device_ops
            where run = ? and rank_id = ?
              and not (run = 'db' and kind = 'other' and name in ('AI_CORE', 'KERNEL_AICORE'))""", [run, rank]))
    text, db = kinds(variant), kinds("db")
    assert text == db
    assert text[("other", "EVENT_RECORD")] == 16  # 5 of them on the compute stream inside an allreduce


def test_the_2024_trace_computes_what_its_overlap_analysis_says(warehouse):
    """msprof-analyze's real 2024 trace types 274 of its 276 tasks "Other" (2 of them
    MEMCPY_ASYNC copies) and has no kernel_details.csv: its compute is its own Overlap
    Analysis "Computing" rows."""
    events = json.loads((FIXTURES / OLD_TRACE).read_text())
    overlap = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
               and e["args"]["name"] == "Overlap Analysis"}
    computing = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events
                 if e.get("ph") == "X" and e.get("pid") in overlap and e["name"] == "Computing"]
    rows = _rows(warehouse, "select kind, start_ns, end_ns, stream from device_ops where run = 'old'")
    compute = [(s, e) for k, s, e, _ in rows if k == "compute"]
    assert abs(union(compute) - union(computing)) <= 1000
    assert len(compute) == 274 and collections.Counter(k for k, *_ in rows) == {"compute": 274, "memcpy": 2}
    assert {stream for *_, stream in rows} == {3}  # the old "Stream Id", the hardware thread


def test_kernel_details_beside_a_trace_says_what_it_is_read_for(warehouse):
    reasons = {message for (message,) in _rows(
        warehouse, "select distinct message from sources where run = 'text' and path like '%kernel_details.csv'")}
    assert len(reasons) == 1
    assert "read with trace_view.json beside it, for the kind of each task" in reasons.pop()
