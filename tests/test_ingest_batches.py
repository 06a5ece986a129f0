"""Files read in place by the warehouse's connection, a batch per statement
(rlwh.ingest.in_place): the rows of files read one by one and of the per-file route the
workers take, and one bad file in a batch costs the others nothing. Expectations come
from the raw files (json, csv), not from rlwh."""

from __future__ import annotations

import csv
import json
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import empty_warehouse, read_db
from warehouse_compare import differences, row_count

from rlwh import synth
from rlwh.ingest import in_place, load
from rlwh.ingest.runner import ingest
from rlwh.readers import ascend_trace

RANKS = 6


@pytest.fixture
def profile(tmp_path) -> Path:
    return synth.write_ascend_profile(tmp_path / "run", roles=("actor_update",), ranks=RANKS, n_ops=400,
                                      n_allocs=300, n_stacks=40, with_collectives=True)


@pytest.fixture
def batch_calls(monkeypatch) -> list:
    """Every read_in_place call of the trace reader: (files, raised or None)."""
    calls: list = []
    real = ascend_trace.read_in_place

    def spy(con, paths, context, scratch):
        try:
            outcomes = real(con, paths, context, scratch)
        except Exception as exc:
            calls.append((list(paths), exc))
            raise
        calls.append((list(paths), None))
        return outcomes

    monkeypatch.setattr(ascend_trace, "read_in_place", spy)
    return calls


def _traces(profile: Path) -> list[Path]:
    return sorted(profile.rglob("trace_view.json"))


def _cpu_ops_in(trace: Path) -> int:
    return sum(1 for e in json.loads(trace.read_text(encoding="utf-8")) if e.get("cat") == "cpu_op")


def _csv_rows(trace: Path) -> int:
    with open(trace.with_name("operator_memory.csv"), newline="", encoding="utf-8") as handle:
        return sum(1 for _ in csv.DictReader(handle))


def _rows_by_capture(config, table: str) -> dict[str, int]:
    con = read_db(config)
    try:
        return dict(con.execute(f"select capture, count(*) from {table} group by capture").fetchall())
    finally:
        con.close()


def _sources(config) -> dict[str, tuple[str, str | None]]:
    con = read_db(config)
    try:
        return {path: (status, message) for path, status, message in
                con.execute("select path, status, message from sources").fetchall()}
    finally:
        con.close()


def _capture_of(trace: Path, profile: Path) -> str:
    return trace.parent.parent.relative_to(profile).as_posix()


@pytest.mark.slow
def test_a_batch_gives_the_rows_of_files_read_one_by_one(profile, config, tmp_path, batch_calls, monkeypatch):
    """Every table of an ingest that read the files in batches equals one that read each
    alone, and one by the per-file route (Parquet parts, as Ray's and dataset mode's
    workers read them)."""
    ingest(profile, config)
    assert batch_calls and all(exc is None for _, exc in batch_calls)
    assert [len(files) for files, _ in batch_calls] == [RANKS]  # every trace in one statement
    batched = config.db_path
    monkeypatch.setattr(in_place, "BATCH_FILES", 1)  # every batch of one
    alone = replace(config, db_path=tmp_path / "alone" / "warehouse.duckdb")
    ingest(profile, alone)
    assert [len(files) for files, _ in batch_calls[1:]] == [1] * RANKS
    monkeypatch.setattr(in_place, "reads_in_place", lambda kind: False)  # every file by its `read`
    per_file = replace(config, db_path=tmp_path / "per_file" / "warehouse.duckdb")
    ingest(profile, per_file)
    assert len(batch_calls) == 1 + RANKS
    assert row_count(batched) > 0
    assert differences(batched, alone.db_path) == {}
    assert differences(batched, per_file.db_path) == {}
    for trace in _traces(profile):
        assert _rows_by_capture(config, "cpu_ops")[_capture_of(trace, profile)] == _cpu_ops_in(trace)
        assert _rows_by_capture(config, "memory_records")[_capture_of(trace, profile)] == _csv_rows(trace)


