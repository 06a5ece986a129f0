"""rlwh.warehouse.derive refreshes a group of keys in one statement per table: the rows
must not depend on which keys share a group (each key alone is the old per-key refresh)."""

from __future__ import annotations

import re
import shutil

import duckdb
import pytest

from rlwh.warehouse import derive

DERIVED = ("internal.memory_record_ops", "internal.memory_timeline_rows", "internal.torch_memory_blocks")


def _rows(con, table: str) -> list[tuple]:
    return sorted(con.execute(f"select * from {table}").fetchall(), key=repr)


def test_each_key_alone_gives_the_rows_of_one_group(demo_warehouse, tmp_path):
    db = tmp_path / "w.duckdb"
    shutil.copy(demo_warehouse, db)
    con = duckdb.connect(str(db))
    try:
        together = {t: _rows(con, t) for t in DERIVED}
        derive.mark_all(con)
        keys = derive.marked_keys(con)
        groups = derive.key_groups(con, keys, group_rows=1)
        assert len(keys) >= 4 and len(groups) == len(keys)  # every key a group of its own
        assert len(derive.key_groups(con, keys)) == 1
        derive.clear_marks(con)
        for table in DERIVED:
            con.execute(f"delete from {table}")
        assert derive.refresh_all(con, group_rows=1) == len(keys)
        for table in DERIVED:
            alone = _rows(con, table)
            assert alone == together[table], table
        assert sum(len(rows) for rows in together.values()) > 1000
        sources = {s for (s,) in con.execute("select distinct source from internal.memory_timeline_rows").fetchall()}
        assert {"ascend", "torch"} <= sources
    finally:
        con.close()


def test_a_key_that_lost_its_memory_rows_loses_its_derived_rows(tmp_path, config):
    """A group without memory rows runs only the deletes: a rank whose operator_memory.csv
    is rewritten empty keeps no derived row, and its cpu_ops stay."""
    from rlwh import synth
    from rlwh.ingest.runner import ingest

    profile = synth.write_ascend_profile(tmp_path / "run", roles=("actor_update",), ranks=2, n_ops=200,
                                         n_allocs=150, n_stacks=20)
    ingest(profile, config)
    memory_csv = sorted(profile.rglob("operator_memory.csv"))[0]
    capture = memory_csv.parent.parent.relative_to(profile).as_posix()

    def derived_rows() -> dict[str, int]:
        con = duckdb.connect(str(config.db_path), read_only=True)
        try:
            return {t: con.execute(f"select count(*) from {t} where capture = ?", [capture]).fetchone()[0]
                    for t in (*DERIVED, "cpu_ops")}
        finally:
            con.close()

    before = derived_rows()
    assert before["internal.memory_record_ops"] == 150 and before["internal.memory_timeline_rows"] > 150
    memory_csv.write_text(memory_csv.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    ingest(profile, config)
    after = derived_rows()
    assert after == {**{t: 0 for t in DERIVED}, "cpu_ops": before["cpu_ops"]}


def test_every_statement_says_what_it_needs():
    """A statement that derives rows names the tables it needs (a table refresh never finds
    held would skip it for good); only deletes of old rows and drops run for every group."""
    for statement in derive.statements():
        code = re.sub(r"--.*", "", statement.sql).strip().lower()
        if code.startswith(("delete", "drop")):
            assert not statement.needs, code[:60]
        else:
            assert statement.needs and statement.needs <= set(derive.MEMORY_TABLES), code[:60]


def test_a_group_runs_only_what_its_rows_need(demo_warehouse, tmp_path, monkeypatch):
    """An Ascend rank's group skips the PyTorch statements and a PyTorch trace's the Ascend
    ones, and each gets the rows it got with every statement run (the test above)."""
    db = tmp_path / "w.duckdb"
    shutil.copy(demo_warehouse, db)
    ran: list[frozenset[str]] = []
    original = derive.Statement.run
    monkeypatch.setattr(derive.Statement, "run", lambda self, con, keys: (ran.append(self.needs),
                                                                          original(self, con, keys)))
    con = duckdb.connect(str(db))
    try:
        for kind, table in (("ascend", "memory_records"), ("torch", "torch_memory_events")):
            key = con.execute(f"select run, role, rank_id, capture from {table} limit 1").fetchone()
            ran.clear()
            derive.clear_marks(con)
            con.execute("insert into _rlwh_dirty values (?, ?, ?, ?)", list(key))
            assert derive.refresh(con) == 1
            needed = {t for needs in ran for t in needs}
            assert table in needed and needed <= {table, "memory_records", "torch_memory_events"}, kind
            other = "torch_memory_events" if kind == "ascend" else "memory_records"
            assert frozenset({other}) not in ran and frozenset({"snapshot_trace_blocks"}) not in ran, kind
    finally:
        con.close()


@pytest.mark.slow  # a scale check: 150,000 rows, ~1.4 CPU-s
def test_live_bytes_of_many_ranks_and_devices_are_each_devices_own_running_sum():
    """The Ascend timeline takes one running sum over every device of a group and subtracts
    what the devices before sum to (ingest/derived/memory.sql). Expected live bytes are
    summed here in Python per (rank, device), in the documented event order (time,
    releases before allocs, then the CSV row), over more events than two of DuckDB's row
    groups (122,880 rows), so its threads share the work."""
    from tests.conftest import migrated_memory

    con = migrated_memory()
    con.execute("set threads = 2")
    con.execute("""
        insert into memory_records by name
        select 'r' as run, 'actor_update' as role, (i % 3)::integer as rank_id, 'c' as capture,
               (i % 3) as source_id, i // 3 + 1 as source_row, 'aclnnAdd' as name,
               1 + (i * 7919) % 4096 as size_bytes,
               (i * 104729) % 200000 as alloc_ns,
               if(i % 5 = 0, null, (i * 104729) % 200000 + (i * 31) % 5000) as release_ns,
               if(i % 7 = 0, 'NPU:1', 'NPU:0') as device
        from range(150000) as t(i)
    """)
    records = con.execute("select rank_id, device, source_row, size_bytes, alloc_ns, release_ns "
                          "from memory_records").fetchall()
    derive.mark_all(con)
    derive.refresh(con)
    events: dict[tuple, list] = {}
    for rank, device, row, size, alloc, release in records:
        events.setdefault((rank, device), []).append((alloc, 1, row, size))
        if release is not None:
            events[(rank, device)].append((release, 0, row, -size))
    expected = {}
    for key, found in events.items():
        live = 0
        for _ts, is_alloc, row, delta in sorted(found):
            live += delta
            expected[(*key, row, "alloc" if is_alloc else "release")] = live
    got = {(rank, device, row, event): live for rank, device, row, event, live in con.execute(
        "select rank_id, device, origin_row, event, live_bytes from internal.memory_timeline_rows").fetchall()}
    assert len(got) == len(expected) > 122_880 * 2
    assert got == expected
