"""What device rows cost a reader (issue 22): each real trace with most device activity read
with and without its device rows, best of 3 rounds, CPU seconds of this process.

"Without" sends the trace's device and launch events nowhere (Kineto) or skips the device
query (Ascend trace_view.json); everything else is the same code.

Usage: python bench/device_cost.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from rlwh.readers import ascend_trace, torch_trace  # noqa: E402
from rlwh.readers.base import TableSink  # noqa: E402

FIXTURES = HERE.parent / "tests" / "data" / "real"
ALEXNET_RANK0 = "ascend/msinsight-alexnet-level1/text/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
TRACES = [
    ("Kineto, df_index_resolver (216 k events, 22 k kernels/copies)",
     torch_trace, FIXTURES / "kineto/hta/df_index_resolver/df_index_resolver.json.gz"),
    ("Kineto, trace_diff/test (105 k events, 16 k kernels/copies)",
     torch_trace, FIXTURES / "kineto/hta/trace_diff/test/test.json.gz"),
    ("Ascend trace_view.json, AlexNet rank 0 (2.2 MB)",
     ascend_trace, FIXTURES / ALEXNET_RANK0 / "trace_view.json"),
]


def _without_device_rows(module):
    if module is torch_trace:
        routes = {k: v for k, v in torch_trace._ROUTES.items() if v not in ("device", "launch")}
        return mock.patch.object(torch_trace, "_ROUTES", routes)
    return mock.patch.object(ascend_trace, "copy_device_ops", lambda *a, **k: None)


def _cpu_s(module, trace: Path) -> float:
    out = Path(tempfile.mkdtemp(prefix="rlwh-device-cost-"))
    try:
        sink = TableSink(out)
        started = time.process_time()
        module.read(trace, sink, {"rank_id": 0, "rel_path": trace.name, "capture": trace.name})
        sink.close()
        return time.process_time() - started
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("| trace | reader CPU with device rows | without | cost |\n| --- | --- | --- | --- |")
    for label, module, trace in TRACES:
        with_rows, without = [], []
        for _ in range(args.rounds):
            with_rows.append(_cpu_s(module, trace))
            with _without_device_rows(module):
                without.append(_cpu_s(module, trace))
        a, b = min(with_rows), min(without)
        print(f"| {label} | {a:.2f} s | {b:.2f} s | {100 * (a - b) / b:+.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
