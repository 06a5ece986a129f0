"""A big trace_view.json read as pieces (rlwh.readers.json_pieces) gives the rows of reading
it whole: on every real Ascend trace here, cut small so that each is many pieces, and on
traces built to put the cut candidates where they are wrong (inside strings, inside nested
arrays of objects). Expected events come from json, not from rlwh."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from conftest import empty_warehouse

from rlwh.readers import ascend_trace, json_pieces

DATA = Path(__file__).resolve().parent / "data"
REAL_TRACES = sorted(p for p in DATA.rglob("trace_view.json") if "bad" not in p.relative_to(DATA).parts
                     and p.stat().st_size > 1000)
TABLES = ("cpu_ops", "call_stacks", "ranges", "device_ops")


def _rows(path: Path, scratch: Path) -> dict[str, list]:
    with empty_warehouse() as con:  # read_in_place looks stack texts up in it, writes temp tables only
        ascend_trace.read_in_place(con, [path], {}, scratch)
        return {t: sorted(con.execute(f"select * from _rows_{t}").fetchall(), key=repr) for t in TABLES}


@pytest.mark.parametrize("trace", REAL_TRACES, ids=lambda p: p.relative_to(DATA).as_posix())
def test_pieces_give_the_rows_of_the_whole_file(trace, tmp_path, monkeypatch):
    whole = _rows(trace, tmp_path / "whole")
    piece_bytes = max(256, trace.stat().st_size // 9)
    monkeypatch.setattr(json_pieces, "PIECE_BYTES", piece_bytes)
    pieces = json_pieces.cut(trace, tmp_path / "cut", piece_bytes)
    assert len(pieces) >= 4  # really cut
    events = json.loads(trace.read_bytes())
    assert sum(len(json.loads(p.read_bytes())) for p in pieces) == len(events)  # every element once
    assert [e for p in pieces for e in json.loads(p.read_bytes())] == events  # and in order
    assert _rows(trace, tmp_path / "in_pieces") == whole
    assert len(whole["cpu_ops"]) == sum(1 for e in events if e.get("cat") == "cpu_op")


def _event(i: int, stack: str, args_extra: dict | None = None) -> dict:
    return {"name": f"op{i}", "cat": "cpu_op", "ph": "X", "ts": f"{1000 + i}.125", "dur": 1.5, "pid": 1, "tid": 2,
            "args": {"Call stack": stack, **(args_extra or {})}}


def _awkward_trace(path: Path, n: int = 400) -> list[dict]:
    """Events whose strings and nested arrays hold the cut pattern '},{' (and '}, {')."""
    events = []
    for i in range(n):
        if i % 3 == 0:
            events.append(_event(i, "f(1): a},{b;\r\ng(2): c}, {\"d\"", {"list": [{"k": 1}, {"k": 2}, {"k": 3}]}))
        elif i % 3 == 1:
            events.append(_event(i, "h(3): x\\\\},{y", {"nested": [[{"a": "},{"}, {"b": 2}]]}))
        else:
            events.append(_event(i, "plain(4): p"))
    path.write_text(json.dumps(events, separators=(",", ":")), encoding="utf-8")
    return events


@pytest.mark.parametrize("piece_bytes", [64, 97, 131, 200, 333, 1000])
def test_a_wrong_cut_is_refused_never_read(scratch_con, tmp_path, piece_bytes):
    """Cut candidates inside strings and nested values: read in pieces, the trace either
    gives exactly its events or raises (the caller then reads it whole); never other rows."""
    trace = tmp_path / "trace_view.json"
    events = _awkward_trace(trace)
    pieces = json_pieces.cut(trace, tmp_path / "cut", piece_bytes)
    assert len(pieces) > 4
    sources = [(0, p) for p in pieces]
    try:
        scratch_con.execute(f"create temp table t as select name, ts from {ascend_trace._scan_sql(sources)}")
    except duckdb.Error:
        return  # refused: a piece did not parse
    got = sorted(scratch_con.execute("select name, ts from t").fetchall())
    assert got == sorted((e["name"], e["ts"]) for e in events)


def test_an_awkward_trace_lands_whole_through_ingest(tmp_path, monkeypatch, config):
    """Through `rlwh ingest`, with pieces far smaller than the events: every event once."""
    from rlwh.ingest.runner import ingest

    rank = tmp_path / "run" / "actor_update" / "rank3_ascend_pt"
    (rank / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    events = _awkward_trace(rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", n=3000)
    monkeypatch.setattr(json_pieces, "PIECE_BYTES", 4096)
    summary = ingest(tmp_path / "run", config)
    assert summary.failed == 0
    con = duckdb.connect(str(config.db_path), read_only=True)
    try:
        got = sorted(con.execute("select name, ts_ns from cpu_ops").fetchall())
    finally:
        con.close()
    assert got == sorted((e["name"], int(e["ts"].replace(".", ""))) for e in events)


@pytest.mark.parametrize("text", [
    '[{"a":"x}]',  # cut inside a string
    '[{"a":1},{"b":"x}]',  # inside a later element's string
    '[{"a":{"b":1}]',  # inside a nested object
    '[{"a":1},{"l":[{"c":1}]',  # inside a nested array of objects
])
def test_read_json_refuses_a_piece_cut_in_the_wrong_place(scratch_con, tmp_path, text):
    """The premise of the pieces' proof: DuckDB's read_json refuses an array whose last
    element is cut inside a string or a nested value."""
    path = tmp_path / "piece.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(duckdb.Error):
        scratch_con.execute("select * from read_json(?, format = 'array', columns = {a: 'VARCHAR'})",
                            [str(path)]).fetchall()


def test_pieces_without_the_kernel_copy_are_the_same(tmp_path, monkeypatch):
    """Where copy_file_range is refused (another file system, an older kernel), the pieces
    are copied through Python: the same bytes."""
    trace = tmp_path / "trace_view.json"
    _awkward_trace(trace, n=200)
    kernel = [p.read_bytes() for p in json_pieces.cut(trace, tmp_path / "kernel", 333)]

    def refuse(*args):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(json_pieces.os, "copy_file_range", refuse)
    python = [p.read_bytes() for p in json_pieces.cut(trace, tmp_path / "python", 333)]
    assert python == kernel and len(kernel) > 4
