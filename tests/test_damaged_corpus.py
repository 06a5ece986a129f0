"""Damaged copies of real profiler files beside intact controls: `rlwh check` and `rlwh
ingest`, each a process of its own under a timeout, give every file a verdict (issue 40).

Each damage (cut, bits flipped, garbage before, re-encoded as UTF-16, a latin-1 byte in
the header, a header column removed, a number that is no finite number, nesting past
what the decoders follow, a UTF-8 BOM) is done to a copy of a real file, each copy in a
capture of its own. Asserted file by file: no hang, a `sources` row for every regular
file, every control loaded, and check's verdict equal to ingest's (status, and the
reason where check says one) wherever the damage lies within what check reads (the
README: a file's first bytes, a trace's or pickle's last ones; a small file it reads
whole).
"""

from __future__ import annotations

import gzip
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runs import checked, ingested
from conftest import FIXTURES

ALEXNET = FIXTURES / "real/ascend/msinsight-alexnet-level1/text/rank0_ascend_pt"
MEMORY_SAMPLE = FIXTURES / "rl-insight-samples/memory_data/20260526_085155_ascend_pt"
KINETO = FIXTURES / "real/kineto/hta/call_stack/backward_thread.json"
KINETO_GZ = FIXTURES / "real/kineto/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
NVTX = FIXTURES / "rl-insight-samples/nvtx_data/nvtx_profile/worker_process_70000.1.jsonl"
SNAPSHOT = FIXTURES / "real/ascend/memory-snapshots/snapshot_1768383987920985470.pkl"
CSVS = ("operator_memory.csv", "memory_record.csv", "step_trace_time.csv", "kernel_details.csv",
        "npu_module_mem.csv")


@dataclass
class Case:
    """A damaged copy: where it lies in the profile dir, and whether check reads the damage."""

    path: str
    data: bytes
    in_reach: bool


