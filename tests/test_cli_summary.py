"""`rlwh summary`, `rlwh compare` and `rlwh forget` on real warehouses built by ingest."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from rlwh import synth
from rlwh.cli import cli
from rlwh.ingest.jobs import FACT_TABLES
from rlwh.warehouse.forget import tables_with_runs


def _profile(path: Path) -> Path:
    synth.write_ascend_profile(path, roles=("actor_update", "rollout"), ranks=2, n_ops=300, n_allocs=300)
    return path


def _scaled(source: Path, target: Path, factor: float) -> Path:
    """A copy whose allocations are `factor` times larger (a memory regression)."""
    shutil.copytree(source, target)
    for csv in target.rglob("operator_memory.csv"):
        lines = csv.read_text(encoding="utf-8").splitlines(keepends=True)
        out = [lines[0]]
        for line in lines[1:]:
            name, size, rest = line.split(",", 2)
            out.append(f"{name},{float(size) * factor:.1f},{rest}")
        csv.write_text("".join(out), encoding="utf-8")
    return target


def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """run-1 and run-2 (50% more memory), and run-2's trace of one rank cut (partial)."""
    tmp = tmp_path_factory.mktemp("summary")
    first = _profile(tmp / "run-1")
    second = _scaled(first, tmp / "run-2", 1.5)
    trace = sorted(second.rglob("trace_view.json"))[-1]
    trace.write_bytes(trace.read_bytes()[: trace.stat().st_size * 3 // 4])
    db = tmp / "w.duckdb"
    assert _invoke("ingest", first, "--db", db, "-q").exit_code == 0
    assert _invoke("ingest", second, "--db", db, "-q").exit_code == 5  # partial
    return db, trace.relative_to(second)


def _scalar(db: Path, sql: str, params=()):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchone()[0]
    finally:
        con.close()


@pytest.mark.slow
def test_summary_of_a_run(two_runs):
    db, cut = two_runs
    result = _invoke("summary", "run-2", "--db", db)
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("run run-2: ") and "1 partial" in out
    for role in ("actor_update", "rollout"):
        for rank in (0, 1):
            assert any(line.split()[:2] == [role, str(rank)] for line in out.splitlines())
    top = out[out.index("Call stacks holding"):out.index("Files that failed")]
    for column in ("call_stack_top", "user_frame"):
        longest = _scalar(db, f"select max_by({column}, length({column})) from (select * from memory_peak_breakdown "
                              "where run = 'run-2' qualify row_number() over (partition by role, rank_id "
                              "order by live_bytes desc, name) <= 3)")
        assert longest and longest in top, column  # frames printed whole
    files = out[out.index("Files that failed or loaded only in part"):]
    assert "partial" in files and str(cut) in files


@pytest.mark.slow
def test_summary_defaults_to_the_run_ingested_last(two_runs):
    db, _ = two_runs
    assert _invoke("summary", "--db", db).output.startswith("run run-2: ")
    missing = _invoke("summary", "nope", "--db", db)
    assert missing.exit_code == 1 and "no run 'nope'" in missing.output


@pytest.mark.slow
def test_compare_shows_both_runs_and_the_change(two_runs):
    db, _ = two_runs
    result = _invoke("compare", "run-1", "run-2", "--db", db, "--format", "csv")
    assert result.exit_code == 3, result.output  # exitcodes.REGRESSION, as nightly's
    header, *rows = [line.split(",") for line in result.output.strip().splitlines()]
    assert header[:5] == ["role", "rank_id", "a_peak_mib", "b_peak_mib", "peak_change_pct"]
    by_key = {(r[0], r[1]): dict(zip(header, r)) for r in rows}
    assert set(by_key) == {(role, rank) for role in ("actor_update", "rollout") for rank in ("0", "1")}
    for row in by_key.values():
        assert float(row["peak_change_pct"]) == pytest.approx(50.0, abs=1.0)
        assert float(row["b_peak_mib"]) == pytest.approx(1.5 * float(row["a_peak_mib"]), rel=0.02)
        assert "peak memory" in row["regression"]
    table = _invoke("compare", "run-1", "run-2", "--db", db)
    assert "a = run-1, b = run-2" in table.output and "regression: actor_update rank 0: peak_live_bytes" in table.output
    assert table.exit_code == 3
    same = _invoke("compare", "run-1", "run-1", "--db", db)
    assert same.exit_code == 0 and "0 regression(s)" in same.output, same.output
    unknown = _invoke("compare", "run-1", "nope", "--db", db)
    assert unknown.exit_code == 1 and "no run 'nope'" in unknown.output


@pytest.mark.slow
def test_forget_removes_every_row_of_the_run_and_only_those(two_runs, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(two_runs[0], db)
    con = duckdb.connect(str(db), read_only=True)
    tables = tables_with_runs(con)
    before = {t: con.execute(f'select count(*) filter (where run = $r), count(*) filter (where run <> $r) '
                             f'from {t}', {"r": "run-1"}).fetchone() for t in tables}
    con.close()
    assert {"internal.memory_record_ops", "internal.memory_timeline_rows", "memory_records", "cpu_ops",
            "sources"} <= set(tables)
    assert before["internal.memory_record_ops"][0] > 0 and before["internal.memory_timeline_rows"][0] > 0
    result = _invoke("forget", "run-1", "--db", db)
    assert result.exit_code == 0, result.output
    read = sum(mine for t, (mine, _) in before.items() if t in FACT_TABLES)
    derived = sum(mine for t, (mine, _) in before.items() if t.startswith("internal."))
    assert f"{read:,} rows read from its files and {derived:,} derived from them" in result.output
    con = duckdb.connect(str(db), read_only=True)
    after = {t: con.execute(f'select count(*) filter (where run = $r), count(*) filter (where run <> $r) '
                            f'from {t}', {"r": "run-1"}).fetchone() for t in tables}
    con.close()
    assert after == {t: (0, others) for t, (_, others) in before.items()}
    assert not (db.parent / (db.name + ".ingest")).exists()
    again = _invoke("forget", "run-1", "--db", db)
    assert again.exit_code == 1 and "no run 'run-1'" in again.output


@pytest.mark.slow
def test_forget_with_a_reader_holding_the_file_open(two_runs, tmp_path):
    """A reader keeps its snapshot (the run still there) and does not block the forget."""
    db = tmp_path / "w.duckdb"
    shutil.copy(two_runs[0], db)
    reader = duckdb.connect(str(db), read_only=True)
    try:
        held = reader.execute("select count(*) from memory_records where run = 'run-2'").fetchone()[0]
        assert held > 0
        result = _invoke("forget", "run-2", "--db", db)
        assert result.exit_code == 0, result.output
        assert reader.execute("select count(*) from memory_records where run = 'run-2'").fetchone()[0] == held
    finally:
        reader.close()
    assert _scalar(db, "select count(*) from memory_records where run = 'run-2'") == 0
    assert _scalar(db, "select count(*) from memory_records where run = 'run-1'") > 0


@pytest.mark.slow
def test_summary_compare_and_forget_on_a_small_warehouse(fresh_db, tmp_path):
    """The fast loop's check of the three commands: two one-rank runs, the second with twice
    the memory, written straight into a warehouse."""
    from conftest import insert_rows

    for run, scale in (("run-1", 1), ("run-2", 2)):
        fresh_db.execute("insert into runs values (?, ?, now()::timestamp, now()::timestamp)", [run, f"/p/{run}"])
        fresh_db.execute("""insert into sources (source_id, run, role, rank_id, capture, kind, path, status, rows,
                              ingested_at) values (?, ?, 'actor', 0, 'c', 'ascend_memory_csv', 'c/m.csv', 'ok', 3,
                              now()::timestamp)""", [scale, run])
        insert_rows(fresh_db, "memory_records", ["source_row", "name", "size_bytes", "alloc_ns", "release_ns"],
                    [(1, "aten::empty", 100 * 2**20 * scale, 10, 50), (2, "aten::mul", 50 * 2**20 * scale, 20, None)],
                    run=run, role="actor", rank_id=0, capture="c", source_id=scale, device="NPU:0")
    fresh_db.close()
    db = tmp_path / "fresh.duckdb"
    summary = _invoke("summary", "--db", db)
    assert summary.exit_code == 0 and summary.output.startswith("run run-2: "), summary.output
    compared = _invoke("compare", "run-1", "run-2", "--db", db, "--format", "csv")
    header, row = [line.split(",") for line in compared.output.strip().splitlines()]
    got = dict(zip(header, row))
    assert (got["a_peak_mib"], got["b_peak_mib"]) == ("150.0", "300.0") and float(got["peak_change_pct"]) == 100
    page = _invoke("compare", "run-1", "run-2", "--db", db, "--out", tmp_path / "compare")
    assert page.exit_code == 3 and list((tmp_path / "compare").rglob("*.html")), page.output  # 100% more memory
    forgot = _invoke("forget", "run-1", "--db", db)
    assert forgot.exit_code == 0, forgot.output
    assert _scalar(db, "select count(distinct run) from memory_records") == 1
