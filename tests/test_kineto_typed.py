"""The typed decoder (rlwh.readers.kineto_events) gives the streaming parser's rows, to the
row, on every real Kineto trace, whatever the size of its byte ranges; where it cannot cut
a file (damaged, cut mid-write) the streaming parser reads it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES

from rlwh.readers import kineto_events, torch_trace
from rlwh.readers.base import TableSink

TRACES = sorted(
    [p for p in (FIXTURES / "real" / "kineto").rglob("*.json*")]
    + [p for p in (FIXTURES / "torch_profile").rglob("*.json.gz")]
    + [p for p in (FIXTURES / "rl-insight-samples" / "torch_data").rglob("*.json.gz")])


def _read(trace: Path, out: Path) -> tuple[dict, dict[str, list]]:
    sink = TableSink(out)
    outcome = torch_trace.read(trace, sink, {"rank_id": 0})
    sink.close()
    tables = {table: sorted(map(str, pq.read_table(parts).to_pylist()))
              for table, parts in sink.tables().items()}
    return {"status": outcome.status, "message": outcome.message, "rank": outcome.rank}, tables


def _streaming_only(monkeypatch) -> None:
    def refuse(path, spill):
        raise kineto_events.NotTyped("this test reads with the streaming parser")
    monkeypatch.setattr(torch_trace, "_scan_typed", refuse)


def _typed_only(monkeypatch) -> None:
    def refuse(path, spill):
        raise AssertionError(f"{path}: fell back to the streaming parser")
    monkeypatch.setattr(torch_trace, "_scan_streaming", refuse)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_typed_and_streaming_passes_give_the_same_rows(trace, tmp_path, monkeypatch):
    with monkeypatch.context() as m:
        _typed_only(m)
        m.setattr(kineto_events, "PIECE_BYTES", 64 << 10)  # many pieces even in a small trace
        m.setattr(torch_trace, "TYPED_READ_BYTES", 16 << 10)
        typed = _read(trace, tmp_path / "typed")
    _streaming_only(monkeypatch)
    streaming = _read(trace, tmp_path / "streaming")
    assert typed[0] == streaming[0]
    assert typed[1].keys() == streaming[1].keys()
    for table in typed[1]:
        assert typed[1][table] == streaming[1][table], table


def _events(n: int) -> list[dict]:
    """Events whose text holds every false boundary: '},{' in a string, a nested array of objects."""
    out = []
    for i in range(n):
        out.append({"ph": "X", "cat": "cpu_op", "name": f'aten::op_{i} }},{{ "x": [{{}}]', "pid": 1, "tid": 1,
                    "ts": f"{1000 + i * 10}.125", "dur": 3.5,
                    "args": {"Input Dims": [[{"a": 1}, {"b": 2}], []], "Sequence number": i,
                             "Call stack": "a.py(1): f;\nb.py(2): g" if i % 3 else None}})
        out[-1]["ts"] = float(out[-1]["ts"]) if i % 2 else out[-1]["ts"]  # a string ts now and then
    return out


@pytest.mark.parametrize("indent", [None, 2])
def test_false_boundaries_and_string_times_cut_nowhere_wrong(tmp_path, monkeypatch, indent):
    trace = tmp_path / "prof_rank-0.pt.trace.json"
    body = {"schemaVersion": 1, "traceEvents": _events(300), "deviceProperties": [{"id": 0}],
            "baseTimeNanoseconds": 1700000000000000000, "traceName": "x ] }, {"}
    trace.write_text(json.dumps(body, indent=indent))
    with monkeypatch.context() as m:
        _typed_only(m)
        m.setattr(kineto_events, "PIECE_BYTES", 1500)
        m.setattr(torch_trace, "TYPED_READ_BYTES", 700)
        typed = _read(trace, tmp_path / "typed")
    _streaming_only(monkeypatch)
    streaming = _read(trace, tmp_path / "streaming")
    assert typed == streaming
    assert len(typed[1]["cpu_ops"]) == 300 and typed[0]["rank"]["metadata"]["traceName"] == "x ] }, {"


def test_a_trace_cut_mid_write_is_read_by_the_streaming_parser(tmp_path):
    trace = tmp_path / "prof_rank-0.pt.trace.json.gz"
    text = json.dumps({"traceEvents": _events(200)}, indent=2)
    trace.write_bytes(gzip.compress(text[: len(text) * 2 // 3].encode()))
    outcome, tables = _read(trace, tmp_path / "out")
    assert outcome["status"] == "partial" and "kept the" in outcome["message"]
    assert 0 < len(tables["cpu_ops"]) < 200


@pytest.mark.parametrize("damage", ["cut", "nan"])
def test_a_damaged_file_leaves_the_typed_decoder_after_a_few_tries(tmp_path, monkeypatch, damage):
    """A file cut mid-write, or a bad token mid-file, costs the typed decoder a few decodes
    (not one per ']' or per candidate boundary) before the streaming parser reads it."""
    text = json.dumps({"traceEvents": _events(3000)}, indent=2)
    if damage == "cut":
        text = text[: len(text) - 5000]
    else:
        text = text.replace('"ph": "X"', '"ph": NaN', 1500).replace('"ph": NaN', '"ph": "X"', 1499)
    trace = tmp_path / "prof_rank-0.pt.trace.json"
    trace.write_text(text)
    calls = []
    decode = kineto_events._decode
    monkeypatch.setattr(kineto_events, "_decode", lambda piece: calls.append(len(piece)) or decode(piece))
    monkeypatch.setattr(kineto_events, "PIECE_BYTES", 64 << 10)
    monkeypatch.setattr(torch_trace, "TYPED_READ_BYTES", 16 << 10)
    outcome, tables = _read(trace, tmp_path / "out")
    assert len(calls) <= 2 * (len(text) // (64 << 10)) + 4
    assert 0 < len(tables["cpu_ops"]) <= 3000
    assert outcome["status"] == "partial"
