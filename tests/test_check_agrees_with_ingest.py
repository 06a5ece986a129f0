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


def _same_words(check_message: str, ingest_message: str, root) -> bool:
    """Check's reason is in ingest's message, word for word (ingest names a file by its full
    path, check by its path in the profile dir; ingest may add what only a full read finds)."""
    said = ingest_message.replace(f"{root.resolve()}/", "").replace(f"{root}/", "")
    path, _, reason = check_message.partition(": ")
    return said.startswith(path) and reason in said


def _agree(root, tmp, words: bool = True) -> dict[str, tuple[str, str | None]]:
    """Check's verdicts, asserted equal to what ingest recorded; returns them. A file check
    calls partial ingest loads in part; one it calls ok ingest loads (whole, or in part for
    damage inside the file, which only a full read sees)."""
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
            assert _same_words(message, got_message, root), (path, message, got_message)  # the same words
        if status == "failed" and words:
            assert _same_words(message, got_message, root), (path, message, got_message)
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


def test_pickles_and_cut_traces_get_ingests_verdict(tmp_path):
    """A pickle that is no snapshot, a pickle that is no pickle, a cut snapshot, a cut
    gzipped trace and a cut plain one: the verdicts check gives, ingest gives."""
    import pickle

    root = tmp_path / "run"
    (root / "snaps").mkdir(parents=True)
    (root / "snaps" / "optimizer.pickle").write_bytes(pickle.dumps({"lr": 0.1, "betas": [0.9, 0.99]}))
    (root / "snaps" / "scores.pkl").write_bytes(pickle.dumps([1, 2, 3]))
    (root / "snaps" / "noise.pkl").write_bytes(bytes(range(7, 250)))
    snapshot = pickle.dumps({"segments": [], "device_traces": [[]]})
    (root / "snaps" / "cut.pickle").write_bytes(snapshot[:-3])
    trace = (FIXTURES / "torch_profile/actor_update/prof_rank-0.pt.trace.json.gz").read_bytes()
    (root / "tr").mkdir()
    (root / "tr" / "prof_rank-0.pt.trace.json.gz").write_bytes(trace[: len(trace) // 2])
    text = gzip.decompress(trace)
    (root / "tr" / "prof_rank-1.pt.trace.json").write_bytes(text[: len(text) * 2 // 3])
    (root / "tr" / "prof_rank-2.pt.trace.json").write_bytes(text[: text.rindex(b"}", 0, len(text) // 2) + 1])
    verdicts = _agree(root, tmp_path)
    assert verdicts["snaps/optimizer.pickle"][0] == verdicts["snaps/scores.pkl"][0] == "ignored"
    assert verdicts["snaps/noise.pkl"][0] == verdicts["snaps/cut.pickle"][0] == "failed"
    assert "\\x" not in verdicts["snaps/noise.pkl"][1] or "invalid load key" in verdicts["snaps/noise.pkl"][1]
    assert {verdicts[f"tr/prof_rank-{k}.pt.trace.json" + ("" if k else ".gz")][0] for k in range(3)} == {"partial"}


def test_the_bad_input_corpus_gets_ingests_verdict(tmp_path):
    """Every case of tests/data/bad (and the generated ones), each in its rank dir."""
    import test_bad_inputs as bad

    root = bad._profile(tmp_path / "profile")
    files = {**bad._committed_cases(), **bad._generated_cases()}
    for rank, case in enumerate(sorted(bad.CASES), start=1):
        name, data = files[case]
        bad._place(root, case, name, data, rank)
    verdicts = _agree(root, tmp_path)
    printable = [m for _, m in verdicts.values() if m and not m.isprintable()]
    assert printable == [], printable  # no reason prints undecoded bytes
    assert sum(1 for s, _ in verdicts.values() if s == "failed") >= 8
