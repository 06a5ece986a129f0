"""Ingest of real Ascend rank dirs: every row accounted for, exact values, idempotence."""

from __future__ import annotations

import csv
import shutil
from decimal import ROUND_HALF_UP, Decimal

import pytest
from conftest import copy_fixture, read_db

from rlwh.ingest.runner import ingest

MEMORY = "rl-insight-samples/memory_data"
RANK_DIR = "20260526_085155_ascend_pt"


@pytest.fixture
def memory_profile(tmp_path):
    return copy_fixture(MEMORY, tmp_path / "profiles")


def _csv_rows(profile):
    path = profile / RANK_DIR / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv"
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _scaled(text: str, factor: int):
    text = text.strip()
    return int((Decimal(text) * factor).to_integral_value(ROUND_HALF_UP)) if text else None


def _ns(text: str):
    return _scaled(text, 1000)


@pytest.mark.slow
def test_every_csv_row_lands_exactly(memory_profile, config):
    summary = ingest(memory_profile, config)
    assert summary.failed == 0
    expected = _csv_rows(memory_profile)
    con = read_db(config)
    got = con.execute(
        "select source_row, name, size_bytes, alloc_ns, release_ns, active_release_ns, duration_ns,"
        " active_duration_ns, alloc_total_allocated_bytes, release_total_reserved_bytes, stream_ptr, device"
        " from memory_records order by source_row"
    ).fetchall()
    assert len(got) == len(expected) == 49
    for i, (row, want) in enumerate(zip(got, expected), start=1):
        assert row[0] == i
        assert row[1] == want["Name"]
        assert row[2] == _scaled(want["Size(KB)"], 1024)
        assert row[3] == _ns(want["Allocation Time(us)"])  # exact to the ns, no float on the way
        assert row[4] == _ns(want["Release Time(us)"])
        assert row[5] == _ns(want["Active Release Time(us)"])
        assert row[6] == _ns(want["Duration(us)"])
        assert row[7] == _ns(want["Active Duration(us)"])
        assert row[8] == _scaled(want["Allocation Total Allocated(MB)"], 1048576)
        assert row[9] == _scaled(want["Release Total Reserved(MB)"], 1048576)
        assert row[10] == want["Stream Ptr"] and row[11] == want["Device Type"]
    # The sample has never-released rows: NULL, not 0.
    assert con.execute("select count(*) from memory_records where release_ns is null").fetchone()[0] > 0
    assert con.execute("select count(*) from memory_records where release_ns = 0").fetchone()[0] == 0


def test_first_row_time_is_exact(memory_profile, config):
    ingest(memory_profile, config)
    con = read_db(config)
    assert con.execute("select alloc_ns from memory_records where source_row = 1").fetchone()[0] == 1779785515596661420


def test_trace_ops_stacks_and_rank(memory_profile, config):
    ingest(memory_profile, config)
    con = read_db(config)
    assert con.execute("select count(*) from cpu_ops").fetchone()[0] == 13
    stack = con.execute(
        "select s.stack, s.top_frame, s.depth from cpu_ops o join call_stacks s using (stack_id)"
        " where o.name = 'aten::add'"
    ).fetchone()
    assert stack == (
        "rl_insight/train.py(42): train_step\ntorch/nn/modules/module.py(150): forward\naten::add(0): kernel_launch",
        "rl_insight/train.py(42): train_step",
        3,
    )
    rank = con.execute("select role, rank_id, device, world_size, versions->>'cann_version' from ranks").fetchall()
    assert rank == [("memory_data", 0, "NPU:0", 16, "8.5.0")]
    statuses = con.execute("select kind, status, rows from sources order by kind").fetchall()
    assert statuses == [("ascend_info", "ok", 1), ("ascend_memory_csv", "ok", 49), ("ascend_trace", "ok", 13),
                        ("ignored", "ignored", 0)]  # profiler_metadata.json, read with profiler_info


def _counts(config):
    con = read_db(config)
    try:
        return {
            t: con.execute(f"select count(*) from {t}").fetchone()[0]
            for t in ("memory_records", "cpu_ops", "call_stacks", "ranks", "sources", "runs")
        }
    finally:
        con.close()


@pytest.mark.slow
def test_reingest_unchanged_is_a_skip(memory_profile, config):
    ingest(memory_profile, config)
    before = _counts(config)
    mtime = config.db_path.stat().st_mtime_ns
    summary = ingest(memory_profile, config)
    assert summary.count("unchanged") == 3 and summary.rows == 0
    assert _counts(config) == before
    assert config.db_path.stat().st_mtime_ns == mtime  # not even rewritten


