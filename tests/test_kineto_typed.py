"""The typed decoder (rlwh.readers.kineto_events) gives the streaming parser's rows, to the
row, on every real Kineto trace, whatever the size of its byte ranges; where it cannot cut
a file (damaged, cut mid-write) the streaming parser reads it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES

from rlwh.readers import kineto_decoding, kineto_events, torch_trace
from rlwh.readers.base import TableSink

TRACES = sorted(
    [p for p in (FIXTURES / "real" / "kineto").rglob("*.json*")]
    + [p for p in (FIXTURES / "torch_profile").rglob("*.json.gz")]
    + [p for p in (FIXTURES / "rl-insight-samples" / "torch_data").rglob("*.json.gz")])
# The traces also decoded by a pool of processes.
PARALLEL_TRACES = [p for p in TRACES if p.name.startswith(("df_index_resolver", "control", "worker0", "prof_rank-0"))]

# Whole real traces over 1 MB (compressed) take seconds each: `make test` reads them, the
# fast loop (`make check`) the smaller ones.
BIG_TRACE_BYTES = 1 << 20


def _params(traces: list[Path]) -> list:
    return [pytest.param(p, id=str(p.relative_to(FIXTURES)),
                         marks=[pytest.mark.slow] if p.stat().st_size > BIG_TRACE_BYTES else [])
            for p in traces]


def _read(trace: Path, out: Path) -> tuple[dict, dict[str, list]]:
    sink = TableSink(out)
    outcome = torch_trace.read(trace, sink, {"rank_id": 0})
    sink.close()
    tables = {table: _sorted_rows(parts) for table, parts in sink.tables().items()}
    return {"status": outcome.status, "message": outcome.message, "rank": outcome.rank}, tables


def _sorted_rows(parts) -> pa.Table:
    """A table's rows in one order (by every column, nulls last), so that two reads of the
    same rows in any order compare equal (==: the same column names and types, the same
    values), in Arrow: turning a big trace's rows into sorted Python strings took seconds."""
    table = pq.read_table(parts)
    return table.sort_by([(name, "ascending") for name in table.column_names])


def _streaming_only(monkeypatch) -> None:
    def refuse(path, spill, *rest):
        raise kineto_events.NotTyped("this test reads with the streaming parser")
    monkeypatch.setattr(torch_trace, "_scan_typed", refuse)


def _typed_only(monkeypatch) -> None:
    def refuse(path, spill, *rest):
        raise AssertionError(f"{path}: fell back to the streaming parser")
    monkeypatch.setattr(torch_trace, "_scan_streaming", refuse)


@pytest.fixture(scope="module")
def streaming_rows(tmp_path_factory):
    """The streaming parser's (outcome, rows) of a trace: the reference of both tests of a
    real trace, read once per module for the traces both tests read (PARALLEL_TRACES)."""
    kept: dict[Path, tuple[dict, dict[str, list]]] = {}

    def rows(trace: Path) -> tuple[dict, dict[str, list]]:
        if trace in kept:
            return kept[trace]
        with pytest.MonkeyPatch.context() as m:
            _streaming_only(m)
            read = _read(trace, tmp_path_factory.mktemp("streaming"))
        if trace in PARALLEL_TRACES:
            kept[trace] = read
        return read

    return rows


