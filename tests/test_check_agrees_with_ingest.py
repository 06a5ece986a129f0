"""`rlwh check` and `rlwh ingest` give every file the same verdict, in the same words.

One rule (rlwh.ingest.discover's table, with rlwh.ingest.sniff's reading of first bytes)
says what a file is. The test runs check, then ingest, on every file of the real corpus
and on probes of files users keep beside their profiles, and compares check's verdict
per file with the `sources` row ingest wrote.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
import shutil

import duckdb
import pytest
from conftest import FIXTURES, copy_fixture
from test_readers_nvtx import base_records, write_jsonl

from rlwh.config import Config
from rlwh.ingest.check import check
from rlwh.ingest.runner import ingest

SNAPSHOTS = FIXTURES / "real" / "snapshots-cuda" / "cs336-medium"


def _same_words(check_message: str, ingest_message: str, root) -> bool:
    """Check's reason is in ingest's message, word for word (ingest names a file by its full
    path, check by its path in the profile dir; ingest may add what only a full read finds)."""
    said = ingest_message.replace(f"{root.resolve()}/", "").replace(f"{root}/", "")
    path, _, reason = check_message.partition(": ")
    return said.startswith(path) and reason in said


def _agree(root, tmp, words: bool = True, exact: bool = False) -> dict[str, tuple[str, str | None]]:
    """Check's verdicts, asserted equal to what ingest recorded; returns them. A file check
    calls partial ingest loads in part; one it calls ok ingest loads (whole, or in part for
    damage inside the file, which only a full read sees), unless `exact`: the damage lies
    where check reads, and ok is ok. A partial file's reason is in ingest's words too."""
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
        # sources names a file by its path in the profile dir, as check does (issue 40 item 4)
        assert str(root.resolve()) not in (got_message or ""), (path, got_message)
        if status == "ok" and not exact:
            assert got_status in ("ok", "partial"), (path, got_status, got_message)
        else:
            assert got_status == status, (path, status, got_status, got_message)
        if status == "ignored":
            assert _same_words(message, got_message, root), (path, message, got_message)  # the same words
        if status == "failed" and words:
            assert _same_words(message, got_message, root), (path, message, got_message)
        if status == "partial" and exact:
            assert _same_words(message.split(": ingest")[0], got_message, root), (path, message, got_message)
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


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch ran-pickle-code",))


def _real_snapshot() -> dict:
    """The real CUDA training snapshot, loaded with no global allowed."""
    class Plain(pickle.Unpickler):
        def find_class(self, module, name):
            raise AssertionError(f"the fixture asks for {module}.{name}")

    with open(SNAPSHOTS / "medium_128_training_memory_snapshot.pickle", "rb") as handle:
        return Plain(handle).load()


def _pickles(root) -> dict[str, str]:
    """Pickles users keep beside profiles, small and over 64 KiB (check's head), each in a
    rank dir: path -> the status ingest must give."""
    snapshot = _real_snapshot()
    big = pickle.dumps(snapshot, protocol=4)
    first = snapshot["segments"][0]  # without its blocks' stacks: a file check reads whole under any limit
    segment = {**first, "blocks": [{k: v for k, v in b.items() if k != "frames"} for b in first["blocks"]]}
    bad_address = {**segment, "address": "0x7f00"}  # a segment address that is no integer
    # A trace that allocates at the address of a block the segments hold, and never frees it
    # (so the segments and the trace disagree: the address is allocated twice).
    held = next(b for b in segment["blocks"] if b["state"] == "active_allocated")
    address = held.get("address", segment["address"])
    twice = [{"action": "alloc", "addr": address, "size": held["size"], "stream": 0, "frames": []}] * 2
    files = {
        "optimizer.pickle": (pickle.dumps({"lr": 0.1, "betas": [0.9, 0.99]}), "failed"),
        "scores.pkl": (pickle.dumps([1, 2, 3]), "failed"),
        "empty.pkl": (b"", "failed"),
        "noise.pkl": (bytes(range(7, 250)), "failed"),
        "cut.pickle": (pickle.dumps({"segments": [], "device_traces": [[]]})[:-3], "failed"),
        "evil.pickle": (pickle.dumps({"segments": [], "device_traces": [], "x": _RunsCode()}), "failed"),
        "segments_only.pickle": (pickle.dumps({"segments": snapshot["segments"][:3]}), "ok"),
        "old_list.pickle": (pickle.dumps(snapshot["segments"][:3]), "ok"),
        "small_malformed.pickle": (pickle.dumps({"segments": [bad_address], "device_traces": [[]]}), "failed"),
        "small_disagreeing.pickle": (pickle.dumps({"segments": [segment], "device_traces": [twice]}), "partial"),
        "big_snapshot.pickle": (big, "ok"),
        "big_cut.pickle": (big[: len(big) // 2], "failed"),
        "big_old_list.pickle": (pickle.dumps(snapshot["segments"]), "ok"),
        "big_weights.pkl": (pickle.dumps({"weights": list(range(50_000))}), "failed"),
        "big_evil.pkl": (pickle.dumps([_RunsCode(), list(range(50_000))]), "failed"),
        "big_noise.pkl": (bytes(range(7, 250)) * 400, "failed"),
    }
    want = {}
    for rank, (name, (data, status)) in enumerate(sorted(files.items())):
        assert not name.startswith("big") or len(data) > 65536, name
        assert not name.startswith("small") or len(data) < 65536, name
        path = root / "snaps" / f"rank{rank}" / name
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        want[str(path.relative_to(root))] = status
    return want


@pytest.mark.parametrize("load_limit", [None, 0], ids=["loaded-whole", "judged-by-head"])
def test_pickles_get_ingests_verdict(load_limit, tmp_path, monkeypatch):
    """A pickle that is no snapshot, asks for code, is no pickle, is empty or cut fails in
    both, in the same words; a snapshot, one with segments only and an old list-format one
    load. With no load limit, check judges every pickle over 64 KiB by its first bytes."""
    from rlwh.ingest import check as check_module

    if load_limit is not None:
        monkeypatch.setattr(check_module, "_PICKLE_LOAD_LIMIT", load_limit)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "run"
    want = _pickles(root)
    verdicts = _agree(root, tmp_path)
    assert {path: status for path, (status, _) in verdicts.items()} == want
    assert not (tmp_path / "ran-pickle-code").exists()
    messages = {path.rsplit("/", 1)[1]: message for path, (_, message) in verdicts.items() if message}
    assert all(m.isprintable() for m in messages.values()), messages  # no reason prints undecoded bytes
    for name in ("optimizer.pickle", "scores.pkl"):
        assert "not a memory snapshot" in messages[name] and "found a" in messages[name]
    assert "refused: the pickle asks for" in messages["evil.pickle"] and "system" in messages["evil.pickle"]
    assert "refused: the pickle asks for" in messages["big_evil.pkl"]
    assert "not a readable pickle" in messages["noise.pkl"] and "not a readable pickle" in messages["big_noise.pkl"]
    # Where the bytes stop being a pickle (issue 40 item 4: 'invalid load key' named no offset).
    assert "invalid load key, '\\x07' at byte 0" in messages["noise.pkl"], messages["noise.pkl"]
    assert "empty file" in messages["empty.pkl"]
    assert "cut short" in messages["cut.pickle"] and "cut short" in messages["big_cut.pickle"]
    assert "not a memory snapshot" in messages["big_weights.pkl"]
    assert "segments[0].address" in messages["small_malformed.pickle"]
    assert "disagree" in messages["small_disagreeing.pickle"]


def test_cut_traces_get_ingests_verdict(tmp_path):
    """A cut gzipped trace and a cut plain one: partial in both."""
    trace = (FIXTURES / "torch_profile/actor_update/prof_rank-0.pt.trace.json.gz").read_bytes()
    root = tmp_path / "run"
    (root / "tr").mkdir(parents=True)
    (root / "tr" / "prof_rank-0.pt.trace.json.gz").write_bytes(trace[: len(trace) // 2])
    text = gzip.decompress(trace)
    (root / "tr" / "prof_rank-1.pt.trace.json").write_bytes(text[: len(text) * 2 // 3])
    (root / "tr" / "prof_rank-2.pt.trace.json").write_bytes(text[: text.rindex(b"}", 0, len(text) // 2) + 1])
    verdicts = _agree(root, tmp_path)
    assert {verdicts[f"tr/prof_rank-{k}.pt.trace.json" + ("" if k else ".gz")][0] for k in range(3)} == {"partial"}


def test_db_exports_get_ingests_verdict(tmp_path):
    """A db export beside its capture's text export is not loaded (ignored, in the reader's
    words, in both), and a file named like a db export that is no SQLite db fails in both."""
    import shutil

    alexnet = FIXTURES / "real/ascend/msinsight-alexnet-level1"
    root = tmp_path / "run"
    shutil.copytree(alexnet / "text" / "rank0_ascend_pt", root / "both" / "rank0_ascend_pt")
    output = root / "both" / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    shutil.copy(alexnet / "db/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db", output)
    noise = root / "noise" / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_1.db"
    noise.parent.mkdir(parents=True)
    noise.write_bytes(b"not a database, just notes\n" * 20)
    verdicts = _agree(root, tmp_path)
    beside = verdicts["both/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"]
    assert beside[0] == "ignored" and "text export of this capture beside it" in beside[1]
    failed = verdicts["noise/rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db"]
    assert failed[0] == "failed" and "not an SQLite database" in failed[1]


@pytest.mark.parametrize("kept", [0.05, 0.5, 0.9])
def test_a_db_export_cut_short_gets_ingests_verdict(tmp_path, kept):
    """A db export cut short (its header's page count against its size, which check reads)
    is partial or failed in check as in ingest (issue 40 item 5); check said ok."""
    import shutil

    rank = FIXTURES / "real/ascend/msinsight-alexnet-level1/db/rank0_ascend_pt"
    root = tmp_path / "run"
    shutil.copytree(rank, root / "rank0_ascend_pt")
    db = root / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    data = db.read_bytes()
    db.write_bytes(data[: max(4096, int(len(data) * kept) // 4096 * 4096)])
    verdict = _agree(root, tmp_path)["rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"]
    assert verdict[0] in ("partial", "failed") and "cut short" in verdict[1], verdict


@pytest.mark.slow
def test_the_bad_input_corpus_gets_ingests_verdict(tmp_path, monkeypatch):
    """Every case of tests/data/bad (and the generated ones), each in its rank dir; the
    pickles that ask for code run none (they would `touch rlwh-hostile-ran` here)."""
    import test_bad_inputs as bad

    monkeypatch.chdir(tmp_path)
    root = bad._profile(tmp_path / "profile")
    files = {**bad._committed_cases(), **bad._generated_cases()}
    for rank, case in enumerate(sorted(bad.CASES), start=1):
        name, data = files[case]
        bad._place(root, case, name, data, rank)
    verdicts = _agree(root, tmp_path)
    printable = [m for _, m in verdicts.values() if m and not m.isprintable()]
    assert printable == [], printable  # no reason prints undecoded bytes
    assert sum(1 for s, _ in verdicts.values() if s == "failed") >= 8
    assert not (tmp_path / "rlwh-hostile-ran").exists()
    pickles = {path: verdict for path, verdict in verdicts.items() if path.endswith(".pickle")}
    assert len(pickles) == 5 and {status for status, _ in pickles.values()} == {"failed"}, pickles


ALEXNET_TEXT = FIXTURES / "real/ascend/msinsight-alexnet-level1/text/rank0_ascend_pt"
CSV_NAMES = ("operator_memory.csv", "memory_record.csv", "step_trace_time.csv", "kernel_details.csv",
             "npu_module_mem.csv")


def _header_damaged(data: bytes, how: str) -> bytes:
    end = data.index(b"\n")
    return {"bom": lambda: b"\xef\xbb\xbf" + data,
            "utf16": lambda: data.decode("utf-8").encode("utf-16"),
            "latin1": lambda: data[:end] + b"\xe9" + data[end:],
            "column_removed": lambda: data[data.index(b",") + 1:],
            "cut_row": lambda: _cut_in_a_row(data)}[how]()


def _cut_in_a_row(data: bytes) -> bytes:
    """Cut in the middle of row 2 (row 1 where it is the only one)."""
    lines = data.split(b"\n")
    keep = 2 if len([line for line in lines if line.strip()]) > 2 else 1
    start = sum(len(line) + 1 for line in lines[:keep])
    return data[: start + len(lines[keep]) // 2]


@pytest.mark.parametrize("how", ["bom", "utf16", "latin1", "column_removed", "cut_row"])
def test_a_csv_damaged_in_its_header_or_first_rows_gets_ingests_verdict(tmp_path, how):
    """A BOM is skipped by both; UTF-16 fails naming the encoding and a latin-1 byte naming
    its byte, in the same words; a header that lost a column, or a row cut short, within
    the rows check reads (issue 40 item 5; check said ok on UTF-16 and latin-1 headers of
    kernel_details.csv, which it did not look at)."""
    root = tmp_path / "run"
    for name in CSV_NAMES:
        capture = root / name[:-4] / "rank0_ascend_pt"
        (capture / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        shutil.copy(ALEXNET_TEXT / "profiler_info_0.json", capture)
        data = (ALEXNET_TEXT / "ASCEND_PROFILER_OUTPUT" / name).read_bytes()
        (capture / "ASCEND_PROFILER_OUTPUT" / name).write_bytes(_header_damaged(data, how))
    verdicts = _agree(root, tmp_path, exact=True)
    said = {path.split("/")[0]: verdict for path, verdict in verdicts.items() if path.endswith(".csv")}
    assert len(said) == len(CSV_NAMES)
    for name, (status, message) in said.items():
        if how == "bom":
            assert (status, message) == ("ok", None), name
        elif how == "utf16":
            assert status == "failed" and "(header) is UTF-16 text, not UTF-8 (convert it: iconv -f UTF-16LE" \
                in message, (name, message)
        elif how == "latin1":
            assert status == "failed" and re.search(r"\(header\) is not UTF-8 text \(byte \d+: 0xe9\)", message)
        elif how == "column_removed":
            assert status == "failed", (name, message)
        elif name == "step_trace_time":  # its only row
            assert status == "failed" and re.search(r"no readable rows: row 1: \d+ cells, the header", message)
        else:
            assert status == "partial" and re.search(r": row 2: \d+ cells, the header has \d+", message), message


def test_a_damaged_trace_named_without_pt_trace_json_says_where(tmp_path):
    """A real trace named rank<k>.json(.gz), damaged: its gzip stream a third of the way in
    (it is still read as a trace: partial), its traceEvents key (ignored as no profile, or
    failed where its first key is a trace's: the byte and line where the JSON breaks). It
    was ignored as 'a JSON object (first keys ) that is no profile' (issue 40 item 4)."""
    plain = (FIXTURES / "real/kineto/hta/call_stack/backward_thread.json").read_bytes()
    packed = (FIXTURES / "real/kineto/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz").read_bytes()
    unpacked = gzip.decompress(packed)
    key = unpacked.index(b'"traceEvents"') + 8
    root = tmp_path / "run"
    (root / "t").mkdir(parents=True)
    broken = bytearray(packed)
    broken[len(packed) // 3:len(packed) // 3 + 8] = b"\xff" * 8
    (root / "t" / "rank0.json.gz").write_bytes(bytes(broken))
    (root / "t" / "rank1.json").write_bytes(plain.replace(b'"traceEvents"', b'"traceEv\x01nts"'))
    (root / "t" / "rank2.json.gz").write_bytes(gzip.compress(unpacked[:key] + b"\x01" + unpacked[key + 1:]))
    verdicts = _agree(root, tmp_path, exact=True)
    status, message = verdicts["t/rank0.json.gz"]
    assert status == "partial" and re.search(r": gzip data damaged \(.*\): ingest keeps the complete events", message)
    status, message = verdicts["t/rank1.json"]
    assert status == "ignored" and "(first keys )" not in message and message.isprintable()
    assert 'first keys "traceEv\\x01nts"' in message and "damaged: the JSON breaks at byte 14 (line 2: " in message
    broke = f"the JSON breaks at uncompressed byte {key} (JSON is malformed: invalid character) before them"
    assert verdicts["t/rank2.json.gz"] == ("failed", f"t/rank2.json.gz: no traceEvents ({broke})")