@pytest.mark.slow
def test_changed_file_replaces_exactly_its_rows(memory_profile, config):
    ingest(memory_profile, config)
    csv_path = memory_profile / RANK_DIR / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv"
    lines = csv_path.read_text().splitlines(keepends=True)
    csv_path.write_text("".join(lines[:11]))  # header + 10 rows
    summary = ingest(memory_profile, config)
    changed = {r.rel_path: r for r in summary.results}
    assert changed[f"{RANK_DIR}/ASCEND_PROFILER_OUTPUT/operator_memory.csv"].status == "ok"
    assert changed[f"{RANK_DIR}/ASCEND_PROFILER_OUTPUT/trace_view.json"].status == "unchanged"
    counts = _counts(config)
    assert counts["memory_records"] == 10 and counts["cpu_ops"] == 13 and counts["sources"] == 4


MEMORY_VIEWS = ("memory_alloc_stack", "memory_event_rows", "memory_blocks", "memory_timeline", "memory_peak",
                "memory_peak_breakdown", "memory_unreleased")


def _memory_views(config):
    con = read_db(config)
    try:
        return {v: sorted(map(repr, con.execute(f"select * exclude (run) from {v}").fetchall())) for v in MEMORY_VIEWS}
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.parametrize("changed", ["operator_memory.csv", "trace_view.json"])
def test_changed_file_refreshes_the_derived_memory_tables(memory_profile, config, tmp_path, changed):
    """After a file changes, every memory view answers as if the new files had been
    ingested into an empty warehouse (the derived tables of that rank were redone)."""
    ingest(memory_profile, config)
    before = _memory_views(config)
    path = memory_profile / RANK_DIR / "ASCEND_PROFILER_OUTPUT" / changed
    if changed.endswith(".csv"):
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:1] + lines[20:]))  # the first 19 rows gone
    else:
        path.write_text(path.read_text().replace('"aten::empty"', '"aten::gone"'))
    ingest(memory_profile, config)
    after = _memory_views(config)
    clean = config.__class__(db_path=tmp_path / "clean.duckdb")
    ingest(memory_profile, clean)
    assert after == _memory_views(clean)
    assert after != before


@pytest.mark.slow
def test_two_runs_stay_apart(memory_profile, config):
    ingest(memory_profile, config, run="night-1")
    ingest(memory_profile, config, run="night-2")
    con = read_db(config)
    assert con.execute("select run, count(*) from memory_records group by run order by run").fetchall() == [
        ("night-1", 49), ("night-2", 49)]
    assert con.execute("select count(*) from call_stacks").fetchone()[0] == 13  # stacks shared by runs


@pytest.mark.slow
def test_bad_file_among_good_ones(memory_profile, config, tmp_path):
    second = memory_profile.parent / "actor_update" / "20260527_010101_ascend_pt"
    shutil.copytree(memory_profile / RANK_DIR, second)
    bad_csv = second / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv"
    bad_csv.write_text(bad_csv.read_text().replace("Allocation Time(us)", "When"))
    summary = ingest(memory_profile.parent, config)
    failed = [r for r in summary.results if r.status == "failed"]
    assert len(failed) == 1
    assert "operator_memory.csv" in failed[0].message and "Allocation Time(us)" in failed[0].message
    con = read_db(config)
    assert con.execute("select count(*) from memory_records").fetchone()[0] == 49
    assert con.execute("select count(*) from cpu_ops").fetchone()[0] == 26


@pytest.mark.slow
def test_malformed_row_keeps_the_rest_and_names_the_row(memory_profile, config):
    csv_path = memory_profile / RANK_DIR / "ASCEND_PROFILER_OUTPUT" / "operator_memory.csv"
    lines = csv_path.read_text().splitlines(keepends=True)
    cells = lines[7].split(",")
    cells[1] = "not-a-size"
    lines[7] = ",".join(cells)
    csv_path.write_text("".join(lines))
    summary = ingest(memory_profile, config)
    result = next(r for r in summary.results if r.kind == "ascend_memory_csv")
    assert result.status == "partial" and result.rows == 48
    assert "row 7" in result.message and "operator_memory.csv" in result.message
    con = read_db(config)
    rows = [r[0] for r in con.execute("select source_row from memory_records order by 1").fetchall()]
    assert rows == [r for r in range(1, 50) if r != 7]


@pytest.mark.slow
def test_truncated_trace_is_partial_with_offset(memory_profile, config):
    trace = memory_profile / RANK_DIR / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) // 2])
    summary = ingest(memory_profile, config)
    result = next(r for r in summary.results if r.kind == "ascend_trace")
    assert result.status == "partial"
    assert "trace_view.json" in result.message and "byte" in result.message
    con = read_db(config)
    kept = con.execute("select count(*) from cpu_ops").fetchone()[0]
    assert 0 < kept < 13
    assert con.execute("select count(*) from memory_records").fetchone()[0] == 49


