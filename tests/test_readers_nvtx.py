"""rlwh.readers.nvtx on the RL-Insight nsys exports and on generated jsonl files."""

import json
import random
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLES, landed_rows

from rlwh.errors import SourceError
from rlwh.readers import nvtx
from rlwh.readers.base import TableSink

FIXTURES = SAMPLES / "nvtx_data"
NVTX_DIR = FIXTURES / "nvtx_profile"
GTID = (1 << 56) | (4242 << 24) | 4243  # vm 1, pid 4242, tid 4243


COLUMNS = ["role", "rank_id", "source", "domain", "name", "start_ns", "end_ns", "pid", "tid", "thread", "clock"]


def run_reader(path: Path, tmp_path: Path, context: dict | None = None):
    """Read `path` into a fresh TableSink and land it with the job's SQL (ingest/nvtx_jsonl.sql,
    which maps the export's fields to columns); return the outcome and the ranges rows."""
    tmp_path.mkdir(parents=True, exist_ok=True)  # a sink makes its folder, never the folders above it
    sink = TableSink(tmp_path / "out")
    outcome = nvtx.read(path, sink, context or {})
    sink.close()
    return outcome, landed_rows("nvtx_jsonl", sink, "ranges", COLUMNS)


def write_jsonl(path: Path, records: list, shuffle_seed: int | None = None) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def base_records(rank='"3"'):
    return [
        {"table": "ANALYSIS_DETAILS", "startTime": 1_000_000_000_000, "stopTime": 1_000_100_000_000,
         "duration": 100_000_000, "globalVid": 1 << 56},
        {"table": "META_DATA_CAPTURE", "name": "PROCESS_0:ENVIRONMENT_VARIABLE", "value": f"RANK={rank}"},
        {"table": "META_DATA_CAPTURE", "name": "PROCESS_0:ENVIRONMENT_VARIABLE", "value": "WORLD_SIZE=8"},
        {"table": "META_DATA_CAPTURE", "name": "PROCESS_0:ENVIRONMENT_VARIABLE", "value": "HF_TOKEN=abc"},
    ]


def test_rl_insight_fixture_ranges(tmp_path):
    shutil.copytree(NVTX_DIR, tmp_path / "nvtx")
    outcome, rows = run_reader(tmp_path / "nvtx" / "worker_process_70000.1.jsonl", tmp_path)
    assert outcome.status == "ok" and outcome.message is None
    assert outcome.rank["rank_id"] == 0
    # The export does not say when its session clock began in UTC: no epoch start is made up.
    assert outcome.rank["capture_started_ns"] is None
    assert outcome.rank["metadata"]["clock"] == {"clock": "nsys_session", "session_start_ns": 6589107243593703,
                                                 "utc_epoch_ns": None}
    assert rows == [{
        "role": "discovered_role", "rank_id": 0, "source": "nvtx", "domain": "default",
        "name": "compute_log_prob",
        "start_ns": 6589107243593703 + 20979323, "end_ns": 6589107243593703 + 21019655556,
        "pid": (282747880941798 >> 24) & 0xFFFFFF, "tid": 282747880941798 & 0xFFFFFF, "thread": None,
        "clock": "nsys_session",
    }]


@pytest.mark.parametrize("name, rank, phase", [
    ("worker_process_70001.1.jsonl", 1, "compute_log_prob"),
    ("worker_process_70001.2.jsonl", 1, "compute_values"),
    ("worker_process_70000.3.jsonl", 0, "update_critic"),
])
def test_rl_insight_fixture_every_file(tmp_path, name, rank, phase):
    """A range is a phase inside its export's role (discovery's): its name never becomes the role."""
    shutil.copy(NVTX_DIR / name, tmp_path / name)
    outcome, rows = run_reader(tmp_path / name, tmp_path)
    assert outcome.rank["rank_id"] == rank
    assert [(r["role"], r["name"], r["rank_id"]) for r in rows] == [("discovered_role", phase, rank)]
    assert rows[0]["end_ns"] > rows[0]["start_ns"]


