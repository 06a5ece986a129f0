"""communication_matrix.json and analysis.db's CommAnalyzerMatrix -> communication_links, and the
slowest_links view over them, on the real alexnet capture (two ranks, a text and a db export):
every link equals the file's own figures, read here with json (exact decimals) and sqlite3;
damaged files fail or load in part naming the place, and check says so before ingest."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import statistics
from decimal import ROUND_HALF_UP, Decimal

import duckdb
import pytest
from conftest import FIXTURES
from test_check_agrees_with_ingest import _agree

from rlwh.ingest.check import check

ALEXNET = "real/ascend/msinsight-alexnet-level1"
OUTPUT = "ASCEND_PROFILER_OUTPUT"
COLUMNS = ("rank_id, step, op_kind, name, \"group\", is_total, op_name, src_rank, dst_rank, transport_type, "
           "size_bytes, duration_ns, bandwidth_gbps")


def _million(value) -> int | None:
    """MB -> bytes and ms -> ns (both x 10^6), half up, from the decimal as the file writes it."""
    if value is None or value == "":
        return None
    return int((Decimal(str(value)) * 1_000_000).to_integral_value(ROUND_HALF_UP))


def _json_links(path, rank: int) -> list[tuple]:
    """Every link of a communication_matrix.json, as the table's columns, by hand."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle, parse_float=Decimal)
    rows = []
    for step_key, sections in data.items():
        step = int(step_key.removeprefix("step"))
        for section, ops in sections.items():
            for label, links in ops.items():
                name, _, group = label.rpartition("@")
                for link, f in links.items():
                    src, dst = (int(x) for x in link.split("-"))
                    rows.append((rank, step, section, name, group, name.endswith("-total"), f.get("Op Name"), src,
                                 dst, f["Transport Type"], _million(f["Transit Size(MB)"]),
                                 _million(f["Transit Time(ms)"]), float(f["Bandwidth(GB/s)"])))
    return rows


@pytest.fixture(scope="module")
def alexnet(alexnet_warehouse):
    """(profile dir, read-only connection to its warehouse): both exports of both ranks, the
    test run's one ingest of them (conftest)."""
    profile, db = alexnet_warehouse
    con = duckdb.connect(str(db), read_only=True)
    yield profile, con
    con.close()


@pytest.mark.parametrize("rank", [0, 1])
def test_every_link_of_the_text_export_lands_as_the_file_records_it(alexnet, rank):
    profile, con = alexnet
    capture = f"text/rank{rank}_ascend_pt"
    want = _json_links(profile / capture / OUTPUT / "communication_matrix.json", rank)
    got = con.execute(f"select {COLUMNS} from communication_links where capture = ?", [capture]).fetchall()
    assert len(want) == 48 and sorted(got, key=repr) == sorted(want, key=repr)
    # The file is loaded now, not ignored.
    status = con.execute("select kind, status, rows from sources where path = ?",
                         [f"{capture}/{OUTPUT}/communication_matrix.json"]).fetchone()
    assert status == ("ascend_comm_matrix", "ok", 48)


@pytest.mark.parametrize("rank", [0, 1])
def test_the_db_export_lands_the_matrix_of_its_analysis_db(alexnet, rank):
    profile, con = alexnet
    capture = f"db/rank{rank}_ascend_pt"
    db = sqlite3.connect(f"file:{profile / capture / OUTPUT / 'analysis.db'}?mode=ro", uri=True)
    cells = db.execute("select rowid, step, type, hccl_op_name, group_name, op_name, src_rank, dst_rank, "
                       "transport_type, cast(transit_size as text), cast(transit_time as text), bandwidth "
                       "from CommAnalyzerMatrix").fetchall()
    db.close()
    want = [(row, rank, int(step.removeprefix("step")), kind, name, group, name.endswith("-total"), op or None,
             int(src), int(dst), transport, _million(size), _million(time), bandwidth)
            for row, step, kind, name, group, op, src, dst, transport, size, time, bandwidth in cells]
    got = con.execute(f"select source_row, {COLUMNS} from communication_links where capture = ?",
                      [capture]).fetchall()
    assert len(want) == 48 and sorted(got) == sorted(want)