@pytest.mark.parametrize("trace", _params(TRACES))
def test_typed_and_streaming_passes_give_the_same_rows(trace, tmp_path, monkeypatch, streaming_rows):
    with monkeypatch.context() as m:
        _typed_only(m)
        m.setattr(kineto_events, "PIECE_BYTES", 64 << 10)  # many pieces even in a small trace
        m.setattr(torch_trace, "TYPED_READ_BYTES", 16 << 10)
        typed = _read(trace, tmp_path / "typed")
    streaming = streaming_rows(trace)
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
    monkeypatch.setattr(kineto_events, "_decode", lambda piece, at=0: calls.append(len(piece)) or decode(piece, at))
    monkeypatch.setattr(kineto_events, "PIECE_BYTES", 64 << 10)
    monkeypatch.setattr(torch_trace, "TYPED_READ_BYTES", 16 << 10)
    outcome, tables = _read(trace, tmp_path / "out")
    assert len(calls) <= 2 * (len(text) // (64 << 10)) + 4
    assert 0 < len(tables["cpu_ops"]) <= 3000
    assert outcome["status"] == "partial"


def _read_with(trace: Path, out: Path, context: dict) -> tuple[dict, dict[str, list]]:
    sink = TableSink(out)
    outcome = torch_trace.read(trace, sink, {"rank_id": 0, **context})
    sink.close()
    tables = {table: _sorted_rows(parts) for table, parts in sink.tables().items()}
    return {"status": outcome.status, "message": outcome.message, "rank": outcome.rank}, tables


@pytest.fixture(scope="module", autouse=True)
def one_pool_for_the_module():
    """One decoding pool for the module's tests, ended with the module: a reader ends it
    after each trace (kineto_decoding.forget_pool, kept from it here), and each start is two
    processes importing the readers (~0.4 s of CPU each; 8 a run of make check, now 2).
    Starting and ending it per trace is tested in test_kineto_early_pool.py."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kineto_decoding, "forget_pool", lambda: None)
        yield
    kineto_decoding.forget_pool()


@pytest.mark.parametrize("trace", _params(PARALLEL_TRACES))
def test_pieces_decoded_by_two_processes_give_the_streaming_rows(trace, tmp_path, monkeypatch, streaming_rows):
    """Pieces cut ahead of their decoding and decoded in other processes, taken back in
    file order: every table as the streaming parser gives it."""
    with monkeypatch.context() as m:
        _typed_only(m)
        m.setattr(kineto_events, "PIECE_BYTES", 64 << 10)
        m.setattr(torch_trace, "TYPED_READ_BYTES", 16 << 10)
        m.setattr(kineto_decoding, "GZIP_RATIO", 1000)  # small files still go to the pool
        parallel = _read_with(trace, tmp_path / "parallel", {"workers": 2})
    streaming = streaming_rows(trace)
    assert parallel[0] == streaming[0]
    assert parallel[1] == streaming[1]


@pytest.mark.parametrize("workers", [1, 2])
def test_false_boundaries_cut_ahead_of_decoding(tmp_path, monkeypatch, workers):
    """A cut inside a string is found when its piece breaks at its end, whichever process
    decodes it; the piece after it (which starts mid-event) is never used."""
    trace = tmp_path / "prof_rank-0.pt.trace.json"
    body = {"schemaVersion": 1, "traceEvents": _events(3000), "baseTimeNanoseconds": 1700000000000000000,
            "traceName": "x ] }, {"}
    trace.write_text(json.dumps(body))
    with monkeypatch.context() as m:
        _typed_only(m)
        m.setattr(kineto_events, "PIECE_BYTES", 4000)
        m.setattr(torch_trace, "TYPED_READ_BYTES", 1500)
        typed = _read_with(trace, tmp_path / "typed", {"workers": workers})
    _streaming_only(monkeypatch)
    streaming = _read(trace, tmp_path / "streaming")
    assert typed == streaming
    assert len(typed[1]["cpu_ops"]) == 3000


def _times_trace(path: Path, times: list[tuple[str, str]]) -> None:
    """A trace whose ts and dur are written exactly as given (JSON number texts)."""
    events = ",\n".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "op{i}", "pid": 1, "tid": 1, "ts": {ts}, "dur": {dur}}}'
        for i, (ts, dur) in enumerate(times))
    path.write_text('{"traceEvents": [\n' + events + "\n]}")


def _expected_ns(text: str) -> int:
    """What the streaming parser's Decimal gives: int(Decimal(text) * 1000), computed here
    from the text with the standard library."""
    import decimal
    return int(decimal.Decimal(text) * 1000)


@pytest.mark.parametrize("times", [
    # epoch µs as old Kineto wrote them: integers beyond 2^42, and with ns decimals
    [("1669783687466835", "39"), ("1669783687466901", "0"), ("1712195495521131.0", "135.162"),
     ("1712195495521131.123", "0.001")],
    # beyond 2^53 µs: no float holds these
    [(str(2**53 + 1), "1"), (f"{2**53 + 3}.999", "2.5"), ("9007199254740993.001", "0.999")],
    # more than 3 decimals, negative times, and an exponent (the event-by-event path)
    [("5138299378382.7119", "3.2251"), ("-0.5", "0.0004"), ("1.5e3", "2E-1")],
    # exponents and negative times of at most 3 decimals (the bulk path reads them)
    [("1.5e3", "2E-1"), ("12345e-3", "1E+2"), ("-0.5", "0.25"), ("-12.345", "0.0"), ("-7.0", "1.000")],
])
def test_times_are_exact_ns_on_every_path(tmp_path, monkeypatch, times):
    trace = tmp_path / "prof_rank-0.pt.trace.json"
    _times_trace(trace, times)
    _typed_only(monkeypatch)
    outcome, tables = _read(trace, tmp_path / "out")
    got = sorted((r["ts_ns"], r["dur_ns"]) for r in tables["cpu_ops"].to_pylist())
    assert got == sorted((_expected_ns(ts), _expected_ns(dur)) for ts, dur in times)


@pytest.mark.parametrize("damage", ["cut", "nan"])
def test_a_damaged_file_decoded_by_the_pool_is_read_by_the_streaming_parser(tmp_path, monkeypatch, damage):
    """A damaged piece found in another process sends the file to the streaming parser,
    which keeps every complete event and names the byte where the file breaks."""
    events = _events(3000)
    text = json.dumps({"traceEvents": events}, indent=2)
    if damage == "cut":
        text = text[: len(text) * 2 // 3]
    else:
        text = text.replace('"ph": "X"', '"ph": NaN', 1500).replace('"ph": NaN', '"ph": "X"', 1499)
    trace = tmp_path / "prof_rank-0.pt.trace.json"
    trace.write_text(text)
    monkeypatch.setattr(kineto_events, "PIECE_BYTES", 64 << 10)
    monkeypatch.setattr(torch_trace, "TYPED_READ_BYTES", 16 << 10)
    outcome, tables = _read_with(trace, tmp_path / "out", {"workers": 2})
    assert outcome["status"] == "partial" and "uncompressed byte" in outcome["message"]
    assert len(tables["cpu_ops"]) == _complete_events(text)


def _complete_events(text: str) -> int:
    """How many events of the traceEvents array parse whole before the file breaks (NaN is
    no JSON)."""
    def no_constant(name):
        raise ValueError(name)
    decoder, i, n = json.JSONDecoder(parse_constant=no_constant), text.index("[") + 1, 0
    while True:
        while i < len(text) and text[i] in " \n,":
            i += 1
        try:
            _, i = decoder.raw_decode(text, i)
        except ValueError:
            return n
        n += 1