def generated_records():
    recs = base_records() + [
        {"table": "StringIds", "id": 7, "value": "actor_update"},
        {"table": "StringIds", "id": 8, "value": "MyDomain"},
        {"table": "NVTX_EVENTS", "eventType": 75, "domainId": 5, "textId": 8, "globalTid": GTID, "start": 1},
        {"table": "NVTX_EVENTS", "eventType": 75, "domainId": 6, "text": "Inline Domain", "globalTid": GTID,
         "start": 1},
        # push/pop by textId, start/end with inline text, a mark, two ranges tied in time
        {"table": "NVTX_EVENTS", "eventType": 59, "textId": 7, "domainId": 0, "globalTid": GTID,
         "start": 100, "end": 900, "rangeId": 1},
        {"table": "NVTX_EVENTS", "eventType": 60, "text": "rollout", "domainId": 5, "globalTid": GTID,
         "start": 100, "end": 900, "rangeId": 2},
        {"table": "NVTX_EVENTS", "eventType": 34, "text": "checkpoint", "domainId": 6, "globalTid": GTID,
         "start": 500},
        {"table": "NVTX_EVENTS", "eventType": 60, "text": "unfinished", "globalTid": GTID, "start": 950},
        {"table": "NVTX_EVENTS", "eventType": 33, "text": "a category, not a range", "globalTid": GTID,
         "start": 1},
        {"table": "CUPTI_ACTIVITY_KIND_KERNEL", "start": 5, "end": 6, "shortName": 7},
    ]
    return recs


def expected_rows():
    base = 1_000_000_000_000
    common = {"rank_id": 3, "source": "nvtx", "pid": 4242, "tid": 4243, "thread": None, "clock": "nsys_session"}
    return sorted([
        dict(common, role="discovered_role", name="actor_update", domain="default",
             start_ns=base + 100, end_ns=base + 900),
        dict(common, role="discovered_role", name="rollout", domain="MyDomain", start_ns=base + 100, end_ns=base + 900),
        dict(common, role="discovered_role", name="checkpoint", domain="Inline Domain",
             start_ns=base + 500, end_ns=base + 500),
        dict(common, role="discovered_role", name="unfinished", domain="default", start_ns=base + 950, end_ns=None),
    ], key=lambda r: (r["start_ns"], r["name"]))


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_generated_any_line_order(tmp_path, seed):
    """Strings and domains may come after the events that use them."""
    path = write_jsonl(tmp_path / "worker_process_1.1.jsonl", generated_records(), seed)
    outcome, rows = run_reader(path, tmp_path)
    assert outcome.status == "ok"
    assert sorted(rows, key=lambda r: (r["start_ns"], r["name"])) == expected_rows()
    assert outcome.rank["world_size"] == 8
    assert outcome.rank["metadata"]["environment"]["HF_TOKEN"] == "<redacted>"


def test_strings_after_events(tmp_path):
    recs = generated_records()
    strings = [r for r in recs if r["table"] == "StringIds"]
    path = write_jsonl(tmp_path / "w.jsonl", [r for r in recs if r["table"] != "StringIds"] + strings)
    _, rows = run_reader(path, tmp_path)
    assert {r["name"] for r in rows} == {"actor_update", "rollout", "checkpoint", "unfinished"}


def test_unquoted_rank_and_unknown_text(tmp_path):
    recs = base_records(rank="5") + [
        {"table": "NVTX_EVENTS", "eventType": 59, "textId": 99, "globalTid": GTID, "start": 1, "end": 2},
        {"table": "NVTX_EVENTS", "eventType": 59, "text": "x", "domainId": 42, "globalTid": GTID,
         "start": 3, "end": 4},
    ]
    outcome, rows = run_reader(write_jsonl(tmp_path / "w.jsonl", recs), tmp_path, {"role": "actor"})
    assert outcome.rank["rank_id"] == 5
    # A range whose name is none of the export's strings names no phase: skipped, its line named.
    assert [(r["role"], r["name"], r["domain"]) for r in rows] == [("discovered_role", "x", None)]
    assert outcome.status == "partial" and "line 5 (an NVTX range whose name is none" in outcome.message


