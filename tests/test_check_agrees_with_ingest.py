"""`rlwh check` and `rlwh ingest` give every file the same verdict, in the same words.

One rule (rlwh.ingest.discover's table, with rlwh.ingest.sniff's reading of first bytes)
says what a file is. The test runs check, then ingest, on every file of the real corpus
and on probes of files users keep beside their profiles, and compares check's verdict
per file with the `sources` row ingest wrote.
"""

from __future__ import annotations

import gzip
import json

import duckdb
import pytest
from conftest import FIXTURES, copy_fixture
from test_readers_nvtx import base_records, write_jsonl

from rlwh.config import Config
from rlwh.ingest.check import check
from rlwh.ingest.runner import ingest


def _agree(root, tmp) -> dict[str, tuple[str, str | None]]:
    """Check's verdicts, asserted equal to what ingest recorded; returns them."""
    verdicts = check(root).verdicts()
    summary = ingest(root, Config(db_path=tmp / "w.duckdb", workers=1))
    if not (tmp / "w.duckdb").exists():  # nothing to load: ingest publishes no warehouse
        assert {status for status, _ in verdicts.values()} == {"ignored"}
        assert any("nothing was written" in w for w in summary.warnings)
        return verdicts
    con = duckdb.connect(str(tmp / "w.duckdb"), read_only=True)
    recorded = {path: (status, message) for path, status, message
                in con.execute("select path, status, message from sources").fetchall()}
    con.close()
    assert set(recorded) == set(verdicts)
    for path, (status, message) in verdicts.items():
        got_status, got_message = recorded[path]
        if status == "ok":
            assert got_status in ("ok", "partial"), (path, got_status, got_message)
        else:
            assert got_status == status, (path, status, got_status, got_message)
        if status == "ignored":
            assert got_message == message, path  # the same words
    return verdicts


def test_files_that_are_not_profiles_get_one_verdict(tmp_path):
    root = tmp_path / "run"
    bench = root / "bench"
    bench.mkdir(parents=True)
    (bench / "results.jsonl").write_text(
        '{"suite": "attention", "forward_ms": 1.52, "backward_ms": 3.1}\n{"suite": "mlp", "forward_ms": 0.7}\n')
    (bench / "config.json").write_text(json.dumps({"lr": 1e-4, "batch": 8}))
    (bench / "empty.jsonl").write_text("")
    (bench / "notes.jsonl").write_text("forward 1.5 ms\n")
    (bench / "metrics.json.gz").write_bytes(gzip.compress(b'[{"step": 1, "loss": 0.5}]'))
    (root / "nsys").mkdir()
    write_jsonl(root / "nsys" / "worker_process_1.1.jsonl", base_records())
    (root / "nsys" / "legacy.json").write_text('{"Type":59,"NvtxEvent":{"Timestamp":"1","Text":"a"}}\n')
    verdicts = _agree(root, tmp_path)
    assert verdicts["bench/results.jsonl"][0] == "ignored"
    assert '"suite", "forward_ms"' in verdicts["bench/results.jsonl"][1]
    assert "not an nsys NVTX export" in verdicts["bench/results.jsonl"][1]
    assert {verdicts[f"bench/{n}"][0] for n in ("config.json", "empty.jsonl", "notes.jsonl", "metrics.json.gz")} \
        == {"ignored"}
    assert verdicts["nsys/worker_process_1.1.jsonl"] == ("ok", None)
    assert verdicts["nsys/legacy.json"][0] == "failed"


@pytest.mark.slow
@pytest.mark.parametrize("part", ["kineto", "snapshots-cuda", "ascend", "verl-logs"])
def test_every_real_file_gets_one_verdict(part, tmp_path):
    root = copy_fixture(f"real/{part}", tmp_path)
    assert (FIXTURES / "real" / part).is_dir()
    verdicts = _agree(root, tmp_path)
    assert verdicts
