"""profiler_steps: the profiler's own step marks, on real traces, against the raw files."""

from __future__ import annotations

import gzip
import json
import re

import duckdb
import pytest
from conftest import copy_fixture

from rlwh.config import Config
from rlwh.ingest.runner import ingest


@pytest.mark.slow
def test_profiler_steps_of_real_traces(tmp_path):
    kineto = copy_fixture("real/kineto/hta/ns_resolution_trace", tmp_path / "run")
    ascend = copy_fixture("real/ascend/msinsight-alexnet-level1/text/rank0_ascend_pt", tmp_path / "run")
    db = tmp_path / "w.duckdb"
    ingest(tmp_path / "run", Config(db_path=db, workers=1))
    con = duckdb.connect(str(db), read_only=True)
    trace = next(kineto.glob("*.json.gz"))
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    expected = sorted(int(m.group(1)) for e in events if e.get("cat") == "user_annotation"
                      and (m := re.fullmatch(r"ProfilerStep#(\d+)", e.get("name", ""))))
    got = [s for (s,) in con.execute("select profiler_step from profiler_steps where source = 'torch_annotation'"
                                     " order by 1").fetchall()]
    assert got == expected and len(got) > 1
    # torch_npu's mark carries the number step_trace_time.csv gives the same step.
    steps = con.execute("""select p.profiler_step, t.step from profiler_steps p
                           join step_times t using (run, rank_id, capture)
                           where p.source = 'cpu_op'""").fetchall()
    assert steps == [(50, 50)]
    assert con.execute("select min(dur_ns) > 0 from profiler_steps").fetchone()[0]
    assert ascend.name == "rank0_ascend_pt"
