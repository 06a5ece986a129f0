"""A rank's span is what its events cover, on every real Kineto trace in ../shared.

Expected spans are computed here from the raw trace with the standard library (gzip, json,
Decimal): the earliest start and latest end of every timed event that is neither metadata
(ph "M") nor the profiler's declared window (cat "Trace", "PyTorch Profiler (0)"), which
stays its own row in ranges (source 'profiler').
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest


def _raw(path: Path) -> dict:
    data = path.read_bytes()
    doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data, parse_float=Decimal)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def _ns(us) -> int:
    return int(Decimal(str(us)) * 1000)


def expected_spans(path: Path) -> tuple[tuple[int, int], tuple[int, int] | None]:
    """(what the events cover, the declared window or None), epoch ns."""
    doc = _raw(path)
    base = int(doc.get("baseTimeNanoseconds") or 0)
    starts, ends, declared = [], [], None
    for ev in doc["traceEvents"]:
        if "ts" not in ev or ev.get("ph") == "M":
            continue
        ts = Decimal(str(ev["ts"]))
        dur = ev.get("dur")
        if ev.get("cat") == "Trace":
            if ev.get("ph") == "X" and dur is not None:
                declared = (_ns(ts) + base, _ns(ts) + _ns(dur) + base)
            continue
        starts.append(ts)
        ends.append(ts + Decimal(str(dur)) if isinstance(dur, (int, Decimal)) else ts)
    return (_ns(min(starts)) + base, _ns(max(ends)) + base), declared


@pytest.fixture(scope="module")
def kineto(real_corpus):
    """The session's real-corpus warehouse (conftest.real_corpus, ingested once per test run;
    its Kineto traces are the captures under kineto/): (read-only connection, the corpus copy)."""
    root, warehouse = real_corpus
    con = duckdb.connect(str(warehouse), read_only=True)
    yield con, root
    con.close()


@pytest.mark.slow
def test_every_traces_span_is_what_its_events_cover(kineto):
    con, root = kineto
    captures = [c for (c,) in con.execute("select distinct capture from sources where kind = 'torch_trace' "
                                          "and capture like 'kineto/%'").fetchall()]
    assert len(captures) == 11
    for capture in captures:
        covered, declared = expected_spans(root / capture)
        spans = con.execute("select start_ns, end_ns from role_timeline where capture = ? and source = 'window'",
                            [capture]).fetchall()
        assert spans == [covered], capture
        windows = con.execute("select start_ns, end_ns from ranges where capture = ? and source = 'profiler'",
                              [capture]).fetchall()
        assert windows == ([declared] if declared else []), capture


@pytest.mark.slow
def test_the_mtia_trace_records_outside_its_declared_window(kineto):
    """The real MTIA trace: events from ~99 ms before the declared window to ~16 ms after."""
    con, root = kineto
    capture = "kineto/hta/mtia_inference_trace/mtia_inference_rank_0.json.gz"
    covered, declared = expected_spans(root / capture)
    assert declared[0] - covered[0] > 98_000_000 and covered[1] - declared[1] > 16_000_000
    span = con.execute("select start_ns, end_ns from role_timeline where capture = ?", [capture]).fetchone()
    assert span == covered
    skew = con.execute("select span_ns from rank_skew r join role_timeline t using (run, role, rank_id) "
                       "where t.capture = ?", [capture]).fetchone()[0]
    assert skew >= covered[1] - covered[0]
