"""A file that changes while it is read (a profiler still appending, a copy in progress) is
never `ok`: its sources row says it changed and is partial, and the next ingest loads it as
it is then (issue 40 item 3). The change is made by the test at the moment the reader has
read the file, on both routes: read in place by the warehouse, and parsed by its reader."""

from __future__ import annotations

import csv
from pathlib import Path

import duckdb
import pytest

from rlwh import synth
from rlwh.ingest import in_place
from rlwh.ingest.runner import ingest
from rlwh.readers import ascend_csv

EXTRA_ROWS = 7


def _append_rows(path: Path, n: int) -> None:
    """n more rows like the file's last one, as a profiler still writing would add."""
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines + [lines[-1]] * n) + "\n", encoding="utf-8")


def _csv_rows(path: Path) -> int:
    with open(path, newline="", encoding="utf-8") as handle:
        return sum(1 for _ in csv.DictReader(handle))


def _source(db: Path, path: str) -> tuple:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("select status, rows, message from sources where path = ?", [path]).fetchone()
    finally:
        con.close()


@pytest.mark.parametrize("route", ["in_place", "per_file"])
def test_a_csv_appended_while_read_is_partial_then_loaded_whole(tmp_path, config, monkeypatch, route):
    profile = synth.write_ascend_profile(tmp_path / "run", roles=("actor_update",), ranks=2, n_ops=100,
                                         n_allocs=120, n_stacks=10)
    victim = sorted(profile.rglob("operator_memory.csv"))[1]
    rel = victim.relative_to(profile).as_posix()
    rows_read = _csv_rows(victim)
    if route == "in_place":
        real = ascend_csv.read_in_place

        def read_then_append(con, paths, context, scratch):
            outcomes = real(con, paths, context, scratch)
            if victim in paths:
                _append_rows(victim, EXTRA_ROWS)
            return outcomes

        monkeypatch.setattr(ascend_csv, "read_in_place", read_then_append)
    else:
        monkeypatch.setattr(in_place, "reads_in_place", lambda kind: False)
        real_read = ascend_csv.read

        def read_then_append_one(path, sink, context):
            outcome = real_read(path, sink, context)
            if path == victim:
                _append_rows(victim, EXTRA_ROWS)
            return outcome

        monkeypatch.setattr(ascend_csv, "read", read_then_append_one)
    summary = ingest(profile, config)
    status, rows, message = _source(config.db_path, rel)
    assert (status, rows) == ("partial", rows_read)
    assert "changed while it was read" in message and rel in message
    assert summary.count("partial") == 1
    monkeypatch.undo()
    ingest(profile, config)  # the file as it is now
    assert _source(config.db_path, rel)[:2] == ("ok", rows_read + EXTRA_ROWS)
