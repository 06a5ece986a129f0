"""profiler_steps: the profiler's own ProfilerStep#<n> marks, from Kineto ranges and torch_npu
cpu_ops, against a filter written in Python (names that only look like a mark are not steps)."""

from __future__ import annotations

import re

from conftest import insert_rows

KEY = dict(run="r", role="actor", rank_id=0)
RANGES = [  # (capture, step, source, domain, name, start_ns, end_ns)
    ("t1.json", 3, "torch_annotation", "default", "ProfilerStep#7", 100, 250),
    ("t1.json", 3, "torch_annotation", "default", "ProfilerStep#8", 250, 400),
    ("t1.json", 3, "torch_annotation", "default", "ProfilerStep#8x", 250, 400),  # no number
    ("t1.json", 3, "torch_annotation", "other", "ProfilerStep#9", 400, 500),     # another domain
    ("t1.json", 3, "nvtx", "default", "ProfilerStep#10", 400, 500),              # another source
    ("t2.json", None, "torch_annotation", "default", "ProfilerStep#0", 10, 10),
    ("t2.json", None, "torch_annotation", "default", "forward", 10, 20),
]
OPS = [  # (capture, step, name, ts_ns, dur_ns)
    ("rank0_ascend_pt", None, "ProfilerStep#50", 1_000, 600),
    ("rank0_ascend_pt", None, "ProfilerStep#51", 2_000, None),  # an open mark: no duration
    ("rank0_ascend_pt", None, "ProfilerStep#", 3_000, 5),
    ("rank0_ascend_pt", None, "aten::mul", 3_000, 5),
]


def test_marks_of_both_profilers(attached_db):
    insert_rows(attached_db, "ranges", ["capture", "step", "source", "domain", "name", "start_ns", "end_ns"], RANGES,
                source_id=1, **KEY)
    insert_rows(attached_db, "cpu_ops", ["capture", "step", "name", "ts_ns", "dur_ns"], OPS, source_id=2, **KEY)
    mark = re.compile(r"ProfilerStep#(\d+)")
    expected = [(capture, step, int(m.group(1)), start, end, end - start, "torch_annotation")
                for capture, step, source, domain, name, start, end in RANGES
                if source == "torch_annotation" and domain == "default" and (m := mark.fullmatch(name))]
    expected += [(capture, step, int(m.group(1)), ts, ts + (dur or 0), dur or 0, "cpu_op")
                 for capture, step, name, ts, dur in OPS if (m := mark.fullmatch(name))]
    got = attached_db.execute("""select capture, step, profiler_step, start_ns, end_ns, dur_ns, source
                                 from profiler_steps order by all""").fetchall()
    assert got == sorted(expected, key=lambda r: tuple((v is None, v) for v in r))
    assert attached_db.execute("select distinct run, role, rank_id from profiler_steps").fetchall() == [
        ("r", "actor", 0)]