def test_slowest_links_rank_the_step_links_as_computed_here(alexnet):
    """The text export's totals between ranks, ordered by bandwidth (ties: rank, peer) by hand;
    the transport's median over the same links; a peer's global rank where its file is here."""
    profile, con = alexnet
    links = [r for rank in (0, 1)
             for r in _json_links(profile / f"text/rank{rank}_ascend_pt" / OUTPUT / "communication_matrix.json", rank)
             if r[5] and r[7] != r[8]]
    links.sort(key=lambda r: (r[12], r[0], r[8]))
    median = statistics.median(r[12] for r in links if r[9] == "HCCS")
    want = [(k, len(links), r[0], r[3].removesuffix("-total"), r[7], r[8], {0: 0, 1: 1}.get(r[8]), r[9], r[10],
             r[11], r[12], k, len(links), median) for k, r in enumerate(links, start=1)]
    got = con.execute("""select slowness_rank, links, rank_id, collective, src_rank, dst_rank, dst_rank_id,
                                transport_type, size_bytes, duration_ns, bandwidth_gbps, transport_rank,
                                transport_links, transport_median_gbps
                         from slowest_links where role = 'text' order by slowness_rank""").fetchall()
    assert len(want) == 14 and {r[7] for r in want} == {"HCCS"}
    assert [g[:13] for g in got] == [w[:13] for w in want]
    assert all(g[13] == pytest.approx(w[13], rel=1e-12) for g, w in zip(got, want))


def _matrix_capture(tmp_path, text: str):
    """A rank dir holding a communication_matrix.json with `text` and the real step_trace_time.csv."""
    output = tmp_path / "profile" / "rank0_ascend_pt" / OUTPUT
    output.mkdir(parents=True)
    (output / "communication_matrix.json").write_text(text, encoding="utf-8")
    shutil.copy(FIXTURES / ALEXNET / "text/rank0_ascend_pt" / OUTPUT / "step_trace_time.csv", output)
    return tmp_path / "profile"


def _real_matrix_text() -> str:
    return (FIXTURES / ALEXNET / "text/rank0_ascend_pt" / OUTPUT / "communication_matrix.json").read_text()


def _landed(tmp_path):
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        source = con.execute("select status, rows, message from sources "
                             "where path like '%communication_matrix.json'").fetchone()
        counts = con.execute("select (select count(*) from communication_links), "
                             "(select count(*) from step_times)").fetchone()
        return source, counts
    finally:
        con.close()


def test_a_cut_matrix_fails_naming_line_and_column_and_nothing_else_is_lost(tmp_path):
    cut = _real_matrix_text()[:1000]
    with pytest.raises(json.JSONDecodeError) as where:
        json.loads(cut)
    profile = _matrix_capture(tmp_path, cut)
    verdicts = _agree(profile, tmp_path)  # check's verdict is ingest's, in its words
    assert verdicts["rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication_matrix.json"][0] == "failed"
    (status, rows, message), (links, steps) = _landed(tmp_path)
    assert (status, rows, links, steps) == ("failed", 0, 0, 1)
    assert f"communication_matrix.json: invalid JSON at line {where.value.lineno} column {where.value.colno}" in message


def test_a_bad_link_is_named_by_its_place_and_the_other_links_land(tmp_path):
    data = json.loads(_real_matrix_text())
    ops = data["step50"]["collective"]
    ops["allreduce-top1@17522688603477080586"]["0-3"]["Transit Size(MB)"] = "lots"
    middle = ops["allreduce-middle@17522688603477080586"]
    middle["zero-five"] = middle.pop("0-5")
    profile = _matrix_capture(tmp_path, json.dumps(data))
    verdicts = _agree(profile, tmp_path)
    assert verdicts["rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication_matrix.json"][0] == "partial"
    (status, rows, message), (links, steps) = _landed(tmp_path)
    assert (status, rows, links, steps) == ("partial", 46, 46, 1)
    assert re.search(r"kept 46 links, skipped 2: link \d+ \(step50 / collective / "
                     r"allreduce-top1@17522688603477080586 / 0-3\): Transit Size\(MB\) 'lots' is not a number", message)
    assert "allreduce-middle@17522688603477080586 / zero-five): the link key is not <src>-<dst>" in message


def test_a_matrix_that_is_no_object_fails(tmp_path):
    profile = _matrix_capture(tmp_path, "[1, 2]")
    assert check(profile).verdicts()["rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication_matrix.json"] == (
        "failed", "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication_matrix.json: expected a JSON object at the "
        "top level")
    _agree(profile, tmp_path)