def test_missing_rank_uses_context_else_errors(tmp_path):
    recs = [r for r in generated_records() if r["table"] != "META_DATA_CAPTURE"]
    path = write_jsonl(tmp_path / "w.jsonl", recs)
    outcome, rows = run_reader(path, tmp_path, {"rank_id": 7})
    assert outcome.rank["rank_id"] == 7 and {r["rank_id"] for r in rows} == {7}
    with pytest.raises(SourceError, match="w.jsonl.*RANK"):
        run_reader(path, tmp_path / "again")


def test_bad_lines_skipped_and_named(tmp_path):
    recs = generated_records()
    lines = [json.dumps(r) for r in recs]
    lines.insert(2, '{"table": "NVTX_EVENTS", "eventType": 59, "text": "broken", "start": 1')
    lines.append('{"table": "CUPTI_ACTIVITY_KIND_KERNEL", "start": 5, "en')  # a cut last line
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(lines))
    outcome, rows = run_reader(path, tmp_path)
    assert outcome.status == "partial"
    assert str(path) in outcome.message
    assert "line 3" in outcome.message and f"line {len(lines)}" in outcome.message
    assert sorted(rows, key=lambda r: (r["start_ns"], r["name"])) == expected_rows()


def test_garbage_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(nvtx, "MAX_BAD_LINES", 10)
    path = tmp_path / "w.jsonl"
    path.write_text("\n".join(["not json"] * 50))
    with pytest.raises(SourceError, match="not an nsys jsonlines export"):
        run_reader(path, tmp_path)


def test_session_start_in_utc_makes_epoch_times(tmp_path):
    utc = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
    recs = generated_records() + [{"table": "TARGET_INFO_SESSION_START_TIME", "utcEpochNs": utc,
                                   "utcTime": "2026-01-01T00:00:00Z"}]
    outcome, rows = run_reader(write_jsonl(tmp_path / "w.jsonl", recs, shuffle_seed=4), tmp_path)
    assert outcome.rank["capture_started_ns"] == utc
    by_name = {r["name"]: r for r in rows}
    assert (by_name["rollout"]["start_ns"], by_name["rollout"]["end_ns"]) == (utc + 100, utc + 900)
    assert {r["clock"] for r in rows} == {"epoch"}


def test_legacy_json_export_fails_saying_how_to_export_jsonlines(tmp_path):
    path = tmp_path / "report.json"
    path.write_text('{"Type":59,"NvtxEvent":{"Type":59,"Timestamp":"100","Text":"actor_update","EndTimestamp":"900"}}\n'
                    '{"Type":48,"CompositeEvent":{}}\n')
    with pytest.raises(SourceError) as err:
        run_reader(path, tmp_path, {"rank_id": 0})
    assert str(path) in str(err.value) and "line 1" in str(err.value)
    assert "nsys export --type jsonlines" in str(err.value)


def test_an_export_without_nvtx_events_says_so(tmp_path):
    recs = [r for r in generated_records() if r["table"] != "NVTX_EVENTS"]
    outcome, rows = run_reader(write_jsonl(tmp_path / "w.jsonl", recs), tmp_path)
    assert rows == []
    assert outcome.status == "ok" and str(tmp_path / "w.jsonl") in outcome.message
    assert "no NVTX ranges or marks" in outcome.message


def test_no_rank_anywhere_is_rank_0_when_discovery_says_single_process(tmp_path):
    recs = [r for r in generated_records() if r["table"] != "META_DATA_CAPTURE"]
    outcome, rows = run_reader(write_jsonl(tmp_path / "w.jsonl", recs), tmp_path, {"single_process_rank0": True})
    assert outcome.rank["rank_id"] == 0 and {r["rank_id"] for r in rows} == {0}
    assert "read as rank 0" in outcome.message