@pytest.mark.slow
def test_several_captures_of_one_rank_stay_apart(memory_profile, config):
    later = memory_profile / "20260526_095155_ascend_pt"
    shutil.copytree(memory_profile / RANK_DIR, later)
    ingest(memory_profile, config)
    con = read_db(config)
    captures = con.execute(
        "select capture, count(*) from memory_records group by capture order by capture").fetchall()
    assert captures == [(RANK_DIR, 49), ("20260526_095155_ascend_pt", 49)]
    ordered = con.execute("select capture from ranks order by capture_started_ns").fetchall()
    assert [c for (c,) in ordered] == [RANK_DIR, "20260526_095155_ascend_pt"]
    # Allocations match ops of their own capture only.
    assert con.execute(
        "select count(*) from memory_alloc_stack a join cpu_ops o on a.op_ts_ns = o.ts_ns and a.name = o.name"
        " where a.capture <> o.capture and o.capture is not null and a.op_ts_ns is not null"
        " and not exists (select 1 from cpu_ops o2 where o2.capture = a.capture and o2.ts_ns = a.op_ts_ns)"
    ).fetchone()[0] == 0
    assert con.execute("select count(*) from memory_peak").fetchone()[0] == 2


def test_role_from_metadata_wins(memory_profile, config):
    meta = memory_profile / RANK_DIR / "profiler_metadata.json"
    meta.write_text(meta.read_text().replace('{"ENV_VARIABLES"', '{"role": "critic", "ENV_VARIABLES"', 1))
    ingest(memory_profile, config)
    con = read_db(config)
    assert con.execute("select distinct role from memory_records").fetchall() == [("critic",)]




@pytest.mark.slow
def test_stack_normalization_is_the_same_in_sql_and_python():
    """Ascend stacks are normalized in SQL, PyTorch stacks in Python: one text, one id."""
    import random

    import duckdb

    from rlwh.readers.ascend_trace import _NORMALIZED_STACK
    from rlwh.readers.base import normalize_stack, stack_id

    rng = random.Random(3)
    pieces = ["a.py(1): f", "b.py(2): g", ";", "\r", "\n", " ", "\t", ";\r\n", "x y", "é"]
    cases = ["a.py(1): f;\r\nb.py(2): g", " a ;\r\n\r\nb;", "x;\r\n", "  a\tb ;\r\n c ", ";;", ""]
    cases += ["".join(rng.choice(pieces) for _ in range(rng.randrange(1, 12))) for _ in range(300)]
    con = duckdb.connect()
    for raw in cases:
        sql = con.execute(f"select {_NORMALIZED_STACK}, (md5_number_lower({_NORMALIZED_STACK}) >> 1)::bigint"
                          " from (select ? as stack)", [raw]).fetchone()
        python = normalize_stack(raw)
        assert sql[0] == (python or None), repr(raw)
        if python:
            assert sql[1] == stack_id(python)


def _frames_by_the_rule(raw: str) -> str | None:
    """Ascend's stack text as rlwh stores it, by the documented rule (standard library only):
    each line trimmed of spaces, tabs and CRs, then of trailing ';', then of spaces again;
    empty lines dropped; frames joined by a newline."""
    frames = [line.strip(" \t\r").rstrip(";").strip(" \t\r") for line in raw.split("\n")]
    return "\n".join(f for f in frames if f) or None


def test_stack_normalization_on_every_real_ascend_trace():
    """Every distinct stack text of every real Ascend trace in tests/data (not the bad-input
    corpus, whose traces are broken on purpose), normalized by the reader's SQL, is byte for
    byte the text the rule gives."""
    import json

    import duckdb
    from conftest import FIXTURES

    from rlwh.readers.ascend_trace import _NORMALIZED_STACK

    texts = set()
    traces = sorted(t for t in FIXTURES.rglob("trace_view.json") if t.relative_to(FIXTURES).parts[0] != "bad")
    assert len(traces) >= 8
    for trace in traces:
        events = json.loads(trace.read_text(encoding="utf-8"))
        texts |= {e["args"]["Call stack"] for e in events
                  if isinstance(e.get("args"), dict) and isinstance(e["args"].get("Call stack"), str)}
    assert len(texts) >= 45  # the alexnet ranks' and the memory sample's stacks
    con = duckdb.connect()
    for text in sorted(texts):
        got = con.execute(f"select {_NORMALIZED_STACK} from (select ? as stack)", [text]).fetchone()[0]
        assert got == _frames_by_the_rule(text), repr(text)


def test_progress_reports_the_derive_step(memory_profile, config):
    """After the last file, progress says the derived memory tables are being computed, then
    that the warehouse is being written."""
    calls = []
    ingest(memory_profile, config, progress=lambda *args: calls.append(args))
    labels = [c[4] for c in calls]
    assert labels[-2:] == ["deriving memory tables: rank 1 of 1", "publishing the warehouse"]
    assert calls[-1][0] == calls[-1][1]  # every file counted by then
    assert any(label.endswith("operator_memory.csv") for label in labels)