def _cut(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _flipped(data: bytes) -> bytes:
    """Eight bits flipped in the second half (past any head check reads)."""
    out = bytearray(data)
    rng = random.Random(40)
    for _ in range(8):
        at = rng.randrange(len(out) // 2, len(out))
        out[at] ^= 1 << rng.randrange(7)
    return bytes(out)


def _garbage(data: bytes) -> bytes:
    return b"\x00\x17garbage\xfe\xff " + data


def _utf16(data: bytes) -> bytes:
    return data.decode("utf-8").encode("utf-16")


def _bom(data: bytes) -> bytes:
    return b"\xef\xbb\xbf" + data


def _latin1_header(data: bytes) -> bytes:
    """A latin-1 byte (0xE9) at the end of the header row's last cell."""
    end = data.index(b"\n")
    end -= data[end - 1:end] == b"\r"
    return data[:end] + b"\xe9" + data[end:]


def _column_removed(data: bytes) -> bytes:
    """The header's first column dropped (the rows keep theirs)."""
    return data[data.index(b",") + 1:]


def _nonfinite_csv(data: bytes) -> bytes:
    """A number cell in a middle row written as inf."""
    lines = data.split(b"\n")
    row = lines[len(lines) // 2].split(b",")
    number = next(i for i, cell in enumerate(row) if cell.strip(b" \t").replace(b".", b"", 1).isdigit())
    row[number] = b"inf"
    lines[len(lines) // 2] = b",".join(row)
    return b"\n".join(lines)


def _nonfinite_json(data: bytes) -> bytes:
    """The first event's duration written as NaN (no JSON token: the decoders refuse it)."""
    at = data.index(b'"dur"')
    value = data.index(b":", at) + 1
    end = min(i for i in (data.find(b",", value), data.find(b"}", value), data.find(b"\n", value)) if i > 0)
    return data[:value] + b" NaN" + data[end:]


def _deep(data: bytes) -> bytes:
    """A value nested 5,000 deep (past what the JSON decoders follow, within check's 64 KiB)
    written first into the first event's args, else into the first object."""
    args = data.find(b'"args"')
    at = data.index(b"{", args) + 1 if args >= 0 else data.index(b"{") + 1
    return data[:at] + b' "deep": ' + b"[" * 5_000 + b"]" * 5_000 + b"," + data[at:]


def _first_line_cut(data: bytes) -> bytes:
    end = data.index(b"\n")
    return data[: end // 2] + data[end:]


def _first_line_damaged(data: bytes) -> bytes:
    end = data.index(b"\n")
    return data[:end].replace(b":", b";", 1) + data[end:]


def _key_damaged(data: bytes) -> bytes:
    """A control byte written into the traceEvents key (no JSON string holds one)."""
    at = data.index(b'"traceEvents"') + 8
    return data[:at] + b"\x01" + data[at + 1:]


def _gzip_damaged(data: bytes) -> bytes:
    """The gzip stream's bytes a third of the way in overwritten (the whole file is gzip)."""
    packed = bytearray(data)
    at = len(packed) // 3
    packed[at:at + 8] = b"\xff" * 8
    return bytes(packed)


def _real(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


# The damages, each with where it lies: "start" (the very first bytes), "head" (within the
# first 64 KiB), "mid" (past them), "tail" (a file cut: its end).
DAMAGES = {"cut": (_cut, "tail"), "flipped": (_flipped, "mid"), "garbage": (_garbage, "start"),
           "utf16": (_utf16, "start"), "bom": (_bom, "start"), "deep": (_deep, "head"),
           "latin1": (_latin1_header, "head"), "column_removed": (_column_removed, "head"),
           "nonfinite_csv": (_nonfinite_csv, "mid"), "nonfinite": (_nonfinite_json, "head"),
           "first_line_cut": (_first_line_cut, "head"), "first_line_damaged": (_first_line_damaged, "head"),
           "key_damaged": (_key_damaged, "head"), "gzip_damaged": (_gzip_damaged, "tail")}
_TEXT = ("cut", "flipped", "garbage", "utf16", "bom")
_JSON = (*_TEXT, "deep")
# Per kind of file: where its copies lie, the real file, its damages, and what check reads
# of it (the README): "head" its first bytes (a CSV's header and first rows, an NVTX
# export's first lines), "head+tail" and its last bytes (a PyTorch trace: its first
# events, and a cut), "start+tail" only its first byte and its last (trace_view.json: its
# events only ingest reads), "whole" a small file it reads as the reader does.
KINDS = {
    **{f"csv_{name[:-4]}": (f"rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/{name}", ALEXNET / "ASCEND_PROFILER_OUTPUT" / name,
                            (*_TEXT, "latin1", "column_removed", "nonfinite_csv"), "head") for name in CSVS},
    "trace_view": ("rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json",
                   MEMORY_SAMPLE / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", (*_JSON, "nonfinite"), "start+tail"),
    "info": ("rank0_ascend_pt/profiler_info_0.json", ALEXNET / "profiler_info_0.json", _JSON, "whole"),
    "matrix": ("rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/communication_matrix.json",
               ALEXNET / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json", _JSON, "whole"),
    "kineto": ("rank0.json", KINETO, (*_JSON, "nonfinite", "key_damaged"), "head+tail"),
    "kineto_gz": ("rank0.json.gz", KINETO_GZ, (*_JSON, "nonfinite", "key_damaged", "gzip_damaged"), "head+tail"),
    "nvtx": (NVTX.name, NVTX, (*_JSON, "first_line_cut", "first_line_damaged"), "head"),
    "snapshot": ("rank0/snapshot.pickle", SNAPSHOT, ("cut", "flipped", "garbage"), "whole"),
}


def _reach(reads: str, where: str) -> bool:
    return (reads == "whole" or where == "start" or (where == "head" and reads != "start+tail")
            or (where == "tail" and "tail" in reads))


def _cases() -> list[Case]:
    cases = []
    for kind, (place, source, damages, reads) in KINDS.items():
        for damage in damages:
            fn, where = DAMAGES[damage]
            gzipped = source.read_bytes()[:2] == b"\x1f\x8b"
            if damage == "gzip_damaged":
                data = fn(source.read_bytes())
            else:
                data = fn(_real(source))
                data = gzip.compress(data, mtime=0) if gzipped else data
            cases.append(Case(f"{kind}_{damage}/{place}", data, _reach(reads, where)))
    return cases


def _profile(root: Path) -> tuple[list[Case], set[str]]:
    """The damaged copies, each in a capture of its own (an Ascend one with the real
    profiler_info), and the controls; returns the cases and the controls' paths."""
    cases = _cases()
    for case in cases:
        path = root / case.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(case.data)
        capture = next((p for p in path.parents if p.name.endswith("_ascend_pt")), None)
        if capture is not None and not (capture / "profiler_info_0.json").exists():
            shutil.copy(ALEXNET / "profiler_info_0.json", capture / "profiler_info_0.json")
    shutil.copytree(ALEXNET, root / "control_ascend" / "rank0_ascend_pt")
    shutil.copytree(MEMORY_SAMPLE, root / "control_memory" / "rank0_ascend_pt")
    for folder, source, name in (("control_kineto", KINETO, "rank0.json"), ("control_kineto_gz", KINETO_GZ,
                                 "rank0.json.gz"), ("control_nvtx", NVTX, NVTX.name),
                                 ("control_snapshot/rank0", SNAPSHOT, "snapshot.pickle")):
        (root / folder).mkdir(parents=True)
        shutil.copy(source, root / folder / name)
    controls = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.parts[len(root.parts)]
                .startswith("control")}
    return cases, controls


@pytest.mark.slow
def test_damaged_copies_of_real_files(tmp_path):
    root = tmp_path / "run"
    cases, controls = _profile(root)
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    got = ingested(root, tmp_path / "w.duckdb", timeout=120)
    assert set(got) == files  # a sources row for every regular file
    assert {p: got[p] for p in controls if got[p][0] not in ("ok", "ignored")} == {}  # the controls load
    assert {p: v for p, v in got.items() if v[1] and ("unexpected" in v[1] or not v[1].isprintable())} == {}
    said = checked(root, files, timeout=60)
    differ = {}
    for case in cases:
        status, message = said[case.path]
        want_status, want_message = got[case.path]
        if case.in_reach and (status != want_status or (status not in ("ok", "ignored")
                                                        and not _same_reason(message, want_message))):
            differ[case.path] = {"check": (status, message), "ingest": (want_status, want_message)}
    assert differ == {}, "\n".join(f"{p}: {v}" for p, v in differ.items())
    damage = {case.path: case.path.split("/")[0].rsplit("_", 1)[-1] for case in cases}
    # One rule for a BOM (skipped) and for wide text (named) in every reader.
    assert {p: got[p] for p, d in damage.items() if d == "bom" and got[p][0] != "ok"} == {}
    assert {p: got[p] for p, d in damage.items() if d == "utf16" and "UTF-16 text, not UTF-8" not in got[p][1]} == {}


def _same_reason(check_message: str | None, ingest_message: str | None) -> bool:
    """Check's reason is ingest's: the words after the file's name in check's (less what
    ingest will do about it) are in ingest's, which may add what only a full read finds
    (how many malformed events, how many complete ones it kept)."""
    if check_message is None or ingest_message is None:
        return check_message == ingest_message
    mine = check_message.split(": ", 1)[1].split(": ingest")[0]
    theirs = re.sub(r"skipped \d+ malformed events?", "skipped malformed events", ingest_message.split(": ", 1)[1])
    return mine in theirs