def test_csv_rows_keep_their_row_number_in_their_own_file(profile, config):
    """source_row numbers each CSV record in its own file, whatever the batch around it."""
    ingest(profile, config)
    con = read_db(config)
    try:
        for trace in _traces(profile):
            with open(trace.with_name("operator_memory.csv"), newline="", encoding="utf-8") as handle:
                expected = [(i, row["Name"].strip()) for i, row in enumerate(csv.DictReader(handle), start=1)]
            got = con.execute("select source_row, name from memory_records where capture = ? order by source_row",
                              [_capture_of(trace, profile)]).fetchall()
            assert got == expected
    finally:
        con.close()


def test_a_bad_csv_row_costs_its_batch_nothing(profile, config):
    """A CSV row the job's SQL cannot read sends its file to the row-by-row read (partial,
    the row named); every other CSV of the batch lands whole."""
    traces = _traces(profile)
    bad = traces[3].with_name("operator_memory.csv")
    lines = bad.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[5] = lines[5].replace(",", ",not a number,", 1)
    bad.write_text("".join(lines), encoding="utf-8")
    ingest(profile, config)
    sources = _sources(config)
    rel = bad.relative_to(profile).as_posix()
    assert sources[rel][0] == "partial" and "row 5" in sources[rel][1]
    memory = _rows_by_capture(config, "memory_records")
    assert memory[_capture_of(traces[3], profile)] == _csv_rows(traces[3]) - 1
    for trace in traces:
        if trace != traces[3]:
            assert sources[trace.with_name("operator_memory.csv").relative_to(profile).as_posix()] == ("ok", None)
            assert memory[_capture_of(trace, profile)] == _csv_rows(trace)


