"""The publish model: writers work on a copy, readers are never blocked, one writer at a time."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import duckdb
import pytest
from conftest import copy_fixture

from rlwh.errors import WarehouseBusy
from rlwh.ingest.runner import ingest
from rlwh.warehouse.session import write_session
from rlwh.warehouse.upgrade import initialize


def test_settings_reach_the_views(config):
    initialize(dataclasses.replace(config, ops_per_layer=4))
    con = duckdb.connect(str(config.db_path), read_only=True)
    assert con.execute("select value from internal.settings where name = 'gmm_ops_per_layer'").fetchone() == ("4",)
    con.close()


def test_failed_write_leaves_the_published_file_untouched(config):
    initialize(config)
    before = config.db_path.read_bytes()
    with pytest.raises(RuntimeError):
        with write_session(config) as session:
            session.con.execute("create table scratch (x int)")
            session.changed = True
            raise RuntimeError("killed mid-ingest")
    assert config.db_path.read_bytes() == before
    assert not list(config.db_path.parent.glob("*.ingest*"))


def test_second_writer_gives_up_with_a_clear_message(config):
    initialize(config)
    quick = dataclasses.replace(config, lock_timeout=0.2)
    with write_session(config):
        with pytest.raises(WarehouseBusy, match="being written by pid"):
            with write_session(quick):
                pass


@pytest.mark.slow
def test_reader_holding_the_file_open_does_not_block_ingest(tmp_path, config):
    profile = copy_fixture("rl-insight-samples/memory_data", tmp_path)
    initialize(config)
    # A separate process holds the published file open read-only, like DBeaver or `duckdb -readonly`.
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys, time
            con = duckdb.connect({str(config.db_path)!r}, read_only=True)
            print(con.execute("select count(*) from memory_records").fetchone()[0], flush=True)
            sys.stdin.readline()
            print(con.execute("select count(*) from memory_records").fetchone()[0], flush=True)
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "0"
        summary = ingest(profile, config)
        assert summary.failed == 0
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "0"  # its consistent (old) view
    finally:
        holder.kill()
    con = duckdb.connect(str(config.db_path), read_only=True)
    assert con.execute("select count(*) from memory_records").fetchone()[0] == 49
