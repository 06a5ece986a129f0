"""A Kineto event nested deeper than the JSON decoders follow is skipped, its place named,
and the file is partial; no other file waits on it (issue 40 item 1). It made ingest run
for minutes and end in `unexpected RecursionError` with no position, while check said ok.

The input is a real trace (HTA's backward_thread.json) with an array nested N deep
written into one event's args, beside an intact copy of the same trace. Every damaged
file of this module sits in one run, each in a folder (a role) of its own, ingested once
and checked once (two processes, not two per case); each test reads its files' verdicts.
The timeouts guard against a hang; they are no speed test.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from cli_runs import checked, ingested

from rlwh.readers.kineto_events import MAX_DEPTH

# Three rlwh processes (two ingests, a check) over traces nested 200,000 deep: ~2 CPU-s, slow
# (pyproject.toml: end-to-end runs of several processes).
pytestmark = pytest.mark.slow

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
    beside the damaged files must say the same (it holds no call stacks, and says so)."""
    root = tmp_path_factory.mktemp("alone") / "run"
    (root / "good").mkdir(parents=True)
    shutil.copy(REAL, root / "good" / "rank0.pt.trace.json")
    return ingested(root, root.parent / "w.duckdb")["good/rank0.pt.trace.json"]


DEPTHS = [2_000, 20_000, 200_000]
NOT_LISTS = [('"not a list"', "a string"), ("{}", "an object"), ("12", "a number"), ("null", "null")]


def _damaged_files() -> dict[str, bytes]:
    """Every damaged file of this module by its path in the run, the intact trace beside them."""
    files = {f"deep{depth}/rank0.pt.trace.json": _with_nesting(depth)[0] for depth in DEPTHS}
    data, event, _ = _with_nesting(200_000, b'{"a": ', b"}")
    files["cut/rank0.pt.trace.json.gz"] = gzip.compress(data[: event + 300_000])  # cut inside the deep event
    text, nested = REAL.read_bytes(), b"[" * 5000 + b"]" * 5000
    files["top/rank0.pt.trace.json"] = text.replace(b"{", b'{"deviceProperties": ' + nested + b",", 1)
    files["top/rank1.pt.trace.json"] = text[: text.rindex(b"}")] + b', "x": ' + nested + b"}\n"
    for i, (value, _) in enumerate(NOT_LISTS):
        files[f"critic{i}/prof_rank-0.pt.trace.json"] = b'{"traceEvents": %s}\n' % value.encode()
    files["good/rank0.pt.trace.json"] = REAL.read_bytes()
    return files


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory) -> tuple[dict, dict]:
    """(ingest's verdict, check's verdict) of each file of _damaged_files(), by its path."""
    root = tmp_path_factory.mktemp("damaged") / "run"
    for path, data in _damaged_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    got = ingested(root, root.parent / "w.duckdb", timeout=60)
    return got, checked(root, got, timeout=60)


def test_the_intact_trace_beside_the_damaged_ones_is_read_as_alone(verdicts, intact):
    got, said = verdicts
    assert got["good/rank0.pt.trace.json"] == intact
    assert said["good/rank0.pt.trace.json"] == ("ok", None)


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_deep_event_is_skipped_and_named(depth, verdicts, intact):
    path = f"deep{depth}/rank0.pt.trace.json"
    _, event, past = _with_nesting(depth)
    got, said = verdicts
    status, message = got[path]
    assert status == "partial", message
    where = (f"element 3 of traceEvents, at uncompressed byte {event}: nested past {MAX_DEPTH} levels, "
             f"deeper than the JSON decoders follow, at uncompressed byte {past}")
    skipped = f"{path}: skipped 1 malformed event (the first: {where})"
    # The rest of the trace is the intact one's: the same note that it holds no stacks,
    # of one op fewer (the skipped event is one of the trace's cpu_ops).
    ops = sum(e.get("cat") == "cpu_op" for e in json.loads(REAL.read_bytes())["traceEvents"])
    assert f"({ops} ops, none with a stack)" in intact[1]
    rest = intact[1].replace("good/", f"deep{depth}/").replace(f"({ops} ops,", f"({ops - 1} ops,")
    assert message == f"{skipped}; {rest}"
    assert said[path][0] == "partial" and where in said[path][1]


def test_a_deep_event_in_a_gzipped_trace_cut_short(verdicts):
    """Cut inside the deep event, gzipped: the streaming pass keeps the events before it."""
    got, said = verdicts
    status, message = got["cut/rank0.pt.trace.json.gz"]
    assert status == "partial" and "kept the 2 complete events before it" in message, message
    assert said["cut/rank0.pt.trace.json.gz"][0] == "partial"


def test_a_deep_top_level_key_fails_the_file(verdicts):
    """Nesting outside the events (metadata before or after traceEvents) is no trace rlwh
    can read: failed, in the same words in check where check reads it."""
    text = REAL.read_bytes()
    got, said = verdicts
    before = len(b'{"deviceProperties": ') + MAX_DEPTH  # the '[' that makes the value 257 levels deep
    after = text.rindex(b"}") + len(b', "x": ') + MAX_DEPTH
    words = "the value of the top-level key {} nests past 256 levels at uncompressed byte {}: no trace rlwh can read"
    assert got["top/rank0.pt.trace.json"] == (
        "failed", "top/rank0.pt.trace.json: " + words.format("'deviceProperties'", before))
    assert got["top/rank1.pt.trace.json"] == (
        "failed", "top/rank1.pt.trace.json: " + words.format("'x' after traceEvents", after))
    assert said["top/rank0.pt.trace.json"] == got["top/rank0.pt.trace.json"]
    assert said["top/rank1.pt.trace.json"] == got["top/rank1.pt.trace.json"]


@pytest.mark.parametrize("index", range(len(NOT_LISTS)), ids=[kind for _, kind in NOT_LISTS])
def test_trace_events_that_are_no_list_fail_the_file_in_check_and_ingest_alike(verdicts, index):
    """Ingest said ok (a ranks row and a note that the file gave no rows), check said the
    JSON was cut while being written."""
    path = f"critic{index}/prof_rank-0.pt.trace.json"
    got, said = verdicts
    expected = ("failed", f"{path}: traceEvents is {NOT_LISTS[index][1]}, not a list of events: no trace rlwh can read")
    assert got[path] == expected
    assert said[path] == expected
