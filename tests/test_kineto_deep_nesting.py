"""A Kineto event nested deeper than the JSON decoders follow is skipped, its place named,
and the file is partial; no other file waits on it (issue 40 item 1). It made ingest run
for minutes and end in `unexpected RecursionError` with no position, while check said ok.

The input is a real trace (HTA's backward_thread.json) with an array nested N deep
written into one event's args, beside an intact copy of the same trace. The timeouts
guard against a hang; they are no speed test.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from cli_runs import checked, ingested

from rlwh.readers.kineto_events import MAX_DEPTH

REAL = Path(__file__).resolve().parent / "data/real/kineto/hta/call_stack/backward_thread.json"
# The third event (a cpu_op): its args get the nested value after this key.
_ANCHOR = b'"Sequence number": 714649'


def _with_nesting(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> tuple[bytes, int, int]:
    """The real trace with one value nested `depth` deep in the third event's args; also
    that event's first byte and the byte where its nesting passes MAX_DEPTH levels."""
    text = REAL.read_bytes()
    at = text.index(_ANCHOR) + len(_ANCHOR)
    deep = b', "deep": ' + opener * depth + b"1" + closer * depth
    event = text.rindex(b"{", 0, text.rindex(b'"args"', 0, at))
    # Levels: the event's object, its args, then the nested value's own.
    past = at + len(b', "deep": ') + MAX_DEPTH - 2
    return text[:at] + deep + text[at:], event, past


@pytest.fixture(scope="module")
def intact(tmp_path_factory) -> tuple[str, str | None]:
    """What the intact trace's row in `sources` says when it is ingested alone: its copy
    beside a deep file must say the same (it holds no call stacks, and says so)."""
    root = tmp_path_factory.mktemp("alone") / "run"
    (root / "good").mkdir(parents=True)
    shutil.copy(REAL, root / "good" / "rank0.pt.trace.json")
    return ingested(root, root.parent / "w.duckdb")["good/rank0.pt.trace.json"]


def _profile(tmp_path: Path, name: str, data: bytes) -> Path:
    root = tmp_path / "run"
    (root / "deep").mkdir(parents=True)
    (root / "deep" / name).write_bytes(data)
    (root / "good").mkdir()
    shutil.copy(REAL, root / "good" / "rank0.pt.trace.json")
    return root


@pytest.mark.parametrize("depth", [2_000, 20_000, 200_000])
def test_a_deep_event_is_skipped_and_named(tmp_path, depth, intact):
    data, event, past = _with_nesting(depth)
    root = _profile(tmp_path, "rank0.pt.trace.json", data)
    got = ingested(root, tmp_path / "w.duckdb")
    status, message = got["deep/rank0.pt.trace.json"]
    assert status == "partial", message
    where = (f"element 3 of traceEvents, at uncompressed byte {event}: nested past {MAX_DEPTH} levels, "
             f"deeper than the JSON decoders follow, at uncompressed byte {past}")
    skipped = f"deep/rank0.pt.trace.json: skipped 1 malformed event (the first: {where})"
    # The rest of the trace is the intact one's: the same note that it holds no stacks,
    # of one op fewer (the skipped event is one of the trace's cpu_ops).
    ops = sum(e.get("cat") == "cpu_op" for e in json.loads(REAL.read_bytes())["traceEvents"])
    assert f"({ops} ops, none with a stack)" in intact[1]
    rest = intact[1].replace("good/", "deep/").replace(f"({ops} ops,", f"({ops - 1} ops,")
    assert message == f"{skipped}; {rest}"
    assert got["good/rank0.pt.trace.json"] == intact
    said = checked(root, got)
    assert said["deep/rank0.pt.trace.json"][0] == "partial" and where in said["deep/rank0.pt.trace.json"][1]
    assert said["good/rank0.pt.trace.json"] == ("ok", None)


def test_a_deep_event_in_a_gzipped_trace_cut_short(tmp_path, intact):
    """Cut inside the deep event, gzipped: the streaming pass keeps the events before it."""
    data, event, _ = _with_nesting(200_000, b'{"a": ', b"}")
    root = _profile(tmp_path, "rank0.pt.trace.json.gz", gzip.compress(data[: event + 300_000]))
    got = ingested(root, tmp_path / "w.duckdb")
    status, message = got["deep/rank0.pt.trace.json.gz"]
    assert status == "partial" and "kept the 2 complete events before it" in message, message
    assert got["good/rank0.pt.trace.json"] == intact
    assert checked(root, got)["deep/rank0.pt.trace.json.gz"][0] == "partial"


def test_a_deep_top_level_key_fails_the_file(tmp_path, intact):
    """Nesting outside the events (metadata before or after traceEvents) is no trace rlwh
    can read: failed, in the same words in check where check reads it."""
    text = REAL.read_bytes()
    head = text.replace(b"{", b'{"deviceProperties": ' + b"[" * 5000 + b"]" * 5000 + b",", 1)
    tail = text[: text.rindex(b"}")] + b', "x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    root = _profile(tmp_path, "rank0.pt.trace.json", head)
    (root / "deep" / "rank1.pt.trace.json").write_bytes(tail)
    got = ingested(root, tmp_path / "w.duckdb")
    before = len(b'{"deviceProperties": ') + MAX_DEPTH  # the '[' that makes the value 257 levels deep
    after = text.rindex(b"}") + len(b', "x": ') + MAX_DEPTH
    said = "the value of the top-level key {} nests past 256 levels at uncompressed byte {}: no trace rlwh can read"
    assert got["deep/rank0.pt.trace.json"] == (
        "failed", "deep/rank0.pt.trace.json: " + said.format("'deviceProperties'", before))
    assert got["deep/rank1.pt.trace.json"] == (
        "failed", "deep/rank1.pt.trace.json: " + said.format("'x' after traceEvents", after))
    assert got["good/rank0.pt.trace.json"] == intact
    said = checked(root, got)
    assert said["deep/rank0.pt.trace.json"] == got["deep/rank0.pt.trace.json"]
    assert said["deep/rank1.pt.trace.json"] == got["deep/rank1.pt.trace.json"]


@pytest.mark.parametrize("value, kind", [('"not a list"', "a string"), ("{}", "an object"), ("12", "a number"),
                                         ("null", "null")])
def test_trace_events_that_are_no_list_fail_the_file_in_check_and_ingest_alike(tmp_path, value, kind):
    """Ingest said ok (a ranks row and a note that the file gave no rows), check said the
    JSON was cut while being written."""
    root = tmp_path / "run"
    (root / "critic").mkdir(parents=True)
    (root / "critic" / "prof_rank-0.pt.trace.json").write_text('{"traceEvents": %s}\n' % value, encoding="utf-8")
    said = f"critic/prof_rank-0.pt.trace.json: traceEvents is {kind}, not a list of events: no trace rlwh can read"
    got = ingested(root, tmp_path / "w.duckdb")
    assert got["critic/prof_rank-0.pt.trace.json"] == ("failed", said)
    assert checked(root, got)["critic/prof_rank-0.pt.trace.json"] == ("failed", said)
