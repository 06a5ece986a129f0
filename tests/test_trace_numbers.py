"""A trace_view.json event with a non-finite number in a field rlwh uses (ts, dur, pid, tid)
is skipped, and the file is partial with the count and the first one's place: it never
lands with a NULL duration or an id that is no id, and nothing else of the file is lost
(issue 40 item 2). The damage is written into a copy of a real Ascend rank here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb

from rlwh.ingest.runner import ingest

RANK = Path(__file__).resolve().parent / "data/real/ascend/msinsight-alexnet-level1/text/rank0_ascend_pt"
# Raw tokens json cannot write: each replaces a placeholder string in the dumped text.
TOKENS = {'"@-inf@"': "-inf", '"@1e309@"': "1e309", '"@NaN@"': "NaN"}


def _damage(events: list[dict]) -> list[tuple[int, str]]:
    """Damage four events in place; return (element, name) of each, in file order."""
    cpu = [i for i, e in enumerate(events) if e.get("cat") == "cpu_op"]
    device = [i for i, e in enumerate(events)
              if isinstance(e.get("args"), dict) and e["args"].get("Task Type") == "PCIE_DMA_SQE"]
    damage = {cpu[10]: ("dur", "@-inf@"), cpu[20]: ("pid", "@1e309@"), cpu[30]: ("ts", "@NaN@"),
              device[0]: ("dur", "@1e309@")}
    for i, (field, token) in damage.items():
        events[i][field] = token
    return sorted((i + 1, events[i]["name"]) for i in damage)


def _reader(db: Path) -> duckdb.DuckDBPyConnection:
    """The warehouse opened read-only once for all of a test's queries (an open costs ~25 ms)."""
    return duckdb.connect(str(db), read_only=True)


def test_an_event_with_a_non_finite_number_is_skipped_and_named(tmp_path, config):
    clean = tmp_path / "clean" / "rank0_ascend_pt"
    shutil.copytree(RANK, clean)
    damaged = tmp_path / "damaged" / "rank0_ascend_pt"
    shutil.copytree(RANK, damaged)
    trace = damaged / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(trace.read_text(encoding="utf-8"))
    hit = _damage(events)
    text = json.dumps(events)
    for placeholder, token in TOKENS.items():
        text = text.replace(placeholder, token)
    trace.write_text(text, encoding="utf-8")

    ingest(clean.parent, config, run="clean")
    ingest(damaged.parent, config, run="damaged")
    with _reader(config.db_path) as con:
        ((status, message),) = con.execute("select status, message from sources where run = 'damaged' "
                                           "and path like '%trace_view.json'").fetchall()
        assert status == "partial"
        assert "skipped 4 events" in message and f"element {hit[0][0]}, name {hit[0][1]!r}" in message
        count = "select run, count(*) from {} group by run order by run"
        ops = dict(con.execute(count.format("cpu_ops")).fetchall())
        assert ops["damaged"] == ops["clean"] - 3
        device = dict(con.execute(count.format("device_ops")).fetchall())
        assert device["damaged"] == device["clean"] - 1
        assert con.execute("select count(*) from cpu_ops where run = 'damaged' and (dur_ns is null or pid is null)"
                           ).fetchall() == [(0,)]
        # Every other file of the rank lands as it does undamaged.
        others = ("select path, status, rows from sources where run = '{}' and path not like '%trace_view.json'"
                  " order by 1")
        assert con.execute(others.format("damaged")).fetchall() == con.execute(others.format("clean")).fetchall()


def test_a_damaged_trace_costs_its_batch_nothing(tmp_path, config):
    """The same damage read in one batch with an intact copy: the intact rank is ok, whole."""
    for name in ("a", "b"):
        shutil.copytree(RANK, tmp_path / "run" / f"rank{'0' if name == 'a' else '1'}_ascend_pt")
    info = tmp_path / "run" / "rank1_ascend_pt" / "profiler_info_0.json"
    info.rename(info.with_name("profiler_info_1.json"))
    trace = tmp_path / "run" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    events = json.loads(trace.read_text(encoding="utf-8"))
    _damage(events)
    text = json.dumps(events)
    for placeholder, token in TOKENS.items():
        text = text.replace(placeholder, token)
    trace.write_text(text, encoding="utf-8")
    ingest(tmp_path / "run", config)
    with _reader(config.db_path) as con:
        statuses = dict(con.execute("select rank_id, status from sources where path like '%trace_view.json'")
                        .fetchall())
        ops = dict(con.execute("select rank_id, count(*) from cpu_ops group by rank_id").fetchall())
    assert statuses == {0: "ok", 1: "partial"}
    assert ops[0] == sum(1 for e in json.loads((RANK / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text(
        encoding="utf-8")) if e.get("cat") == "cpu_op") == ops[1] + 3
