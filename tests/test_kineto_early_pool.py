"""A big PyTorch trace read in the writer's process (issue 38 items 2 and 3): its pieces
are byte ranges that the decoding processes read themselves, cut exactly at event
boundaries; the decoding pool starts once the plan is made and ends once the trace is
decoded; the rows are those of a trace decoded in one process."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path

import duckdb
import pytest

from rlwh.ingest.runner import ingest
from rlwh.readers import kineto_decoding, kineto_events

TRACE = Path(__file__).resolve().parent / "data/torch_profile/actor_update/prof_rank-0.pt.trace.json.gz"
TABLES = ("cpu_ops", "torch_memory_events", "device_ops", "ranges", "call_stacks")


def test_spans_are_the_array_cut_between_events(tmp_path, monkeypatch):
    """Every span ends at a '}' and the next starts at a '{', only ',' and whitespace lie
    between two spans, the first starts right after the array's '[' and the rest follows
    the last."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f'op {i} }}, {{ "x": [{{}}, {{}}]', "ts": i, "dur": 1,
               "pid": 1, "tid": 1, "args": {"nested": [{"a": 1}, {"b": 2}]}} for i in range(400)]
    path = tmp_path / "prof_rank-0.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "}, {"}, indent=1))
    monkeypatch.setattr(kineto_events, "PIECE_BYTES", 2000)
    monkeypatch.setattr(kineto_events, "SPAN_WINDOW", 700)
    data = path.read_bytes()
    *cut, rest = list(kineto_events.spans(str(path)))
    assert len(cut) > 10
    assert cut[0].start == re.search(rb'"traceEvents"\s*:\s*\[', data).end()
    for span, after in zip(cut, cut[1:]):
        assert data[span.end - 1:span.end] == b"}" and data[after.start:after.start + 1] == b"{"
        assert re.fullmatch(rb"\s*,\s*", data[span.end:after.start])
    assert re.fullmatch(rb"\s*,\s*", data[cut[-1].end:len(data) - len(rest.data)])


def _rows(db: Path, run: str) -> dict[str, list]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for table in TABLES:
            where = "" if table == "call_stacks" else " where run = ?"
            cols = [c for (c,) in con.execute(
                "select column_name from duckdb_columns() where table_name = ? and column_name not in "
                "('run', 'source_id')", [table]).fetchall()]
            quoted = ", ".join(f'"{c}"' for c in cols)
            out[table] = sorted(map(str, con.execute(f"select {quoted} from {table}{where}",
                                                     [run] if where else []).fetchall()))
        return out
    finally:
        con.close()


@pytest.mark.slow
def test_the_pool_starts_after_the_plan_and_ends_with_the_trace(tmp_path, config, monkeypatch):
    folder = tmp_path / "run" / "actor_update"
    folder.mkdir(parents=True)
    (folder / "prof_rank-0.pt.trace.json").write_bytes(gzip.decompress(TRACE.read_bytes()))
    one = ingest(tmp_path / "run", config, run="one")  # config: workers=1, decoded here
    assert one.failed == 0
    monkeypatch.setattr(kineto_events, "PIECE_BYTES", 64 << 10)  # pieces enough for the pool
    made, prestarted = [], []
    get_pool, prestart = kineto_decoding._get_pool, kineto_decoding.prestart
    monkeypatch.setattr(kineto_decoding, "_get_pool", lambda n: made.append(n) or get_pool(n))
    monkeypatch.setattr(kineto_decoding, "prestart", lambda *a: prestarted.append(a) or prestart(*a))
    two = ingest(tmp_path / "run", dataclasses.replace(config, workers=2), run="two")
    assert two.failed == 0 and len(prestarted) == 1
    assert made and kineto_decoding._pool is None  # started early, ended with the trace
    assert _rows(config.db_path, "two") == _rows(config.db_path, "one")


def test_a_pool_started_for_a_file_that_is_no_trace_ends(tmp_path):
    from rlwh.errors import SourceError
    from rlwh.readers import torch_trace
    from rlwh.readers.base import TableSink

    path = tmp_path / "prof_rank-0.pt.trace.json"
    path.write_text('{"schemaVersion": 1}')
    kineto_decoding._get_pool(2)
    with pytest.raises(SourceError, match="no traceEvents"):
        torch_trace.read(path, TableSink(tmp_path / "out"), {"rank_id": 0, "workers": 2})
    assert kineto_decoding._pool is None
