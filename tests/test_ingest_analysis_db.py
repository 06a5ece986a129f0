"""communication_links from every analysis.db that holds CommAnalyzerMatrix rows: beside a
loaded db export (its reader reads it), alone, or beside a text export that is loaded
instead of the db and has no communication_matrix.json. Expected links come from the raw
analysis.db with sqlite3."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, copy_fixture

from rlwh.config import Config
from rlwh.ingest.runner import ingest

ALEXNET = "real/ascend/msinsight-alexnet-level1"
OUTPUT = "ASCEND_PROFILER_OUTPUT"


def _matrix(rank: int) -> list[tuple]:
    """(src_rank, dst_rank, transport, bandwidth) of each CommAnalyzerMatrix row."""
    path = FIXTURES / ALEXNET / f"db/rank{rank}_ascend_pt/{OUTPUT}/analysis.db"
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return sorted(con.execute("""select cast(src_rank as integer), cast(dst_rank as integer), transport_type,
                                     bandwidth from CommAnalyzerMatrix""").fetchall())
    finally:
        con.close()


def _ingest(profile: Path, tmp_path: Path) -> tuple[list[tuple], dict[str, tuple]]:
    db = tmp_path / "w.duckdb"
    summary = ingest(profile, Config(db_path=db, workers=1), run="r")
    assert summary.failed == 0
    con = duckdb.connect(str(db), read_only=True)
    try:
        links = sorted(con.execute("""select src_rank, dst_rank, transport_type, bandwidth_gbps
                                      from communication_links""").fetchall())
        sources = {Path(p).name: (kind, status, message) for p, kind, status, message in con.execute(
            "select path, kind, status, message from sources").fetchall()}
    finally:
        con.close()
    return links, sources


def _rank_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    """A rank dir rank0_ascend_pt holding the named fixture files (name -> fixture path)."""
    profile = tmp_path / "profile"
    output = profile / "rank0_ascend_pt" / OUTPUT
    output.mkdir(parents=True)
    for name, relative in files.items():
        target = output.parent if name.startswith("profiler_info") else output
        copy_fixture(relative, target)
    for path in profile.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return profile


def test_an_analysis_db_alone_lands_its_links(tmp_path):
    profile = _rank_dir(tmp_path, {"analysis.db": f"{ALEXNET}/db/rank0_ascend_pt/{OUTPUT}/analysis.db",
                                   "profiler_info_0.json": f"{ALEXNET}/db/rank0_ascend_pt/profiler_info_0.json"})
    links, sources = _ingest(profile, tmp_path)
    assert links == _matrix(0) and len(links) == 48
    assert sources["analysis.db"][:2] == ("ascend_analysis_db", "ok")
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    transfers = con.execute("select name, transport_type, bandwidth_gbps from collective_transfers").fetchall()
    con.close()
    path = FIXTURES / ALEXNET / f"db/rank0_ascend_pt/{OUTPUT}/analysis.db"
    raw = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    want = set(raw.execute("select hccl_op_name, transport_type, bandwidth from CommAnalyzerBandwidth").fetchall())
    raw.close()
    assert len(transfers) == len(want) == 8 and set(transfers) == want


def test_beside_a_text_export_loaded_instead_of_its_db(tmp_path):
    """The text export without communication_matrix.json is loaded, so the db is not: its
    analysis.db still gives the links."""
    text = FIXTURES / ALEXNET / f"text/rank0_ascend_pt/{OUTPUT}"
    files = {p.name: f"{ALEXNET}/text/rank0_ascend_pt/{OUTPUT}/{p.name}" for p in text.iterdir()
             if p.name in ("step_trace_time.csv", "npu_module_mem.csv")}
    files.update({name: f"{ALEXNET}/db/rank0_ascend_pt/{OUTPUT}/{name}"
                  for name in ("analysis.db", "ascend_pytorch_profiler_0.db")})
    files["profiler_info_0.json"] = f"{ALEXNET}/text/rank0_ascend_pt/profiler_info_0.json"
    links, sources = _ingest(_rank_dir(tmp_path, files), tmp_path)
    assert sources["ascend_pytorch_profiler_0.db"][1] == "ignored"
    assert links == _matrix(0)


@pytest.mark.parametrize("with_db", [True, False])
def test_analysis_db_is_read_once(tmp_path, with_db):
    """Beside a loaded db its reader reads analysis.db; beside communication_matrix.json (and no
    db) the JSON gives the links and analysis.db says so."""
    files = {"analysis.db": f"{ALEXNET}/db/rank0_ascend_pt/{OUTPUT}/analysis.db",
             "profiler_info_0.json": f"{ALEXNET}/db/rank0_ascend_pt/profiler_info_0.json"}
    if with_db:
        files["ascend_pytorch_profiler_0.db"] = f"{ALEXNET}/db/rank0_ascend_pt/{OUTPUT}/ascend_pytorch_profiler_0.db"
    else:
        files["communication_matrix.json"] = f"{ALEXNET}/text/rank0_ascend_pt/{OUTPUT}/communication_matrix.json"
    links, sources = _ingest(_rank_dir(tmp_path, files), tmp_path)
    assert len(links) == 48  # never twice
    kind, status, message = sources["analysis.db"]
    assert (kind, status) == ("ignored", "ignored")
    assert ("db beside it" in message) if with_db else ("communication_matrix.json beside it" in message)
    shutil.rmtree(tmp_path / "profile")


@pytest.mark.slow
def test_a_warehouse_that_ignored_it_reads_it_after_the_upgrade(tmp_path):
    """Before migration 0014 an analysis.db alone was ignored, and an unchanged file is skipped;
    the migration marks it for reading again, so the next ingest lands its links."""
    from rlwh.warehouse.schema import migrate

    profile = _rank_dir(tmp_path, {"analysis.db": f"{ALEXNET}/db/rank0_ascend_pt/{OUTPUT}/analysis.db",
                                   "profiler_info_0.json": f"{ALEXNET}/db/rank0_ascend_pt/profiler_info_0.json"})
    _ingest(profile, tmp_path)
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    con.execute("delete from communication_links")  # as the release before left it
    con.execute("update sources set kind = 'ignored', status = 'ignored' where path like '%analysis.db'")
    con.execute("delete from internal.migrations where name like '0014%'")
    assert migrate(con) == ["0014_reload_ascend_device_sources.sql"]
    con.close()
    links, sources = _ingest(profile, tmp_path)
    assert links == _matrix(0) and sources["analysis.db"][:2] == ("ascend_analysis_db", "ok")
