"""phase_device_time.activities on every real Kineto trace with annotation ranges: each row
counts the device activities launched inside its range once, the count computed here from
the raw JSON with the standard library (issue 42: "activities 2-4 too high in 14 of 223
rows" of HTA's trace-diff test trace).

The rule, as the view's doc states it: a phase is a user_annotation X range with a
duration (not ProfilerStep#n, not the GPU-side copies); its activities are the device's
kernels, copies and sets with a duration whose launch (the runtime or driver call of the
same correlation id) lies in [start, end), or where no launch is linked, whose own start
does. Ranges of the same name and times (on two threads) are one row, and count each
activity once.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, copy_fixture
from device_real import ns

KINETO = FIXTURES / "real" / "kineto"
TRACES = sorted(str(p.relative_to(FIXTURES)) for p in KINETO.rglob("*") if p.is_file()
                and (p.name.endswith(".json") or p.name.endswith(".json.gz")))
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")
LAUNCH = ("cuda_runtime", "cuda_driver", "mtia_runtime")


def _events(path: Path) -> tuple[list[dict], int]:
    """The trace's events, and the epoch ns of its ts 0 (Kineto's baseTimeNanoseconds)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f, parse_float=Decimal)  # a float would lose the ns of epoch µs
    if isinstance(data, list):
        return data, 0
    return data["traceEvents"], int(data.get("baseTimeNanoseconds") or 0)


def _expected(path: Path) -> Counter:
    """(phase, start_ns, end_ns) -> activities, from the raw trace."""
    events, base = _events(path)
    launches = {e["args"]["correlation"]: ns(e["ts"]) for e in events
                if e.get("cat") in LAUNCH and "correlation" in e.get("args", {})}
    starts = []
    for e in events:
        if e.get("cat") in DEVICE and ns(e.get("dur", 0)) > 0:
            correlation = e.get("args", {}).get("correlation")
            starts.append(launches.get(correlation, ns(e["ts"])))
    phases = {(e["name"], base + ns(e["ts"]), base + ns(e["ts"]) + ns(e["dur"])) for e in events
              if e.get("cat") == "user_annotation" and e.get("ph") == "X" and ns(e.get("dur", 0)) > 0
              and not e["name"].startswith("ProfilerStep#")}
    counts = Counter()
    for name, start, end in phases:
        n = sum(1 for t in starts if start <= base + t < end)
        if n:
            counts[(name, start, end)] = n
    return counts


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    """Each trace its own run (one job each: their rank ids would otherwise meet)."""
    from rlwh.config import Config
    from rlwh.ingest.runner import ingest

    root = tmp_path_factory.mktemp("phase_activities")
    db = root / "w.duckdb"
    for i, relative in enumerate(TRACES):
        folder = root / f"trace{i}" / "actor"
        folder.mkdir(parents=True)
        copy_fixture(relative, folder)
        ingest(folder.parent, Config(db_path=db, workers=1), run=f"trace{i}")
    return db


def test_the_corpus_has_phases_to_count(warehouse):
    with duckdb.connect(str(warehouse), read_only=True) as con:
        rows = con.execute("select count(*), count(distinct run) from phase_device_time").fetchone()
    assert rows[0] >= 200 and rows[1] >= 3, rows


@pytest.mark.parametrize("index", range(len(TRACES)), ids=TRACES)
def test_activities_are_counted_once_per_range(warehouse, index):
    expected = _expected(FIXTURES / TRACES[index])
    with duckdb.connect(str(warehouse), read_only=True) as con:
        got = Counter({(phase, start, end): n for phase, start, end, n in con.execute(
            """select phase, start_ns, end_ns, sum(activities)::bigint from phase_device_time
               where run = ? and source = 'torch_annotation' group by all""", [f"trace{index}"]).fetchall()})
    assert got == expected


def test_a_range_on_two_threads_counts_its_work_once(tmp_path):
    """Two ranges of one name and the same times, on two threads: one row, each kernel once."""
    from rlwh.config import Config
    from rlwh.ingest.runner import ingest

    def event(cat, name, ts, dur, tid, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events = [event("user_annotation", "update_actor", 1000, 100, tid) for tid in (1, 2)]
    for i, ts in enumerate((1010, 1020, 1030)):
        events.append(event("cuda_runtime", "cudaLaunchKernel", ts, 2, 1, correlation=i))
        events.append(event("kernel", f"k{i}", ts + 50, 5, 7, correlation=i, device=0, stream=7))
    folder = tmp_path / "profile" / "actor"
    folder.mkdir(parents=True)
    (folder / "rank0.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    db = tmp_path / "w.duckdb"
    ingest(folder.parent, Config(db_path=db, workers=1), run="two_threads")
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("select phase, activities from phase_device_time").fetchall()
    assert rows == [("update_actor", 3)]
