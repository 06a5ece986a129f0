"""Regenerate the bad-input corpus in this folder (run by hand from the repository root):

    .venv/bin/python tests/data/bad/make_bad_files.py

One folder per case, holding the one damaged file under the name the profiler gives it
(or, for a memory snapshot, a name users give it: memory_snapshot.pickle);
tests/test_bad_inputs.py puts each into its own rank dir beside a good one and says what
must happen to it. Cases too big to commit (10 MB lines, deep nesting) and those the file
system must make (permissions, FIFOs, symlink loops, non-UTF-8 names, a full disk) are
made by the tests at run time.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent

CSV_HEADER = (
    "Name,Size(KB),Allocation Time(us),Release Time(us),Active Release Time(us),"
    "Duration(us),Active Duration(us),Allocation Total Allocated(MB),"
    "Allocation Total Reserved(MB),Allocation Total Active(MB),"
    "Release Total Allocated(MB),Release Total Reserved(MB),Release Total Active(MB),"
    "Stream Ptr,Device Type"
)


def csv_row(name: str, size_kb: str = "8.5", i: int = 0) -> str:
    """One operator_memory.csv row as torch_npu writes it (quoted times ending in a TAB)."""
    t = 1779785515596661420 + i * 1000
    us = f"{t // 1000}.{t % 1000:03d}"
    return (f'{name},{size_kb},"{us}\t","{us}\t","{us}\t","0.000\t","0.000\t",'
            "19071.576171875,21084,19071.576171875,19071.576171875,21084,19071.576171875,6,NPU:0")


def event(name: str, ts: str = "1779785515694669.200", **override) -> dict:
    """One Ascend cpu_op event with a call stack."""
    ev = {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": "50.000", "cat": "cpu_op",
          "args": {"Call stack": "train.py(42): step;\r\nmodule.py(150): forward"}}
    ev.update(override)
    return ev


def trace(*events) -> bytes:
    """A trace_view.json array, one event a line, as the profiler writes it."""
    return ("[\n" + ",\n".join(e if isinstance(e, str) else json.dumps(e) for e in events) + "\n]\n").encode()


def cases() -> dict[str, tuple[str, bytes]]:
    good1, good2, good3 = event("good_1"), event("good_2"), event("good_3")
    return {
        # trace_view.json
        "trace_empty": ("trace_view.json", b""),
        "trace_object": ("trace_view.json", b'{"traceEvents": "not a list", "x": 1}\n'),
        "trace_non_objects": ("trace_view.json", trace("1", '"x"', "null", "[2]", good1)),
        "trace_wrong_types": ("trace_view.json", trace(
            event("ts_object", ts={"a": 1}), event("dur_list", dur=[1]), event(5), event("pid_text", pid="abc"),
            good1)),
        "trace_nan_tokens": ("trace_view.json", trace(
            good1, '{"ph": "X", "name": "nan", "pid": 1, "tid": 1, "ts": NaN, "dur": Infinity, "cat": "cpu_op"}',
            good2)),
        "trace_nan_strings": ("trace_view.json", trace(
            event("ts_nan", ts="NaN"), event("dur_inf", dur="inf"), event("ts_minus_inf", ts="-Infinity"), good1)),
        "trace_absurd_numbers": ("trace_view.json", trace(
            event("ts_huge", ts="99999999999999999999999.000"), event("dur_huge", dur=1e300),
            event("pid_huge", pid=1e30), event("dur_negative", dur="-5.000"), good1)),
        "trace_non_utf8": ("trace_view.json", trace(good1, event("bad_BYTES"), good2).replace(b"BYTES", b"\xff\xfe")),
        "trace_trailing_commas": ("trace_view.json", trace(good1, good2).replace(b"\n]\n", b",\n]\n")),
        "trace_missing_bracket": ("trace_view.json", trace(good1, good2)[: -len(b"\n]\n")] + b"\n"),
        "trace_control_chars": ("trace_view.json", trace(good1, event("ctl_CTRL"), good3).replace(
            b"CTRL", b"a\x01b\tc\nd\x1f")),
        "trace_cut_mid_event": ("trace_view.json", trace(good1, good2, good3)[:-60]),
        # operator_memory.csv
        "csv_empty": ("operator_memory.csv", b""),
        "csv_header_only": ("operator_memory.csv", (CSV_HEADER + "\n").encode()),
        "csv_bad_row": ("operator_memory.csv", "\n".join(
            [CSV_HEADER, csv_row("a", i=1), csv_row("b", i=2), "cut,1.0", csv_row("c", i=4), csv_row("d", i=5)]
        ).encode() + b"\n"),
        "csv_bad_values": ("operator_memory.csv", "\n".join(
            [CSV_HEADER, csv_row("good_1", i=1), csv_row("nan", "nan", 2), csv_row("inf", "inf", 3),
             csv_row("text", "abc", 4), csv_row("huge", "1e300", 5), csv_row("huge_negative", "-1e30", 6),
             csv_row("good_2", i=7)]
        ).encode() + b"\n"),
        "csv_non_utf8": ("operator_memory.csv", "\n".join(
            [CSV_HEADER, csv_row("bad_BYTES", i=1), csv_row("good_1", i=2), csv_row("good_2", i=3)]
        ).encode().replace(b"BYTES", b"\xff\xfe") + b"\n"),
        "csv_missing_columns": ("operator_memory.csv", b"Name,Foo\nx,1\n"),
        # profiler_info_<rank>.json (the test names it for its rank)
        "info_empty": ("profiler_info.json", b""),
        "info_wrong_types": ("profiler_info.json", b'{"rank_id": "abc", "config": 5}\n'),
        "info_array": ("profiler_info.json", b"[1, 2]\n"),
        "info_non_utf8": ("profiler_info.json", '{"config": {"host": "caf\xe9"}}\n'.encode("latin-1")),
        # group_list.pt
        "gmm_empty": ("group_list.pt", b""),
        "gmm_garbage": ("group_list.pt", bytes(range(256)) * 4),
        # a memory snapshot's name (*.pickle), written as protocol-0 bytes (stable across Pythons)
        "pickle_not_snapshot": ("memory_snapshot.pickle", pickle.dumps({"step": 3, "\x1b[31mloss": 0.25}, protocol=0)),
        "pickle_empty": ("memory_snapshot.pickle", b""),
        "pickle_garbage": ("memory_snapshot.pickle", b"\x07\xff\xfe" + bytes(range(256))),
        "pickle_asks_for_code": ("memory_snapshot.pickle",
                                 b"(dp0\nVsegments\np1\n(lp2\nsVx\np3\ncos\nsystem\np4\n"
                                 b"(Vtouch rlwh-hostile-ran\np5\ntp6\nRp7\ns."),
        "pickle_cut": ("memory_snapshot.pickle", pickle.dumps(
            {"segments": [{"device": 0, "address": 4096, "total_size": 2097152, "blocks": []}],
             "device_traces": [[]]}, protocol=0)[:-20]),
    }


def main() -> None:
    for case, (name, data) in cases().items():
        folder = HERE / case
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        (folder / name).write_bytes(data)


if __name__ == "__main__":
    main()
