"""Files of one kind read together (rlwh.ingest.batches): the rows of files read one by one,
and one bad file in a batch costs the others nothing. Expectations come from the raw
files (json, csv), not from rlwh."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest
from conftest import read_db
from warehouse_compare import differences, row_count

from rlwh import synth
from rlwh.ingest import batches as batching
from rlwh.ingest import load
from rlwh.ingest.runner import ingest
from rlwh.readers import ascend_trace

RANKS = 6


@pytest.fixture
def profile(tmp_path) -> Path:
    return synth.write_ascend_profile(tmp_path / "run", roles=("actor_update",), ranks=RANKS, n_ops=400,
                                      n_allocs=300, n_stacks=40, with_collectives=True)


@pytest.fixture
def batch_calls(monkeypatch) -> list:
    """Every read_batch call: (files, raised or None). Parsing runs in-process (workers=1)."""
    calls: list = []
    real = ascend_trace.read_batch

    def spy(paths, sinks, context, staging):
        try:
            outcomes = real(paths, sinks, context, staging)
        except Exception as exc:
            calls.append((list(paths), exc))
            raise
        calls.append((list(paths), None))
        return outcomes

    monkeypatch.setattr(ascend_trace, "read_batch", spy)
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


def test_a_batch_gives_the_rows_of_files_read_one_by_one(profile, config, tmp_path, batch_calls, monkeypatch):
    """Every table of an ingest that read the traces in batches equals one that read each alone."""
    ingest(profile, config)
    assert batch_calls and all(exc is None for _, exc in batch_calls)
    assert sum(len(files) for files, _ in batch_calls) == RANKS  # every trace went through a batch
    batched = config.db_path
    monkeypatch.setattr(batching, "BATCH_FILES", 1)  # every batch of one: the per-file path
    alone = replace(config, db_path=tmp_path / "alone" / "warehouse.duckdb")
    calls_before = len(batch_calls)
    ingest(profile, alone)
    assert len(batch_calls) == calls_before
    assert row_count(batched) > 0
    assert differences(batched, alone.db_path) == {}
    for trace in _traces(profile):
        assert _rows_by_capture(config, "cpu_ops")[_capture_of(trace, profile)] == _cpu_ops_in(trace)


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
    assert sources[rel][0] == "partial" and str(bad) in sources[rel][1] and "byte" in sources[rel][1]
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


def test_a_file_that_cannot_land_fails_alone_and_its_batch_lands(profile, config, monkeypatch):
    """Landing is LAND_FILES files per transaction; one file's landing error rolls that
    transaction back and the files land one by one: it fails, with its own sources row
    and message, and every other file of the transaction lands."""
    traces = _traces(profile)
    victim = traces[2].relative_to(profile).as_posix()
    real = load._land

    def land(con, run, p, parsed, with_step):
        if p.source.rel_path == victim:
            con.execute("select error('the disk said no to this file')")
        return real(con, run, p, parsed, with_step)

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


def _planned(sizes: list[int]) -> list:
    return [SimpleNamespace(size=s, source=SimpleNamespace(kind="ascend_trace")) for s in sizes]


def test_the_batch_rule():
    """At most BATCH_FILES files and BATCH_BYTES bytes a batch, two batches per worker where
    there are files enough, a big file alone, no batch of one."""
    mb = 2**20
    small = _planned([8 * mb] * 64)
    found = batching.batches(small, workers=2)
    assert [len(b) for b in found] == [16, 16, 16, 16]
    many = _planned([1 * mb] * 1000)
    found = batching.batches(many, workers=2)
    assert all(len(b) <= batching.BATCH_FILES for b in found)
    assert sum(len(b) for b in found) == 1000
    sized = _planned([100 * mb] * 10)
    assert all(sum(p.size for p in b) <= batching.BATCH_BYTES for b in batching.batches(sized, workers=1))
    big = _planned([batching.BATCH_BYTES // 2, 4 * mb, 4 * mb, 4 * mb, 4 * mb])
    found = batching.batches(big, workers=1)
    assert big[0] not in [p for b in found for p in b]
    assert [len(b) for b in found] == [2, 2]
    assert batching.batches(_planned([mb, mb]), workers=2) == []  # two batches of one: none
    csv_files = [SimpleNamespace(size=mb, source=SimpleNamespace(kind="ascend_memory_csv")) for _ in range(8)]
    assert batching.batches(csv_files, workers=1) == []  # its reader reads one file at a time


def test_read_batch_refuses_what_it_cannot_read_whole(tmp_path):
    """read_batch raises (so the caller reads one by one) on a file without its closing ']'."""
    from rlwh.readers.base import TableSink

    good = tmp_path / "a.json"
    good.write_text('[{"cat": "cpu_op", "name": "x", "ph": "X", "ts": "1.000", "dur": 1, "pid": 1, "tid": 1}]')
    cut = tmp_path / "b.json"
    cut.write_text('[{"cat": "cpu_op", "name": "x", "ph": "X", "ts": "1.000", "dur": 1, "pid": 1, "tid": 1},')
    sinks = [TableSink(tmp_path / "s0"), TableSink(tmp_path / "s1")]
    with pytest.raises(Exception, match="closing"):
        ascend_trace.read_batch([good, cut], sinks, {}, tmp_path / "stage")
    with pytest.raises(Exception, match="twice"):
        ascend_trace.read_batch([good, good], sinks, {}, tmp_path / "stage")
    other = tmp_path / "c.json"
    other.write_text('[{"cat": "cpu_op", "name": "y", "ph": "X", "ts": "2.5", "dur": 1, "pid": 1, "tid": 1},\n'
                     ' {"cat": "cpu_op", "name": "y", "ph": "X", "ts": "3.25", "dur": 1, "pid": 1, "tid": 1}]')
    outcomes = ascend_trace.read_batch([good, other], sinks, {}, tmp_path / "stage")
    assert [o.status for o in outcomes] == ["ok", "ok"]
    con = duckdb.connect()
    got = [con.execute("select count(*), min(ts_ns), max(name) from read_parquet(?)",
                       [[str(p) for p in sink.tables()["cpu_ops"]]]).fetchone() for sink in sinks]
    assert got == [(1, 1000, "x"), (2, 2500, "y")]