@pytest.mark.slow
def test_one_damaged_trace_in_a_batch_costs_the_others_nothing(profile, config, batch_calls):
    """A trace damaged mid-file makes its batch fall back to one by one: it is salvaged up
    to the damage and named; every other file lands whole."""
    traces = _traces(profile)
    bad = traces[1]
    data = bad.read_bytes()
    middle = data.index(b"\n", len(data) // 2)
    bad.write_bytes(data[:middle] + b'\n{"name": "x", "ph": ]]]\n' + data[middle:])
    summary = ingest(profile, config)
    assert any(exc is not None and str(bad) in {str(p) for p in files} for files, exc in batch_calls)
    sources = _sources(config)
    rel = bad.relative_to(profile).as_posix()
    assert sources[rel][0] == "partial" and sources[rel][1].startswith(f"{rel}: ") and "byte" in sources[rel][1]
    others = {p: s for p, s in sources.items() if p != rel and s[0] != "ignored"}
    assert len(others) == 3 * RANKS - 1  # the other traces, every CSV, every profiler_info
    assert all(status == "ok" for status, _ in others.values()), others
    ops = _rows_by_capture(config, "cpu_ops")
    for trace in traces:
        if trace != bad:
            assert ops[_capture_of(trace, profile)] == _cpu_ops_in(trace)
    assert 0 < ops[_capture_of(bad, profile)] < _cpu_ops_in(traces[0]) + 1
    assert summary.failed == 0


def test_a_cut_trace_in_a_batch_is_salvaged_and_the_others_land(profile, config, batch_calls):
    """A trace cut while being written (no closing ']') is partial with every complete
    event; the rest of its batch lands as if it were alone."""
    traces = _traces(profile)
    cut = traces[0]
    data = cut.read_bytes()
    keep = data[: data.rindex(b"},", 0, len(data) * 2 // 3) + 2]  # cut right after an event's comma
    cut.write_bytes(keep)
    ingest(profile, config)
    sources = _sources(config)
    rel = cut.relative_to(profile).as_posix()
    assert sources[rel][0] == "partial" and "no closing ']'" in sources[rel][1]
    complete = json.loads(keep.rstrip().rstrip(b",") + b"]")
    ops = _rows_by_capture(config, "cpu_ops")
    assert ops[_capture_of(cut, profile)] == sum(1 for e in complete if e.get("cat") == "cpu_op")
    for trace in traces[1:]:
        assert sources[trace.relative_to(profile).as_posix()] == ("ok", None)
        assert ops[_capture_of(trace, profile)] == _cpu_ops_in(trace)


def test_csvs_land_beside_the_traces_and_every_rank_is_derived(profile, config, tmp_path, monkeypatch):
    """CSV batches land on a second connection while the trace batches land on the
    warehouse's (rlwh.ingest.in_place._SecondLane). A rank with a CSV and no trace is
    derived all the same (the CSVs' ranks are marked on the warehouse's connection, where
    derive reads its marks): its timeline has an event per allocation and per recorded
    release of its CSV, and the warehouse equals one whose batches all ran on one
    connection."""
    traces = _traces(profile)
    memory_csv = traces[1].with_name("operator_memory.csv")
    traces[1].unlink()
    lanes: list[tuple[str, str, int]] = []  # every batch (a file that fell back alone too): kind, thread, files
    real = in_place._batch

    def spy(con, run, files, config, parts):
        lanes.append((files[0].source.kind, threading.current_thread().name, len(files)))
        return real(con, run, files, config, parts)

    monkeypatch.setattr(in_place, "_batch", spy)
    ingest(profile, config)
    assert sorted(lanes) == [("ascend_memory_csv", "rlwh-second-lane", RANKS),
                             ("ascend_trace", "MainThread", RANKS - 1)]
    alone = _capture_of(traces[1], profile)
    with open(memory_csv, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    con = read_db(config)
    try:
        assert _rows_by_capture(config, "memory_records")[alone] == len(rows)
        derived = con.execute("select count(*) from memory_timeline where capture = ?", [alone]).fetchone()[0]
        assert derived == sum(1 + bool(row["Release Time(us)"].strip()) for row in rows)
    finally:
        con.close()
    monkeypatch.setattr(in_place, "lanes", lambda todo: (todo, []))  # every batch on the warehouse's connection
    one = replace(config, db_path=tmp_path / "one" / "warehouse.duckdb")
    lanes.clear()
    ingest(profile, one)
    assert sorted(lanes) == [("ascend_memory_csv", "MainThread", RANKS), ("ascend_trace", "MainThread", RANKS - 1)]
    assert differences(config.db_path, one.db_path) == {}


@pytest.mark.slow
def test_a_file_that_cannot_land_fails_alone_and_its_batch_lands(profile, config, monkeypatch):
    """A batch is one transaction; one file's landing error rolls it back and the files
    land one by one, then by their per-file route: it fails, with its own sources row and
    message, and every other file of the batch lands."""
    traces = _traces(profile)
    victim = traces[2].relative_to(profile).as_posix()
    real_batch, real_file = in_place.land, load._land

    def land_batch(con, run, files, outcomes, seconds):
        if victim in {p.source.rel_path for p in files}:
            con.execute("select error('the disk said no to this file')")
        return real_batch(con, run, files, outcomes, seconds)

    def land(con, run, p, parsed, with_step):
        if p.source.rel_path == victim:
            con.execute("select error('the disk said no to this file')")
        return real_file(con, run, p, parsed, with_step)

    monkeypatch.setattr(in_place, "land", land_batch)
    monkeypatch.setattr(load, "_land", land)
    summary = ingest(profile, config)
    sources = _sources(config)
    assert sources[victim][0] == "failed" and "the disk said no to this file" in sources[victim][1]
    assert summary.failed == 1
    assert all(status in ("ok", "ignored") for path, (status, _) in sources.items() if path != victim)
    ops = _rows_by_capture(config, "cpu_ops")
    assert _capture_of(traces[2], profile) not in ops  # nothing of it landed
    memory = _rows_by_capture(config, "memory_records")
    for trace in traces:
        assert memory[_capture_of(trace, profile)] == _csv_rows(trace)  # its CSV is another file
        if trace != traces[2]:
            assert ops[_capture_of(trace, profile)] == _cpu_ops_in(trace)


def _planned(sizes: list[int], kind: str = "ascend_trace") -> list:
    return [SimpleNamespace(size=s, source=SimpleNamespace(kind=kind)) for s in sizes]


def test_the_batch_rule():
    """At most BATCH_FILES files (or the reader's own figure) and BATCH_BYTES bytes a batch, of
    one kind; a big file alone."""
    mb = 2**20
    found = in_place.batches(_planned([8 * mb] * 64))
    assert [len(b) for b in found] == [in_place.BATCH_BYTES // (8 * mb)] * 2
    many = _planned([1 * mb] * 1000)
    found = in_place.batches(many)
    assert all(len(b) <= in_place.BATCH_FILES for b in found)
    assert [p for b in found for p in b] == many  # every file once, in order
    sized = _planned([100 * mb] * 10)
    assert all(sum(p.size for p in b) <= in_place.BATCH_BYTES for b in in_place.batches(sized))
    big = _planned([in_place.BATCH_BYTES // 2, 4 * mb, 4 * mb])
    assert [len(b) for b in in_place.batches(big)] == [1, 2]
    mixed = _planned([mb] * 3) + _planned([mb] * 2, "ascend_memory_csv")
    assert sorted(len(b) for b in in_place.batches(mixed)) == [2, 3]
    assert all(len({p.source.kind for p in b}) == 1 for b in in_place.batches(mixed))
    dumps = _planned([400] * 2000, "gmm_group_list")  # a reader of tiny files allows more a batch
    assert in_place.files_per_batch("gmm_group_list") > in_place.BATCH_FILES == in_place.files_per_batch("ascend_trace")
    assert [len(b) for b in in_place.batches(dumps)] == [512, 512, 512, 464]


def test_the_lanes():
    """The second lane takes the batches DuckDB reads that add no shared rows (the CSVs); a
    trace's (call stacks) and the expert-count dumps' (decoded in Python) stay on the first."""
    trace, csv, dumps = (_planned([1], kind) for kind in ("ascend_trace", "ascend_memory_csv", "gmm_group_list"))
    assert in_place.lanes([trace, csv, dumps]) == ([trace, dumps], [csv])
    assert in_place.lanes([dumps, csv]) == ([dumps], [csv])
    assert in_place.lanes([csv]) == ([csv], [])  # one lane when the other would be empty


def test_read_in_place_refuses_what_it_cannot_read_whole(tmp_path):
    """read_in_place raises (so the caller reads one by one) on a file without its closing
    ']' or named twice; else each file's rows carry its index in the batch."""
    good = tmp_path / "a.json"
    good.write_text('[{"cat": "cpu_op", "name": "x", "ph": "X", "ts": "1.000", "dur": 1, "pid": 1, "tid": 1}]')
    cut = tmp_path / "b.json"
    cut.write_text('[{"cat": "cpu_op", "name": "x", "ph": "X", "ts": "1.000", "dur": 1, "pid": 1, "tid": 1},')
    with empty_warehouse() as con:  # a warehouse's connection: read_in_place looks stack texts up in it
        with pytest.raises(Exception, match="closing"):
            ascend_trace.read_in_place(con, [good, cut], {}, tmp_path)
        with pytest.raises(Exception, match="twice"):
            ascend_trace.read_in_place(con, [good, good], {}, tmp_path)
        other = tmp_path / "c.json"
        other.write_text('[{"cat": "cpu_op", "name": "y", "ph": "X", "ts": "2.5", "dur": 1, "pid": 1, "tid": 1},\n'
                         ' {"cat": "cpu_op", "name": "y", "ph": "X", "ts": "3.25", "dur": 1, "pid": 1, "tid": 1}]')
        outcomes = ascend_trace.read_in_place(con, [good, other], {}, tmp_path)
        assert [o.status for o in outcomes] == ["ok", "ok"]
        got = con.execute("select _file, count(*), min(ts_ns), max(name) from _rows_cpu_ops group by _file "
                          "order by _file").fetchall()
        assert got == [(0, 1, 1000, "x"), (1, 2, 2500, "y")]


def test_tables_with_step_are_the_base_tables_the_catalog_lists_with_a_step_column():
    """Looked up a table at a time (load.TablesWithStep), the answer is the catalog's: every base
    table of the schema, with and without a step column, a view's step column not counted."""
    with empty_warehouse() as con:
        tables = [r[0] for r in con.execute("select table_name from duckdb_tables() where schema_name = 'main'")
                  .fetchall()]
        listed = {r[0] for r in con.execute(
            "select table_name from duckdb_columns() join duckdb_tables() using (database_name, schema_name, "
            "table_name) where schema_name = 'main' and column_name = 'step'").fetchall()}
        with_step = load.TablesWithStep(con)
        assert {t for t in tables if t in with_step} == listed
        assert listed and set(tables) - listed  # both kinds are asked
